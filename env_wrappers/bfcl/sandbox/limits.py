"""The limits of the sandbox's pool: how many tool workers one process may run (its open-files limit, and
``SEAL_BFCL_MAX_TOOL_WORKERS``), and what a released worker may hold to be kept warm (its memory after its reset,
and the budgets of all idle workers together, ``SEAL_BFCL_IDLE_POOL_MB``).

The settings are read through the project's registry of environment variables (``seal_verl.env_vars``), so a bad
value is one line naming the variable, at the start of the command, not a checker error in every judgement.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from seal_verl import env_vars

#: Idle workers kept warm for reuse at least (more when a busy period had more rollouts at once: see
#: ``WorkerPool.idle_cap``).
MAX_IDLE_WORKERS = 64
#: A released worker is kept warm only if, after its reset, it maps and holds at most this much (MiB) above
#: what it did when it started (and at most a quarter of its cap): a worker whose rollout filled its memory
#: would otherwise give the next, unrelated rollout a fraction of the headroom the cap promises.
IDLE_WORKER_MAX_MB = 256
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

#: Environment variables read when a process's pool starts (docs/gpu_training.md, "Tool workers"); registered in
#: ``seal_verl.env_vars``.
ENV_MAX_WORKERS = "SEAL_BFCL_MAX_TOOL_WORKERS"
ENV_IDLE_POOL_MB = "SEAL_BFCL_IDLE_POOL_MB"
ENV_RAISE_OPEN_FILES = "SEAL_BFCL_RAISE_NOFILE"


def fits(worker: Any, report: Any) -> bool:
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


# ----------------------------------------------------------------------------------------------------------
# the bounds of one process's pool


@dataclass(frozen=True)
class Bounds:
    """What a pool starts with: ``max_workers`` tool workers at once, ``idle_private_mb`` for its idle workers
    in all, and the soft open-files limit ``(before, after)`` it raised (``(None, None)``: not raised)."""

    max_workers: int
    idle_private_mb: int
    open_files: tuple


def bounds(max_workers: int | None = None, raise_open_files: bool | None = None) -> Bounds:
    """The bounds of a new pool: ``max_workers`` as given, else what the open-files limit allows (after raising
    it, unless ``raise_open_files`` is False or ``SEAL_BFCL_RAISE_NOFILE`` says no), capped by
    ``SEAL_BFCL_MAX_TOOL_WORKERS``.

    Raises:
        seal_verl.env_vars.SettingError: a sandbox variable with a bad value (the message names it).
    """
    if raise_open_files is None:
        raise_open_files = env_vars.value(ENV_RAISE_OPEN_FILES)
    cap = env_vars.value(ENV_MAX_WORKERS)
    budget = env_vars.value(ENV_IDLE_POOL_MB)
    before, after = raise_open_files_limit() if raise_open_files else (None, None)
    if max_workers is None:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        max_workers = worker_bound(soft, open_descriptors())
        if cap is not None:
            max_workers = min(max_workers, cap)
    return Bounds(max(1, int(max_workers)), IDLE_POOL_PRIVATE_MB if budget is None else budget, (before, after))
