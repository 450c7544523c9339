"""The sandbox's client: one rollout's backend instances behind a worker process (:class:`IsolatedBackends`),
and the sandbox's own threads that steps from an event loop run in (:func:`run_blocking`).

Every call runs in the rollout's worker under ``call_timeout_s``. A call over its limit gets BFCL's time-limit
text and costs the worker; a worker that ends costs only the call it was running. Either way a fresh worker
gets the calls completed so far replayed, so the rollout keeps its tools and its state (see the package
docstring). Failures are told apart by type (:class:`~.worker.WorkerTimeout` or :class:`~.worker.WorkerDied`).

A rollout holds one of the pool's slots from its first call until it is closed (see :mod:`.pool`); closing it
returns at once, its worker's reset runs in the pool's own threads.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, TypeVar

from seal_verl import env_vars

from ..tools.backends import ERROR_PREFIX, timeout_text
from .pool import WorkerPool, pool
from .worker import DEFAULT_MEMORY_LIMIT_MB, Worker, WorkerDied, WorkerTimeout

#: A replay is sent in messages of at most this many calls (a fresh worker need not receive it all at once).
REPLAY_CHUNK_CALLS = 64
#: Threads of the sandbox's executor (:func:`tool_executor`); ``SEAL_BFCL_TOOL_THREADS`` changes it.
TOOL_THREADS = 64
ENV_TOOL_THREADS = "SEAL_BFCL_TOOL_THREADS"
#: Name prefix of those threads.
TOOL_THREAD_NAME = "seal-bfcl-tool"

T = TypeVar("T")


class _Lease:
    """What one rollout holds of its process's pool: a slot, and the worker (while it has one)."""

    __slots__ = ("pid", "pool", "slot", "worker")

    def __init__(self):
        self.pid = os.getpid()
        self.pool: WorkerPool | None = None
        self.slot = False
        self.worker: Worker | None = None


def _release(lease: _Lease) -> None:
    """Hand the worker back (its reset runs in the pool's threads) and give the slot back. Never blocks on
    the worker. In a process forked from the rollout's, the lease is not this process's: nothing to do."""
    if lease.pid != os.getpid():
        return
    worker, lease.worker = lease.worker, None
    slot, lease.slot = lease.slot, False
    if worker is None and not slot:
        return
    try:
        lease.pool.release(worker, slot=slot)
    except Exception:  # noqa: BLE001 - at interpreter exit
        if worker is not None:
            worker.kill()


