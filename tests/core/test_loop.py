"""The closed loop: one step, the ablation switches, persistence and metrics (``seal_verl/core/loop.py``)."""

import itertools
import json
import os

import pytest

from seal_verl.core import taxonomy as tx
from seal_verl.core.interface import DEFAULT_TRIGGERS, InterfaceConfig, active_kinds
from seal_verl.core.loop import ClosedLoopState, SealSwitches, closed_loop_step, initial, metrics
from seal_verl.core.profile import TrajectoryRecord
from seal_verl.core.weighting import WeightingConfig

CUE_KINDS = tuple(DEFAULT_TRIGGERS.values())  # the kinds the default trigger map switches on
ICFG = InterfaceConfig(ema_beta=1.0).validate()  # no smoothing: each step's prevalence drives evolve directly
WCFG_DYN = WeightingConfig(dynamic=True, n_conf=2).validate()
ALL_SWITCHES = [SealSwitches(*combo) for combo in itertools.product([True, False], repeat=3)]


def _failing_batch():
    """Half the turns miss a tool call: tool_affordance must switch on, missing_tool_call's rho must rise."""
    return [
        TrajectoryRecord("multi_turn_base", [tx.MISSING_TOOL_CALL, tx.PASS], [False, False], 0.0),
        TrajectoryRecord("multi_turn_base", [tx.MISSING_TOOL_CALL, tx.PASS], [False, False], 0.0),
        TrajectoryRecord("multi_turn_miss_func", [tx.PASS, tx.MISSING_TOOL_CALL], [True, False], 1.0),
    ]


def _clean_batch():
    return [TrajectoryRecord("multi_turn_base", [tx.PASS, tx.PASS], [False, False], 1.0) for _ in range(3)]


@pytest.mark.parametrize("sw", ALL_SWITCHES, ids=lambda s: f"env{int(s.env_side)}-rw{int(s.reweighting)}-cl{int(s.closed_loop)}")
def test_vanilla_iff_both_sides_off(sw):
    assert sw.vanilla == (not sw.env_side and not sw.reweighting)


def test_switches_from_dict():
    assert SealSwitches.from_dict({"closed_loop": False}) == SealSwitches(True, True, False)
    with pytest.raises(ValueError, match="allowed keys"):
        SealSwitches.from_dict({"env": False})
    with pytest.raises(ValueError, match="boolean"):
        SealSwitches.from_dict({"env_side": "no"})


@pytest.mark.parametrize("sw", ALL_SWITCHES, ids=lambda s: f"env{int(s.env_side)}-rw{int(s.reweighting)}-cl{int(s.closed_loop)}")
def test_each_switch_combination(sw):
    state = initial(sw, ICFG, WCFG_DYN)
    # the interface before any data: all off, except the fixed all-on interface of "no closed loop"
    expect_initial = set(CUE_KINDS) if (sw.env_side and not sw.closed_loop) else set()
    assert active_kinds(state.interface) == expect_initial

    state, sp = closed_loop_step(state, _failing_batch(), sw, ICFG, WCFG_DYN)
    assert state.step == 1 and sp.n_trajectories == 3

    if not sw.env_side:
        expected = set()
    elif not sw.closed_loop:
        expected = set(CUE_KINDS)
    else:
        expected = {"tool_affordance"}
    assert active_kinds(state.interface) == expected

    adapts = sw.closed_loop and sw.reweighting
    if adapts:
        assert state.rho[tx.MISSING_TOOL_CALL] > state.base_rho[tx.MISSING_TOOL_CALL]
    else:
        assert state.rho == state.base_rho
    assert state.rho[tx.PASS] == state.base_rho[tx.PASS]

    # a long run of clean steps: the closed loop fades the scaffolding, the fixed modes stay as they are
    for _ in range(ICFG.patience + 1):
        state, _ = closed_loop_step(state, _clean_batch(), sw, ICFG, WCFG_DYN)
    assert active_kinds(state.interface) == (set(CUE_KINDS) if sw.env_side and not sw.closed_loop else set())
    assert state.step == ICFG.patience + 2
    assert [row["step"] for row in state.history] == list(range(state.step))


def test_static_rho_in_full_method_stays_put():
    sw = SealSwitches()
    cfg = WeightingConfig(dynamic=False).validate()
    state = initial(sw, ICFG, cfg)
    state, _ = closed_loop_step(state, _failing_batch(), sw, ICFG, cfg)
    assert state.rho == state.base_rho == cfg.rho
    assert "tool_affordance" in active_kinds(state.interface)


def test_step_is_pure_and_records_history():
    sw = SealSwitches()
    s0 = initial(sw, ICFG, WCFG_DYN)
    before = s0.to_dict()
    s1, sp = closed_loop_step(s0, _failing_batch(), sw, ICFG, WCFG_DYN)
    assert s0.to_dict() == before
    row = s1.history[-1]
    assert row["step"] == 0 and row["n_trajectories"] == 3
    assert row["active"] == ["tool_affordance"]
    assert row["prevalence"][tx.MISSING_TOOL_CALL] == pytest.approx(0.5)
    assert row["success_rate"] == pytest.approx(1 / 3)
    assert row["rho"][tx.MISSING_TOOL_CALL] == pytest.approx(s1.rho[tx.MISSING_TOOL_CALL], abs=1e-6)
    json.dumps(s1.history)  # serialisable


