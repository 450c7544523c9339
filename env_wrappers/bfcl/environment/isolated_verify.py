"""The verifier's replay of a model's calls, in a worker process under a rollout's time and memory limits.

Judging a trajectory replays the model's calls on fresh backends (BFCL's checker does the same). Those calls
are the model's: a ``power(base=10, exponent=30000000)`` holds the interpreter lock for half a minute, a
``find`` below deep directories builds gigabytes. Run in the judging process (the reward function,
``diagnose``, ``eval`` scoring), one such call would stall or bloat it without limit. :func:`verify_isolated`
therefore sends the whole judgement (:func:`.verifier.judge_job`: the model path, the ground-truth path and
the counterfactual copies) to a worker process of the sandbox with the rollouts' memory cap (as a ``job``
request naming :func:`_judge_in_worker`), and watches it:

- the worker publishes on a shared-memory board when a model call starts and ends (no message, no wake-up
  of this process per call); a call still running after ``call_timeout_s`` gets the worker killed, and the
  judgement starts again on a fresh worker with that call marked as timed out: it is skipped and gets the
  time-limit text, exactly as a call the rollout recorded as timed out;
- a worker that ends during a model call (killed from outside) is handled the same way, with the text of a
  call that stopped the tool backend;
- a worker that ends before it starts the judgement (killed while idle) is replaced once;
- anything else (the worker ends outside a model call, other work over ``OTHER_WORK_S``, too many restarts,
  a reply that cannot be read or has the wrong shape) gives ``Judged.checker_error``: a checker-error
  verdict for every turn, never an exception into training. ``faults`` injects each of these in tests.

Only plain verdict data comes back. The ground-truth calls run inline in the worker, with no thread hand-off
(they are BFCL's own, trusted calls). A worker is reused for the next judgement only if its memory is back
within an idle worker's limits; it keeps the tasks it was sent (by a key per task object), so a task crosses
the pipe once per worker.
"""

from __future__ import annotations

import itertools
import time

from ..sandbox import worker as sandbox_worker
from ..sandbox.pool import pool as worker_pool
from ..sandbox.worker import (PROGRESS_CALL, PROGRESS_POS, PROGRESS_SEQ, PROGRESS_SINCE, PROGRESS_TURN, Worker,
                              WorkerDied, WorkerTimeout)
from ..tools.backends import ERROR_PREFIX
from .tasks import BFCLTask
from .verifier import Judged, from_wire, judge_job, to_wire

#: Time allowed while no model call runs (ground-truth calls, state comparison, building instances) between
#: two model calls: all of BFCL's ground truth replays in well under a second.
OTHER_WORK_S = 60.0
#: Longest wait between two looks at the worker's board (how late an overrunning call may be noticed).
TICK_S = 0.1
#: Restarts allowed for one judgement (each one marks one more call as stopped).
MAX_RESTARTS = 8


def verify_isolated(task: BFCLTask, decoded: list, attempted: list, strict_abstention: bool,
                    call_timeout_s: float, timed_out: list | None, want_outcomes: bool,
                    memory_limit_mb: int | None = None, meanwhile=None) -> Judged:
    """:func:`.verifier.judge_job` in a worker: a :class:`.verifier.Judged`, whose verdicts carry every
    turn's flags, differences and ground-truth calls (what Psi's checks read), not the call and result lists
    (``verifier.to_wire``). A judgement that cannot finish is ``Judged.checker_error``: never an exception.

    ``memory_limit_mb``: the worker's cap; None takes ``sandbox.worker.DEFAULT_MEMORY_LIMIT_MB`` (the
    rollouts').
    ``meanwhile``: called once, in this process, after the judgement was first sent and before its reply is
    awaited (the caller's own work, done while the worker runs).
    """
    cap = sandbox_worker.DEFAULT_MEMORY_LIMIT_MB if memory_limit_mb is None else memory_limit_mb
    skip = [dict(timed_out[k]) if timed_out is not None and k < len(timed_out) else {} for k in range(len(decoded))]
    why = "the judgement restarted too often"
    pool = worker_pool()
    fresh_starts = 0  # workers that ended before they began this judgement (killed while idle)
    for _ in range(MAX_RESTARTS + 1):
        worker = pool.acquire_judge(cap)
        key = _key(task)
        rest = (decoded, attempted, strict_abstention, call_timeout_s, skip if any(skip) else None, want_outcomes)
        seq0 = worker.board[PROGRESS_SEQ]
        try:
            worker.request_nowait(("job", _judge_in_worker, key, None if key in worker.tasks_sent else task) + rest)
            worker.tasks_sent.add(key)
            if meanwhile is not None:
                meanwhile, work = None, meanwhile
                work()
            reply, stopped = _await(worker, call_timeout_s)
            if stopped is None and isinstance(reply, tuple) and reply[:1] == ("need_task",):
                worker.request_nowait(("job", _judge_in_worker, key, task) + rest)  # the worker had dropped it
                reply, stopped = _await(worker, call_timeout_s)
        except WorkerDied as exc:
            reply, stopped = None, (_running(worker), exc)
        if stopped is not None:
            worker.kill()
            where, error = stopped
            if where is None:
                idle = worker.board[PROGRESS_SEQ] == seq0  # it never reached a model call
                if idle and not isinstance(error, WorkerTimeout) and not fresh_starts:
                    fresh_starts += 1  # it ended before it began: once, a fresh worker tries instead
                    continue
                why = f"the verifier's worker ended outside a model call ({error})"[:300]
                break
            k, i = where
            if isinstance(error, WorkerTimeout):
                skip[k][i] = None  # the standard time-limit text
            else:
                name = _flat(decoded, k)[i].split("(", 1)[0].strip()[:80] or "?"
                skip[k][i] = ERROR_PREFIX + f"call to {name} stopped the tool backend"
            continue
        try:
            judged = _read_reply(reply)
        except (TypeError, ValueError, IndexError, KeyError) as exc:
            worker.kill()
            why = f"the verifier's worker failed: {str(exc)[:300]}"
            break
        pool.release_judge(worker, reply[1][1])
        return judged
    return Judged.checker_error(task, decoded, why)


