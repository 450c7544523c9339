"""Every way a judgement or a tool worker can fail ends as a labelled failure of that one task, and the next
task is judged normally.

Faults are injected deterministically (``env_wrappers.bfcl.sandbox.faults``): a worker ends at a named point, writes a
reply that cannot be read, overruns a call limit without the test waiting for the limit, or exceeds its real
memory cap. Workers read the fault from their environment, so each test sets it, then starts from an empty
pool (workers forked before it would not see it) and leaves an empty pool behind (so no later test meets it).
Each fault names one task or call; the other task of the same test runs in the same workers, unaffected.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from _paths import REPO

from env_wrappers.bfcl.tools.backends import is_timeout_result
from env_wrappers.bfcl.environment.judge import _judge_replayed, _replay, judge_result
from env_wrappers.bfcl.environment.perturb import ground_truth_steps, to_result
from env_wrappers.bfcl.environment.tasks import load_tasks
from env_wrappers.bfcl.sandbox import faults
from env_wrappers.bfcl.sandbox import pool as sandbox_pool
from env_wrappers.bfcl.sandbox.worker import WorkerDied, WorkerTimeout

ROOT = REPO
HOSTILE = "multi_turn_base_15"  # GorillaFileSystem + MathAPI: ``power`` is one of its functions
ORDINARY = "multi_turn_base_0"
POWER = "power(base=10, exponent=30000000)"  # about half a minute of big-integer arithmetic, if it ran


@pytest.fixture(scope="module")
def tasks():
    return load_tasks([HOSTILE, ORDINARY])


@pytest.fixture
def inject(monkeypatch):
    """``inject(spec)``: faults for the workers started from now on (see ``faults``)."""
    def _set(spec: str) -> None:
        monkeypatch.setenv(faults.ENV_VAR, spec)
        sandbox_pool.pool().shutdown()

    yield _set
    monkeypatch.delenv(faults.ENV_VAR, raising=False)
    sandbox_pool.pool().shutdown()


def _good(task) -> list:
    return to_result(task, ground_truth_steps(task), "python")


def _ten_overruns(task) -> list:
    """The issue's result entry: turn 0 makes ten calls that each outrun the call limit."""
    good = _good(task)
    return [[f"[{POWER}]"] * 10 + good[0]] + good[1:]


def _assert_ordinary_judges_normally(tasks):
    task = tasks[ORDINARY]
    j = judge_result(task, _good(task))
    assert j.valid and j.labels == ["pass"] * task.n_turns, j.diagnosis.reasons


def _assert_checker_error(j, task, reason: str):
    assert j.labels == ["checker_error"] * task.n_turns, j.labels
    assert j.valid is False and j.reward_valid is False and j.error_type == "checker_error"
    assert all(reason in r for r in j.diagnosis.reasons), j.diagnosis.reasons


# ---------------------------------------------------------------------------------------------- the issue