class IsolatedBackends:
    """The backends of one rollout, in a worker process. The same results as ``tools.backends.Backends``
    for every call that finishes in time; see the package docstring for what happens to one that does not.

    Args:
        involved_classes, initial_config, long_context: as for ``Backends``.
        call_timeout_s: per-call time limit (required: isolation exists to enforce it). It also bounds, as a
            whole, the replay that rebuilds the state on a new worker.
        memory_limit_mb: address-space cap of the worker (None: no cap).
    """

    def __init__(self, involved_classes: list[str], initial_config: dict, long_context: bool = False,
                 call_timeout_s: float = 10.0, memory_limit_mb: int | None = DEFAULT_MEMORY_LIMIT_MB):
        if call_timeout_s is None or call_timeout_s <= 0:
            raise ValueError("IsolatedBackends needs a positive call_timeout_s")
        self._load = ("load", list(involved_classes), initial_config, bool(long_context))
        self.call_timeout_s = float(call_timeout_s)
        self.memory_limit_mb = memory_limit_mb
        self.broken: str | None = None
        self.history: list[str] = []  # calls that completed, in order: replayed to rebuild the state
        self.replaced = 0  # workers replaced during this rollout (after an overrun or a worker's end)
        self._leases = 0
        self._lease = _Lease()  # the slot and the worker; shared with the finalizer
        self._finalizer = weakref.finalize(self, _release, self._lease)

    @property
    def _box(self) -> list:
        """``[worker]`` while one is leased, else ``[]``."""
        return [] if self._lease.worker is None else [self._lease.worker]

    # ------------------------------------------------------------------------------------------------------
    def _take_slot(self) -> None:
        """This rollout's slot, waited for in this thread (see :meth:`admit` for an event loop)."""
        lease = self._lease
        if not lease.slot:
            lease.pool = lease.pool or pool()
            lease.pool.take_slot()
            lease.slot = True

    async def admit(self) -> None:
        """Wait on the running event loop, holding no thread, until this rollout has its slot (its place among
        the tool workers its process runs at once); at once if it has one, or if its tools are closed."""
        lease = self._lease
        if lease.slot or self.broken:
            return
        lease.pool = lease.pool or pool()
        await lease.pool.take_slot_async()
        if lease.slot:  # taken meanwhile by a thread of the same rollout
            lease.pool.give_slot()
        lease.slot = True

    def _worker(self) -> Worker:
        """The rollout's worker. A worker that has ended since the last call (killed while idle) is replaced
        first; a new worker is loaded and then gets the completed calls replayed, within one time limit."""
        lease = self._lease
        if lease.worker is not None and not lease.worker.alive():
            self._discard_worker()
        if lease.worker is None:
            self._take_slot()
            w = lease.pool.acquire(self.memory_limit_mb)
            self._leases += 1
            self.replaced = self._leases - 1
            try:
                reply = w.request(self._load, timeout=max(30.0, self.call_timeout_s))
                status, detail = reply if isinstance(reply, tuple) and len(reply) == 2 else ("error", reply)
                if status != "ok":
                    raise RuntimeError(f"tool worker could not build the backends: {detail}")
                if self.history:
                    self._replay(w)
            except BaseException:
                w.kill()
                raise
            lease.worker = w
        return lease.worker

    def _replay(self, w: Worker) -> None:
        """Run the completed calls again on a fresh worker, all of them within ``call_timeout_s``."""
        deadline = time.monotonic() + self.call_timeout_s
        history = list(self.history)
        for i in range(0, len(history), REPLAY_CHUNK_CALLS):
            chunk = history[i:i + REPLAY_CHUNK_CALLS]
            try:
                w.conn.send(("run", chunk))
            except OSError as exc:
                raise WorkerDied(f"worker process ended ({exc})") from None
            for _ in chunk:
                try:
                    result = w.receive(max(0.0, deadline - time.monotonic()))
                except WorkerTimeout:
                    raise WorkerDied(f"replaying the {len(history)} earlier calls took longer than "
                                     f"{self.call_timeout_s:g}s") from None
                if not (isinstance(result, tuple) and len(result) == 3):
                    raise WorkerDied(f"worker process failed: {str(result)[:200]}")

    def _discard_worker(self) -> None:
        worker, self._lease.worker = self._lease.worker, None
        if worker is not None:
            worker.kill()

    def close(self) -> None:
        """Hand the worker back to the pool (also done when this object is garbage-collected)."""
        self._finalizer()

    # ------------------------------------------------------------------------------------------------------
    def execute(self, call: str) -> tuple[str, bool, bool]:
        return self.execute_many([call])[0]

    def execute_many(self, calls: list) -> list:
        """Run call strings in order, each under the time limit; ``(text, is_error, executed)`` per call."""
        out: list = []
        pending = list(calls)
        undelivered = 0  # requests lost to a worker that ended before it read them (bounded retries)
        while pending:
            if self.broken:
                out.extend((ERROR_PREFIX + self.broken, True, False) for _ in pending)
                break
            try:
                w = self._worker()
            except (WorkerDied, OSError, RuntimeError) as exc:  # NoWorkerFree is a RuntimeError
                what = "be restored" if self.history else "start"
                self._close_tools(f"tool backend could not {what} ({_short(exc)})")
                continue
            try:
                w.conn.send(("run", pending))
            except OSError as exc:  # the worker ended before it got the calls: none of them ran
                self._discard_worker()
                undelivered += 1
                if undelivered > 2:
                    self._close_tools(f"tool backend could not be restored ({_short(exc)})")
                continue
            done = 0
            failure = None
            for call in pending:
                try:
                    result = w.receive(self.call_timeout_s)
                except WorkerDied as exc:
                    failure = exc
                    break
                if not (isinstance(result, tuple) and len(result) == 3):  # the worker failed outside a call
                    failure = WorkerDied(f"worker process failed: {str(result)[:200]}")
                    break
                out.append(result)
                self.history.append(call)
                done += 1
            if failure is None:
                break
            call = pending[done]
            if isinstance(failure, WorkerTimeout):
                out.append((timeout_text(_call_name(call), self.call_timeout_s), True, True))
            else:
                out.append((ERROR_PREFIX + f"call to {_call_name(call)} stopped the tool backend", True, True))
            self._discard_worker()
            self._restore()
            pending = pending[done + 1:]
        return out

    def _restore(self) -> None:
        """A fresh worker with the state of the calls completed so far (or the tools closed if that fails)."""
        try:
            self._worker()
        except (WorkerDied, OSError, RuntimeError) as exc:
            self._discard_worker()
            self._close_tools(f"tool backend could not be restored ({_short(exc)})")

    def _close_tools(self, why: str) -> None:
        self.broken = f"{why}; the episode's tools are unavailable"
        self._discard_worker()
        lease = self._lease
        if lease.slot:  # a rollout without tools needs no place among the workers
            lease.slot = False
            lease.pool.give_slot()

    # ------------------------------------------------------------------------------------------------------
    def state(self) -> dict[str, dict]:
        """The public state of every instance (BFCL's state-check view), read from the worker."""
        return self._ask("state")

    @property
    def instances(self) -> dict[str, Any]:
        """Copies of the worker's instances as they are now (for inspection: changes do not reach it)."""
        return self._ask("instances")

    def _ask(self, op: str):
        for attempt in range(2):
            w = self._worker()
            try:
                reply = w.request((op,), timeout=max(30.0, self.call_timeout_s))
                if not (isinstance(reply, tuple) and len(reply) == 2):
                    raise WorkerDied(f"worker process failed: {str(reply)[:200]}")
            except WorkerDied as exc:
                self._discard_worker()
                if attempt or isinstance(exc, WorkerTimeout):
                    raise
                continue  # the worker ended: a new one, with the calls replayed, answers instead
            status, value = reply
            if status != "ok":
                raise RuntimeError(f"tool worker: {value}")
            return value
        raise WorkerDied("unreachable")  # pragma: no cover


