"""verl plugin entry point of seal-verl (``verl.plugins``: ``seal = seal_verl.verl_glue.plugin``).

verl imports every ``verl.plugins`` entry point at the end of ``import verl``, in the driver and in every Ray
worker, and swallows any exception raised there (logged at DEBUG only). Importing this module registers:

1. the CPU platform, if its env switch ``SEAL_CPU_PLATFORM`` is set (first, because it
   must patch verl before verl's worker modules are imported);
2. the advantage estimator ``seal_grpo`` (``verl.trainer.ppo.core_algos.register_adv_est``);
3. the legacy-trainer wrappers (``legacy.install``), pass-throughs unless a run selects SEAL;
4. the V1 trainer ``seal`` (``verl.trainer.ppo.v1.register_trainer``);
5. the agent loops of :mod:`seal_verl.verl_glue.agent_loop` (``seal_env`` / ``env`` for any environment,
   ``seal_bfcl`` / ``bfcl`` for BFCL), through its ``register_agent_loops``;
6. a weight-sync socket named by the raylet as well (``compat.distinct_weight_sync_socket``), so two runs on
   one host never share it.

Everything is idempotent: ``register()`` may run any number of times. ``REGISTERED`` records what happened,
so tests can prove the registration in a fresh interpreter and in a Ray worker, where verl would have hidden
an import error.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os

logger = logging.getLogger(__name__)

#: What ``register()`` did in this process (names -> True); read by tests and ``seal-verl`` diagnostics.
REGISTERED: dict[str, bool] = {}

AGENT_LOOP_MODULE = "seal_verl.verl_glue.agent_loop"
CPU_PLATFORM_MODULE = "seal_cpu_platform"
CPU_PLATFORM_SWITCH = "SEAL_CPU_PLATFORM"


def _module_exists(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def _cpu_platform_requested() -> bool:
    """``SEAL_CPU_PLATFORM`` set to 1/true/yes/on (the CPU platform's own switch, read here without importing it)."""
    return os.environ.get(CPU_PLATFORM_SWITCH, "").strip().lower() in ("1", "true", "yes", "on")


def _activate_cpu_platform() -> None:
    # The CPU platform is a distribution of its own (recipes/bfcl_v3/cpu/platform), installed by the CPU set-up
    # only; a process that did not ask for it never imports it.
    if not _cpu_platform_requested():
        return
    if not _module_exists(CPU_PLATFORM_MODULE):
        message = (f"{CPU_PLATFORM_SWITCH}=1 but the CPU platform is not installed in this environment: "
                   "pip install --no-deps -e recipes/bfcl_v3/cpu/platform (make cpu-env and make venv do)")
        logger.error(message)  # verl hides a plugin's exceptions at DEBUG level
        raise ImportError(message)
    module = importlib.import_module(CPU_PLATFORM_MODULE)
    module.activate_if_requested()
    REGISTERED["cpu_platform_checked"] = True


def _register_agent_loops() -> None:
    # ---- agent-loop import hook ---------------------------------------------------------------------
    # seal_verl/verl_glue/agent_loop.py (the BFCL loops "seal_bfcl" and "bfcl") registers itself with
    # verl when imported (verl.experimental.agent_loop.register, or a module-level register() function).
    # It may not exist yet in a checkout; that case is detected explicitly, never by catching errors, so
    # a genuine import error in the module still surfaces.
    if not _module_exists(AGENT_LOOP_MODULE):
        return
    module = importlib.import_module(AGENT_LOOP_MODULE)
    register = getattr(module, "register_agent_loops", None)
    if callable(register):
        register()
    REGISTERED["agent_loops"] = True


def register() -> dict[str, bool]:
    """Register everything SEAL adds to verl; safe to call repeatedly. Returns ``REGISTERED``."""
    _activate_cpu_platform()

    from seal_verl.verl_glue import advantage

    advantage.register_estimator()
    REGISTERED["adv_estimator:seal_grpo"] = True

    # V1 first, so that verl.trainer.ppo.v1.utils binds the unwrapped ray_trainer.compute_advantage.
    from seal_verl.verl_glue import trainer

    trainer.register()
    for name in trainer.SEAL_TRAINERS:
        REGISTERED[f"trainer:{name}"] = True

    from seal_verl.verl_glue import legacy

    legacy.install()
    REGISTERED["legacy_wrappers"] = True

    _register_agent_loops()

    from seal_verl.verl_glue import compat

    compat.distinct_weight_sync_socket()
    REGISTERED["distinct_weight_sync_socket"] = True
    return REGISTERED


register()
