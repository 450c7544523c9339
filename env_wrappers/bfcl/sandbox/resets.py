"""The pool's reset threads: a released worker is reset by one of a few threads of the pool, so that releasing
returns at once and a rollout never waits for the worker it hands back.

A reset is a round trip to the worker (the worker does the work: it drops its instances and frees their
memory); what happens to the worker afterwards (kept warm or stopped) is the pool's decision, made by the
``reset`` function the pool gives. The threads start with the first lease and end after a while with nothing
leased or released.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any, Callable

#: How long a released worker has to answer its reset before it is stopped instead.
RESET_TIMEOUT_S = 5.0
#: Threads that reset released workers (a reset is a round trip to the worker, which does the work).
RESET_THREADS = 4
#: A reset thread with nothing to do for this long (and nothing leased) ends.
IDLE_THREAD_S = 30.0


class Resets:
    """Released workers waiting for their reset, and the threads that reset them.

    Args:
        lock: the pool's lock (a released worker is queued with the pool's counts).
        reset: ``reset(worker, generation)`` resets one worker and keeps or stops it (called without the lock).
        busy: whether the pool has a worker leased (called with the lock held); an idle thread ends only when not.
    """

    def __init__(self, lock: threading.RLock, reset: Callable[[Any, int], None], busy: Callable[[], bool]):
        self._lock = lock
        self._reset = reset
        self._busy = busy
        self._queued = threading.Condition(lock)  # a worker was released
        self._settled = threading.Condition(lock)  # no released worker is waiting for its reset
        self._queue: deque = deque()  # (worker, generation) released and waiting for a reset thread
        self._in_reset: set = set()  # workers a thread is resetting now
        #: workers released and not yet kept or stopped (queued or being reset)
        self.pending = 0
        self._threads = 0

    def wanted(self, count: int) -> int:
        """How many threads to start for there to be ``count`` (called with the lock held; they are counted as
        started now). Started when a worker is leased, so that releasing never waits for one."""
        more = max(0, count - self._threads)
        self._threads += more
        return more

    @property
    def running(self) -> int:
        return self._threads

    def start(self, count: int) -> None:
        for _ in range(count):
            threading.Thread(target=self._loop, name="seal-bfcl-reset", daemon=True).start()

    def put(self, worker: Any, generation: int) -> int:
        """Queue a released worker (called with the lock held); returns the threads to start (:meth:`start`)."""
        self._queue.append((worker, generation))
        self.pending += 1
        self._queued.notify()
        return self.wanted(1)  # seldom: they start with the first lease

    def waiting_workers(self) -> list:
        """The workers queued or being reset (called with the lock held), for a shutdown to stop."""
        return [w for w, _ in self._queue] + list(self._in_reset)

    def settle(self, timeout: float | None = None) -> bool:
        """Wait until every released worker has been reset (kept or stopped); False if ``timeout`` ran out."""
        with self._lock:
            return self._settled.wait_for(lambda: self.pending == 0, timeout)

    def _loop(self) -> None:
        """A reset thread: resets released workers; ends after a while with nothing leased or released."""
        while True:
            with self._lock:
                while not self._queue:
                    if not self._queued.wait(IDLE_THREAD_S) and not self._queue and not self._busy():
                        self._threads -= 1
                        return
                worker, generation = self._queue.popleft()
                self._in_reset.add(worker)
            try:
                self._reset(worker, generation)
            finally:
                with self._lock:
                    self._in_reset.discard(worker)
                    self.pending -= 1
                    if not self.pending:
                        self._settled.notify_all()
