"""The warm starts' training rows come from the real agent loop: the scripted ground truth of a task, rendered
under each cue state asked for, passes and gives one row per state with the cues of that state in its text.

Both warm starts (BFCL's and the ledger's) render through one function,
``seal_verl.models.warm_start.render.render_under_cue_states``.
"""

from __future__ import annotations

import json

import pytest

from seal_verl.models.warm_start import bfcl_cpu as WS
from seal_verl.models.warm_start import ledger as ledger_ws


@pytest.fixture(scope="module")
def base_model(tmp_path_factory):
    from seal_verl.dry_run import tiny_model

    return tiny_model(str(tmp_path_factory.mktemp("tiny") / "tiny-random"))


def test_bfcl_rows_of_the_ground_truth_pass_under_no_cue(base_model, tmp_path):
    with open(WS.DEFAULT_SPLIT) as f:
        task = json.load(f)["train"][0]
    rows = WS.render_rows(base_model, [task], str(tmp_path))
    assert [(r["task_id"], r["interface"]) for r in rows] == [(task, "none")]
    assert rows[0]["trained_tokens"] > 0


def test_ledger_rows_come_under_no_cue_and_under_every_cue(base_model, tmp_path):
    from seal_verl import dry_run as dr
    task = dr.environment(ledger_ws.ENV).task_ids("train")[0]
    rows = ledger_ws.render_rows(base_model, [task], str(tmp_path))
    every = ",".join(ledger_ws.WARM_KINDS)  # every kind the ledger run switches on
    assert [(r["task_id"], r["interface"]) for r in rows] == [(task, "none"), (task, every)]
    # proactive cues sit in the first prompt: the cued row's prompt is the longer one
    assert rows[1]["prompt_tokens"] > rows[0]["prompt_tokens"]


def test_both_warm_starts_grade_sampled_rollouts_with_the_real_reward(base_model, tmp_path):
    """The pass rates that stop each warm start: every task gets its samples, each with a score and labels."""
    from seal_verl import dry_run as dr
    with open(WS.DEFAULT_SPLIT) as f:
        bfcl_task = json.load(f)["train"][0]
    ledger_task = dr.environment(ledger_ws.ENV).task_ids("train")[0]
    (tmp_path / "b").mkdir()
    (tmp_path / "l").mkdir()
    for rates, task in ((WS.pass_rates(base_model, [bfcl_task], 2, 0, str(tmp_path / "b")), bfcl_task),
                        (ledger_ws.pass_rates(base_model, [ledger_task], 1, 0, str(tmp_path / "l"), greedy=True),
                         ledger_task)):
        assert list(rates) == [task]
        r = rates[task]
        assert len(r["scores"]) == len(r["labels"]) >= 1
        assert r["pass_rate"] == sum(r["scores"]) / len(r["scores"])
        # whatever the model wrote: a score in [0, 1] and the labels Psi gave each rollout
        assert all(0.0 <= s <= 1.0 for s in r["scores"]) and all(r["labels"]), r
