"""SEAL under verl's ``colocate_async`` V1 trainer, for real on CPU: ``recipes/bfcl_v3/cpu/run_cpu.sh`` with
``mode=colocate_async`` (``trainer.v1.trainer_mode=seal_colocate_async``) through ``python -m verl.trainer.main_ppo``,
then ``seal-verl check`` on each run folder.

1. ``colocate``: 2 steps, a checkpoint after each. verl generates one batch of prompts ahead
   (``num_warmup_batches``), so step 2 trains rollouts that started under step 0's closed-loop state while step 1's
   is current: each of them is weighted with the rho of its own state (the check recomputes every weight from the
   state its row names), the closed loop counts it once, in step 2;
2. ``colocate_resumed``: resumed from run 1's ``global_step_2`` for a third step. verl's async checkpoint keeps the
   prompts it had fetched ahead (TransferQueue's checkpoint: finished rollouts as they were, the ones in flight
   started again under the restored state); a finished one of an earlier state is weighted from the rho the
   checkpoint's ``seal_state.json`` keeps (``rho_history``).

Opt-in like ``tests/cpu_training/test_cpu_training.py`` (``SEAL_CPU_TRAINING=1``; about 15 minutes on 2 cores):

    SEAL_CPU_TRAINING=1 pytest -q tests/cpu_training/test_cpu_async.py          # make test-cpu-async

``separate_async`` cannot run on CPU (a standalone rollout pool fed by a checkpoint engine verl allows only on
NCCL-class transports); its configuration composes and validates for every backbone and node shape
(``tests/recipes/test_hardware_configs.py``), and ``recipes/bfcl_v3/cpu/README.md`` shows verl's own error.
"""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest
from _cpu_venv import cpu_train_venv
from _paths import REPO

from seal_verl.runs import check as CHECK

CPU_DIR = os.path.join(REPO, "recipes", "bfcl_v3", "cpu")
VENV = cpu_train_venv()
ASYNC = ("mode=colocate_async", "trainer.save_freq=1")

needs_runs = pytest.mark.slow(pytest.mark.skipif(
    VENV is None, reason="real CPU training runs: set SEAL_CPU_TRAINING=1 (uses/builds <repo>/.venv-cpu-train)"))


def _run(name, root, steps, extra_env=None):
    out = os.path.join(root, name)
    env = dict(os.environ, VARIANT="seal", STEPS=str(steps), OUT=out, SEAL_CPU_VENV=VENV, FORCE="1")
    env.pop("RAY_ADDRESS", None)
    env.update(extra_env or {})
    t0 = time.time()
    with open(os.path.join(root, f"{name}.out"), "w") as log:
        # a Ray instance of its own (temp folder and ports), apart from any other on the machine
        temp = f"/tmp/seal-async-{os.getpid()}-{name[:3]}"
        proc = subprocess.run(["bash", os.path.join(CPU_DIR, "run_cpu.sh"), *ASYNC,
                               f"+ray_kwargs.ray_init._temp_dir={temp}"], env=env, cwd=REPO, stdout=log,
                              stderr=subprocess.STDOUT, timeout=3600)
    return {"dir": out, "rc": proc.returncode, "seconds": round(time.time() - t0, 1),
            "log": os.path.join(root, f"{name}.out")}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = os.environ.get("SEAL_CPU_TRAINING_OUT") or str(tmp_path_factory.mktemp("cpu_async"))
    os.makedirs(root, exist_ok=True)
    out = {"colocate": _run("colocate", root, 2)}
    ckpt = os.path.join(out["colocate"]["dir"], "checkpoints", "global_step_2")
    out["colocate_resumed"] = _run("colocate_resumed", root, 3, {"RESUME_FROM": ckpt})
    print("\nasync CPU runs:", json.dumps({k: (v["rc"], v["seconds"]) for k, v in out.items()}))
    return out


SPECS = {"colocate": (2, None), "colocate_resumed": (3, "colocate")}


@pytest.fixture(scope="module")
def reports(runs):
    out = {}
    for name, (steps, parent) in SPECS.items():
        rep = CHECK.check_run(runs[name]["dir"], steps, runs[parent]["dir"] if parent else None, True, 0.0)
        print(f"\n== {name}\n{rep.text()}")
        out[name] = rep
    return out


@needs_runs
@pytest.mark.parametrize("run", list(SPECS))
def test_the_async_run_passes_seal_verl_check(runs, reports, run):
    assert runs[run]["rc"] == 0, f"{run}: exit {runs[run]['rc']}; console {runs[run]['log']}"
    rep = reports[run]
    assert rep.ok, rep.text()
    names = {n for n, _, _ in rep.items}
    assert {"weights", "cues", "state", "sync", "provenance"} <= names
    if SPECS[run][1]:
        assert "resume" in names


@needs_runs
def test_a_step_trained_rollouts_of_an_earlier_state(runs, reports):
    """Step 2 of the first run trained rollouts generated under step 0's state (verl's batch generated ahead); the
    weights check above recomputed each of their weights from that state's rho."""
    run = CHECK.Run(runs["colocate"]["dir"])
    stale = [r for r in run.traces.get(2, []) if r.get("state_step") is not None and int(r["state_step"]) < 1]
    assert stale, [r.get("state_step") for r in run.traces.get(2, [])]
    config = json.load(open(os.path.join(runs["colocate"]["dir"], "config.json")))
    assert config["trainer"].endswith("trainer_mode=seal_colocate_async")
    staleness = [r["metrics"].get("training/off_policy/trajectory_staleness/max") for r in run.metrics]
    print(f"\nstep-2 rollouts of state 0: {len(stale)}/{len(run.traces[2])}; verl's staleness per step: {staleness}")
