"""The sandbox's client: one rollout's backend instances behind a worker process (:class:`IsolatedBackends`).

Every call runs in the rollout's worker under ``call_timeout_s``. A call over its limit gets BFCL's time-limit
text and costs the worker; a worker that ends costs only the call it was running. Either way a fresh worker
gets the calls completed so far replayed, so the rollout keeps its tools and its state (see the package
docstring). Failures are told apart by type (:class:`~.worker.WorkerTimeout` or :class:`~.worker.WorkerDied`).
"""

from __future__ import annotations

import time
import weakref
from typing import Any

from ..environment.backends import ERROR_PREFIX, timeout_text
from .pool import pool
from .worker import DEFAULT_MEMORY_LIMIT_MB, Worker, WorkerDied, WorkerTimeout

#: A replay is sent in messages of at most this many calls (a fresh worker need not receive it all at once).
REPLAY_CHUNK_CALLS = 64


def _release(worker_box: list) -> None:
    worker = worker_box[0] if worker_box else None
    worker_box.clear()
    if worker is not None:
        try:
            pool().release(worker)
        except Exception:  # noqa: BLE001 - at interpreter exit
            worker.kill()


class IsolatedBackends:
    """The backends of one rollout, in a worker process. The same results as ``environment.backends.Backends``
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
        self._box: list = []  # [worker] while one is leased; shared with the finalizer
        self._finalizer = weakref.finalize(self, _release, self._box)

    # ------------------------------------------------------------------------------------------------------
    def _worker(self) -> Worker:
        """The rollout's worker. A worker that has ended since the last call (killed while idle) is replaced
        first; a new worker is loaded and then gets the completed calls replayed, within one time limit."""
        if self._box and not self._box[0].alive():
            self._discard_worker()
        if not self._box:
            w = pool().acquire(self.memory_limit_mb)
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
            self._box.append(w)
        return self._box[0]

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
        if self._box:
            self._box.pop().kill()

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
            except (WorkerDied, OSError, RuntimeError) as exc:
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
