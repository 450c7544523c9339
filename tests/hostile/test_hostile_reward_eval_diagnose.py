"""Hostile input on the surfaces added since the second round: the reward function's ``extra_info`` and
solution string, ``eval``'s scoring of a result it cannot judge, ``diagnose`` writing over its own input, and
the ledger environment's tool calls. Each ends as a labelled failure or one clear error, never a traceback.
"""

from __future__ import annotations

import json
import os

import pytest

from env_wrappers.bfcl.environment.judge import _replay
from env_wrappers.bfcl.environment.perturb import ground_truth_steps, to_result
from env_wrappers.bfcl.environment.tasks import load_tasks
from env_wrappers.bfcl.sandbox import faults
from env_wrappers.bfcl.sandbox import pool as sandbox_pool
from reward_fns.seal_reward import compute_score
from seal_verl.cli import main

TASK = "multi_turn_base_0"


@pytest.fixture(scope="module")
def tasks():
    return load_tasks([TASK, "multi_turn_base_15"])


@pytest.fixture(scope="module")
def trace_dict(tasks):
    task = tasks[TASK]
    env = _replay(task, to_result(task, ground_truth_steps(task), "python"), "python", None)
    env.flush()
    return env.trace.to_dict()


def _with(d: dict, change) -> str:
    d = json.loads(json.dumps(d))
    change(d)
    return json.dumps(d)


# ------------------------------------------------------------------------------------- the reward function


BAD_TRACES = {
    "turn-not-an-object": lambda d: _with(d, lambda t: t["turns"].__setitem__(0, "x")),
    "cues-not-a-mapping": lambda d: _with(d, lambda t: t.__setitem__("meta", {"cues": 5})),
    "cue-tokens-not-a-number": lambda d: _with(d, lambda t: t.__setitem__("meta", {"cues": {"tokens": "many"}})),
    "cue-tokens-nan": lambda d: _with(d, lambda t: t.__setitem__("meta", {"cues": {"tokens": float("nan")}})),
    "nesting-past-the-parser": lambda d: "[" * 100_000 + "]" * 100_000,
    "bytes-not-utf8": lambda d: b"\xff\xfe{",
}


@pytest.mark.parametrize("name", sorted(BAD_TRACES))
def test_a_malformed_trace_is_one_error_naming_it(trace_dict, name):
    """Each of these raised AttributeError, RecursionError or an unnamed ValueError from deep inside."""
    with pytest.raises(ValueError) as err:
        compute_score("multi_turn_base", "", None, {"seal_trace": BAD_TRACES[name](trace_dict), "task_id": TASK},
                      env="bfcl")
    assert str(err.value).startswith("seal_reward: extra_info['seal_trace'] is not a valid trace"), err.value
    assert len(str(err.value)) < 600


@pytest.mark.parametrize("solution", ["\x00" * 1000, "\ud800 unpaired", "x" * 20_000_000,
                                      "<tool_call>{\"name\": \"rm\"}</tool_call>" * 10_000])
def test_a_hostile_solution_string_does_not_change_the_grade(trace_dict, solution):
    """The grade comes from the trace; the decoded text verl passes along is never read."""
    out = compute_score("multi_turn_base", solution, None, {"seal_trace": json.dumps(trace_dict), "task_id": TASK},
                        env="bfcl")
    assert out["score"] == 1.0 and json.loads(out["seal_labels"]) == ["pass"] * 4


def test_cue_tokens_still_read(trace_dict):
    raw = _with(trace_dict, lambda t: t.__setitem__("meta", {"cues": {"tokens": 12, "n": 2}}))
    out = compute_score("multi_turn_base", "", None, {"seal_trace": raw, "task_id": TASK}, env="bfcl")
    assert out["seal_cue_tokens"] == 12.0


# ------------------------------------------------------------------------------------------- eval scoring


