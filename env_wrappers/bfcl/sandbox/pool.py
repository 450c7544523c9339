"""The sandbox's pool of warm worker processes, and the limits that decide how many there are and which ones
stay warm.

A rollout first takes a *slot* (:meth:`WorkerPool.take_slot`, or :meth:`WorkerPool.take_slot_async` from an
event loop, which waits without holding a thread): the slots bound the tool workers one process runs at once,
so that a process with more concurrent rollouts than its open-files limit allows queues them instead of
failing with ``EMFILE``. With its slot it leases a worker (:meth:`WorkerPool.acquire`) and hands it back when it
ends (:meth:`WorkerPool.release`, which returns at once: a few reset threads of the pool reset the worker and
keep it warm or stop it). A judgement leases one of a separate set of judgement workers
(:meth:`WorkerPool.acquire_judge`). A released worker is kept only if it is back within its memory limits (see
the package docstring); the idle ones together stay within a budget and number at most the peak of the last
busy period (see :meth:`WorkerPool.idle_cap`).
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import threading
import time
from collections import deque
from typing import Any

from ..environment.backends import _class_for
from .memory import find_malloc_trim
from .worker import Worker

logger = logging.getLogger(__name__)

#: Idle workers kept warm for reuse at least (more when a busy period had more rollouts at once: see
#: :meth:`WorkerPool.idle_cap`).
MAX_IDLE_WORKERS = 64
#: A released worker is kept warm only if, after its reset, it maps and holds at most this much (MiB) above
#: what it did when it started (and at most a quarter of its cap): a worker whose rollout filled its memory
#: would otherwise give the next, unrelated rollout a fraction of the headroom the cap promises.
IDLE_WORKER_MAX_MB = 256
#: Idle judgement workers kept warm (one per thread that judges at the same time is enough).
MAX_IDLE_JUDGES = 8
#: What all idle workers together may hold (private MiB above their start); the oldest go first.
IDLE_POOL_BUDGET_MB = 1024
#: What all idle workers together may hold in all (private MiB, their start included): the bound on keeping
#: a busy period's peak warm. ``SEAL_BFCL_IDLE_POOL_MB`` changes it.
IDLE_POOL_PRIVATE_MB = 4096
#: Descriptors this process holds per live worker: the worker's end of its pipe, and the two pipe ends
#: ``multiprocessing`` keeps to see the process end.
FDS_PER_WORKER = 3
#: Of the open-files limit, this share (at least ``FD_RESERVE_MIN`` descriptors) is left to the rest of the
#: process (sockets, files, judgement workers); the tool workers get what remains.
FD_RESERVE_SHARE = 0.25
FD_RESERVE_MIN = 32
#: The soft open-files limit the pool raises this process's to when it starts (never above the hard limit).
OPEN_FILES_TARGET = 65536
#: Below this many tool workers at once (set by the open-files limit), the pool says so when it starts.
LOW_WORKER_BOUND = 256
#: How long a released worker has to answer its reset before it is stopped instead.
RESET_TIMEOUT_S = 5.0
#: Threads that reset released workers (a reset is a round trip to the worker, which does the work).
RESET_THREADS = 4
#: How long a thread waits for a slot before its rollout's tools are closed with an error that says so (a
#: guard against a thread that holds the slots itself; rollouts that wait on an event loop wait as long as
#: it takes).
SLOT_WAIT_S = 600.0

#: Environment variables read when a process's pool starts (docs/gpu_training.md, "Tool workers").
ENV_MAX_WORKERS = "SEAL_BFCL_MAX_TOOL_WORKERS"
ENV_IDLE_POOL_MB = "SEAL_BFCL_IDLE_POOL_MB"
ENV_RAISE_OPEN_FILES = "SEAL_BFCL_RAISE_NOFILE"

#: Modules imported before the first worker is forked, so that workers start with the backend classes loaded.
#: (A judgement worker is forked by the judge side, which has the verifier imported already.)
_PRELOAD = [
    "env_wrappers.bfcl.environment.backends",
    "bfcl_eval.eval_checker.multi_turn_eval.func_source_code.gorilla_file_system",
    "bfcl_eval.eval_checker.multi_turn_eval.func_source_code.math_api",
    "bfcl_eval.eval_checker.multi_turn_eval.func_source_code.message_api",
    "bfcl_eval.eval_checker.multi_turn_eval.func_source_code.posting_api",
    "bfcl_eval.eval_checker.multi_turn_eval.func_source_code.ticket_api",
    "bfcl_eval.eval_checker.multi_turn_eval.func_source_code.trading_bot",
    "bfcl_eval.eval_checker.multi_turn_eval.func_source_code.travel_booking",
    "bfcl_eval.eval_checker.multi_turn_eval.func_source_code.vehicle_control",
]

_PRELOAD_CLASSES = ("GorillaFileSystem", "MathAPI", "MessageAPI", "TwitterAPI", "TicketAPI", "TradingBot",
                    "TravelAPI", "VehicleControlAPI")


class NoWorkerFree(RuntimeError):
    """No tool worker became free for this rollout within the time a thread may wait (``SLOT_WAIT_S``)."""


def _fits(worker: Worker, report: Any) -> bool:
    """Whether a worker's memory report after its reset (``((mapped, own) at start, (mapped, own) now)``, see
    :func:`.memory.footprint`) is within the limits for going back to the pool; records what it holds."""
    try:
        (vm0, rss0), (vm, rss) = report
        grown = max(int(vm) - int(vm0), int(rss) - int(rss0))
        worker.held = max(0, int(rss) - int(rss0))
        worker.private = max(0, int(rss))
    except (TypeError, ValueError):
        return False
    limit_mb = float(IDLE_WORKER_MAX_MB)
    if worker.memory_limit_mb:
        limit_mb = min(limit_mb, worker.memory_limit_mb / 4)
    return grown <= limit_mb * 2**20


# ----------------------------------------------------------------------------------------------------------
# the open-files limit


def open_descriptors() -> int:
    """Descriptors this process has open now (0 where ``/proc`` cannot tell)."""
    try:
        return max(0, len(os.listdir("/proc/self/fd")) - 1)  # less the one that lists them
    except OSError:
        return 0


def raise_open_files_limit(target: int = OPEN_FILES_TARGET) -> tuple[int, int]:
    """Raise this process's soft open-files limit towards ``target`` (never above the hard limit, never
    down); returns the soft limit ``(before, after)``. Each live tool worker costs ``FDS_PER_WORKER``
    descriptors here, and the common default of 1024 is reached at a few hundred rollouts at once."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = target if hard == resource.RLIM_INFINITY else min(hard, target)
    if soft == resource.RLIM_INFINITY or soft >= want:
        return soft, soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    except (ValueError, OSError):  # pragma: no cover - refused by the system
        return soft, soft
    return soft, want