def test_diagnose_labels_the_hostile_task_checker_error_and_goes_on(tmp_path, tasks, inject):
    """``seal-verl diagnose`` on the issue's file: ten over-limit calls (more restarts than ``MAX_RESTARTS``
    allows) plus an ordinary task. It exits 0, without a traceback, with one row per task."""
    inject("judge_call=overrun#power")
    src, out = tmp_path / "results.json", tmp_path / "labels.jsonl"
    with open(src, "w") as f:
        f.write(json.dumps({"id": HOSTILE, "result": _ten_overruns(tasks[HOSTILE])}) + "\n")
        f.write(json.dumps({"id": ORDINARY, "result": _good(tasks[ORDINARY])}) + "\n")
    env = dict(os.environ, PYTHONPATH=ROOT)
    run = subprocess.run([sys.executable, "-m", "seal_verl.cli", "diagnose", str(src), "--out", str(out),
                          "--no-progress"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "Traceback" not in run.stderr, run.stderr[-3000:]
    with open(out) as f:
        rows = {r["id"]: r for r in map(json.loads, f)}
    assert rows[HOSTILE]["labels"] == ["checker_error"] * tasks[HOSTILE].n_turns
    assert rows[HOSTILE]["error_type"] == "checker_error" and rows[HOSTILE]["valid"] is False
    assert rows[ORDINARY]["labels"] == ["pass"] * tasks[ORDINARY].n_turns and rows[ORDINARY]["valid"] is True


def test_the_same_trajectory_through_the_reward_function_gets_a_score_and_labels(tasks, inject):
    """The reward function on a rollout's trace with the ten calls: a score of 0, checker-error labels and
    the flag; the next rollout scores 1."""
    from reward_fns.seal_reward import compute_score

    inject("judge_call=overrun#power")
    for task_id, result, want in ((HOSTILE, _ten_overruns(tasks[HOSTILE]), 0.0),
                                  (ORDINARY, _good(tasks[ORDINARY]), 1.0)):
        env = _replay(tasks[task_id], result, "python", 10.0)
        env.abandon("Error during execution: recorded by the rollout")  # the rollout's results; none timed out
        out = compute_score("multi_turn_base", None, None,
                            {"seal_trace": env.trace.to_json(), "task_id": task_id}, env="bfcl")
        labels = json.loads(out["seal_labels"])
        assert out["score"] == want
        if want:
            assert labels == ["pass"] * tasks[task_id].n_turns and out["seal_checker_error"] == 0.0
        else:
            assert labels == ["checker_error"] * tasks[task_id].n_turns and out["seal_checker_error"] == 1.0


def test_restarts_exhausted_by_real_calls_under_a_short_limit(tasks):
    """No injection: ten real ``power`` calls, each far over a 0.3 s limit. The judgement restarts until
    ``MAX_RESTARTS`` and ends as a checker error naming that; the replay does not run them again."""
    task = tasks[HOSTILE]
    env = _replay(task, _ten_overruns(task), "python", 0.3)
    j = _judge_replayed(task, env, False, 0.3)
    _assert_checker_error(j, task, "restarted too often")
    recorded = [c.result for a in env.trace.turns[0].attempts for c in a.calls if c.parsed]
    assert all("not run: the verifier could not judge" in r for r in recorded[:10]), recorded[:2]
    _assert_ordinary_judges_normally(tasks)


# ------------------------------------------------------------------------------------- judge worker faults


@pytest.mark.parametrize("spec, reason", [
    ("judge=exit@start#{task}", "ended outside a model call"),           # killed before it began: also on retry
    ("judge=exit@ground_truth#{task}", "ended outside a model call"),
    ("judge=exit@finish#{task}", "ended outside a model call"),
    ("judge=exit@reply#{task}", "ended outside a model call"),           # a reply cut off halfway
    ("judge=close@reply#{task}", "ended outside a model call"),          # the pipe closed, the worker alive
    ("judge=garbage@reply#{task}", "unreadable reply"),
    ("judge=shape@reply#{task}", "the verifier's worker failed"),
    ("judge=memory@build#{task}", "MemoryError"),                        # the real cap, while building state
    ("judge_call=overrun#power", "restarted too often"),                 # more restarts than allowed
], ids=["killed-at-start", "killed-in-ground-truth", "killed-after-calls", "killed-while-replying",
        "pipe-closed", "unpicklable-reply", "wrong-shape-reply", "memory-cap-building-state",
        "restarts-exhausted"])
def test_a_failed_judgement_is_that_tasks_checker_error(tasks, inject, spec, reason):
    task = tasks[HOSTILE]
    inject(spec.format(task=HOSTILE))
    result = _ten_overruns(task) if "power" in spec else _good(task)
    j = judge_result(task, result)
    _assert_checker_error(j, task, reason)
    _assert_ordinary_judges_normally(tasks)  # same pool, same process: goes on


def test_a_judge_killed_during_a_model_call_marks_that_call_and_judges_the_rest(tasks, inject):
    """A worker that ends during a model call (here at the start of ``mean``) is not a checker error: the
    call gets the text of a call that stopped the tool backend, and the judgement finishes on a new worker."""
    task = tasks[HOSTILE]
    inject("judge_call=exit#mean(")
    env = _replay(task, _good(task), "python", 10.0)
    j = _judge_replayed(task, env, False, 10.0)
    assert "checker_error" not in j.labels, j.diagnosis.reasons
    assert j.labels[:4] == ["pass"] * 4 and j.labels[4] != "pass"
    last = [c.result for a in env.trace.turns[4].attempts for c in a.calls if c.parsed]
    assert last == ["Error during execution: call to mean stopped the tool backend"], last
    _assert_ordinary_judges_normally(tasks)


def test_one_overrunning_call_gets_the_time_limit_text(tasks, inject):
    task = tasks[HOSTILE]
    inject("judge_call=overrun#power")
    good = _good(task)
    env = _replay(task, [[f"[{POWER}]"] + good[0]] + good[1:], "python", 10.0)
    j = _judge_replayed(task, env, False, 10.0)
    assert "checker_error" not in j.labels, j.diagnosis.reasons
    first = next(c.result for a in env.trace.turns[0].attempts for c in a.calls if c.parsed)
    assert is_timeout_result(first), first


def test_a_judge_killed_while_idle_is_replaced(tasks):
    """An idle judgement worker killed from outside (the system's OOM killer, an operator) is not reused."""
    sandbox_pool.pool().shutdown()
    _assert_ordinary_judges_normally(tasks)
    idle = list(sandbox_pool.pool()._judges.idle)
    assert idle, "the judgement worker did not go back to the pool"
    for w in idle:
        os.kill(w.process.pid, signal.SIGKILL)
        w.process.join(10)
    try:
        _assert_ordinary_judges_normally(tasks)
        assert all(w not in sandbox_pool.pool()._judges.idle for w in idle)
    finally:
        sandbox_pool.pool().shutdown()


# -------------------------------------------------------------------------------------- tool worker faults


def _rollout(task, calls_per_turn: list, limit: float = 10.0):
    """Play ``calls_per_turn`` (one BFCL python call list per turn) through a real isolated rollout."""
    from env_wrappers.bfcl.environment.env import BFCLEnv

    env = BFCLEnv(task, call_format="python", call_timeout_s=limit)
    env.reset()
    for calls in calls_per_turn:
        if calls:
            env.step(calls)
        env.step("Done.")
    return env


@pytest.mark.parametrize("kind", ["garbage", "shape", "exit"],
                         ids=["unpicklable-reply", "wrong-shape-reply", "killed-while-replying"])
def test_a_tool_worker_reply_fault_costs_that_call_only(tasks, inject, kind):
    """The call whose reply fails gets the text of a call that stopped the tool backend; the rollout goes on
    on a fresh worker with the earlier calls replayed, and the later calls see that state."""
    task = tasks[ORDINARY]
    inject(f"tool={kind}@reply#grep(")
    env = _rollout(task, [turn[0] for turn in _good(task)])
    results = [[c.result for a in t.attempts for c in a.calls if c.parsed] for t in env.trace.turns]
    env.close()
    assert results[1][1] == "Error during execution: call to grep stopped the tool backend", results[1]
    assert not any(str(r).startswith("Error") for r in results[0] + results[1][:1] + results[3]), results
    from env_wrappers.bfcl.environment.environment import BFCLEnvironment

    v = BFCLEnvironment().verify(task, env.trace)
    assert len(v.checks) == task.n_turns and not any(c.checker_error for c in v.checks)


def test_the_memory_cap_hit_while_building_a_rollouts_state_closes_its_tools(tasks, inject):
    """Every worker fails to build the backends under its cap: the rollout's calls get one error text, the
    episode ends normally, and the verifier (another worker kind) still labels it."""
    task = tasks[ORDINARY]
    inject("tool=memory@build")
    env = _rollout(task, [turn[0] for turn in _good(task)])
    results = [c.result for t in env.trace.turns for a in t.attempts for c in a.calls if c.parsed]
    env.close()
    assert results and all("tool backend could not start" in r and "MemoryError" in r for r in results), results[:2]
    from env_wrappers.bfcl.environment.environment import BFCLEnvironment

    v = BFCLEnvironment().verify(task, env.trace)
    # The verifier judges the calls by replaying them in its own worker (as BFCL's checker does): they pass.
    assert len(v.checks) == task.n_turns and not any(c.checker_error for c in v.checks) and v.valid


# ----------------------------------------------------------------------------------------- the result types


def test_a_judgement_cannot_be_half_empty(tasks):
    """The old failure path returned ``(verdict, None, None)``, which its caller read as a verdict."""
    from env_wrappers.bfcl.environment.verifier import Judged

    task = tasks[HOSTILE]
    failed = Judged.checker_error(task, [[] for _ in range(task.n_turns)], "why")
    assert failed.failed and failed.verdict is failed.official and failed.outcomes is None
    assert all(ev.checker_error == "why" for ev in failed.verdict.turns)
    with pytest.raises(TypeError):
        Judged(failed.official, None)


def test_no_reply_in_time_is_a_typed_timeout_and_a_dead_worker_is_not():
    """A tool worker that does not answer raises ``WorkerTimeout``; the caller tells it from a worker that ended
    by its type, not by the wording of a message."""
    w = sandbox_pool.pool().acquire(None)
    try:
        with pytest.raises(WorkerTimeout):
            w.receive(0.05)  # an idle worker was asked nothing: no reply can come
        os.kill(w.process.pid, signal.SIGKILL)
        w.process.join(10)
        with pytest.raises(WorkerDied) as err:
            w.receive(5.0)
        assert not isinstance(err.value, WorkerTimeout)
    finally:
        w.kill()
