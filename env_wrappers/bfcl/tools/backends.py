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
import inspect
import json
import threading
import time
from typing import Any

from . import calls as _calls
from . import classes

#: Names BFCL refuses before executing anything (its own safety list).
REFUSED_NAMES = frozenset(["kill", "exit", "quit", "remove", "unlink", "popen", "Popen", "run"])

ERROR_PREFIX = "Error during execution: "

#: Longest result text a call may return (characters). The largest result of any BFCL ground-truth call is
#: about 32,000 characters; a longer one (a model can make a backend build hundreds of MB of text) becomes an
#: error result that says so, never a text that reaches the rollout process, the prompt or the trace.
MAX_RESULT_CHARS = 1_000_000


#: What every time-limit error text holds between the call's name and its limit.
TIMEOUT_MARK = " timed out after "


def timeout_text(name: str, limit_s: float) -> str:
    """The error result of a call stopped at its time limit (the same text in the thread mode, the sandbox and
    the verifier)."""
    return ERROR_PREFIX + f"call to {name}{TIMEOUT_MARK}{limit_s:g}s"


def is_timeout_result(text: Any) -> bool:
    """Whether a recorded call result is the error of a call stopped at its time limit (how a judgement finds,
    in a trace, the calls not to run again)."""
    return isinstance(text, str) and text.startswith(ERROR_PREFIX + "call to ") and TIMEOUT_MARK in text


def too_long_text(name: str, length: int) -> str:
    """The error result of a call whose result text is over :data:`MAX_RESULT_CHARS`."""
    return ERROR_PREFIX + (f"the result of {name} has {length} characters, over the limit of "
                           f"{MAX_RESULT_CHARS}; it was not returned")


def bound_result(call: str, outcome: tuple) -> tuple:
    """``outcome`` (``(text, is_error, executed)``), or the too-long error in its place (still executed)."""
    text = outcome[0]
    if isinstance(text, str) and len(text) > MAX_RESULT_CHARS:
        head = call.split("(", 1)[0].strip()[:80] or "?"
        return too_long_text(head, len(text)), True, outcome[2]
    return outcome

#: BFCL backend methods that write module-level state shared by every instance. In long-context mode
#: ``VehicleControlAPI.get_outside_temperature_from_google`` stores its reading in the module dict
#: ``LONG_WEATHER_EXTENSION`` and returns that very dict, so two rollouts calling it at the same time can
#: each report the other's reading; ``MathAPI.logarithm`` sets mpmath's process-wide precision and then
#: computes with it. Such calls run under one process-wide lock and hand back a private copy of what they
#: return; a single call behaves exactly as it would unlocked. (Rollouts run their calls in worker processes of their
#: own, see the sandbox; this keeps the in-process paths, the verifier's, deterministic too.)
SHARED_STATE_METHODS = frozenset({("VehicleControlAPI", "get_outside_temperature_from_google"),
                                  ("MathAPI", "logarithm")})
_SHARED_STATE_LOCK = threading.Lock()


class _Formatted:
    """A result already formatted while the shared-state lock was held (its text may depend on the
    process-wide setting, as an mpmath number's printed digits do)."""

    __slots__ = ("text", "is_error")

    def __init__(self, value: Any):
        self.text = format_result(value)
        self.is_error = is_error_result(value)


def _guarded(method):
    def guarded(*args, **kwargs):
        with _SHARED_STATE_LOCK:
            return _Formatted(copy.deepcopy(method(*args, **kwargs)))

    return guarded


class CallTimeout(Exception):
    pass


_METHODS_CACHE: dict[type, tuple[str, ...]] = {}


def _public_methods(inst: Any) -> tuple[str, ...]:
    """Public method names of a backend instance, as BFCL lists them (``inspect.getmembers`` with
    ``ismethod``, names without a leading underscore, in its sorted order). Methods live on the class, so
    the list is computed once per class (a performance cache; the result is the same for every instance)."""
    cls = type(inst)
    names = _METHODS_CACHE.get(cls)
    if names is None:
        names = tuple(n for n, _ in inspect.getmembers(inst, predicate=inspect.ismethod) if not n.startswith("_"))
        _METHODS_CACHE[cls] = names
    return names


