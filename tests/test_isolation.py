"""Hostile tool calls cannot freeze, starve or leak between rollouts.

Model-issued calls run in a worker process per rollout (``env_wrappers.bfcl.isolation``):

- a call that holds the interpreter lock (big-integer or decimal arithmetic) is stopped at its time limit,
  and no other thread of the rollout process stalls meanwhile;
- a rollout whose calls overran keeps its tools and its state (the worker is replaced and the completed
  calls are replayed), and slow calls of other rollouts never make a fast call time out;
- mpmath's process-wide precision, set by ``logarithm``, is never shared: 64 concurrent rollouts of a
  MathAPI task get exactly the results of the same rollouts run one after another;
- the verifier does not re-run a call the rollout recorded as timed out.
"""

from __future__ import annotations

import concurrent.futures
import json
import sys
import threading
import time

import pytest

from env_wrappers.bfcl.env import BFCLEnv
from env_wrappers.bfcl.isolation import is_timeout_result
from env_wrappers.bfcl.judge import judge_trace
from env_wrappers.bfcl.tasks import load_tasks

MATH_TASK = "multi_turn_base_15"  # GorillaFileSystem + MathAPI
FS_TASK = "multi_turn_base_0"


@pytest.fixture(scope="module")
def tasks():
    return load_tasks([MATH_TASK, FS_TASK])


def call(name: str, **arguments) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


class Ticker:
    """A thread that wakes every 0.1 s and records the longest gap between two wake-ups."""

    def __init__(self):
        self.max_gap = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        last = time.perf_counter()
        while not self._stop.is_set():
            time.sleep(0.1)
            now = time.perf_counter()
            self.max_gap = max(self.max_gap, now - last - 0.1)
            last = now

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def test_ten_second_limit_holds_for_a_gil_holding_call_and_no_thread_stalls(tasks):
    env = BFCLEnv(tasks[MATH_TASK], call_format="json", call_timeout_s=10.0)
    env.reset()
    assert env.step(call("mkdir", dir_name="kept")).tool_results[0].is_error is False
    with Ticker() as ticker:
        t0 = time.perf_counter()
        result = env.step(call("power", base=10, exponent=30000000))
        elapsed = time.perf_counter() - t0
    assert elapsed < 12.0, f"the 10 s limit took {elapsed:.1f}s"
    assert ticker.max_gap < 1.0, f"another thread stalled for {ticker.max_gap:.1f}s"
    shown = result.tool_results[0]
    assert shown.is_error and is_timeout_result(shown.content), shown.content
    # The rollout keeps its tools and the state of the calls before the overrun.
    after = env.step(call("ls"))
    assert not after.tool_results[0].is_error
    assert "kept" in after.tool_results[0].content
    assert env.step(call("add", a=1, b=2)).tool_results[0].content == '{"result": 3}'


def test_decimal_precision_bomb_is_stopped(tasks):
    env = BFCLEnv(tasks[MATH_TASK], call_format="json", call_timeout_s=2.0)
    env.reset()
    with Ticker() as ticker:
        t0 = time.perf_counter()
        result = env.step(call("square_root", number=2, precision=30000000))
        elapsed = time.perf_counter() - t0
    assert elapsed < 4.0, f"the 2 s limit took {elapsed:.1f}s"
    assert ticker.max_gap < 1.0
    assert is_timeout_result(result.tool_results[0].content)


def test_slow_calls_of_other_rollouts_do_not_close_a_rollouts_tools(tasks):
    """16 rollouts overrun with slow logarithms at the same time; an unrelated rollout's ``pwd`` still runs
    in time and its tools stay open."""
    slow = [BFCLEnv(tasks[MATH_TASK], call_format="json", call_timeout_s=1.0) for _ in range(16)]
    for e in slow:
        e.reset()
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        results = list(pool.map(lambda e: e.step(call("logarithm", value=2, base=3, precision=200000)), slow))
    assert all(is_timeout_result(r.tool_results[0].content) for r in results)
    other = BFCLEnv(tasks[FS_TASK], call_format="json", call_timeout_s=2.0)
    other.reset()
    for _ in range(3):
        shown = other.step(call("pwd")).tool_results[0]
        assert not shown.is_error, shown.content
    assert not other.backends.broken


def _math_messages(i: int) -> list:
    """One rollout's messages: logarithms at precisions that differ between rollouts, and other math."""
    msgs = []
    for k in range(6):
        precision = (15, 400, 3000, 30, 1500, 8)[(i + k) % 6] + i
        msgs.append(call("logarithm", value=2 + k, base=3 + (i % 5), precision=precision))
        msgs.append(call("square_root", number=2 + i, precision=precision))
        msgs.append(call("divide", a=1 + k, b=7 + i))
    return msgs


def _run_rollout(task, i: int) -> list:
    env = BFCLEnv(task, call_format="json", call_timeout_s=30.0)
    env.reset()
    out = []
    for m in _math_messages(i):
        out.extend(r.content for r in env.step(m).tool_results)
    return out


def test_64_concurrent_mathapi_rollouts_give_the_sequential_results(tasks):
    task = tasks[MATH_TASK]
    n = 64
    sequential = [_run_rollout(task, i) for i in range(n)]
    assert len({tuple(s) for s in sequential}) == n
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # preempt often, as a loaded rollout worker would
    try:
        with concurrent.futures.ThreadPoolExecutor(n) as pool:
            concurrent_runs = list(pool.map(lambda i: _run_rollout(task, i), range(n)))
    finally:
        sys.setswitchinterval(interval)
    differing = sum(a != b for s, c in zip(sequential, concurrent_runs) for a, b in zip(s, c))
    assert differing == 0, f"{differing} tool results differ from the sequential run"


def test_verifier_does_not_rerun_a_call_the_rollout_recorded_as_timed_out(tasks):
    """Judging a trajectory with an overrunning call takes no longer than its other calls."""
    task = tasks[MATH_TASK]
    env = BFCLEnv(task, call_format="json", call_timeout_s=1.0)
    env.reset()
    env.step(call("power", base=10, exponent=30000000))
    env.step(call("add", a=1, b=2))
    while not env.done:
        env.step("done")
    t0 = time.perf_counter()
    j = judge_trace(task, env.trace, call_timeout_s=10.0)
    assert time.perf_counter() - t0 < 5.0
    assert len(j.labels) == task.n_turns
    outcomes: list = []
    from env_wrappers.bfcl.judge import _timed_out_positions
    from env_wrappers.bfcl.verifier import verify

    verify(task, env.trace.decoded_steps(), call_timeout_s=10.0, model_outcomes=outcomes,
           timed_out=_timed_out_positions(env.trace))
    recorded = [c.result for t in env.trace.turns for a in t.attempts for c in a.calls if c.parsed]
    assert [o[0] for turn in outcomes for o in turn] == recorded  # the verifier saw what the rollout saw
