"""Memory probes of the sandbox's processes, and the allocator controls a worker uses to give memory back.

All read ``/proc`` (Linux) and answer 0 where it cannot tell. The allocator functions are glibc's, looked up
in the parent before any worker is forked (:func:`find_malloc_trim`); without glibc they do nothing.
"""

from __future__ import annotations

import ctypes
import gc
import os


def process_memory(pid: int | str = "self") -> tuple[int, int]:
    """``(mapped, resident)`` bytes of a process (``(0, 0)`` where ``/proc`` cannot tell)."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            fields = f.read().split()
        page = os.sysconf("SC_PAGE_SIZE")
        return int(fields[0]) * page, int(fields[1]) * page
    except (OSError, ValueError, IndexError):
        return 0, 0


def anon_bytes() -> int:
    """This process's resident anonymous memory (resident minus file-backed and shared pages), read cheaply
    from ``/proc/self/statm``; 0 where ``/proc`` cannot tell."""
    try:
        with open("/proc/self/statm") as f:
            fields = f.read().split()
        return max(0, int(fields[1]) - int(fields[2])) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def mapped_bytes() -> int:
    return process_memory()[0]


def footprint() -> tuple[int, int]:
    """``(mapped, own)`` bytes of this process: own is its private resident memory (pages no longer shared
    with the process it was forked from), or its resident memory where ``/proc`` does not tell."""
    mapped, resident = process_memory()
    try:
        own = 0
        with open("/proc/self/smaps_rollup") as f:
            for line in f:
                if line.startswith(("Private_Clean:", "Private_Dirty:")):
                    own += int(line.split()[1]) * 1024
        return mapped, own
    except (OSError, ValueError, IndexError):
        return mapped, resident


#: glibc's ``malloc_trim``, looked up in the parent (a forked worker must not run the dynamic loader: another
#: thread of the parent may have held its lock at the fork). None until looked up, False without glibc.
_MALLOC_TRIM = None


#: glibc's ``mallopt``, looked up with ``malloc_trim``.
_MALLOPT = None
#: ``mallopt`` parameters: free memory at the top of the heap past this many bytes goes back to the system;
#: blocks from this size up are mapped on their own (and unmapped when freed).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
#: The largest mmap threshold glibc takes on 64-bit systems (its dynamic threshold's ceiling).
_MMAP_THRESHOLD_MAX = 32 * 2**20


def find_malloc_trim():
    """Look up glibc's ``malloc_trim`` and ``mallopt`` once, in the parent before it forks a worker; returns
    ``malloc_trim`` (False without glibc)."""
    global _MALLOC_TRIM, _MALLOPT
    if _MALLOC_TRIM is None:
        try:
            libc = ctypes.CDLL(None)
            _MALLOC_TRIM = libc.malloc_trim
            _MALLOC_TRIM.argtypes = [ctypes.c_size_t]
            _MALLOC_TRIM.restype = ctypes.c_int
            _MALLOPT = libc.mallopt
            _MALLOPT.argtypes = [ctypes.c_int, ctypes.c_int]
            _MALLOPT.restype = ctypes.c_int
        except (OSError, AttributeError):  # pragma: no cover - not glibc
            _MALLOC_TRIM = _MALLOPT = False
    return _MALLOC_TRIM


def keep_freed_memory() -> None:
    """Stop the allocator from handing freed heap memory back on its own, so that a worker's resident memory
    after a job is the most its heap reached since the worker started: what a judgement took then shows on
    release whatever the allocator did with it (a worker gives memory back only in :func:`free_heap`)."""
    if _MALLOPT:
        try:
            _MALLOPT(_M_TRIM_THRESHOLD, 2**31 - 1)
            # Setting one threshold freezes the other at its start value (128 KiB), and every larger block
            # would then be mapped and unmapped on each use. Blocks past the ceiling go back when freed.
            _MALLOPT(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_MAX)
        except Exception:  # noqa: BLE001  # pragma: no cover
            pass


def free_heap() -> None:
    """Hand the allocator's free pages back to the system."""
    if _MALLOC_TRIM:
        try:
            _MALLOC_TRIM(0)
        except Exception:  # noqa: BLE001  # pragma: no cover
            pass


def free_memory() -> None:
    """Free what a rollout left: its instances hold reference cycles (a directory tree points back to its
    parents), which only the cyclic collector frees; then hand the allocator's free pages back."""
    gc.collect()
    free_heap()