_METHOD_NAMES: dict[tuple, frozenset] = {}


def method_names(involved_classes: list[str]) -> frozenset:
    """The public method names a :class:`Backends` of these classes dispatches (they depend on the classes
    only), without building instances for every caller: computed once per class list."""
    key = tuple(involved_classes)
    names = _METHOD_NAMES.get(key)
    if names is None:
        names = frozenset(Backends(list(key), {}, False, None).methods)
        _METHOD_NAMES[key] = names
    return names


class _NotPlainData(Exception):
    pass


_ATOMS = frozenset({str, int, float, bool, type(None)})


def _copy_plain(value: Any, seen: set) -> Any:
    t = type(value)
    if t in _ATOMS:
        return value
    if id(value) in seen:
        raise _NotPlainData  # a shared sub-object: deepcopy keeps the sharing
    seen.add(id(value))
    if t is dict:
        out = {}
        for k, v in value.items():
            if type(k) not in _ATOMS:
                raise _NotPlainData
            out[k] = v if type(v) in _ATOMS else _copy_plain(v, seen)
        return out
    if t is list:
        return [v if type(v) in _ATOMS else _copy_plain(v, seen) for v in value]
    raise _NotPlainData


def _copy_config(config: Any) -> Any:
    """``copy.deepcopy`` of a scenario config. Task configs are JSON data (dicts, lists, scalars, no shared
    sub-objects); those are copied by a plain recursive copy, several times faster than deepcopy and equal
    to what it returns. Anything else goes to deepcopy."""
    try:
        return _copy_plain(config, set())
    except (_NotPlainData, RecursionError):
        return copy.deepcopy(config)


