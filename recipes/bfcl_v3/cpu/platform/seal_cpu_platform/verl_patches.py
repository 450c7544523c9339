"""verl-side patches for CPU runs (applied in the driver and in every Ray worker, at ``import verl`` time).

Process-group backend. verl 0.9.1 builds the backend string ``f"cpu:gloo,{device}:{backend}"``
(``verl/utils/distributed.py``). With the CPU platform that is ``cpu:gloo,cpu:gloo`` and torch refuses it:
``ValueError: Duplicate device type cpu in backend string``. The two initialisers are replaced by versions that
use plain ``gloo`` (an explicit ``backend=`` argument is still honoured). ``verl/workers/engine_workers.py`` and
``verl/checkpoint_engine/base.py`` import ``initialize_global_process_group_ray`` by name, so the replacement must
be in place before they are imported: activation at ``import verl`` (a ``verl.plugins`` entry point or
``VERL_USE_EXTERNAL_MODULES``) is early enough; modules that already hold the old function are patched too.
"""

from __future__ import annotations

import inspect
import os
import sys
from datetime import timedelta

from .versions import require_version

PATCH = "gloo process group (verl.utils.distributed.initialize_global_process_group[_ray])"
_MARK = "_seal_cpu_patched"


def _initialize_global_process_group(timeout_second=36000):
    """CPU stand-in for ``verl.utils.distributed.initialize_global_process_group``: plain gloo."""
    import torch.distributed

    torch.distributed.init_process_group(
        backend="gloo",
        timeout=timedelta(seconds=timeout_second),
        init_method=os.environ.get("DIST_INIT_METHOD", None),
    )
    local_rank = int(os.environ["LOCAL_RANK"])
    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    return local_rank, rank, world_size


def _wrap_ray_initializer(original):
    def initialize_global_process_group_ray(timeout_second=None, backend=None):
        """CPU stand-in for ``initialize_global_process_group_ray``: plain gloo unless a backend is given."""
        return original(timeout_second=timeout_second, backend=backend or "gloo")

    initialize_global_process_group_ray.__wrapped__ = original
    setattr(initialize_global_process_group_ray, _MARK, True)
    return initialize_global_process_group_ray


def patch_process_group_backend() -> bool:
    """Install the gloo initialisers; idempotent. Returns True if this call changed anything."""
    require_version("verl", PATCH)
    from verl.utils import distributed as dist_mod

    current_ray = dist_mod.initialize_global_process_group_ray
    if getattr(current_ray, _MARK, False):
        return False
    params = list(inspect.signature(current_ray).parameters)
    if params != ["timeout_second", "backend"]:
        raise RuntimeError(
            f"seal_cpu_platform: patch '{PATCH}' expects initialize_global_process_group_ray"
            f"(timeout_second, backend), found ({', '.join(params)})"
        )
    original_plain = dist_mod.initialize_global_process_group
    new_ray = _wrap_ray_initializer(current_ray)
    new_plain = _initialize_global_process_group
    new_plain.__wrapped__ = original_plain
    setattr(new_plain, _MARK, True)

    dist_mod.initialize_global_process_group_ray = new_ray
    dist_mod.initialize_global_process_group = new_plain
    # modules imported earlier that bound the old functions by name
    for mod in list(sys.modules.values()):
        name = getattr(mod, "__name__", "") or ""
        if not name.startswith("verl.") or mod is dist_mod:
            continue
        d = getattr(mod, "__dict__", {})
        if d.get("initialize_global_process_group_ray") is current_ray:
            mod.initialize_global_process_group_ray = new_ray
        if d.get("initialize_global_process_group") is original_plain:
            mod.initialize_global_process_group = new_plain
    return True


# ------------------------------------------------------------------------------------------------------------
# FSDP2 CPU offload of the reference model without pinned memory
# ------------------------------------------------------------------------------------------------------------
# verl 0.9.1 forces ``CPUOffloadPolicy(pin_memory=True)`` on every forward-only FSDP2 engine (the reference
# policy, used when ``actor.use_kl_loss=true``): ``verl/workers/engine/fsdp/transformer_impl.py::
# _build_fsdp_module``. Pinning needs an accelerator, so on a CPU-only machine ``fully_shard`` fails with
# ``RuntimeError: Cannot access accelerator device when none is available.`` (``_fsdp_param.py``:
# ``padded_sharded_param.pin_memory()``). The policy class that transformer_impl binds by name is replaced by a
# subclass that never pins; ``isinstance(..., CPUOffloadPolicy)`` checks in torch still hold. Offloading to the
# CPU is a no-op on the CPU anyway.

OFFLOAD_PATCH = "unpinned FSDP2 CPU offload (verl.utils.fsdp_utils.CPUOffloadPolicy)"


def _unpinned_policy_class(base):
    class CPUOffloadPolicyUnpinned(base):
        """``CPUOffloadPolicy`` that never pins memory (seal_cpu_platform: no accelerator to pin for)."""

        def __init__(self, pin_memory: bool = False):
            super().__init__(pin_memory=False)

    setattr(CPUOffloadPolicyUnpinned, _MARK, True)
    CPUOffloadPolicyUnpinned.__wrapped__ = base
    return CPUOffloadPolicyUnpinned


def patch_fsdp2_offload_pin_memory() -> bool:
    """Make verl's FSDP2 engines build unpinned CPU-offload policies; idempotent. True if this call changed it."""
    require_version("verl", OFFLOAD_PATCH)
    from verl.utils import fsdp_utils

    current = getattr(fsdp_utils, "CPUOffloadPolicy", None)
    if current is None:
        raise RuntimeError(f"seal_cpu_platform: patch '{OFFLOAD_PATCH}' found no CPUOffloadPolicy in verl")
    if getattr(current, _MARK, False):
        return False
    replacement = _unpinned_policy_class(current)
    fsdp_utils.CPUOffloadPolicy = replacement
    for mod in list(sys.modules.values()):  # modules that imported the class by name already
        name = getattr(mod, "__name__", "") or ""
        if name.startswith("verl.") and mod is not fsdp_utils and getattr(mod, "__dict__", {}).get("CPUOffloadPolicy") is current:
            mod.CPUOffloadPolicy = replacement
    return True
