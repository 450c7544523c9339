"""The pool's judgement workers: a judgement leases one of a set of workers apart from the rollouts' tool workers.

Judgement workers keep no state between judgements but the tasks they were sent, so they skip a tool worker's
reset; their memory is checked instead when they come back. They take no slot (a judging thread holds one at a
time; the pool's descriptor reserve leaves room for them).
"""

from __future__ import annotations

import os
import threading
from typing import Any, Callable

from .limits import fits
from .worker import Worker

#: Idle judgement workers kept warm (one per thread that judges at the same time is enough).
MAX_IDLE_JUDGES = 8


class Judges:
    """Idle judgement workers of one process.

    Args:
        lock: the pool's lock.
        context: the pool's multiprocessing context (workers are forked after the backend modules are imported).
    """

    def __init__(self, lock: threading.RLock, context: Callable[[], Any]):
        self._lock = lock
        self._context = context
        self._pid = os.getpid()
        self.idle: list[Worker] = []

    def acquire(self, memory_limit_mb: int | None) -> Worker:
        """An idle judgement worker with this cap, else a new one (idle ones with another cap, or that ended,
        are stopped)."""
        stale = []
        with self._lock:
            worker = None
            while self.idle:
                w = self.idle.pop()
                if w.alive() and w.memory_limit_mb == memory_limit_mb:
                    worker = w
                    break
                stale.append(w)
            ctx = self._context()
        for w in stale:
            w.kill()
        return worker if worker is not None else Worker(ctx, memory_limit_mb)

    def release(self, worker: Worker, report: Any) -> None:
        """Keep a judgement worker warm if its resident anonymous memory (``((0, at its start), (0, now))``, freed
        heap memory included: see :func:`.memory.keep_freed_memory`) is within the limits of an idle worker; stop
        it otherwise, or when ``MAX_IDLE_JUDGES`` are idle already. Measured from the worker's start, judgements
        that each grew a little cannot add up unseen."""
        keep = fits(worker, report) and os.getpid() == self._pid
        with self._lock:
            if keep and len(self.idle) < MAX_IDLE_JUDGES:
                self.idle.append(worker)
                return
        worker.kill()

    def drain(self) -> list[Worker]:
        """Take every idle judgement worker out (called with the lock held), for a shutdown to stop."""
        out, self.idle = self.idle, []
        return out
