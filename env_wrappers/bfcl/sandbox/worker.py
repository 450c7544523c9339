"""One sandbox worker: the loop its process runs, and the parent's handle on it.

A worker serves one rollout's backends at a time (``load``, ``run``, ``state``, ``instances``, ``reset``), or
one job at a time (``job``: a whole unit of work the parent names by a function, run inline while the worker
publishes on a shared-memory board when each model call starts and ends; the judge side sends its
judgements this way, see ``environment.isolated_verify``).

A request fails in one of two typed ways, which callers tell apart by type: :class:`WorkerTimeout` (no reply
within the time allowed; the worker may still be running) and :class:`WorkerDied` (the worker ended, its pipe
closed, or its reply could not be read).
"""

from __future__ import annotations

import gc
import os
import threading
import time

from ..tools.backends import Backends
from . import faults
from .memory import anon_bytes, footprint, free_heap, free_memory, keep_freed_memory, mapped_bytes

#: Default cap (MiB) on what a worker may map beyond what it inherited. Generous for any legitimate call (the
#: largest BFCL state is a few MB); it exists to stop a single call from taking the host's memory.
DEFAULT_MEMORY_LIMIT_MB = 4096
#: Tasks a judgement worker keeps (all 800 BFCL tasks fit); past it, it drops them and asks again.
MAX_WORKER_TASKS = 1024


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



#: How often an idle worker looks whether its parent process is still there (seconds).
PARENT_CHECK_S = 2.0


def _worker_main(conn, memory_limit_mb: int | None, board=None, parent: int | None = None) -> None:
    """Serve one rollout's backends at a time (``load``, ``run``, ``state``, ``instances``, ``reset``), or
    one job at a time (``job``)."""
    if memory_limit_mb:
        import resource

        # On top of what the worker already maps: a fork inherits the parent's address space, which in a
        # training process (CUDA, torch) can be far larger than any sane absolute cap.
        limit = mapped_bytes() + int(memory_limit_mb) * 2**20
        try:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        except (ValueError, OSError):  # a lower hard limit is already in place
            pass
    faults.enter_worker()
    # What the fork inherited is never garbage here: out of the collector's sight, a collection neither
    # scans it (time) nor writes to its pages (which would copy them into this process).
    gc.freeze()
    # The parent's freed heap chunks came with the fork, resident and shared: memory a judgement took from
    # them would be ours without our resident memory growing (a parent that ran hundreds of tests holds
    # hundreds of MB of them). Given back now, such memory is new pages; kept from then on, freed memory
    # stays counted, so a judgement's growth cannot hide behind what it freed before or after.
    free_heap()
    keep_freed_memory()
    start = footprint()
    start_anon = anon_bytes()
    backends = None
    tasks: dict = {}  # judgements: tasks received so far, by the parent's key (it sends each task once)
    parent = os.getppid() if parent is None else parent  # given by the parent: it may be gone already
    while True:
        try:
            # Workers forked later hold the parent's end of this pipe too, so a parent that died without
            # stopping its workers (killed, or os._exit) gives no end of file: the worker looks up its parent
            # while it waits, and ends when it has another one.
            while not conn.poll(PARENT_CHECK_S):
                if os.getppid() != parent:
                    return
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
            elif op == "job":  # ("job", function, task key, task or None, *arguments): see isolated_verify
                backends = None
                job, key, task = msg[1], msg[2], msg[3]
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
                value = job(task, *msg[4:], on_call=_progress_writer(conn, board))
                msg = task = job = None
                if faults.at("judge", "finish", task_id) == "exit":
                    faults.die()
                reply = ("ok", (value, ((0, start_anon), (0, anon_bytes()))))
                value = None
                fault = faults.at("judge", "reply", task_id)
                if fault is None:
                    conn.send(reply)
                else:
                    faults.send_faulty(conn, reply, fault)
            elif op == "reset":
                backends = msg = None
                if faults.at("tool", "reset") == "hold":
                    faults.hold()
                free_memory()
                _reset_process_settings()
                conn.send(("ok", (start, footprint())))
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


class Worker:
    """The parent's handle on one worker process: its pipe, its progress board and what it was sent."""

    def __init__(self, ctx, memory_limit_mb):
        with _FORK_LOCK:
            self.conn, child = ctx.Pipe(duplex=True)
            self.board = ctx.RawArray("d", 5)  # progress of a judgement (see _progress_writer)
            self.process = ctx.Process(target=_worker_main, args=(child, memory_limit_mb, self.board, os.getpid()),
                                       daemon=True, name=_WORKER_NAME)
            self.process.start()
            child.close()
        self.memory_limit_mb = memory_limit_mb
        self.held = 0  # own (private) bytes above its start, as measured when it was last released
        self.private = 0  # own (private) bytes in all, as measured when it was last released
        self.tasks_sent: set = set()  # judgements: keys of the tasks this worker was sent
        self.leased = False  # the pool's: whether a rollout holds it
        self.on_end = None  # the pool's: called once with this worker when it is stopped (kill)

    def request(self, msg, timeout: float | None):
        """Send one request and return its ``(status, value)`` reply; :class:`WorkerTimeout` when none comes
        within ``timeout``, :class:`WorkerDied` when the worker is gone or its reply cannot be read."""
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

    def stop_process(self) -> None:
        """End the process only (its pipe stays open for whoever is waiting on it, who then sees it end)."""
        try:
            self.process.kill()
        except Exception:  # noqa: BLE001
            pass

    def kill(self) -> None:
        """End the process and close every descriptor this process held for it (its pipe, and the pipe
        ``multiprocessing`` keeps to see the process end, which would otherwise stay open until the next
        worker starts); tells the pool once."""
        try:
            self.process.kill()
            self.process.join(2)
        except Exception:  # noqa: BLE001
            pass
        try:
            self.conn.close()
        except Exception:  # noqa: BLE001
            pass
        try:
            # Not while the interpreter exits: multiprocessing then joins its children from the main thread.
            if self.process.exitcode is not None and threading.main_thread().is_alive():
                self.process.close()
        except Exception:  # noqa: BLE001
            pass
        on_end, self.on_end = self.on_end, None
        if on_end is not None:
            on_end(self)

