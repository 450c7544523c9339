"""Cue triggers read each label's rate among the turns where that label can occur (``seal_verl/core/interface.py``).

Abstention turns (empty ground truth) are the only turns that can carry ``spurious_tool_call``; they are about
12% of the training split's turns. A trigger on the share of *all* turns could therefore never switch the
``ask_or_abstain`` cue on at the default on-threshold 0.15, whatever the model did. These tests feed the real
turn structure of the SEAL split's 400 training tasks through the closed loop (``closed_loop_step`` ->
``evolve``) and show that every cue kind switches on once its trigger label is common where it can occur.
"""

from __future__ import annotations

import pytest

from seal_verl.core import taxonomy as tx
from seal_verl.core.interface import DEFAULT_TRIGGERS, InterfaceConfig, active_kinds
from seal_verl.core.loop import SealSwitches, closed_loop_step, initial
from seal_verl.core.profile import TrajectoryRecord, aggregate
from seal_verl.core.weighting import WeightingConfig

ON = InterfaceConfig().on_threshold  # the recipe's default, 0.15


@pytest.fixture(scope="module")
def train_turns():
    """(category, abstention flags per turn) of every training task of the shipped SEAL split."""
    from env_wrappers.bfcl.environment.tasks import load_split, load_tasks

    tasks = load_tasks(load_split()["train"])
    return [(t.category, [not gt for gt in t.ground_truth]) for t in tasks.values()]


def _records(train_turns, label: str, every: int) -> list[TrajectoryRecord]:
    """Every training task once; ``label`` on every ``every``-th turn where it can occur, ``pass`` elsewhere."""
    on_abstention = label == tx.SPURIOUS_TOOL_CALL
    out, k = [], 0
    for category, abstention in train_turns:
        labels = []
        for abst in abstention:
            if abst == on_abstention:
                labels.append(label if k % every == 0 else tx.PASS)
                k += 1
            else:
                labels.append(tx.PASS)
        out.append(TrajectoryRecord(category, labels, abstention, 0.0 if label in labels else 1.0))
    return out


def test_abstention_turns_are_too_rare_for_a_share_of_all_turns(train_turns):
    """Why the old trigger could never fire: abstention turns are below the on-threshold as a share of all."""
    n = sum(len(a) for _, a in train_turns)
    n_abst = sum(sum(a) for _, a in train_turns)
    assert 0.08 < n_abst / n < ON, (n_abst, n)
    everything_spurious = _records(train_turns, tx.SPURIOUS_TOOL_CALL, every=1)
    sp = aggregate(everything_spurious)
    assert sp.prevalence[tx.SPURIOUS_TOOL_CALL] < ON          # share of all turns: at most ~12%
    assert sp.rate[tx.SPURIOUS_TOOL_CALL] == pytest.approx(1.0)  # share of abstention turns: all of them
    assert sp.n_abstention_turns == n_abst


@pytest.mark.parametrize("kind", sorted(DEFAULT_TRIGGERS.values()))
def test_every_cue_kind_switches_on_from_the_training_split(train_turns, kind):
    trigger = {k: label for label, k in DEFAULT_TRIGGERS.items()}[kind]
    records = _records(train_turns, trigger, every=5)  # 20% of the turns where the trigger can occur
    cfg = InterfaceConfig(ema_beta=1.0)
    sw = SealSwitches()
    state = initial(sw, cfg, WeightingConfig())
    state, sp = closed_loop_step(state, records, sw, cfg, WeightingConfig())
    assert sp.rate[trigger] == pytest.approx(0.2, abs=0.01)
    assert kind in active_kinds(state.interface), (kind, sp.rate[trigger], sp.prevalence[trigger])
    # only the kinds whose trigger is this label
    assert active_kinds(state.interface) == {DEFAULT_TRIGGERS[trigger]}
    assert state.history[-1]["rate"][trigger] == pytest.approx(sp.rate[trigger], abs=1e-6)


def test_rates_use_their_own_denominators():
    recs = [
        TrajectoryRecord("multi_turn_miss_param", [tx.PASS, tx.SPURIOUS_TOOL_CALL, tx.ARGUMENT_MISMATCH],
                         [False, True, False], 0.0),
        TrajectoryRecord("multi_turn_miss_param", [tx.PASS, tx.PASS, tx.CHECKER_ERROR], [False, True, False], 0.0),
    ]
    sp = aggregate(recs)
    assert sp.n_turns == 5 and sp.n_abstention_turns == 2
    assert sp.rate[tx.SPURIOUS_TOOL_CALL] == pytest.approx(0.5)       # 1 of 2 abstention turns
    assert sp.rate[tx.CORRECT_ABSTENTION] == pytest.approx(0.5)
    assert sp.rate[tx.ARGUMENT_MISMATCH] == pytest.approx(1 / 3)       # 1 of 3 turns with a ground-truth call
    assert sp.rate[tx.PASS] == pytest.approx(2 / 3)
    assert sp.prevalence[tx.SPURIOUS_TOOL_CALL] == pytest.approx(1 / 5)


def test_state_round_trip_keeps_the_rate_ema(tmp_path, train_turns):
    cfg, w, sw = InterfaceConfig(), WeightingConfig(), SealSwitches()
    state, _ = closed_loop_step(initial(sw, cfg, w), _records(train_turns, tx.SPURIOUS_TOOL_CALL, 3), sw, cfg, w)
    path = tmp_path / "s.json"
    state.save(path)
    back = type(state).load(path)
    assert back.rate_ema == pytest.approx(state.rate_ema) and back.rate_ema[tx.SPURIOUS_TOOL_CALL] > ON
