"""The ledger warm start's mixed stage (seal_verl.models.warm_start.ledger_mix): every training task gets a failing
trajectory whose labels the real verifier and Psi confirm, the kinds are spread over the tasks, and the rows come
from verl's real agent loop under both cue states with the planned labels, so cue text says nothing about
which behaviour is right."""

from __future__ import annotations

from collections import Counter

import pytest

from seal_verl.models.warm_start import ledger as LEDGER
from seal_verl.models.warm_start import ledger_mix as MIX


@pytest.fixture(scope="module")
def train_ids():
    from seal_verl import dry_run as dr
    return dr.environment("ledger").task_ids("train")


def test_every_training_task_gets_a_verified_failing_plan_of_a_mixed_kind(train_ids):
    plans = MIX.failure_plans(train_ids)
    assert list(plans) == train_ids
    kinds = Counter(p.target for p in plans.values())
    assert set(kinds) == set(MIX.MIX_KINDS) and min(kinds.values()) >= len(train_ids) // 8, kinds
    for tid, plan in plans.items():
        # the failing turns carry the plan's kind, the others pass: the verifier confirmed it offline
        assert plan.target in plan.labels and set(plan.labels) <= {plan.target, "pass"}, (tid, plan.labels)
    # a task that cannot show its kind takes the next: with no deposit or withdraw (transfer_ask, sweep) there is
    # no opposite state change to script, so those families never get state_mismatch, yet every task has a plan
    from seal_verl import dry_run as dr
    env = dr.environment("ledger")
    no_opposite = [t for t in train_ids if env.load_task(t).category in ("transfer_ask", "sweep")]
    assert no_opposite and all(plans[t].target != "state_mismatch" for t in no_opposite)


@pytest.mark.parametrize("kind", MIX.MIX_KINDS)
def test_a_kind_that_no_task_can_show_is_never_planned(kind, train_ids):
    plans = MIX.failure_plans(train_ids[:6], kinds=(kind,))
    assert all(p.target == kind for p in plans.values())


def test_failing_rows_come_from_the_agent_loop_with_the_planned_labels(train_ids, tmp_path):
    from seal_verl.dry_run import tiny_model
    from seal_verl.models.warm_start.ledger import WARM_KINDS

    base = tiny_model(str(tmp_path / "tiny-random"))
    plans = MIX.failure_plans(train_ids[:3])
    rows, dropped = MIX.render_failure_rows(base, plans, str(tmp_path))
    assert dropped == []
    assert [(r["task_id"], r["interface"]) for r in rows] == [
        (t, state) for t in train_ids[:3] for state in ("none", ",".join(WARM_KINDS))]
    for r in rows:
        assert r["failure"] == plans[r["task_id"]].target
        assert len(r["labels"]) == len(r["input_ids"]) and r["trained_tokens"] > 0
        # only generated tokens are trained: the prompt is masked
        assert all(x == -100 for x in r["labels"][: r["prompt_tokens"]])
    # proactive cues sit in the first prompt under the cued state
    assert rows[1]["prompt_tokens"] > rows[0]["prompt_tokens"]


@pytest.mark.parametrize("stage", [MIX, LEDGER], ids=["ledger_mix", "ledger"])
def test_a_base_that_is_not_a_model_folder_is_one_line_not_a_traceback(stage, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        stage.main([str(tmp_path / "out"), "--base", str(tmp_path / "missing")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "not a model folder (no config.json)" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


#: SHA-256 of the mixed stage's training rows (every training task's ground truth, then its failing plan, each under
#: no cue and every kind the ledger run switches on) rendered with the tiny tokenizer: the rows the shipped ledger
#: model was trained on. A change here changes every ledger warm start built after it (and its cache key); update it
#: only on purpose. The rows name their cue state; the kind the shipped model knew as ``tool_affordance`` is now
#: ``act_with_tools`` (the same sentence), so the digest is taken with the earlier name. Last changed when the
#: ledger began to answer a malformed call with an error result instead of ending the turn (the malformed-call rows
#: now hold that result); the shipped model was trained on the rows before.
MIXED_ROWS_SHA256 = "cb5e91553eda4c8be1d78438777f09e2b8dae5e031ce0fb3c186b0a3b3b3f038"


def test_the_mixed_stage_trains_on_the_rows_it_always_did(train_ids, tmp_path):
    import hashlib
    import json

    from seal_verl.dry_run import tiny_model

    base = tiny_model(str(tmp_path / "tiny-random"))
    rows = LEDGER.render_rows(base, train_ids, str(tmp_path))
    failing, dropped = MIX.render_failure_rows(base, MIX.failure_plans(train_ids), str(tmp_path))
    assert dropped == [] and len(rows) == len(failing) == 2 * len(train_ids)
    named = [r["interface"].replace("act_with_tools", "tool_affordance") for r in rows + failing]
    digest = hashlib.sha256(json.dumps([[r["task_id"], n, r.get("failure"), r["input_ids"], r["labels"]]
                                        for r, n in zip(rows + failing, named)]).encode()).hexdigest()
    assert digest == MIXED_ROWS_SHA256
