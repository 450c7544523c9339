"""A CPU platform for verl 0.9.1, registered through verl's public ``PlatformRegistry`` as ``cpu``.

Selected with ``VERL_PLATFORM=cpu``. What it answers, and why:

- device ``cpu``, vendor ``cpu``; collective backend ``gloo``;
- Ray resource name ``GPU``: verl's resource-pool accounting (``ResourcePoolManager``) counts only GPU/NPU, so
  the run starts Ray with logical GPUs (``+ray_kwargs.ray_init.num_gpus=N``; nothing touches CUDA) and every
  "GPU" worker is really a CPU process;
- the device module is ``torch.cpu`` plus the calls verl makes on ``torch.cuda`` that ``torch.cpu`` lacks:
  ``get_device_name()`` returns ``"CPU"`` (``verl.utils.flops_counter.get_device_flops`` tests substrings of
  it and crashed on None), memory statistics return 0 and cache/allocator calls are no-ops;
- ``current_device()`` is ``"cpu"`` (as ``torch.cpu.current_device()``), because verl passes
  ``get_device_id()`` straight to ``.to(...)``/``device=``; an int there means an accelerator index;
- no CUDA IPC (verl then moves weights to vLLM through shared memory), no sleep mode (set
  ``enable_sleep_mode=false`` and ``free_cache_engine=false`` in the rollout config);
- rollout env vars ``VLLM_TARGET_DEVICE=cpu`` (else vLLM: "Failed to infer device type") and the activation
  variable, so that the vLLM server actor and its engine processes apply the vLLM-side patches too.
"""

from __future__ import annotations

import os
import types
from contextlib import contextmanager
from typing import Any, Optional

import torch

from .versions import require_version

PLATFORM_NAME = "cpu"


def _total_memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def _available_memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def _zero(*_args, **_kwargs) -> int:
    return 0


def _noop(*_args, **_kwargs) -> None:
    return None


class _CPUDeviceModule(types.ModuleType):
    """``torch.cpu`` with the extra ``torch.cuda``-style functions verl calls on its device module."""

    def __init__(self) -> None:
        super().__init__("seal_cpu_platform.device_module", "torch.cpu as seen by verl's CPU platform")
        self.get_device_name = lambda device=None: "CPU"
        self.is_available = lambda: True
        self.device_count = lambda: 1
        self.current_device = lambda: "cpu"  # as torch.cpu.current_device()
        self.set_device = _noop
        self.synchronize = _noop
        self.empty_cache = _noop
        self.ipc_collect = _noop
        self.reset_peak_memory_stats = _noop
        self.set_per_process_memory_fraction = _noop
        self.memory_allocated = _zero
        self.memory_reserved = _zero
        self.max_memory_allocated = _zero
        self.max_memory_reserved = _zero
        self.mem_get_info = lambda device=None: (_available_memory_bytes(), _total_memory_bytes())
        self.manual_seed = lambda seed: torch.manual_seed(seed)
        self.manual_seed_all = lambda seed: torch.manual_seed(seed)
        self.get_rng_state = lambda device=None: torch.get_rng_state()
        self.set_rng_state = lambda state, device=None: torch.set_rng_state(state)

    def __getattr__(self, name: str) -> Any:
        # Stream, Event, current_stream, stream, ... come from torch.cpu itself
        return getattr(torch.cpu, name)


DEVICE_MODULE = _CPUDeviceModule()


def _platform_class():
    from verl.plugin.platform import PlatformBase

    class PlatformCPU(PlatformBase):
        """verl platform for plain CPU processes (gloo, logical Ray GPUs, no IPC, no profiler)."""

        @property
        def device_name(self) -> str:
            return "cpu"

        @property
        def vendor_name(self) -> str:
            return "cpu"

        @property
        def device_module(self) -> types.ModuleType:
            return DEVICE_MODULE

        def is_available(self) -> bool:
            return True

        def is_platform_available(self, use_smi_check: bool = False) -> bool:
            # only ever chosen explicitly (VERL_PLATFORM=cpu), never by auto-detection
            return False

        def current_device(self) -> str:
            # verl uses get_device_id() directly as a torch device (`.to(get_device_id())`,
            # `torch.empty(..., device=get_device_id())`); an int would mean an accelerator index, which
            # fails on CPU ("Cannot access accelerator device when none is available"). torch.cpu answers
            # "cpu" here too.
            return "cpu"

        def device_count(self) -> int:
            return 1

        def set_device(self, device_index: int) -> None:
            return None

        def synchronize(self, device_index: Optional[int] = None) -> None:
            return None

        def manual_seed(self, seed: int) -> None:
            torch.manual_seed(seed)

        def manual_seed_all(self, seed: int) -> None:
            torch.manual_seed(seed)

        def set_allocator_settings(self, settings: str) -> None:
            return None

        def empty_cache(self) -> None:
            return None

        def get_device_capability(self, device_index: int = 0) -> tuple[Optional[int], Optional[int]]:
            return None, None

        def communication_backend_name(self) -> str:
            return "gloo"

        def visible_devices_envvar(self) -> str:
            # Ray assigns the logical "GPU" ids through this variable; nothing reads it on CPU
            return "CUDA_VISIBLE_DEVICES"

        def ray_resource_name(self) -> str:
            return "GPU"

        def ray_resource_options(self, num_gpus: float) -> dict[str, Any]:
            return {"num_gpus": num_gpus}

        def ray_noset_envvars(self) -> list[str]:
            return ["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"]

        def is_ipc_supported(self) -> bool:
            return False

        def rollout_env_vars(self) -> dict[str, str]:
            from . import ENV_VAR

            return {"VLLM_TARGET_DEVICE": "cpu", ENV_VAR: os.environ.get(ENV_VAR, "1")}

        @contextmanager
        def nvtx_range(self, msg: str):
            yield

        def profiler_start(self) -> None:
            return None

        def profiler_stop(self) -> None:
            return None

        def cudart(self) -> Any:
            return None

    return PlatformCPU


def register_cpu_platform():
    """Register :class:`PlatformCPU` as ``cpu`` in verl's PlatformRegistry (idempotent); return the class."""
    require_version("verl", "register CPU platform (verl.plugin.platform.PlatformRegistry)")
    from verl.plugin.platform import PlatformRegistry

    existing = PlatformRegistry.get(PLATFORM_NAME)
    if existing is not None and getattr(existing, "_seal_cpu_platform", False):
        return existing
    cls = _platform_class()
    cls._seal_cpu_platform = True
    PlatformRegistry.register(platform=PLATFORM_NAME)(cls)
    return cls


def register_failing_platform(error: BaseException) -> None:
    """Register a ``cpu`` platform whose construction re-raises ``error``.

    verl swallows exceptions raised while loading ``verl.plugins`` entry points (it logs them at debug
    level). When activation fails, this keeps the cause visible: the first ``get_platform()`` with
    ``VERL_PLATFORM=cpu`` raises the original error instead of "Unknown platform 'cpu'".
    """
    try:
        from verl.plugin.platform import PlatformRegistry

        base = _platform_class()
    except Exception:  # verl itself is unusable; nothing to register into
        return
    message = str(error)
    error_type = type(error)

    class FailedPlatformCPU(base):
        def __init__(self) -> None:
            raise error_type(message)

    PlatformRegistry.register(platform=PLATFORM_NAME)(FailedPlatformCPU)
