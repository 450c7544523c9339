"""Hostile tool calls cannot freeze, starve or leak between rollouts.

Model-issued calls run in a worker process per rollout (``env_wrappers.bfcl.sandbox``):

- a call that holds the interpreter lock (big-integer or decimal arithmetic) is stopped at its time limit,
  and no other thread of the rollout process stalls meanwhile;
- a rollout whose calls overran keeps its tools and its state (the worker is replaced and the completed
  calls are replayed), and slow calls of other rollouts never make a fast call time out;
- mpmath's process-wide precision, set by ``logarithm``, is never shared: 64 concurrent rollouts of a
  MathAPI task get exactly the results of the same rollouts run one after another;
- the verifier does not re-run a call the rollout recorded as timed out;
- a worker goes back to the warm pool only when its memory is back near its start, and the idle pool
  holds no more than its budget;
- a worker killed while idle is replaced and the completed calls replayed: the rollout reads as undisturbed;
- an overrun after a long history ends within three times the limit (the replay is bounded as a whole);
- a huge tool result becomes a short error result in BFCL's style, in the observation and in the trace.
"""

from __future__ import annotations

import concurrent.futures
import json
import sys
import threading
import time

import pytest

from env_wrappers.bfcl.tools.backends import is_timeout_result
from env_wrappers.bfcl.environment.env import BFCLEnv
from env_wrappers.bfcl.environment.judge import judge_trace
from env_wrappers.bfcl.environment.tasks import load_tasks

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


#: What the time-limit tests allow, as shares of the call's limit. The faults they catch are gross: a limit that does
#: not hold lets ``power(10, 30000000)`` run for minutes, and a call that holds this process's interpreter lock stalls
#: every other thread for the whole call. On a loaded machine (``make test-under-load``: a busy process on every core)
#: the scheduler alone delays a thread by more than a second, so the bounds are twice the limit for the call and half
#: the limit for the longest stall of another thread, not the limit plus a little.
ELAPSED_SHARE = 2.0
STALL_SHARE = 0.5


def test_ten_second_limit_holds_for_a_gil_holding_call_and_no_thread_stalls(tasks):
    limit = 10.0
    env = BFCLEnv(tasks[MATH_TASK], call_format="json", call_timeout_s=limit)
    env.reset()
    assert env.step(call("mkdir", dir_name="kept")).tool_results[0].is_error is False
    with Ticker() as ticker:
        t0 = time.perf_counter()
        result = env.step(call("power", base=10, exponent=30000000))
        elapsed = time.perf_counter() - t0
    assert elapsed < ELAPSED_SHARE * limit, f"the {limit:g} s limit took {elapsed:.1f}s"
    assert ticker.max_gap < STALL_SHARE * limit, f"another thread stalled for {ticker.max_gap:.1f}s"
    shown = result.tool_results[0]
    assert shown.is_error and is_timeout_result(shown.content), shown.content
    # The rollout keeps its tools and the state of the calls before the overrun.
    after = env.step(call("ls"))
    assert not after.tool_results[0].is_error
    assert "kept" in after.tool_results[0].content
    assert env.step(call("add", a=1, b=2)).tool_results[0].content == '{"result": 3}'


def test_decimal_precision_bomb_is_stopped(tasks):
    limit = 5.0  # long enough that half of it is above what a loaded scheduler delays a thread by
    env = BFCLEnv(tasks[MATH_TASK], call_format="json", call_timeout_s=limit)
    env.reset()
    with Ticker() as ticker:
        t0 = time.perf_counter()
        result = env.step(call("square_root", number=2, precision=30000000))
        elapsed = time.perf_counter() - t0
    assert elapsed < ELAPSED_SHARE * limit, f"the {limit:g} s limit took {elapsed:.1f}s"
    assert ticker.max_gap < STALL_SHARE * limit, f"another thread stalled for {ticker.max_gap:.1f}s"
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
    from env_wrappers.bfcl.environment.judge import _timed_out_positions
    from env_wrappers.bfcl.environment.verifier import verify

    verify(task, env.trace.decoded_steps(), call_timeout_s=10.0, model_outcomes=outcomes,
           timed_out=_timed_out_positions(env.trace))
    recorded = [c.result for t in env.trace.turns for a in t.attempts for c in a.calls if c.parsed]
    assert [o[0] for turn in outcomes for o in turn] == recorded  # the verifier saw what the rollout saw


