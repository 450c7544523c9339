"""The sandbox's pool of warm worker processes, and the limits that decide which ones stay warm.

A rollout leases a worker (:meth:`WorkerPool.acquire`) and hands it back when it ends; a judgement leases one
of a separate set of judgement workers (:meth:`WorkerPool.acquire_judge`). A released worker is kept only if
it is back within its memory limits (see the package docstring); the idle ones together stay within a budget.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from typing import Any

from ..environment.backends import _class_for
from .memory import find_malloc_trim
from .worker import Worker

#: Idle workers kept warm for reuse (more are started on demand and stopped when released).
MAX_IDLE_WORKERS = 64
#: A released worker is kept warm only if, after its reset, it maps and holds at most this much (MiB) above
#: what it did when it started (and at most a quarter of its cap): a worker whose rollout filled its memory
#: would otherwise give the next, unrelated rollout a fraction of the headroom the cap promises.
IDLE_WORKER_MAX_MB = 256
#: Idle judgement workers kept warm (one per thread that judges at the same time is enough).
MAX_IDLE_JUDGES = 8
#: What all idle workers together may hold (private MiB above their start); the oldest go first.
IDLE_POOL_BUDGET_MB = 1024

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


def _fits(worker: Worker, report: Any) -> bool:
    """Whether a worker's memory report after its reset (``((mapped, own) at start, (mapped, own) now)``, see
    :func:`.memory.footprint`) is within the limits for going back to the pool; records what it holds."""
    try:
        (vm0, rss0), (vm, rss) = report
        grown = max(int(vm) - int(vm0), int(rss) - int(rss0))
        worker.held = max(0, int(rss) - int(rss0))
    except (TypeError, ValueError):
        return False
    limit_mb = float(IDLE_WORKER_MAX_MB)
    if worker.memory_limit_mb:
        limit_mb = min(limit_mb, worker.memory_limit_mb / 4)
    return grown <= limit_mb * 2**20


class WorkerPool:
    """Warm worker processes, each leased to one rollout at a time. One pool per parent process."""

    def __init__(self):
        self._lock = threading.Lock()
        self._idle: list[Worker] = []  # oldest first
        self._judges: list[Worker] = []  # idle judgement workers (``job`` requests, see isolated_verify)
        self._ctx = None
        self._pid = os.getpid()

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

    def _take(self, idle: list, memory_limit_mb: int | None) -> Worker:
        """A live worker of ``idle`` with this cap (others found on the way are stopped), else a new one."""
        with self._lock:
            while idle:
                w = idle.pop()
                if w.alive() and w.memory_limit_mb == memory_limit_mb:
                    return w
                w.kill()
            ctx = self._context()
        return Worker(ctx, memory_limit_mb)

    def acquire(self, memory_limit_mb: int | None) -> Worker:
        return self._take(self._idle, memory_limit_mb)

    def release(self, worker: Worker) -> None:
        """Return a worker after its rollout: reset it and keep it warm if it is back within its limits (see
        the package docstring), else stop it. Keeps the idle workers within the pool's memory budget."""
        try:
            status, report = worker.request(("reset",), timeout=5.0)
            keep = status == "ok" and _fits(worker, report)
        except Exception:  # noqa: BLE001
            keep = False
        stop = [] if keep else [worker]
        with self._lock:
            if keep and os.getpid() == self._pid:
                self._idle.append(worker)
                budget = IDLE_POOL_BUDGET_MB * 2**20
                held = sum(w.held for w in self._idle)
                while self._idle and (len(self._idle) > MAX_IDLE_WORKERS or held > budget):
                    oldest = self._idle.pop(0)
                    held -= oldest.held
                    stop.append(oldest)
            elif keep:
                stop.append(worker)
        for w in stop:
            w.kill()

    def acquire_judge(self, memory_limit_mb: int | None) -> Worker:
        """A worker for one judgement: an idle judgement worker with this cap, else a new one. Judgement
        workers keep no state between judgements but the tasks they were sent, so they skip a rollout
        worker's reset; :meth:`release_judge` checks their memory instead."""
        return self._take(self._judges, memory_limit_mb)

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

    def idle_memory(self) -> tuple[int, int]:
        """``(number of idle workers, private bytes they hold above their start)``."""
        with self._lock:
            return len(self._idle), sum(w.held for w in self._idle)

    def shutdown(self) -> None:
        with self._lock:
            idle, self._idle = self._idle + self._judges, []
            self._judges = []
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