def test_eval_scoring_labels_an_unjudgeable_result_and_scores_the_rest(tmp_path, tasks, monkeypatch):
    """``seal-verl eval``'s scoring: a result whose judgement fails (the judge worker ends before it replies)
    is that task's checker_error row; the other task is scored; both are in labels.jsonl."""
    from env_wrappers.bfcl.evaluation.config import EvalConfig
    from env_wrappers.bfcl.evaluation.result_files import ResultStore
    from env_wrappers.bfcl.evaluation.scoring import score

    hostile, ordinary = tasks["multi_turn_base_15"], tasks[TASK]
    cfg = EvalConfig(base_url="http://127.0.0.1:9", model="m", out=str(tmp_path), mode="prompt",
                     call_format="python")
    store = ResultStore(str(tmp_path), "m")
    for t in (hostile, ordinary):
        store.append(t, to_result(t, ground_truth_steps(t), "python"))
    monkeypatch.setenv(faults.ENV_VAR, f"judge=exit@finish#{hostile.id}")
    sandbox_pool.pool().shutdown()
    try:
        summary = score(cfg, [hostile, ordinary], store, "python")
    finally:
        monkeypatch.delenv(faults.ENV_VAR)
        sandbox_pool.pool().shutdown()
    with open(os.path.join(tmp_path, "labels.jsonl")) as f:
        rows = {r["id"]: r for r in map(json.loads, f)}
    assert rows[hostile.id]["labels"] == ["checker_error"] * hostile.n_turns
    assert rows[hostile.id]["error_type"] == "checker_error"
    assert rows[TASK]["valid"] is True and rows[TASK]["labels"] == ["pass"] * ordinary.n_turns
    assert summary.scores["categories"]["multi_turn_base"]["n"] == 2


# ------------------------------------------------------------------------------------------------ diagnose


@pytest.mark.parametrize("option", ["--out", "--plot"])
@pytest.mark.parametrize("via_link", [False, True], ids=["same-path", "symlink"])
def test_diagnose_refuses_to_write_over_its_input(tmp_path, capsys, option, via_link):
    """With ``--force``, ``--out`` naming the result file truncated it before it was read: the input was lost
    and the run ended with "no valid result entries"."""
    src = tmp_path / "r.json"
    line = json.dumps({"id": TASK, "result": "Error during inference: timeout"}) + "\n"
    src.write_text(line)
    target = src
    if via_link:
        target = tmp_path / "link.json"
        os.symlink(src, target)
    rc = main(["diagnose", str(src), option, str(target), "--force", "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and "is one of the result files read" in err, err
    assert src.read_text() == line


# ------------------------------------------------------------------------------------------- ledger calls


def _ledger_labels(message: str):
    from env_wrappers.ledger.environment import LedgerEnvironment
    from seal_verl.core.diagnosis import diagnose

    env = LedgerEnvironment()
    task = env.load_task(env.task_ids("train")[0])
    ep = env.start(task, call_format="json")
    ep.reset()
    ep.step(message)
    while not ep.done:
        ep.step("Done.")
    v = env.verify(task, ep.trace)
    return task, ep.trace, diagnose(ep.trace, v.checks).labels


def _block(call) -> str:
    return "<tool_call>\n" + (call if isinstance(call, str) else json.dumps(call)) + "\n</tool_call>"


@pytest.mark.parametrize("message", [
    _block({"name": "deposit", "arguments": {"account": "alice", "amount": -5}}),
    _block({"name": "deposit", "arguments": {"account": "alice", "amount": 10 ** 1900}}),
    _block('{"name": "deposit", "arguments": {"account": "alice", "amount": 1e400}}'),
    _block('{"name": "deposit", "arguments": {"account": "alice", "amount": NaN}}'),
    _block({"name": "deposit", "arguments": {"account": "\u202e\U0001F600alice", "amount": 1}}),
    _block('{"name": "get_balance", "arguments": {"account": "\\ud800"}}'),
    _block("[" * 990 + "]" * 990),
    _block({"name": "deposit", "arguments": {"account": "a" * 10_000_000, "amount": 1}}),
    _block({"name": "deposit", "arguments": {"account": "alice", "amount": 1}}) * 3000,
    _block({"name": "__init__", "arguments": {"balances": {}}}),
], ids=["negative", "huge", "inf", "nan", "unicode", "surrogate", "deep", "10MB", "3000-calls", "dunder"])
def test_hostile_ledger_calls_are_labelled(message):
    """A guard (these held before this round): every hostile call gets a label and the trace stays small
    where the call was refused."""
    task, trace, labels = _ledger_labels(message)
    assert len(labels) == len(task.turns) and labels[0] != "pass"
    assert len(json.dumps(trace.to_dict())) < 4_000_000