# ----------------------------------------------------------------------------------------------------------
# workers that are clean or gone (small memory caps: every test here stays well under 1 GB)

import os  # noqa: E402
import signal  # noqa: E402

from env_wrappers.bfcl.tools.backends import ERROR_PREFIX, MAX_RESULT_CHARS  # noqa: E402
from env_wrappers.bfcl.sandbox import pool as sandbox_pool  # noqa: E402
from env_wrappers.bfcl.sandbox.client import IsolatedBackends  # noqa: E402

SMALL_CAP_MB = 160


def _rss(pid: int) -> int:
    """The memory a process holds of its own (private pages: not those it still shares with its parent)."""
    total = 0
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith(("Private_Clean:", "Private_Dirty:")):
                total += int(line.split()[1]) * 1024
    return total


def _fs(cap_mb: int = SMALL_CAP_MB):
    return IsolatedBackends(["GorillaFileSystem"], {}, False, call_timeout_s=20.0, memory_limit_mb=cap_mb)


def _fill(backends, files: int, tag: str) -> list:
    """Write ``files`` files of 60,000 characters (a legitimate call each); the error results, if any."""
    errors = []
    backends.execute_many(["mkdir(dir_name='d')", "cd(folder='d')"])
    for k in range(0, files, 16):
        calls = []
        for i in range(k, min(files, k + 16)):
            content = chr(97 + i % 26) * 60_000
            calls += [f"touch(file_name='{tag}{i}')", f"echo(content='{content}', file_name='{tag}{i}')"]
        errors += [r[0][:120] for r in backends.execute_many(calls) if r[1]]
    return errors


def _fresh_rss() -> int:
    sandbox_pool.pool().shutdown()
    b = _fs()
    assert b.execute("pwd()")[1] is False
    rss = _rss(b._box[0].process.pid)
    b._discard_worker()
    return rss


def test_a_worker_that_filled_its_memory_does_not_reach_the_next_rollout():
    """A rollout that filled most of its worker's memory cap ends; the worker it used must not go back to the
    pool holding that memory: the next, unrelated rollout has its whole cap (a legitimate 60 KB ``echo``
    and a state of half the cap work) and the idle pool holds no more than a clean worker would."""
    baseline = _fresh_rss()
    first = _fs()
    first_errors = _fill(first, 1900, "a")  # about 115 MB of state under a 160 MB cap
    assert not first.broken, first.broken
    first.close()
    sandbox_pool.pool().settle()  # the worker's reset runs in the pool's threads
    for w in list(sandbox_pool.pool()._idle):
        grown = _rss(w.process.pid) - baseline
        assert grown <= SMALL_CAP_MB / 4 * 2**20, f"an idle worker holds {grown / 2**20:.0f} MB more than a fresh one"
    second = _fs()
    echo = second.execute(f"echo(content='{'x' * 60_000}')")
    assert echo[1] is False and len(echo[0]) > 60_000, echo[0][:120]
    errors = _fill(second, 1200, "b")  # about 72 MB: fits a whole cap, not what a used one has left
    assert errors == [] and not second.broken, (errors[:3], second.broken, first_errors[:3])
    second.close()
    sandbox_pool.pool().shutdown()


def test_the_idle_pool_stays_within_its_memory_budget(monkeypatch):
    """Four rollouts that each held ~40 MB end at once; what their idle workers still hold is bounded by the
    pool's budget (here 64 MB), not by the number of workers."""
    monkeypatch.setattr(sandbox_pool, "IDLE_POOL_BUDGET_MB", 64, raising=False)
    baseline = _fresh_rss()
    rollouts = [_fs() for _ in range(4)]
    for i, b in enumerate(rollouts):
        assert _fill(b, 650, f"r{i}") == []
    for b in rollouts:
        b.close()
    sandbox_pool.pool().settle()
    idle = list(sandbox_pool.pool()._idle)
    held = sum(max(0, _rss(w.process.pid) - baseline) for w in idle)
    slack = 8 * 2**20 * len(idle)  # a worker's own small growth (its caches), per worker
    assert held <= 64 * 2**20 + slack, f"{len(idle)} idle workers hold {held / 2**20:.0f} MB"
    sandbox_pool.pool().shutdown()


