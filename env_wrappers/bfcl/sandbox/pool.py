"""The sandbox's pool of warm tool workers, one per process: leases, the idle workers kept warm, and how the
other parts of the pool fit together.

A rollout first takes a *slot* (:meth:`WorkerPool.take_slot`, or :meth:`WorkerPool.take_slot_async` from an
event loop; :mod:`.slots`), which bounds the tool workers one process runs at once by its open-files limit
(:mod:`.limits`). With its slot it leases a worker (:meth:`WorkerPool.acquire`) and hands it back when it ends
(:meth:`WorkerPool.release`, which returns at once: the pool's reset threads, :mod:`.resets`, reset the worker
and this module keeps it warm or stops it). A judgement leases one of a separate set of judgement workers
(:meth:`WorkerPool.acquire_judge`; :mod:`.judges`). A released worker is kept only if it is back within its
memory limits (see the package docstring); the idle ones together stay within a budget and number at most the
peak of the last busy period (see :meth:`WorkerPool.idle_cap`).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading
import time
from typing import Any

from ..tools import classes
from . import limits
from .judges import Judges
from .limits import FDS_PER_WORKER, IDLE_POOL_BUDGET_MB, LOW_WORKER_BOUND, MAX_IDLE_WORKERS, fits
from .memory import find_malloc_trim
from .resets import RESET_THREADS, RESET_TIMEOUT_S, Resets
from .slots import SLOT_WAIT_S, NoWorkerFree, Slots
from .worker import Worker

logger = logging.getLogger(__name__)

__all__ = ["NoWorkerFree", "WorkerPool", "pool"]


class WorkerPool:
    """Warm worker processes, each leased to one rollout at a time. One pool per parent process.

    Args:
        max_workers: tool workers (leased, being reset, or idle) this process may run at once; None takes
            what the open-files limit allows (after raising it, see ``raise_open_files``), capped by
            ``SEAL_BFCL_MAX_TOOL_WORKERS`` when that is set.
        raise_open_files: raise the soft open-files limit towards ``limits.OPEN_FILES_TARGET`` when the pool
            starts (default: unless ``SEAL_BFCL_RAISE_NOFILE`` says no).

    Raises:
        seal_verl.env_vars.SettingError: a sandbox variable with a bad value (the message names it).
    """

    def __init__(self, max_workers: int | None = None, raise_open_files: bool | None = None):
        bounds = limits.bounds(max_workers, raise_open_files)
        self._lock = threading.RLock()
        self._capacity = threading.Condition(self._lock)  # a worker went idle or ended (for acquire)
        self._idle: list[Worker] = []  # oldest first
        self._idle_held = 0  # what they hold above their start (bytes), and in all
        self._idle_private = 0
        self._ctx = None
        self._pid = os.getpid()
        self._live = 0  # rollout workers alive: leased, being reset or idle
        self._leased = 0
        self._peak = 0  # most workers leased at once in this busy period (since the last time none was)
        self._last_peak = 0  # ... and in the one before
        self._generation = 0  # changes at shutdown: a reset that finishes later does not keep its worker
        self._counts = {"forks": 0, "reused": 0, "kept": 0, "stopped": 0}
        self.max_workers = bounds.max_workers
        self.idle_private_mb = bounds.idle_private_mb
        self._slots = Slots(self._lock, self.max_workers)
        self._resets = Resets(self._lock, self._reset, lambda: self._leased > 0)
        self._judges = Judges(self._lock, self._context)
        before, after = bounds.open_files
        if before is not None and after != before:
            logger.warning("tool sandbox: raised this process's soft limit on open files from %d to %d (each "
                           "tool worker holds %d); at most %d tool workers at once here", before, after,
                           FDS_PER_WORKER, self.max_workers)
        elif self.max_workers < LOW_WORKER_BOUND and max_workers is None:
            logger.warning("tool sandbox: the open-files limit allows %d tool workers at once in this process; "
                           "rollouts beyond that wait for one (raise the hard limit, ulimit -Hn, to run more)",
                           self.max_workers)

    @property
    def counts(self) -> dict:
        """``forks``, ``reused`` leases, workers ``kept`` after a reset and ``stopped``, and ``slot_waits``."""
        return dict(self._counts, slot_waits=self._slots.waits)

    def _context(self):
        """Workers are forked from this process, after the backend modules are imported here.

        Forking (rather than a fork server or a fresh interpreter) gives the worker this process's string
        hash seed, so results that print a set (several BFCL error texts do) read exactly as they would in
        process; it also makes a new worker cost one fork. The worker only runs its loop (``worker``) and
        touches no lock another thread of this process could hold (its modules are imported already).
        """
        if self._ctx is None:
            classes.preload()  # resolved now, so a worker never takes the lookup's lock
            find_malloc_trim()
            methods = multiprocessing.get_all_start_methods()
            self._ctx = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
        return self._ctx

    # ------------------------------------------------------------------------------------------------------
    # slots: which rollouts may hold a tool worker now

    def take_slot(self, timeout: float | None = SLOT_WAIT_S) -> None:
        """Wait (in this thread, first come first served) until this rollout may hold a tool worker;
        :class:`NoWorkerFree` after ``timeout`` seconds."""
        self._slots.take(timeout)

    async def take_slot_async(self) -> None:
        """:meth:`take_slot` for a coroutine: it waits on its event loop, holding no thread."""
        await self._slots.take_async()

    def give_slot(self) -> None:
        """Give a slot back: to the rollout that has waited longest, if one does."""
        self._slots.give()

    # ------------------------------------------------------------------------------------------------------
    # rollout workers

    def acquire(self, memory_limit_mb: int | None, timeout: float | None = SLOT_WAIT_S) -> Worker:
        """An idle worker with this cap (idle ones with another cap, or that ended, are stopped), else a new
        one; while ``max_workers`` are alive, waits for one to come back or end (a rollout with a slot waits
        at most for a reset). :class:`NoWorkerFree` after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if self._resets.running < RESET_THREADS and os.getpid() == self._pid:  # for the release to come
            with self._lock:
                wanted = self._resets.wanted(RESET_THREADS)
            self._resets.start(wanted)
        while True:
            worker, ctx, stale = self._pick(memory_limit_mb, deadline)
            for w in stale:
                w.kill()
            if worker is None:
                break
            if worker.alive():  # asked outside the lock: a system call
                with self._lock:
                    self._counts["reused"] += 1
                return worker
            worker.kill()  # it ended while idle: its place is free again
        if ctx is None:
            raise NoWorkerFree(f"no tool worker became free within {timeout:g}s ({self.max_workers} run at "
                               "once in this process)")
        try:
            worker = Worker(ctx, memory_limit_mb)
        except BaseException:
            with self._lock:
                self._live -= 1
                self._count_unlease()
                self._capacity.notify()
            raise
        worker.leased = True
        worker.on_end = self._ended
        return worker

    def _pick(self, memory_limit_mb: int | None, deadline: float | None) -> tuple:
        """``(idle worker, None, stale)`` leased to the caller, or ``(None, context, stale)`` with a place for a
        new worker taken, or ``(None, None, stale)`` when ``deadline`` passed; ``stale``: idle workers with
        another cap, taken out of the pool for the caller to stop."""
        stale: list[Worker] = []
        with self._lock:
            while True:
                while self._idle:
                    w = self._take_idle(-1)
                    if w.memory_limit_mb == memory_limit_mb:
                        self._count_lease(w)
                        return w, None, stale
                    self._forget(w)
                    stale.append(w)
                if self._live < self.max_workers:
                    self._live += 1
                    self._counts["forks"] += 1
                    self._count_lease(None)
                    return None, self._context(), stale
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None, None, stale
                # Woken one at a time (a released worker serves one rollout); the limit only re-checks.
                self._capacity.wait(1.0 if left is None else min(left, 1.0))

    def _count_lease(self, worker: Worker | None) -> None:
        """Count a lease (called with the lock held)."""
        if worker is not None:
            worker.leased = True
        self._leased += 1
        self._peak = max(self._peak, self._leased)

    def _count_unlease(self) -> None:
        """Count the end of a lease (called with the lock held); a busy period ends when no worker is leased."""
        self._leased = max(0, self._leased - 1)
        if self._leased == 0:
            self._last_peak, self._peak = self._peak, 0

    def _unlease(self, worker: Worker) -> None:
        if worker.leased:
            worker.leased = False
            self._count_unlease()

    def _take_idle(self, index: int) -> Worker:
        """Take an idle worker out of the list (called with the lock held)."""
        worker = self._idle.pop(index)
        self._idle_held -= worker.held
        self._idle_private -= worker.private
        return worker

    def _forget(self, worker: Worker) -> None:
        """Stop counting a worker about to be stopped (called with the lock held)."""
        if worker.on_end is not None:
            worker.on_end = None
            self._unlease(worker)
            self._live = max(0, self._live - 1)
            self._counts["stopped"] += 1

    def _ended(self, worker: Worker) -> None:
        """A rollout worker ended (``Worker.kill``): its place is free."""
        with self._lock:
            self._unlease(worker)
            self._live = max(0, self._live - 1)
            self._counts["stopped"] += 1
            self._capacity.notify()

    def idle_cap(self) -> int:
        """Idle workers kept at most: ``MAX_IDLE_WORKERS``, or as many as were leased at once in the current
        or the last busy period, so that the next period of the same size forks no new workers (within the
        memory budgets and ``max_workers``)."""
        with self._lock:
            return min(self.max_workers, max(MAX_IDLE_WORKERS, self._peak, self._last_peak))

    def release(self, worker: Worker | None, slot: bool = False) -> None:
        """Return a worker after its rollout (and, with ``slot``, the rollout's slot: one trip through the
        lock for both). Returns at once: a reset thread of the pool resets the worker and keeps it warm if
        it is back within its limits (see the package docstring), else stops it; the idle workers stay
        within the pool's memory budgets."""
        start = 0
        with self._lock:
            later = os.getpid() == self._pid and threading.main_thread().is_alive()
            if worker is not None:
                self._unlease(worker)
                if later:
                    start = self._resets.put(worker, self._generation)
            if slot:
                self.give_slot()
        self._resets.start(start)
        if worker is not None and not later:  # a forked child, or the interpreter exits: no thread for it
            self._reset(worker, self._generation)

    def _reset(self, worker: Worker, generation: int) -> None:
        """Reset a released worker and keep it idle, or stop it (and the oldest idle ones past the limits)."""
        try:
            status, report = worker.request(("reset",), timeout=RESET_TIMEOUT_S)
            keep = status == "ok" and fits(worker, report)
        except Exception:  # noqa: BLE001
            keep = False
        stop = [] if keep else [worker]
        with self._lock:
            if keep and os.getpid() == self._pid and generation == self._generation:
                self._idle.append(worker)
                self._idle_held += worker.held
                self._idle_private += worker.private
                self._counts["kept"] += 1
                cap = self.idle_cap()
                budget = IDLE_POOL_BUDGET_MB * 2**20
                private_budget = self.idle_private_mb * 2**20
                while self._idle and (len(self._idle) > cap or self._idle_held > budget
                                      or self._idle_private > private_budget):
                    stop.append(self._take_idle(0))
                if self._idle and self._idle[-1] is worker:
                    self._capacity.notify()
            elif keep:
                stop.append(worker)
        for w in stop:
            w.kill()

    def settle(self, timeout: float | None = None) -> bool:
        """Wait until every released worker has been reset (kept or stopped); False if ``timeout`` ran out."""
        return self._resets.settle(timeout)

    # ------------------------------------------------------------------------------------------------------
    # judgement workers

    def acquire_judge(self, memory_limit_mb: int | None) -> Worker:
        """A worker for one judgement (:meth:`.judges.Judges.acquire`)."""
        return self._judges.acquire(memory_limit_mb)

    def release_judge(self, worker: Worker, report: Any) -> None:
        """Keep a judgement worker warm or stop it (:meth:`.judges.Judges.release`)."""
        self._judges.release(worker, report)

    # ------------------------------------------------------------------------------------------------------

    def idle_memory(self) -> tuple[int, int]:
        """``(number of idle workers, private bytes they hold above their start)``."""
        with self._lock:
            return len(self._idle), self._idle_held

    def stats(self) -> dict:
        """What the pool runs now and has done: ``live`` rollout workers (``leased``, ``idle``, ``releasing``:
        being reset), ``slots`` taken and rollouts ``waiting`` for one, the bound ``max_workers``, the idle cap,
        and the counts of ``forks``, ``reused`` leases, workers ``kept`` after a reset and ``stopped``, and
        ``slot_waits`` (rollouts that had to wait for a slot)."""
        with self._lock:
            return {"live": self._live, "leased": self._leased, "idle": len(self._idle),
                    "releasing": self._resets.pending, "slots": self._slots.taken, "waiting": self._slots.waiting,
                    "max_workers": self.max_workers, "idle_cap": self.idle_cap(), **self.counts}

    def shutdown(self) -> None:
        """Stop every worker of the pool: idle ones, judgement workers and those being reset."""
        with self._lock:
            self._generation += 1
            idle, self._idle = self._idle + self._judges.drain(), []
            self._idle_held = self._idle_private = 0
            pending = self._resets.waiting_workers()
        for w in pending:
            w.stop_process()
        self.settle(RESET_TIMEOUT_S + 5.0)
        for w in idle:
            w.kill()


_POOL: WorkerPool | None = None
_POOL_LOCK = threading.Lock()


def pool() -> WorkerPool:
    """This process's worker pool (a forked child gets a pool of its own)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or _POOL._pid != os.getpid():
            _POOL = WorkerPool()
        return _POOL
