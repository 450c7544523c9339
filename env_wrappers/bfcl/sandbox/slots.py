"""The pool's slots: which rollouts of a process may hold a tool worker now.

A rollout takes a slot before its first call (:meth:`Slots.take` in a thread, :meth:`Slots.take_async` from an
event loop, which waits without holding a thread) and gives it back when it ends. The slots bound the tool
workers one process runs at once, so that a process with more rollouts than its open-files limit allows queues
them, first come first served, instead of failing with ``EMFILE``.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque

#: How long a thread waits for a slot before its rollout's tools are closed with an error that says so (a
#: guard against a thread that holds the slots itself; rollouts that wait on an event loop wait as long as
#: it takes).
SLOT_WAIT_S = 600.0


class NoWorkerFree(RuntimeError):
    """No tool worker became free for this rollout within the time a thread may wait (``SLOT_WAIT_S``)."""


class _Waiter:
    """One rollout waiting for a slot: a thread (an event) or a coroutine (a future of its event loop)."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None):
        self.loop = loop
        self.event = threading.Event() if loop is None else None
        self.future = loop.create_future() if loop is not None else None
        self.granted = False

    def grant(self) -> bool:
        """Hand the slot over (called with the slots' lock held); False if the waiter can no longer take it."""
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


class Slots:
    """``bound`` slots, handed out first come first served.

    Args:
        lock: the pool's lock (the slots and the pool's counts change together).
        bound: slots at most (the pool's ``max_workers``).
    """

    def __init__(self, lock: threading.RLock, bound: int):
        self._lock = lock
        self.bound = bound
        self.taken = 0
        self._waiters: deque = deque()
        #: rollouts that had to wait for a slot
        self.waits = 0

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def _take_now(self) -> bool:
        if not self._waiters and self.taken < self.bound:
            self.taken += 1
            return True
        return False

    def take(self, timeout: float | None = SLOT_WAIT_S) -> None:
        """Wait (in this thread) until this rollout may hold a tool worker; :class:`NoWorkerFree` after
        ``timeout`` seconds."""
        with self._lock:
            if self._take_now():
                return
            waiter = _Waiter()
            self._waiters.append(waiter)
            self.waits += 1
        if waiter.event.wait(timeout):
            return
        with self._lock:
            if waiter.granted:
                return
            if waiter in self._waiters:
                self._waiters.remove(waiter)
        raise NoWorkerFree(f"no tool worker became free within {timeout:g}s ({self.bound} run at once "
                           "in this process)")

    async def take_async(self) -> None:
        """:meth:`take` for a coroutine: it waits on its event loop, holding no thread, as long as it takes
        (the rollouts that hold the slots go on meanwhile)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._take_now():
                return
            waiter = _Waiter(loop)
            self._waiters.append(waiter)
            self.waits += 1
        try:
            await waiter.future
        except BaseException:  # cancelled: a slot handed over meanwhile goes to the next waiter
            with self._lock:
                if waiter.granted:
                    self.give()
                elif waiter in self._waiters:
                    self._waiters.remove(waiter)
            raise

    def give(self) -> None:
        """Give a slot back: to the rollout that has waited longest, if one does."""
        with self._lock:
            while self._waiters:
                if self._waiters.popleft().grant():
                    return
            self.taken = max(0, self.taken - 1)
