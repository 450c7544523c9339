"""Model-issued tool calls run in a worker process that can be killed, so that a time limit really holds.

A backend call runs Python code of BFCL's classes on arguments the model chose. Big-integer and decimal
arithmetic (``power(base=10, exponent=30000000)``, ``square_root(precision=30000000)``) holds the
interpreter lock for minutes: a thread cannot be stopped, and while it runs every other thread of the
process stalls. Some backends also set process-wide state (``logarithm`` sets ``mpmath.mp.dps``), so two
rollouts calling at the same time in one process can change each other's results.

:class:`IsolatedBackends` therefore keeps the backend instances of one rollout in a worker process of its
own. The parent only waits on a pipe (releasing the lock), so other threads never stall:

- **time limit**: each call gets ``call_timeout_s`` from its start; a call over it gets BFCL's kind of
  error text, the worker is killed, and a fresh worker rebuilds the rollout's state by replaying the calls
  that completed before it (the backends are deterministic: per-instance seeded generators). That replay is
  bounded as a whole by ``call_timeout_s`` too, so a call never takes more than about twice its limit. The
  rollout keeps its tools, and the overrunning call leaves no trace in the state. Only when that replay
  itself fails (or overruns) are the rollout's tools closed, with an error text that says so. The verifier,
  which replays the model's calls, skips a call recorded as timed out in the same way (see
  ``verifier.verify``), and does its replay in a worker of this pool too (``verify`` requests, see
  ``isolated_verify``): no model call runs in the judging process.
- **a worker that died**: a worker that ended at any moment (during a call, or idle between two calls of its
  rollout: killed by the system, out of memory) is replaced the same way, with the completed calls replayed,
  so the rollout's later observations are those of an undisturbed run. A call that was running when its
  worker ended gets an error text that says so; a call the worker never received simply runs on the new one.
- **memory limit**: the worker's address space is capped (``resource.RLIMIT_AS``) so a call that builds a
  huge value fails with ``MemoryError`` (an error result) instead of exhausting the host.
- **result size**: a result text over ``backends.MAX_RESULT_CHARS`` characters becomes an error result that
  says so (the call still ran); the long text never leaves the worker.
- **no shared settings**: a worker serves one rollout at a time. Workers are kept warm in a pool and reused;
  between rollouts a worker drops its instances, frees their memory (a cyclic garbage collection, then the
  allocator's free pages back to the system) and resets the process-wide arithmetic settings BFCL's backends
  change (mpmath's precision and the decimal context).
- **clean workers only**: a released worker goes back to the pool only if it reset in time and its memory
  is back near what it started with (at most ``IDLE_WORKER_MAX_MB`` and a quarter of its cap above it, in
  address space and in private memory); otherwise it is stopped. The idle workers together may hold at
  most ``IDLE_POOL_BUDGET_MB`` above their start (the oldest are stopped first) and number at most
  ``MAX_IDLE_WORKERS``.

A reply that cannot be read (it does not unpickle, has the wrong shape or was cut off) counts as the
worker's end; a reply that does not come in time raises :class:`WorkerTimeout`. Each of these ways out can
be injected deterministically in tests (``faults``).

Workers are forked from the rollout process after it has imported the backend modules, so a new worker
costs a fork, not an interpreter start, and shares the process's hash seed (set orders in result texts).
"""

from __future__ import annotations

import ctypes
import gc
import multiprocessing
import os
import threading
import time
import weakref
from typing import Any

from . import faults
from .backends import ERROR_PREFIX

#: Default cap (MiB) on what a worker may map beyond what it inherited. Generous for any legitimate call (the
#: largest BFCL state is a few MB); it exists to stop a single call from taking the host's memory.
DEFAULT_MEMORY_LIMIT_MB = 4096
#: Idle workers kept warm for reuse (more are started on demand and stopped when released).
MAX_IDLE_WORKERS = 64
#: A released worker is kept warm only if, after its reset, it maps and holds at most this much (MiB) above
#: what it did when it started (and at most a quarter of its cap): a worker whose rollout filled its memory
#: would otherwise give the next, unrelated rollout a fraction of the headroom the cap promises.
IDLE_WORKER_MAX_MB = 256
#: Idle judgement workers kept warm (one per thread that judges at the same time is enough).
MAX_IDLE_JUDGES = 8
#: Tasks a judgement worker keeps (all 800 BFCL tasks fit); past it, it drops them and asks again.
MAX_WORKER_TASKS = 1024
#: What all idle workers together may hold (private MiB above their start); the oldest go first.
IDLE_POOL_BUDGET_MB = 1024
#: A replay is sent in messages of at most this many calls (a fresh worker need not receive it all at once).
REPLAY_CHUNK_CALLS = 64