def _wait_dead(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split(")")[-1].split()[0] in ("Z", "X"):
                    return
        except FileNotFoundError:
            return
        time.sleep(0.01)


FS_STEPS = [call("mkdir", dir_name="kept"), call("cd", folder="kept"), call("touch", file_name="a.txt"),
            call("echo", content="one\ntwo\nthree", file_name="a.txt"), call("cat", file_name="a.txt"),
            call("wc", file_name="a.txt", mode="l"), call("cd", folder=".."), call("ls"),
            call("find", path="."), call("pwd")]


def test_a_worker_killed_while_idle_is_replaced_and_the_rollout_reads_as_undisturbed(tasks):
    """The rollout's worker is killed between two steps (twice); the rollout keeps its tools and every later
    observation and the final state equal those of an undisturbed run of the same steps."""

    def run(kill_after: set) -> tuple:
        env = BFCLEnv(tasks[FS_TASK], call_format="json", call_timeout_s=10.0)
        env.reset()
        seen = []
        for k, m in enumerate(FS_STEPS):
            seen.extend((r.content, r.is_error) for r in env.step(m).tool_results)
            if k in kill_after:
                _wait_dead(env.backends._box[0].process.pid)
        state = env.backends.state()
        broken = env.backends.broken
        env.close()
        return seen, json.dumps(state, sort_keys=True, default=str), broken

    undisturbed = run(set())
    disturbed = run({1, 4})
    assert disturbed[2] is None, disturbed[2]
    assert disturbed[0] == undisturbed[0]
    assert disturbed[1] == undisturbed[1]


def _pow_exponent_taking(seconds: float) -> tuple:
    """An exponent for which ``10 ** exponent`` takes about ``seconds`` here (bounded search), and the
    median of three timings of it."""
    exponent = 100_000
    for _ in range(12):
        t0 = time.perf_counter()
        _ = 10 ** exponent
        if time.perf_counter() - t0 >= seconds:
            break
        exponent *= 2
    timings = []
    for _ in range(3):
        t0 = time.perf_counter()
        _ = 10 ** exponent
        timings.append(time.perf_counter() - t0)
    return exponent, sorted(timings)[1]


def test_an_overrun_after_a_long_history_ends_within_three_times_the_limit(tasks):
    """Earlier calls that each take about a sixth of the limit and together over three limits: replaying
    them on the new worker after an overrun must not add their whole time to the overrunning call."""
    exponent, took = _pow_exponent_taking(0.2)
    limit = max(1.0, 6 * took)
    b = IsolatedBackends(["MathAPI"], {}, False, call_timeout_s=limit)
    history_s = 0.0
    for _ in range(60):
        t0 = time.perf_counter()
        text, _, _ = b.execute(f"power(base=10, exponent={exponent})")
        if is_timeout_result(text) or b.broken:
            b.close()
            pytest.skip("the machine is too loaded to build the history within the limit")
        history_s += time.perf_counter() - t0
        if history_s >= 3.5 * limit:
            break
    assert history_s >= 3.5 * limit
    t0 = time.perf_counter()
    text, is_error, _ = b.execute("power(base=10, exponent=30000000)")
    elapsed = time.perf_counter() - t0
    assert is_error and is_timeout_result(text), text
    assert elapsed < 3 * limit, f"an overrunning call with a {limit:.1f}s limit took {elapsed:.1f}s"
    b.close()


def test_a_huge_tool_result_becomes_a_short_error_result(tasks):
    """``find`` below 40 nested directories with 1,500-character names returns about 1.2 million
    characters; the model sees (and the trace keeps) a short error in BFCL's style instead, and the
    rollout goes on."""
    env = BFCLEnv(tasks[FS_TASK], call_format="json", call_timeout_s=10.0, max_steps_per_turn=100)
    env.reset()
    depth, width = 40, 1500
    for k in range(depth):
        name = str(k) * (width // len(str(k)))
        env.step(call("mkdir", dir_name=name) + call("cd", folder=name))
    env.step("".join(call("cd", folder="..") for _ in range(depth)))
    shown = env.step(call("find", path=".")).tool_results[0]
    assert shown.is_error, shown.content[:200]
    assert shown.content.startswith(ERROR_PREFIX) and str(MAX_RESULT_CHARS) in shown.content
    assert len(shown.content) < 500
    recorded = [c.result for t in env.trace.turns for a in t.attempts for c in a.calls if c.parsed]
    assert max(len(r or "") for r in recorded) < 20_000
    assert not env.step(call("pwd")).tool_results[0].is_error
    assert not env.backends.broken
    env.close()