def _call_name(call: str) -> str:
    head = call.split("(", 1)[0].strip()
    return head[:80] if head else "?"


def _short(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:200]


# ----------------------------------------------------------------------------------------------------------
# the sandbox's threads

_EXECUTOR: tuple[int, ThreadPoolExecutor] | None = None
_EXECUTOR_LOCK = threading.Lock()


def tool_executor() -> ThreadPoolExecutor:
    """This process's executor for tool steps (``TOOL_THREADS`` threads named ``TOOL_THREAD_NAME``), apart from
    the event loop's default executor, which verl's own work uses too."""
    global _EXECUTOR
    with _EXECUTOR_LOCK:
        if _EXECUTOR is None or _EXECUTOR[0] != os.getpid():
            threads = env_vars.value(ENV_TOOL_THREADS) or TOOL_THREADS
            _EXECUTOR = (os.getpid(), ThreadPoolExecutor(threads, thread_name_prefix=TOOL_THREAD_NAME))
        return _EXECUTOR[1]


async def run_blocking(fn: Callable[[], T], backends: IsolatedBackends | None = None) -> T:
    """Run ``fn`` (a step of a rollout whose calls run on ``backends``) from the running event loop in the
    sandbox's threads, once the rollout has its slot: a rollout beyond the process's bound waits on the event
    loop, not in one of those threads, so the rollouts that hold the slots always have threads to go on."""
    if backends is not None:
        await backends.admit()
    return await asyncio.get_running_loop().run_in_executor(tool_executor(), fn)