#: Modules imported before the first worker is forked, so that workers start with the backend classes loaded.
_PRELOAD = [
    "env_wrappers.bfcl.backends",
    "env_wrappers.bfcl.verifier",
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

TIMEOUT_MARK = " timed out after "


def timeout_text(name: str, limit_s: float) -> str:
    """The error result of a call stopped at its time limit (the same text the thread mode gives)."""
    return ERROR_PREFIX + f"call to {name}{TIMEOUT_MARK}{limit_s:g}s"


def is_timeout_result(text: Any) -> bool:
    """Whether a recorded call result is the error of a call stopped at its time limit."""
    return isinstance(text, str) and text.startswith(ERROR_PREFIX + "call to ") and TIMEOUT_MARK in text


# ----------------------------------------------------------------------------------------------------------
# worker side


def _reset_process_settings() -> None:
    """Undo the process-wide settings BFCL's backends change, so a reused worker starts like a new one."""
    import decimal

    decimal.setcontext(decimal.Context())
    try:
        import mpmath

        mpmath.mp.dps = 15  # mpmath's default precision
    except ImportError:  # pragma: no cover - mpmath comes with bfcl-eval
        pass


def _memory(pid: int | str = "self") -> tuple[int, int]:
    """``(mapped, resident)`` bytes of a process (``(0, 0)`` where ``/proc`` cannot tell)."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            fields = f.read().split()
        page = os.sysconf("SC_PAGE_SIZE")
        return int(fields[0]) * page, int(fields[1]) * page
    except (OSError, ValueError, IndexError):
        return 0, 0


def _anon_bytes() -> int:
    """This process's resident anonymous memory (resident minus file-backed and shared pages), read cheaply
    from ``/proc/self/statm``; 0 where ``/proc`` cannot tell."""
    try:
        with open("/proc/self/statm") as f:
            fields = f.read().split()
        return max(0, int(fields[1]) - int(fields[2])) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _mapped_bytes() -> int:
    return _memory()[0]


def _footprint() -> tuple[int, int]:
    """``(mapped, own)`` bytes of this process: own is its private resident memory (pages no longer shared
    with the process it was forked from), or its resident memory where ``/proc`` does not tell."""
    mapped, resident = _memory()
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


def _find_malloc_trim():
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


def _keep_freed_memory() -> None:
    """Stop the allocator from handing freed heap memory back on its own, so that a worker's resident memory
    after a job is the most its heap reached since the worker started: what a judgement took then shows on
    release whatever the allocator did with it (a worker gives memory back only in :func:`_free_heap`)."""
    if _MALLOPT:
        try:
            _MALLOPT(_M_TRIM_THRESHOLD, 2**31 - 1)
            # Setting one threshold freezes the other at its start value (128 KiB), and every larger block
            # would then be mapped and unmapped on each use. Blocks past the ceiling go back when freed.
            _MALLOPT(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_MAX)
        except Exception:  # noqa: BLE001  # pragma: no cover
            pass


def _free_heap() -> None:
    """Hand the allocator's free pages back to the system."""
    if _MALLOC_TRIM:
        try:
            _MALLOC_TRIM(0)
        except Exception:  # noqa: BLE001  # pragma: no cover
            pass


def _free_memory() -> None:
    """Free what a rollout left: its instances hold reference cycles (a directory tree points back to its
    parents), which only the cyclic collector frees; then hand the allocator's free pages back."""
    gc.collect()
    _free_heap()


#: Slots of a worker's progress board (shared memory the worker writes and its parent reads, so that a
#: judgement's progress costs no message): a sequence number, whether a model call runs, and since when.
PROGRESS_SEQ, PROGRESS_CALL, PROGRESS_TURN, PROGRESS_POS, PROGRESS_SINCE = range(5)


def _progress_writer(conn, board):
    """The ``on_call`` hook of a judgement in a worker: publish ``(path, turn, position)`` when a model call
    starts and None when it ends (on the board when there is one, else as a message)."""
    if board is None:
        return lambda where, call="": conn.send(("call", where))

    def publish(where, call: str = ""):
        fault = None
        if where is None:
            board[PROGRESS_CALL] = 0.0
        else:
            fault = faults.active("judge_call", call)
            board[PROGRESS_TURN], board[PROGRESS_POS] = where[1], where[2]
            # An injected overrun: the call shows as started long ago, so the parent finds it over any limit.
            board[PROGRESS_SINCE] = time.monotonic() - (1e6 if fault == "overrun" else 0.0)
            board[PROGRESS_CALL] = 1.0
        board[PROGRESS_SEQ] += 1.0  # written last: the parent rereads when it changed under it
        if fault == "exit":
            faults.die()  # killed during the call: the board shows it running
        if fault == "overrun":
            while True:
                time.sleep(60)

    return publish


def _worker_main(conn, memory_limit_mb: int | None, board=None) -> None:
    """Serve one rollout's backends at a time (``load``, ``run``, ``state``, ``instances``, ``reset``), or
    one judgement at a time (``verify``)."""
    if memory_limit_mb:
        import resource

        # On top of what the worker already maps: a fork inherits the parent's address space, which in a
        # training process (CUDA, torch) can be far larger than any sane absolute cap.
        limit = _mapped_bytes() + int(memory_limit_mb) * 2**20
        try:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        except (ValueError, OSError):  # a lower hard limit is already in place
            pass
    from .backends import Backends

    faults.enter_worker()
    # What the fork inherited is never garbage here: out of the collector's sight, a collection neither
    # scans it (time) nor writes to its pages (which would copy them into this process).
    gc.freeze()
    # The parent's freed heap chunks came with the fork, resident and shared: memory a judgement took from
    # them would be ours without our resident memory growing (a parent that ran hundreds of tests holds
    # hundreds of MB of them). Given back now, such memory is new pages; kept from then on, freed memory
    # stays counted, so a judgement's growth cannot hide behind what it freed before or after.
    _free_heap()
    _keep_freed_memory()
    start = _footprint()
    start_anon = _anon_bytes()
    backends = None
    tasks: dict = {}  # judgements: tasks received so far, by the parent's key (it sends each task once)
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        except MemoryError:  # a request larger than what is left under the cap: the parent replaces us
            return
        op = msg[0]
        try:
            if op == "load":
                _reset_process_settings()
                if faults.at("tool", "build") == "memory":
                    faults.exhaust_memory()
                backends = Backends(msg[1], msg[2], msg[3], None)
                conn.send(("ok", None))
            elif op == "run":
                for call in msg[1]:
                    result = backends.execute(call)
                    fault = faults.at("tool", "reply", call)
                    if fault is None:
                        conn.send(result)
                    else:
                        faults.send_faulty(conn, result, fault)
            elif op == "state":
                conn.send(("ok", backends.state()))
            elif op == "instances":
                conn.send(("ok", backends.instances))
            elif op == "verify":  # a whole judgement (see isolated_verify)
                from .verifier import judge_job, to_wire

                backends = None
                key, task = msg[1], msg[2]
                if faults.at("judge", "start", getattr(task, "id", "")) == "exit":
                    faults.die()
                if task is None:
                    task = tasks.get(key)
                    if task is None:  # dropped (see below): the parent sends it again
                        conn.send(("need_task", None))
                        continue
                else:
                    if len(tasks) >= MAX_WORKER_TASKS:
                        tasks.clear()
                    tasks[key] = task
                _reset_process_settings()
                task_id = task.id
                if faults.at("judge", "build", task_id) == "memory":
                    faults.exhaust_memory()
                judged = judge_job(task, *msg[3:], on_call=_progress_writer(conn, board))
                msg = task = None
                if faults.at("judge", "finish", task_id) == "exit":
                    faults.die()
                official, verdict = judged.official, judged.verdict
                wire = (to_wire(official), None if verdict is official else to_wire(verdict), judged.outcomes)
                reply = ("ok", (wire, ((0, start_anon), (0, _anon_bytes()))))
                judged = None
                fault = faults.at("judge", "reply", task_id)
                if fault is None:
                    conn.send(reply)
                else:
                    faults.send_faulty(conn, reply, fault)
            elif op == "reset":
                backends = msg = None
                _free_memory()
                _reset_process_settings()
                conn.send(("ok", (start, _footprint())))
            else:
                return
        except (EOFError, OSError, BrokenPipeError):
            return
        except Exception as exc:  # noqa: BLE001 - reported to the parent, which decides
            try:
                conn.send(("error", f"{type(exc).__name__}: {exc}"[:500]))
            except Exception:  # noqa: BLE001
                return


# ----------------------------------------------------------------------------------------------------------
# parent side


class WorkerDied(Exception):
    """The worker gave no usable reply: it ended, its pipe closed, or what it sent could not be read."""


class WorkerTimeout(WorkerDied):
    """The worker gave no reply within the time allowed (it may still be running)."""


_WORKER_NAME = "seal-bfcl-tools"


#: Held while a worker is forked and its pipes are set up. A fork copies every open descriptor: a worker
#: forked by one thread while another thread's new worker still had the child's ends of its pipes open in
#: this process would keep those ends alive, so the other worker's exit would go unnoticed (a join that
#: waits out its timeout, a dead worker taken for a slow one).
_FORK_LOCK = threading.Lock()


class _Worker:
    def __init__(self, ctx, memory_limit_mb):
        with _FORK_LOCK:
            self.conn, child = ctx.Pipe(duplex=True)
            self.board = ctx.RawArray("d", 5)  # progress of a judgement (see _progress_writer)
            self.process = ctx.Process(target=_worker_main, args=(child, memory_limit_mb, self.board),
                                       daemon=True, name=_WORKER_NAME)
            self.process.start()
            child.close()
        self.memory_limit_mb = memory_limit_mb
        self.held = 0  # own (private) bytes above its start, as measured when it was last released
        self.tasks_sent: set = set()  # judgements: keys of the tasks this worker was sent

    def request(self, msg, timeout: float | None):
        """Send one request and return its ``(status, value)`` reply; ``WorkerDied`` on no reply in time."""
        try:
            self.conn.send(msg)
        except OSError as exc:
            raise WorkerDied(f"worker process ended ({exc})") from None
        return self.receive(timeout)

    def request_nowait(self, msg) -> None:
        """Send one request without waiting for its reply (``WorkerDied`` if the worker is gone)."""
        try:
            self.conn.send(msg)
        except OSError as exc:
            raise WorkerDied(f"worker process ended ({exc})") from None

    def receive(self, timeout: float | None):
        """The next reply; ``WorkerTimeout`` if none comes in time, ``WorkerDied`` if the worker ended or sent
        something that cannot be read (the worker is then of no further use)."""
        try:
            if not self.conn.poll(timeout):
                raise WorkerTimeout("no reply in time")
            return self.conn.recv()
        except (EOFError, OSError) as exc:
            raise WorkerDied(f"worker process ended ({exc})") from None
        except WorkerDied:
            raise
        except Exception as exc:  # noqa: BLE001 - an unpicklable or truncated reply
            raise WorkerDied(f"worker sent an unreadable reply ({type(exc).__name__})") from None

    def alive(self) -> bool:
        try:
            return self.process.is_alive()
        except Exception:  # noqa: BLE001
            return False

    def kill(self) -> None:
        try:
            self.process.kill()
            self.process.join(2)
        except Exception:  # noqa: BLE001
            pass
        try:
            self.conn.close()
        except Exception:  # noqa: BLE001
            pass


def _fits(worker: _Worker, report: Any) -> bool:
    """Whether a worker's memory report after its reset (``((mapped, own) at start, (mapped, own) now)``, see
    :func:`_footprint`) is within the limits for going back to the pool; records what it holds."""
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
        self._idle: list[_Worker] = []  # oldest first
        self._judges: list[_Worker] = []  # idle judgement workers (see isolated_verify)
        self._ctx = None
        self._pid = os.getpid()

    def _context(self):
        """Workers are forked from this process, after the backend modules are imported here.

        Forking (rather than a fork server or a fresh interpreter) gives the worker this process's string
        hash seed, so results that print a set (several BFCL error texts do) read exactly as they would in
        process; it also makes a new worker cost one fork. The worker only runs :func:`_worker_main` and
        touches no lock another thread of this process could hold (its modules are imported already).
        """
        if self._ctx is None:
            import importlib

            from .backends import _class_for

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
            _find_malloc_trim()
            methods = multiprocessing.get_all_start_methods()
            self._ctx = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
        return self._ctx

    def _take(self, idle: list, memory_limit_mb: int | None) -> _Worker:
        """A live worker of ``idle`` with this cap (others found on the way are stopped), else a new one."""
        with self._lock:
            while idle:
                w = idle.pop()
                if w.alive() and w.memory_limit_mb == memory_limit_mb:
                    return w
                w.kill()
            ctx = self._context()
        return _Worker(ctx, memory_limit_mb)

    def acquire(self, memory_limit_mb: int | None) -> _Worker:
        return self._take(self._idle, memory_limit_mb)

    def release(self, worker: _Worker) -> None:
        """Return a worker after its rollout: reset it and keep it warm if it is back within its limits (see
        the module docstring), else stop it. Keeps the idle workers within the pool's memory budget."""
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

    def acquire_judge(self, memory_limit_mb: int | None) -> _Worker:
        """A worker for one judgement: an idle judgement worker with this cap, else a new one. Judgement
        workers keep no state between judgements but the tasks they were sent, so they skip a rollout
        worker's reset; :meth:`release_judge` checks their memory instead."""
        return self._take(self._judges, memory_limit_mb)

    def release_judge(self, worker: _Worker, report: Any) -> None:
        """Keep a judgement worker warm if its resident anonymous memory (``((0, at its start), (0, now))``,
        freed heap memory included: see :func:`_keep_freed_memory`) is within the limits of an idle worker;
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


def _release(worker_box: list) -> None:
    worker = worker_box[0] if worker_box else None
    worker_box.clear()
    if worker is not None:
        try:
            pool().release(worker)
        except Exception:  # noqa: BLE001 - at interpreter exit
            worker.kill()


class IsolatedBackends:
    """The backends of one rollout, in a worker process. The same results as :class:`~.backends.Backends`
    for every call that finishes in time; see the module docstring for what happens to one that does not.

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
    def _worker(self) -> _Worker:
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

    def _replay(self, w: _Worker) -> None:
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
                    raise
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