def format_result(value: Any) -> str:
    """Format a backend return value exactly as BFCL's execution helper does."""
    if type(value) is _Formatted:
        return value.text
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
    if type(value) is _Formatted:
        return value.is_error
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
        stateless = classes.stateless()
        for class_name in involved_classes:
            inst = classes.class_for(class_name)()
            if class_name not in stateless:
                inst._load_scenario(_copy_config(initial_config.get(class_name, {})), long_context=long_context)
            self.instances[class_name] = inst
            for method_name in _public_methods(inst):
                self.methods[method_name] = (class_name, method_name)

    def copy(self) -> "Backends":
        """An independent deep copy (used for counterfactual checks; the original is never touched)."""
        new = object.__new__(Backends)
        new.instances = copy.deepcopy(self.instances)
        new.methods = dict(self.methods)
        new.call_timeout_s = self.call_timeout_s
        new.broken = self.broken
        return new

    # ------------------------------------------------------------------------------------------------------
    def execute(self, call: str) -> tuple[str, bool, bool]:
        """Execute one canonical call string. Returns ``(result_text, is_error, executed)``.

        ``executed`` is true when a backend method was entered. The string is parsed literal-only; a call
        that does not parse, names no public method of an involved instance, or is on BFCL's refusal list
        runs nothing and returns BFCL's kind of error text.
        """
        final, invocation = self._prepare(call)
        return final if final is not None else bound_result(call, self._invoke(*invocation))

    def _prepare(self, call: str) -> tuple:
        """Parse and check one call without running it. Returns ``(final, None)`` with the final
        ``(text, is_error, executed)`` of a call that cannot run, or ``(None, (name, args, kwargs))`` to
        invoke. Nothing here depends on backend state."""
        undefined = None
        try:
            name, args, kwargs = _calls.split_call(call, bare_names=False)
        except _calls.UndefinedName as exc:
            # A bare identifier among the arguments (``nan``/``inf`` from a non-finite float): BFCL's eval
            # fails on it after resolving the function, without running anything.
            name, undefined, args, kwargs = exc.func, exc.name, (), {}
        except ValueError as exc:
            return (ERROR_PREFIX + f"invalid syntax ({exc})", True, False), None
        bare = name.split(".")[-1]
        if bare in REFUSED_NAMES:
            return (ERROR_PREFIX + f"Function call {bare} is not allowed.", True, False), None
        if "." in name or name not in self.methods:
            root = name.split(".")[0]
            return (ERROR_PREFIX + f"name '{root}' is not defined", True, False), None
        if undefined is not None:
            return (ERROR_PREFIX + f"name '{undefined}' is not defined", True, False), None
        return None, (name, args, kwargs)

    def execute_many(self, calls: list) -> list:
        """Execute call strings in order: the same results as ``[self.execute(c) for c in calls]``.

        Without a time limit the calls run inline. With one, the calls that reach a backend method run as a
        single job on a worker thread, each still under its own limit (counted from its start, the first
        from submission): one hand-off between threads per batch instead of one per call. A call over its
        limit gets the timeout error and marks the backends broken; the batch's later invocations then get
        the broken error without running, exactly as separate ``execute`` calls would.
        """
        if self.call_timeout_s is None or len(calls) <= 1:
            return [self.execute(c) for c in calls]
        out: list = [None] * len(calls)
        jobs = []  # (position in calls, name, args, kwargs)
        for i, c in enumerate(calls):
            final, invocation = self._prepare(c)
            if final is not None:
                out[i] = final
            else:
                jobs.append((i, *invocation))
        if len(jobs) <= 1 or self.broken:
            for i, name, args, kwargs in jobs:
                out[i] = bound_result(calls[i], self._invoke(name, args, kwargs))
            return out
        bound = [(self._bound(name), args, kwargs) for _, name, args, kwargs in jobs]
        done: list = []
        progress = [(0, None)]  # (index of the running job, its start time), replaced atomically
        cancel = threading.Event()
        submitted = time.monotonic()
        future = self._get_pool().submit(_run_batch, bound, done, progress, cancel)
        while True:
            idx, started = progress[0]
            deadline = (started if started is not None else submitted) + self.call_timeout_s
            try:
                future.result(timeout=max(0.0, deadline - time.monotonic()))
                break
            except concurrent.futures.TimeoutError:
                if progress[0] != (idx, started):
                    continue  # that call returned and the next one started: wait for its own limit
                cancel.set()
                self.broken = (f"tool backend stopped responding after {self.call_timeout_s:g}s; "
                               "the episode's tools are unavailable")
                for j, (i, name, _, _) in enumerate(jobs):
                    if j < idx:
                        out[i] = bound_result(calls[i], done[j])
                    elif j == idx:
                        out[i] = (timeout_text(name, self.call_timeout_s), True, True)
                    else:
                        out[i] = (ERROR_PREFIX + self.broken, True, False)
                return out
        for (i, *_), r in zip(jobs, done):
            out[i] = bound_result(calls[i], r)
        return out

    def _bound(self, name: str):
        """The bound backend method for a public method name (guarded if it writes module-level state)."""
        class_name, method_name = self.methods[name]
        method = getattr(self.instances[class_name], method_name)
        if (class_name, method_name) in SHARED_STATE_METHODS:
            return _guarded(method)
        return method

    def _invoke(self, name: str, args: tuple, kwargs: dict) -> tuple[str, bool, bool]:
        if self.broken:
            return ERROR_PREFIX + self.broken, True, False
        method = self._bound(name)
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
            return timeout_text(name, self.call_timeout_s), True, True

    @classmethod
    def _get_pool(cls) -> concurrent.futures.ThreadPoolExecutor:
        with cls._pool_lock:
            if cls._pool is None:
                cls._pool = concurrent.futures.ThreadPoolExecutor(max_workers=16, thread_name_prefix="bfcl-call")
            return cls._pool

    def state(self) -> dict[str, dict]:
        return {name: public_state(inst) for name, inst in self.instances.items()}


def _run_batch(bound: list, done: list, progress: list, cancel: threading.Event) -> None:
    """Worker side of :meth:`Backends.execute_many`: run the calls in order, publishing progress."""
    for j, (method, args, kwargs) in enumerate(bound):
        if cancel.is_set():
            return
        progress[0] = (j, time.monotonic())
        done.append(_run_call(method, args, kwargs))


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
