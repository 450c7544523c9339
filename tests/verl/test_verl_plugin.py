"""The seal plugin registers with verl through the ``verl.plugins`` entry point.

verl imports entry points at ``import verl`` and swallows their import errors (logged at DEBUG only), so a
broken plugin would look like a missing estimator much later. These tests prove the registration where it
matters: in a fresh interpreter that only runs ``import verl``, and in a Ray worker process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import entry_points

import pytest

PROBE = r"""
import json, importlib, sys
import verl  # nothing else: the entry point must do the work
from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY
from verl.trainer.ppo.v1 import get_trainer_cls
from verl.trainer.ppo import ray_trainer
plugin = sys.modules.get("seal_verl.verl_glue.plugin")
out = {
    "plugin_loaded": plugin is not None,
    "registered": dict(plugin.REGISTERED) if plugin else {},
    "estimator": getattr(ADV_ESTIMATOR_REGISTRY.get("seal_grpo"), "__seal_estimator__", False),
    "trainer": get_trainer_cls("seal").__name__,
    "legacy_wrapped": bool(getattr(ray_trainer.compute_advantage, "__seal_wrapper__", False)),
}
# idempotent: registering again, and re-executing the trainer module, must not raise
plugin.register()
import seal_verl.verl_glue.trainer as tr
importlib.reload(tr)
tr.register()
import seal_verl.verl_glue.advantage as adv
importlib.reload(adv)
adv.register_estimator()
out["second_registration_ok"] = True
print("SEAL_PROBE " + json.dumps(out))
"""


def _clean_env():
    env = dict(os.environ)
    env.pop("VERL_USE_EXTERNAL_PLUGINS", None)  # "auto" (all entry points) is verl's default
    env.setdefault("PYTHONWARNINGS", "ignore")
    return env


def _parse(stdout: str) -> dict:
    for line in stdout.splitlines():
        if line.startswith("SEAL_PROBE "):
            return json.loads(line[len("SEAL_PROBE "):])
    raise AssertionError(f"probe printed nothing:\n{stdout[-3000:]}")


def test_entry_point_is_declared():
    eps = [ep for ep in entry_points(group="verl.plugins") if ep.value == "seal_verl.verl_glue.plugin"]
    assert eps, "seal-verl is not installed with its verl.plugins entry point (pip install -e .)"


def test_plain_import_verl_registers_everything_in_fresh_interpreter(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, env=_clean_env(), cwd=tmp_path, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = _parse(proc.stdout)
    assert out["plugin_loaded"]
    assert out["estimator"] is True
    assert out["trainer"] == "SealPPOTrainer"
    assert out["legacy_wrapped"] is True
    assert out["registered"]["adv_estimator:seal_grpo"] and out["registered"]["trainer:seal"]
    assert out["second_registration_ok"]


def test_plugin_disabled_by_verl_switch_registers_nothing(tmp_path):
    """Control: with verl's own switch off the same probe finds nothing, so the test above is not vacuous."""
    env = _clean_env()
    env["VERL_USE_EXTERNAL_PLUGINS"] = "none"
    code = (
        "import sys, verl\n"
        "from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY\n"
        "print('SEAL_PROBE', __import__('json').dumps({'loaded': 'seal_verl.verl_glue.plugin' in sys.modules,"
        " 'estimator': 'seal_grpo' in ADV_ESTIMATOR_REGISTRY}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _parse(proc.stdout) == {"loaded": False, "estimator": False}


def test_registration_in_ray_worker():
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        pytest.skip("needs its own local Ray instance")
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": {"PYTHONWARNINGS": "ignore"}})
    try:

        @ray.remote(num_cpus=0)
        def probe():
            import os
            import sys

            import verl  # noqa: F401
            from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY
            from verl.trainer.ppo.v1 import get_trainer_cls

            plugin = sys.modules.get("seal_verl.verl_glue.plugin")
            return {
                "pid": os.getpid(),
                "plugin_loaded": plugin is not None,
                "estimator": "seal_grpo" in ADV_ESTIMATOR_REGISTRY,
                "trainer": get_trainer_cls("seal").__name__,
            }

        out = ray.get(probe.remote(), timeout=240)
    finally:
        ray.shutdown()
    assert out["pid"] != os.getpid()
    assert out == {"pid": out["pid"], "plugin_loaded": True, "estimator": True, "trainer": "SealPPOTrainer"}
