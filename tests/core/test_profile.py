"""Profiles p_j(z) and the step profile C_t (``seal_verl/core/profile.py``)."""

import json
import math

import pytest

from seal_verl.core import taxonomy as tx
from seal_verl.core.profile import StepProfile, TrajectoryRecord, aggregate, ema_update, trajectory_profile

P, AM, SM, IV, MT, SP, CE = (
    tx.PASS,
    tx.ARGUMENT_MISMATCH,
    tx.STATE_MISMATCH,
    tx.INVALID_TOOL_CALL,
    tx.MISSING_TOOL_CALL,
    tx.SPURIOUS_TOOL_CALL,
    tx.CHECKER_ERROR,
)


def test_profile_shares_exclude_checker_errors_and_split_abstention():
    prof = trajectory_profile([P, AM, CE, P], [False, False, False, True])
    assert set(prof) == set(tx.PROFILE_KEYS)
    assert prof[tx.PASS] == pytest.approx(1 / 3)
    assert prof[AM] == pytest.approx(1 / 3)
    assert prof[tx.CORRECT_ABSTENTION] == pytest.approx(1 / 3)
    assert all(prof[k] == 0.0 for k in tx.PROFILE_KEYS if k not in (P, AM, tx.CORRECT_ABSTENTION))
    assert sum(prof.values()) == pytest.approx(1.0)


def test_spurious_on_abstention_turn():
    prof = trajectory_profile([SP, MT], [True, False])
    assert prof[SP] == 0.5 and prof[MT] == 0.5 and prof[tx.CORRECT_ABSTENTION] == 0.0


@pytest.mark.parametrize("labels,abst", [([], []), ([CE], [False]), ([CE, CE], [True, False])])
def test_no_labelled_turn_gives_all_zeros(labels, abst):
    prof = trajectory_profile(labels, abst)
    assert set(prof) == set(tx.PROFILE_KEYS)
    assert all(v == 0.0 for v in prof.values())


@pytest.mark.parametrize(
    "labels,abst,match",
    [
        (["pas"], [False], "unknown SEAL label"),
        ([tx.CORRECT_ABSTENTION], [True], "unknown SEAL label"),  # a profile key, not a Psi label
        ([P, P], [False], "differ in length"),
        ([SM], [True], "abstention turn"),
        ([SP], [False], "non-abstention"),
    ],
)
def test_profile_rejects_bad_input(labels, abst, match):
    with pytest.raises(ValueError, match=match):
        trajectory_profile(labels, abst)


def test_record_validates_at_construction():
    with pytest.raises(ValueError, match="unknown SEAL label"):
        TrajectoryRecord("multi_turn_base", ["oops"], [False], 1.0)
    with pytest.raises(ValueError, match="finite"):
        TrajectoryRecord("multi_turn_base", [P], [False], float("nan"))


def _records():
    return [
        # base: 3 labelled turns + 1 checker error, success
        TrajectoryRecord("base", [P, P, P, CE], [False] * 4, 1.0),
        # base: failure with argument_mismatch twice and a missing call
        TrajectoryRecord("base", [P, AM, AM, MT], [False] * 4, 0.0),
        # miss_param: spurious on the abstention turn, otherwise pass
        TrajectoryRecord("miss_param", [P, SP, P], [False, True, False], 0.0),
        # miss_param: correct abstention, success
        TrajectoryRecord("miss_param", [P, P, AM], [False, True, False], 1.0),
    ]


def test_aggregate_against_hand_computation():
    sp = aggregate(_records())
    assert sp.n_trajectories == 4
    assert sp.n_turns == 13 and sp.n_checker_errors == 1
    assert sp.counts[P] == 3 + 1 + 2 + 1
    assert sp.counts[AM] == 3 and sp.counts[MT] == 1 and sp.counts[SP] == 1
    assert sp.counts[tx.CORRECT_ABSTENTION] == 1
    assert sp.prevalence[AM] == pytest.approx(3 / 13)
    assert sp.prevalence[P] == pytest.approx(7 / 13)
    assert sum(sp.prevalence.values()) == pytest.approx(1.0)
    assert sp.trajectories_with[AM] == 2 and sp.trajectories_with[P] == 4 and sp.trajectories_with[SP] == 1
    assert sp.mean_reward_with[AM] == pytest.approx(0.5)
    assert sp.mean_reward_with[SP] == pytest.approx(0.0)
    assert sp.mean_reward_with[MT] == pytest.approx(0.0)
    assert sp.mean_reward_with[tx.STATE_MISMATCH] is None
    assert sp.success_rate == pytest.approx(0.5)
    assert sp.n_by_category == {"base": 2, "miss_param": 2}
    assert sp.success_rate_by_category == {"base": 0.5, "miss_param": 0.5}
    assert sp.prevalence_by_category["base"][AM] == pytest.approx(2 / 7)
    assert sp.prevalence_by_category["miss_param"][AM] == pytest.approx(1 / 6)
    assert sp.counts_by_category["miss_param"][SP] == 1


def test_aggregate_success_threshold():
    recs = [TrajectoryRecord("c", [P], [False], 0.6), TrajectoryRecord("c", [P], [False], 1.0)]
    assert aggregate(recs).success_rate == 0.5
    assert aggregate(recs, success_threshold=0.5).success_rate == 1.0


def test_aggregate_empty():
    sp = aggregate([])
    assert sp.n_trajectories == 0 and sp.n_turns == 0 and sp.success_rate == 0.0
    assert all(v == 0.0 for v in sp.prevalence.values())
    assert set(sp.prevalence) == set(tx.PROFILE_KEYS)


def test_step_profile_json_round_trip():
    sp = aggregate(_records())
    text = json.dumps(sp.to_dict(), allow_nan=False)
    back = StepProfile.from_dict(json.loads(text))
    assert back == sp


def test_step_profile_from_dict_rejects_unknown_keys():
    d = aggregate(_records()).to_dict()
    d["surprise"] = 1
    with pytest.raises(ValueError, match="unknown StepProfile keys"):
        StepProfile.from_dict(d)


def test_ema_update():
    new = {"a": 1.0, "b": 0.0}
    first = ema_update(None, new, 0.25)
    assert first == new and first is not new
    prev = {"a": 0.0, "b": 1.0, "c": 0.5}
    out = ema_update(prev, {"a": 1.0, "b": 0.0, "d": 0.3}, 0.25)
    assert out["a"] == pytest.approx(0.25)
    assert out["b"] == pytest.approx(0.75)
    assert out["c"] == 0.5  # no new evidence: kept
    assert out["d"] == 0.3  # first evidence: taken as is
    assert prev == {"a": 0.0, "b": 1.0, "c": 0.5}  # input untouched
    assert ema_update(prev, {"a": 0.7}, 1.0)["a"] == 0.7


@pytest.mark.parametrize("beta", [0.0, -0.1, 1.5, math.nan])
def test_ema_update_rejects_bad_beta(beta):
    with pytest.raises(ValueError, match="beta"):
        ema_update({"a": 0.0}, {"a": 1.0}, beta)


def test_profile_keys_name_turns_as_the_metrics_do():
    """Run-folder traces carry the turns in the metrics' vocabulary: a pass on an abstention turn is a correct
    abstention there (Psi's label stays ``pass``)."""
    from seal_verl.core.profile import profile_keys

    assert profile_keys(["pass", "pass", "spurious_tool_call", "checker_error"], [False, True, True, False]) == [
        "pass", "correct_abstention", "spurious_tool_call", None]
