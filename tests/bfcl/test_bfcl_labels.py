"""Psi on real BFCL tasks: one hand-made case per label, exact label sequences, in all three result forms."""

import pytest

from env_wrappers.bfcl.environment.examples import examples
from env_wrappers.bfcl.environment.judge import judge_result, judge_trace, replay_result
from env_wrappers.bfcl.environment import verifier as verifier_mod

EXPECTED = {
    "pass": (True, ["pass", "pass", "pass", "pass"]),
    "invalid_tool_call": (False, ["pass", "invalid_tool_call", "pass", "pass"]),
    "argument_mismatch_schema": (False, ["argument_mismatch", "pass", "pass", "pass"]),
    "argument_mismatch_value": (False, ["pass", "argument_mismatch", "pass", "pass"]),
    "state_mismatch": (False, ["state_mismatch", "pass", "pass", "pass"]),
    "recovery_failure": (False, ["pass", "recovery_failure", "pass", "pass"]),
    "missing_tool_call": (False, ["pass", "pass", "missing_tool_call", "pass"]),
    "response_mismatch": (False, ["pass", "response_mismatch", "pass", "pass"]),
    # The official score skips abstention turns: the task passes, the turn is still labelled spurious.
    "spurious_tool_call": (True, ["pass", "pass", "spurious_tool_call", "pass", "pass"]),
    "hidden_function_called": (False, ["pass", "invalid_tool_call", "pass", "pass", "pass"]),
}


@pytest.mark.parametrize("fmt", ["json", "python", "fc"])
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_label_sequence(tasks, fmt, name):
    task_id, result = examples(fmt)[name]
    j = judge_result(tasks[task_id], result)
    valid, labels = EXPECTED[name]
    assert j.labels == labels, j.diagnosis.reasons
    assert j.valid is valid


def test_strict_abstention_fails_spurious_task(tasks):
    task_id, result = examples("json")["spurious_tool_call"]
    j = judge_result(tasks[task_id], result, strict_abstention=True)
    assert j.valid is True  # official semantics unchanged
    assert j.reward_valid is False  # the training reading fails it
    assert j.labels[2] == "spurious_tool_call"


def test_correct_abstention_is_pass_and_counted_as_abstention(tasks):
    task_id, result = examples("json")["pass"]
    task = tasks["multi_turn_miss_func_0"]
    from env_wrappers.bfcl.environment.perturb import ground_truth_steps, to_result

    j = judge_result(task, to_result(task, ground_truth_steps(task), "json"))
    assert j.labels == ["pass"] * 5
    assert j.diagnosis.abstention == [False, False, True, False, False]
    prof = j.diagnosis.profile()
    assert prof["correct_abstention"] == pytest.approx(0.2)
    assert prof["pass"] == pytest.approx(0.8)


def test_checker_error_label(tasks, monkeypatch):
    task_id, result = examples("json")["pass"]
    task = tasks[task_id]
    trace = replay_result(task, result)
    calls = {"n": 0}
    real = verifier_mod._compare

    def flaky(model, gt):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("state comparison exploded")
        return real(model, gt)

    monkeypatch.setattr(verifier_mod, "_compare", flaky)
    from env_wrappers.bfcl.sandbox import pool as sandbox_pool

    sandbox_pool.pool().shutdown()  # judgements run in forked workers: these are forked with the patch
    try:
        j = judge_trace(task, trace)
    finally:
        sandbox_pool.pool().shutdown()  # and none of them judges for a later test
    assert j.labels == ["pass", "checker_error", "pass", "pass"]
    assert j.valid is False and j.error_type == "checker_error"
    assert j.diagnosis.profile()["pass"] == pytest.approx(1.0)  # checker errors leave the profile


def test_no_contamination_after_early_failure(tasks):
    """A wrong first turn must not turn every later (correct) turn into state_mismatch."""
    task = tasks["multi_turn_base_0"]
    from env_wrappers.bfcl.environment.perturb import to_result

    g = [[list(x)] for x in task.ground_truth]
    traj = [[["cd(folder='document')", "mkdir(dir_name='tmp2')"]], g[1], g[2], g[3]]
    j = judge_result(task, to_result(task, traj, "python"))
    assert j.labels[0] != "pass"
    assert j.labels[1:] == ["pass", "pass", "pass"]


def test_deterministic(tasks):
    for name in EXPECTED:
        task_id, result = examples("python")[name]
        a = judge_result(tasks[task_id], result)
        b = judge_result(tasks[task_id], result)
        assert (a.labels, a.valid, a.diagnosis.reasons) == (b.labels, b.valid, b.diagnosis.reasons)