def _judge_in_worker(task: BFCLTask, decoded: list, attempted: list, strict_abstention: bool,
                     call_timeout_s: float, timed_out: list | None, want_outcomes: bool, *, on_call) -> tuple:
    """What a judge worker runs for one ``job`` request: :func:`.verifier.judge_job` with the worker's
    progress hook, returned as plain verdict data for the pipe (``verifier.to_wire``)."""
    judged = judge_job(task, decoded, attempted, strict_abstention, call_timeout_s, timed_out, want_outcomes,
                       on_call=on_call)
    official, verdict = judged.official, judged.verdict
    return (to_wire(official), None if verdict is official else to_wire(verdict), judged.outcomes)


def _read_reply(reply) -> Judged:
    """The judgement in a worker's reply ``("ok", ((official, verdict or None, outcomes), memory))``;
    ``ValueError`` (or another error of a malformed reply) for anything else."""
    if not (isinstance(reply, tuple) and len(reply) == 2 and reply[0] == "ok"):
        detail = reply[1] if isinstance(reply, tuple) and len(reply) == 2 else reply
        raise ValueError(str(detail)[:300])
    (official, verdict, outcomes), _memory = reply[1]
    if outcomes is not None and not isinstance(outcomes, list):
        raise ValueError(f"outcomes of type {type(outcomes).__name__}")
    official = from_wire(official)
    return Judged(official, official if verdict is None else from_wire(verdict), outcomes)


_KEYS = itertools.count(1)


def _key(task: BFCLTask) -> int:
    """A key for this task object, unique in this process: a worker keeps the tasks it was sent by key (a
    task id alone could name two different objects, as tests and perturbations make)."""
    key = task.__dict__.get("_judge_key")
    if key is None:
        key = task.__dict__["_judge_key"] = next(_KEYS)
    return key


def _running(worker: Worker) -> tuple | None:
    """``(turn, position)`` of the model call the worker's board shows running, or None."""
    board = worker.board
    for _ in range(3):
        seq = board[PROGRESS_SEQ]
        running = board[PROGRESS_CALL] == 1.0
        where = (int(board[PROGRESS_TURN]), int(board[PROGRESS_POS]))
        if board[PROGRESS_SEQ] == seq:
            return where if running else None
    return None  # pragma: no cover - the worker kept writing: it was not stuck in a call


def _await(worker: Worker, call_timeout_s: float) -> tuple:
    """Wait for the judgement's reply: ``(reply, None)``, or ``(None, ((turn, position) or None, error))`` when
    the worker stopped: ``error`` is a :class:`~..sandbox.worker.WorkerTimeout` when a model call overran its
    limit (or, outside a model call, nothing moved for ``OTHER_WORK_S``), a ``WorkerDied`` when it ended."""
    board = worker.board
    seen, changed = None, time.monotonic()
    while True:
        seq = board[PROGRESS_SEQ]
        now = time.monotonic()
        if seq != seen:
            seen, changed = seq, now
        running = board[PROGRESS_CALL] == 1.0
        since = board[PROGRESS_SINCE]
        deadline = since + call_timeout_s if running else changed + OTHER_WORK_S
        try:
            # Woken every TICK_S at least: a model call may start while this waits on the longer deadline.
            if worker.conn.poll(min(TICK_S, max(0.0, deadline - now))):
                return worker.conn.recv(), None
        except (EOFError, OSError) as exc:
            return None, (_running(worker), WorkerDied(f"worker process ended ({exc})"))
        except Exception as exc:  # noqa: BLE001 - a reply that cannot be unpickled: the worker is of no use
            return ("error", f"unreadable reply ({type(exc).__name__})"), None
        if board[PROGRESS_SEQ] != seen or time.monotonic() < deadline:
            continue  # progress meanwhile: wait on with the new deadline
        where = _running(worker)
        if where is not None:
            return None, (where, WorkerTimeout(f"a model call ran past {call_timeout_s:g}s"))
        return None, (where, WorkerTimeout(f"no progress for {OTHER_WORK_S:g}s"))


def _flat(decoded: list, k: int) -> list:
    return [c for s in decoded[k] if s for c in s]