def worker_bound(soft_limit: int, in_use: int) -> int:
    """Tool workers that fit the open-files limit: what is left of it after the descriptors in use and the
    reserve (``FD_RESERVE_SHARE``, at least ``FD_RESERVE_MIN``), at ``FDS_PER_WORKER`` each; at least one."""
    import resource

    if soft_limit == resource.RLIM_INFINITY:
        soft_limit = OPEN_FILES_TARGET * 16
    reserve = max(FD_RESERVE_MIN, int(soft_limit * FD_RESERVE_SHARE))
    return max(1, (soft_limit - in_use - reserve) // FDS_PER_WORKER)


def env_int(name: str) -> int | None:
    """The positive whole number the environment variable ``name`` holds, None when it is unset or empty; a
    ValueError naming the variable for anything else (the sandbox's settings, docs/gpu_training.md)."""
    value = os.environ.get(name, "").strip()
    if not value:
        return None
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number <= 0:
        raise ValueError(f"{name} must be a positive whole number, got {value!r}")
    return number


# ----------------------------------------------------------------------------------------------------------
# slots


class _Waiter:
    """One rollout waiting for a slot: a thread (an event) or a coroutine (a future of its event loop)."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None):
        self.loop = loop
        self.event = threading.Event() if loop is None else None
        self.future = loop.create_future() if loop is not None else None
        self.granted = False

    def grant(self) -> bool:
        """Hand the slot over (called with the pool's lock held); False if the waiter can no longer take it."""
        if self.loop is None:
            self.granted = True
            self.event.set()
            return True
        try:
            self.loop.call_soon_threadsafe(self._resolve)
        except RuntimeError:  # its event loop is closed
            return False
        self.granted = True
        return True

    def _resolve(self) -> None:
        if not self.future.done():
            self.future.set_result(None)


# ----------------------------------------------------------------------------------------------------------
# the pool


class WorkerPool:
    """Warm worker processes, each leased to one rollout at a time. One pool per parent process.

    Args:
        max_workers: tool workers (leased, being reset, or idle) this process may run at once; None takes
            what the open-files limit allows (after raising it, see ``raise_open_files``), capped by
            ``SEAL_BFCL_MAX_TOOL_WORKERS`` when that is set.
        raise_open_files: raise the soft open-files limit towards ``OPEN_FILES_TARGET`` when the pool starts
            (default: unless ``SEAL_BFCL_RAISE_NOFILE=0``).
    """

    def __init__(self, max_workers: int | None = None, raise_open_files: bool | None = None):
        self._lock = threading.RLock()
        self._capacity = threading.Condition(self._lock)  # a worker went idle or ended (for acquire)
        self._queued = threading.Condition(self._lock)  # a worker was released (for the reset threads)
        self._settled = threading.Condition(self._lock)  # no released worker is waiting for its reset
        self._idle: list[Worker] = []  # oldest first
        self._idle_held = 0  # what they hold above their start (bytes), and in all
        self._idle_private = 0
        self._judges: list[Worker] = []  # idle judgement workers (``job`` requests, see isolated_verify)
        self._ctx = None
        self._pid = os.getpid()
        self._live = 0  # rollout workers alive: leased, being reset or idle
        self._leased = 0
        self._peak = 0  # most workers leased at once in this busy period (since the last time none was)
        self._last_peak = 0  # ... and in the one before
        self._slots = 0  # slots taken
        self._waiters: deque = deque()
        self._resets: deque = deque()  # (worker, generation) released and waiting for a reset thread
        self._in_reset: set = set()  # workers a reset thread is resetting now
        self._releasing = 0  # workers released and not yet kept or stopped (queued or being reset)
        self._reset_threads = 0
        self._generation = 0  # changes at shutdown: a reset that finishes later does not keep its worker
        self.counts = {"forks": 0, "reused": 0, "kept": 0, "stopped": 0, "slot_waits": 0}
        if raise_open_files is None:
            raise_open_files = os.environ.get(ENV_RAISE_OPEN_FILES, "1").strip() != "0"
        before, after = raise_open_files_limit() if raise_open_files else (None, None)
        max_workers_given = max_workers
        if max_workers is None:
            import resource

            soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            max_workers = worker_bound(soft, open_descriptors())
            cap = env_int(ENV_MAX_WORKERS)
            if cap is not None:
                max_workers = min(max_workers, cap)
        self.max_workers = max(1, int(max_workers))
        budget = env_int(ENV_IDLE_POOL_MB)
        self.idle_private_mb = IDLE_POOL_PRIVATE_MB if budget is None else budget
        if before is not None and after != before:
            logger.warning("tool sandbox: raised this process's soft limit on open files from %d to %d (each "
                           "tool worker holds %d); at most %d tool workers at once here", before, after,
                           FDS_PER_WORKER, self.max_workers)
        elif self.max_workers < LOW_WORKER_BOUND and max_workers_given is None:
            logger.warning("tool sandbox: the open-files limit allows %d tool workers at once in this process; "
                           "rollouts beyond that wait for one (raise the hard limit, ulimit -Hn, to run more)",
                           self.max_workers)

    def _context(self):
        """Workers are forked from this process, after the backend modules are imported here.

        Forking (rather than a fork server or a fresh interpreter) gives the worker this process's string
        hash seed, so results that print a set (several BFCL error texts do) read exactly as they would in
        process; it also makes a new worker cost one fork. The worker only runs its loop (``worker``) and
        touches no lock another thread of this process could hold (its modules are imported already).
        """
        if self._ctx is None:
            import importlib

            for name in _PRELOAD:
                try:
                    importlib.import_module(name)
                except ImportError:  # pragma: no cover - a backend missing from this bfcl-eval version
                    pass
            for class_name in _PRELOAD_CLASSES:  # resolved now, so a worker never takes the lookup's lock
                try:
                    _class_for(class_name)
                except (ImportError, KeyError):  # pragma: no cover
                    pass
            find_malloc_trim()
            methods = multiprocessing.get_all_start_methods()
            self._ctx = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
        return self._ctx

    # ------------------------------------------------------------------------------------------------------
    # slots: which rollouts may hold a tool worker now

    def take_slot(self, timeout: float | None = SLOT_WAIT_S) -> None:
        """Wait (in this thread, first come first served) until this rollout may hold a tool worker;
        :class:`NoWorkerFree` after ``timeout`` seconds."""
        with self._lock:
            if not self._waiters and self._slots < self.max_workers:
                self._slots += 1
                return
            waiter = _Waiter()
            self._waiters.append(waiter)
            self.counts["slot_waits"] += 1
        if waiter.event.wait(timeout):
            return
        with self._lock:
            if waiter.granted:
                return
            if waiter in self._waiters:
                self._waiters.remove(waiter)
        raise NoWorkerFree(f"no tool worker became free within {timeout:g}s ({self.max_workers} run at once "
                           "in this process)")

    async def take_slot_async(self) -> None:
        """:meth:`take_slot` for a coroutine: it waits on its event loop, holding no thread, as long as it
        takes (the rollouts that hold the slots go on meanwhile)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            if not self._waiters and self._slots < self.max_workers:
                self._slots += 1
                return
            waiter = _Waiter(loop)
            self._waiters.append(waiter)
            self.counts["slot_waits"] += 1
        try:
            await waiter.future
        except BaseException:  # cancelled: a slot handed over meanwhile goes to the next waiter
            with self._lock:
                if waiter.granted:
                    self.give_slot()
                elif waiter in self._waiters:
                    self._waiters.remove(waiter)
            raise

    def give_slot(self) -> None:
        """Give a slot back: to the rollout that has waited longest, if one does."""
        with self._lock:
            while self._waiters:
                if self._waiters.popleft().grant():
                    return
            self._slots = max(0, self._slots - 1)

    # ------------------------------------------------------------------------------------------------------
    # rollout workers

    def acquire(self, memory_limit_mb: int | None, timeout: float | None = SLOT_WAIT_S) -> Worker:
        """An idle worker with this cap (idle ones with another cap, or that ended, are stopped), else a new
        one; while ``max_workers`` are alive, waits for one to come back or end (a rollout with a slot waits
        at most for a reset). :class:`NoWorkerFree` after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if self._reset_threads < RESET_THREADS and os.getpid() == self._pid:  # for the release to come
            with self._lock:
                wanted = self._resetters_wanted(RESET_THREADS)
            self._start_resetters(wanted)
        while True:
            worker, ctx, stale = self._pick(memory_limit_mb, deadline)
            for w in stale:
                w.kill()
            if worker is None:
                break
            if worker.alive():  # asked outside the lock: a system call
                with self._lock:
                    self.counts["reused"] += 1
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
                    self.counts["forks"] += 1
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
            self.counts["stopped"] += 1

    def _ended(self, worker: Worker) -> None:
        """A rollout worker ended (``Worker.kill``): its place is free."""
        with self._lock:
            self._unlease(worker)
            self._live = max(0, self._live - 1)
            self.counts["stopped"] += 1
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
                    self._resets.append((worker, self._generation))
                    self._releasing += 1
                    start = self._resetters_wanted(1)  # seldom: they start with the first lease
                    self._queued.notify()
            if slot:
                self.give_slot()
        self._start_resetters(start)
        if worker is not None and not later:  # a forked child, or the interpreter exits: no thread for it
            self._reset(worker, self._generation)

    def _resetters_wanted(self, count: int) -> int:
        """How many reset threads to start for there to be ``count`` (called with the lock held; they are
        counted as started now). Started when a worker is leased, so that releasing never waits for one."""
        wanted = max(0, count - self._reset_threads)
        self._reset_threads += wanted
        return wanted

    def _start_resetters(self, wanted: int) -> None:
        for _ in range(wanted):
            threading.Thread(target=self._reset_loop, name="seal-bfcl-reset", daemon=True).start()

    def _reset_loop(self) -> None:
        """A reset thread: resets released workers; ends after a while with nothing leased or released."""
        while True:
            with self._lock:
                while not self._resets:
                    if not self._queued.wait(30.0) and not self._resets and not self._leased:
                        self._reset_threads -= 1
                        return
                worker, generation = self._resets.popleft()
                self._in_reset.add(worker)
            try:
                self._reset(worker, generation)
            finally:
                with self._lock:
                    self._in_reset.discard(worker)
                    self._releasing -= 1
                    if not self._releasing:
                        self._settled.notify_all()

    def _reset(self, worker: Worker, generation: int) -> None:
        """Reset a released worker and keep it idle, or stop it (and the oldest idle ones past the limits)."""
        try:
            status, report = worker.request(("reset",), timeout=RESET_TIMEOUT_S)
            keep = status == "ok" and _fits(worker, report)
        except Exception:  # noqa: BLE001
            keep = False
        stop = [] if keep else [worker]
        with self._lock:
            if keep and os.getpid() == self._pid and generation == self._generation:
                self._idle.append(worker)
                self._idle_held += worker.held
                self._idle_private += worker.private
                self.counts["kept"] += 1
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
        with self._lock:
            return self._settled.wait_for(lambda: self._releasing == 0, timeout)

    # ------------------------------------------------------------------------------------------------------
    # judgement workers

    def acquire_judge(self, memory_limit_mb: int | None) -> Worker:
        """A worker for one judgement: an idle judgement worker with this cap, else a new one. Judgement
        workers keep no state between judgements but the tasks they were sent, so they skip a rollout
        worker's reset; :meth:`release_judge` checks their memory instead. They take no slot (a judging
        thread holds one at a time; ``FD_RESERVE_SHARE`` leaves room for them)."""
        stale = []
        with self._lock:
            worker = None
            while self._judges:
                w = self._judges.pop()
                if w.alive() and w.memory_limit_mb == memory_limit_mb:
                    worker = w
                    break
                stale.append(w)
            ctx = self._context()
        for w in stale:
            w.kill()
        return worker if worker is not None else Worker(ctx, memory_limit_mb)

    def release_judge(self, worker: Worker, report: Any) -> None:
        """Keep a judgement worker warm if its resident anonymous memory (``((0, at its start), (0, now))``,
        freed heap memory included: see :func:`.memory.keep_freed_memory`) is within the limits of an idle worker;
        stop it otherwise, or when ``MAX_IDLE_JUDGES`` are idle already. Measured from the worker's start,
        judgements that each grew a little cannot add up unseen."""
        keep = _fits(worker, report) and os.getpid() == self._pid
        with self._lock:
            if keep and len(self._judges) < MAX_IDLE_JUDGES:
                self._judges.append(worker)
                return
        worker.kill()

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
                    "releasing": self._releasing, "slots": self._slots, "waiting": len(self._waiters),
                    "max_workers": self.max_workers, "idle_cap": self.idle_cap(), **self.counts}

    def shutdown(self) -> None:
        """Stop every worker of the pool: idle ones, judgement workers and those being reset."""
        with self._lock:
            self._generation += 1
            idle, self._idle = self._idle + self._judges, []
            self._idle_held = self._idle_private = 0
            self._judges = []
            pending = [w for w, _ in self._resets] + list(self._in_reset)
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