def test_prevalence_ema_across_steps():
    icfg = InterfaceConfig(ema_beta=0.5).validate()
    sw = SealSwitches()
    s, _ = closed_loop_step(initial(sw, icfg, WCFG_DYN), _failing_batch(), sw, icfg, WCFG_DYN)
    assert s.prevalence_ema[tx.MISSING_TOOL_CALL] == pytest.approx(0.5)
    s, _ = closed_loop_step(s, _clean_batch(), sw, icfg, WCFG_DYN)
    assert s.prevalence_ema[tx.MISSING_TOOL_CALL] == pytest.approx(0.25)


def test_step_without_labelled_turns_keeps_evidence():
    sw = SealSwitches()
    s, _ = closed_loop_step(initial(sw, ICFG, WCFG_DYN), _failing_batch(), sw, ICFG, WCFG_DYN)
    empty = [TrajectoryRecord("multi_turn_base", [tx.CHECKER_ERROR], [False], 0.0)]
    for _ in range(ICFG.patience + 2):
        s2, sp = closed_loop_step(s, empty, sw, ICFG, WCFG_DYN)
        assert sp.n_turns == 0
        assert s2.prevalence_ema == s.prevalence_ema
        assert s2.interface.active == s.interface.active
        assert s2.step == s.step + 1
        s = s2
    assert "tool_affordance" in active_kinds(s.interface)


def _run_some_steps():
    sw = SealSwitches()
    s = initial(sw, ICFG, WCFG_DYN)
    for batch in (_failing_batch(), _clean_batch(), _failing_batch()):
        s, sp = closed_loop_step(s, batch, sw, ICFG, WCFG_DYN)
    return s, sp


def test_save_load_round_trip(tmp_path):
    s, _ = _run_some_steps()
    path = tmp_path / "ckpt" / "seal_state.json"
    s.save(path)
    back = ClosedLoopState.load(path)
    assert back == s
    assert back.to_dict() == s.to_dict()
    # a resumed loop continues exactly as the original would
    sw = SealSwitches()
    a, _ = closed_loop_step(s, _failing_batch(), sw, ICFG, WCFG_DYN)
    b, _ = closed_loop_step(back, _failing_batch(), sw, ICFG, WCFG_DYN)
    assert a == b


def test_save_is_atomic(tmp_path, monkeypatch):
    s, _ = _run_some_steps()
    path = tmp_path / "seal_state.json"
    s.save(path)
    original = path.read_text()

    newer, _ = closed_loop_step(s, _failing_batch(), SealSwitches(), ICFG, WCFG_DYN)

    def crash(*args, **kwargs):
        raise OSError("disk went away")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="disk went away"):
        newer.save(path)
    monkeypatch.undo()
    assert path.read_text() == original
    assert sorted(os.listdir(tmp_path)) == ["seal_state.json"]  # no temporary file left behind

    # an unserialisable state fails before the disk is touched
    newer.history.append({"bad": object()})
    with pytest.raises(TypeError):
        newer.save(path)
    assert path.read_text() == original
    assert sorted(os.listdir(tmp_path)) == ["seal_state.json"]


def test_load_rejects_other_version_and_bad_rho(tmp_path):
    s, _ = _run_some_steps()
    d = s.to_dict()
    with pytest.raises(ValueError, match="format version"):
        ClosedLoopState.from_dict(dict(d, version=99))
    with pytest.raises(ValueError, match="unknown key"):
        ClosedLoopState.from_dict(dict(d, rho=dict(d["rho"], bogus=1.0)))


def test_metrics_names_and_values():
    s, sp = _run_some_steps()
    m = metrics(s, sp)
    assert all(k.startswith("seal/") and isinstance(v, float) for k, v in m.items())
    for key in tx.PROFILE_KEYS:
        assert m[f"seal/prevalence/{key}"] == pytest.approx(sp.prevalence[key])
        assert m[f"seal/rho/{key}"] == pytest.approx(s.rho[key])
    for kind in CUE_KINDS:
        assert m[f"seal/cue_active/{kind}"] == (1.0 if s.interface.active[kind] else 0.0)
    assert m["seal/cue_active/tool_affordance"] == 1.0
    assert m["seal/success_rate"] == pytest.approx(sp.success_rate)
    assert m["seal/success_rate_by_category/multi_turn_miss_func"] == 1.0
    assert m["seal/step"] == 3.0
    assert m["seal/prevalence_by_category/multi_turn_base/missing_tool_call"] == pytest.approx(0.5)


def test_metrics_report_active_cue_families():
    from seal_verl.core.interface import InterfaceConfig, InterfaceState
    from seal_verl.core.loop import ClosedLoopState, SealSwitches, metrics
    from seal_verl.core.profile import aggregate
    from seal_verl.core.weighting import WeightingConfig

    state = ClosedLoopState.initial(SealSwitches(), InterfaceConfig(), WeightingConfig())
    active = dict(state.interface.active)
    active["error_recovery"] = True
    state.interface = InterfaceState(active=active, streak_below=dict(state.interface.streak_below), step=1)
    m = metrics(state, aggregate([]))
    assert m["seal/cue_family_active/error"] == 1.0
    assert m["seal/cue_family_active/schema"] == 0.0
    assert m["seal/cue_family_active/capability"] == 0.0
