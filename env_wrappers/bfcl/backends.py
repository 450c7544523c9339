"""Per-rollout instances of BFCL's backend classes and safe dispatch of decoded calls to them.

BFCL's own helper (``execute_multi_turn_func_call``) rewrites call strings and runs them with ``eval`` and
caches instances in module globals forever. Here a :class:`Backends` object owns fresh instances built from
the task's ``initial_config`` and dispatches a decoded call by attribute lookup on them. The observable
behaviour is BFCL's: the same method resolution (a later class wins a shared method name), the same result
formatting, the same error texts, the same refusal list.
"""

from __future__ import annotations

import concurrent.futures
import copy
import importlib
import inspect
import json
import threading
from typing import Any

from . import calls as _calls

# Imported lazily by _class_for so that importing this module stays cheap.
_CLASS_CACHE: dict[str, type] = {}
_CLASS_LOCK = threading.Lock()

#: Names BFCL refuses before executing anything (its own safety list).
REFUSED_NAMES = frozenset(["kill", "exit", "quit", "remove", "unlink", "popen", "Popen", "run"])

ERROR_PREFIX = "Error during execution: "


class CallTimeout(Exception):
    pass


def _class_for(class_name: str) -> type:
    cls = _CLASS_CACHE.get(class_name)
    if cls is not None:
        return cls
    from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING

    if class_name not in CLASS_FILE_PATH_MAPPING:
        raise KeyError(f"unknown BFCL backend class {class_name!r}")
    with _CLASS_LOCK:
        module = importlib.import_module(CLASS_FILE_PATH_MAPPING[class_name])
        cls = getattr(module, class_name)
        _CLASS_CACHE[class_name] = cls
    return cls


def _stateless() -> frozenset[str]:
    from bfcl_eval.constants.executable_backend_config import STATELESS_CLASSES

    return frozenset(STATELESS_CLASSES)


def format_result(value: Any) -> str:
    """Format a backend return value exactly as BFCL's execution helper does."""
    if type(value) == str:  # noqa: E721 - BFCL compares exact types
        return value
    if type(value) == dict:  # noqa: E721
        try:
            return json.dumps(value)
        except Exception:
            return str(value)
    return str(value)


def is_error_result(value: Any) -> bool:
    """BFCL backends report most failures by returning ``{"error": ...}`` rather than raising."""
    return type(value) == dict and "error" in value  # noqa: E721


def public_state(instance: Any) -> dict:
    """The attributes BFCL's state checker compares: every public instance attribute."""
    return {k: v for k, v in vars(instance).items() if not k.startswith("_")}


class Backends:
    """The backend instances of one rollout (or one verifier path) of one task.

    Args:
        involved_classes: BFCL class names, in the task's order (the order decides shared method names).
        initial_config: the task's ``initial_config``; deep-copied, never mutated.
        long_context: BFCL's long-context flag (true for the long_context category).
        call_timeout_s: when set, each call runs on a worker thread and a call that has not returned in
            time yields an error result instead of blocking the rollout. The hung call's instances are
            then marked broken: every later call of this rollout returns an error, since the abandoned
            thread may still be mutating them.
    """

    _pool: concurrent.futures.ThreadPoolExecutor | None = None
    _pool_lock = threading.Lock()

    def __init__(self, involved_classes: list[str], initial_config: dict, long_context: bool = False,
                 call_timeout_s: float | None = None):
        self.instances: dict[str, Any] = {}
        self.methods: dict[str, tuple[str, str]] = {}  # method name -> (class name, method name)
        self.call_timeout_s = call_timeout_s
        self.broken: str | None = None
        stateless = _stateless()
        for class_name in involved_classes:
            inst = _class_for(class_name)()
            if class_name not in stateless:
                inst._load_scenario(copy.deepcopy(initial_config.get(class_name, {})), long_context=long_context)
            self.instances[class_name] = inst
            for method_name, _ in inspect.getmembers(inst, predicate=inspect.ismethod):
                if not method_name.startswith("_"):
                    self.methods[method_name] = (class_name, method_name)

    def copy(self) -> "Backends":
        """An independent deep copy (used for counterfactual checks; the original is never touched)."""
        new = object.__new__(Backends)
        new.instances = copy.deepcopy(self.instances)
        new.methods = dict(self.methods)
        new.call_timeout_s = self.call_timeout_s
        new.broken = self.broken
        return new

    def knows(self, name: str) -> bool:
        return name in self.methods

    # ------------------------------------------------------------------------------------------------------
    def execute(self, call: str) -> tuple[str, bool, bool]:
        """Execute one canonical call string. Returns ``(result_text, is_error, executed)``.

        ``executed`` is true when a backend method was entered. The string is parsed literal-only; a call
        that does not parse, names no public method of an involved instance, or is on BFCL's refusal list
        runs nothing and returns BFCL's kind of error text.
        """
        try:
            name, args, kwargs = _calls.split_call(call)
        except ValueError as exc:
            return ERROR_PREFIX + f"invalid syntax ({exc})", True, False
        bare = name.split(".")[-1]
        if bare in REFUSED_NAMES:
            return ERROR_PREFIX + f"Function call {bare} is not allowed.", True, False
        if "." in name or name not in self.methods:
            root = name.split(".")[0]
            return ERROR_PREFIX + f"name '{root}' is not defined", True, False
        return self._invoke(name, args, kwargs)

    def _invoke(self, name: str, args: tuple, kwargs: dict) -> tuple[str, bool, bool]:
        if self.broken:
            return ERROR_PREFIX + self.broken, True, False
        class_name, method_name = self.methods[name]
        method = getattr(self.instances[class_name], method_name)
        if self.call_timeout_s is None:
            try:
                value = method(*args, **kwargs)
                return format_result(value), is_error_result(value), True
            except BaseException as exc:  # noqa: BLE001 - a backend failure is the agent's observation
                if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                    raise
                return ERROR_PREFIX + _safe_str(exc), True, True
        pool = self._get_pool()
        future = pool.submit(_run_call, method, args, kwargs)
        try:
            return future.result(timeout=self.call_timeout_s)
        except concurrent.futures.TimeoutError:
            self.broken = f"tool backend stopped responding after {self.call_timeout_s:g}s; the episode's tools are unavailable"
            return ERROR_PREFIX + f"call to {name} timed out after {self.call_timeout_s:g}s", True, True

    @classmethod
    def _get_pool(cls) -> concurrent.futures.ThreadPoolExecutor:
        with cls._pool_lock:
            if cls._pool is None:
                cls._pool = concurrent.futures.ThreadPoolExecutor(max_workers=16, thread_name_prefix="bfcl-call")
            return cls._pool

    def state(self) -> dict[str, dict]:
        return {name: public_state(inst) for name, inst in self.instances.items()}


def _run_call(method, args, kwargs) -> tuple[str, bool, bool]:
    try:
        value = method(*args, **kwargs)
        return format_result(value), is_error_result(value), True
    except Exception as exc:  # noqa: BLE001
        return ERROR_PREFIX + _safe_str(exc), True, True


def _safe_str(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # noqa: BLE001 - an exception whose __str__ fails
        return type(exc).__name__
