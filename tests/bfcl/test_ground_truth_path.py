"""The verifier runs a task's ground truth once and keeps it: every later judgement of the task compares the
trajectory with the kept per-turn results and state copies, and gets the verdict a fresh ground-truth run
gives. The replay of a result file gets its calls' schema facts while the judge worker runs the calls.
"""

from __future__ import annotations

import dataclasses

import pytest

from env_wrappers.bfcl.tools import backends as backends_mod
from env_wrappers.bfcl.environment import verifier as verifier_mod
from env_wrappers.bfcl.environment.judge import _judge_replayed, _replay, judge_result
from env_wrappers.bfcl.environment.perturb import KINDS, ground_truth_steps, perturb, to_result
from env_wrappers.bfcl.environment.tasks import load_tasks
from env_wrappers.bfcl.environment.verifier import _public, ground_truth_path, verify

TASKS = ["multi_turn_base_0", "multi_turn_base_15", "multi_turn_long_context_3", "multi_turn_miss_param_7"]


@pytest.fixture(scope="module")
def tasks():
    return load_tasks(TASKS)


@pytest.fixture
def constructions(monkeypatch):
    """Counts the backend instance sets built from here on."""
    count = {"n": 0}
    real = backends_mod.Backends.__init__

    def counting(self, *args, **kwargs):
        count["n"] += 1
        real(self, *args, **kwargs)

    monkeypatch.setattr(backends_mod.Backends, "__init__", counting)
    return count


def test_a_task_judged_again_runs_its_ground_truth_once(tasks, constructions):
    task = dataclasses.replace(tasks["multi_turn_base_0"])  # a new object: nothing kept for it yet
    decoded = ground_truth_steps(task)
    assert verify(task, decoded, call_timeout_s=None).valid
    first = constructions["n"]
    assert first == 2  # the model path and the ground-truth path
    for _ in range(3):
        assert verify(task, decoded, call_timeout_s=None).valid
    assert constructions["n"] - first == 3  # one model path each, no ground-truth path


def test_the_kept_ground_truth_equals_a_fresh_run_after_other_judgements(tasks):
    """Judgements that fail (so that counterfactual copies run) leave the kept copies as a fresh ground-truth
    run has them, and every later verdict equals the verdict of a process that kept nothing."""
    for task in tasks.values():
        decoded = ground_truth_steps(task)
        variants = [decoded] + [p[0] for p in (perturb(task, kind, 0) for kind in KINDS) if p is not None]
        kept = [verify(task, d, call_timeout_s=None) for d in variants]
        fresh_gt = backends_mod.Backends(task.involved_classes, task.initial_config, task.long_context, None)
        for k, turn in enumerate(ground_truth_path(task).turns):
            results = [fresh_gt.execute(c)[0] for c in task.ground_truth[k]]
            assert turn == (results, _public(fresh_gt)), (task.id, k)
        verifier_mod._GT_PATHS.clear()
        for d, v in zip(variants, kept):
            again = verify(task, d, call_timeout_s=None)
            assert (again.valid, again.error_type, again.failed_turn) == (v.valid, v.error_type, v.failed_turn)
            assert [(e.state_diff, e.missing_results, e.model_results) for e in again.turns] == \
                   [(e.state_diff, e.missing_results, e.model_results) for e in v.turns], task.id


def test_kept_ground_truth_paths_are_bounded(tasks, monkeypatch):
    monkeypatch.setattr(verifier_mod, "MAX_GROUND_TRUTH_PATHS", 2)
    verifier_mod._GT_PATHS.clear()
    for task in tasks.values():
        verify(task, ground_truth_steps(task), call_timeout_s=None)
        assert len(verifier_mod._GT_PATHS) <= 2
    kept = [ref() for ref, _ in verifier_mod._GT_PATHS.values()]
    assert kept == [tasks[TASKS[-2]], tasks[TASKS[-1]]]  # the most recently judged


def test_a_task_whose_ground_truth_fails_gives_checker_errors_from_that_turn(tasks, monkeypatch):
    task = dataclasses.replace(tasks["multi_turn_base_0"])
    real = backends_mod.Backends.execute
    bad = task.ground_truth[1][0]

    def failing(self, call):
        if call == bad:
            raise RuntimeError("backend exploded")
        return real(self, call)

    monkeypatch.setattr(backends_mod.Backends, "execute", failing)
    v = verify(task, ground_truth_steps(task), call_timeout_s=None)
    assert not v.valid and v.failed_turn == 1 and v.error_type == verifier_mod.CHECKER_ERROR
    assert not v.turns[0].checker_error
    assert all("backend exploded" in e.checker_error for e in v.turns[1:] if e.gt_calls or e.index == 1)


def test_a_replay_gets_its_schema_facts_while_the_worker_judges(tasks):
    """A deferred replay leaves its calls' schema facts for later; the judgement gives them (while the worker
    runs the calls), so a judged result has them as an eagerly recorded one does."""
    task = tasks["multi_turn_base_15"]
    decoded = ground_truth_steps(task)
    first = decoded[0][0][0]
    name = first.split("(", 1)[0]
    decoded[0][0][0] = f"{name}(no_such_argument=1)"  # a schema error on a known, offered function
    result = to_result(task, decoded, "python")

    env = _replay(task, result, "python", 10.0)
    rec = env.trace.turns[0].attempts[0].calls[0]
    assert rec.available and (rec.known, rec.schema_errors) == (False, [])  # not yet given

    _judge_replayed(task, env, False, 10.0)
    assert rec.known and rec.available and rec.schema_errors, rec
    assert rec.result is not None  # settled from the worker's outcomes

    eager = judge_result(task, result, call_format="python")
    assert eager.labels[0] == "argument_mismatch", eager.labels  # "invalid_tool_call" without the facts


def test_meanwhile_runs_once_even_when_the_judgement_restarts(tasks):
    """``verify_isolated`` calls its ``meanwhile`` work once, after the first request, also when a model
    call overran and the judgement started again on a new worker."""
    from env_wrappers.bfcl.environment.isolated_verify import verify_isolated
    from env_wrappers.bfcl.tools.backends import is_timeout_result

    task = tasks["multi_turn_base_15"]
    decoded = ground_truth_steps(task)
    decoded[0] = [["power(base=10, exponent=30000000)"]] + decoded[0]
    calls = []
    official, _, outcomes = verify_isolated(task, decoded, [True] * len(decoded), False, 1.0, None, True,
                                            meanwhile=lambda: calls.append(1))
    assert calls == [1]
    assert is_timeout_result(outcomes[0][0][0]), outcomes[0][0]
