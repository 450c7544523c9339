"""The cue-effect probe's arithmetic (``seal_verl.core.cue_effect``): conditions, intervals, effects, retirement."""

from __future__ import annotations

import math

import pytest

from _paths import REPO

from seal_verl.core import cue_effect as ce
from seal_verl.core.interface import InterfaceConfig, InterfaceState, evolve, retire
from seal_verl.core.loop import ClosedLoopState, SealSwitches, StateFileError
from seal_verl.core.weighting import WeightingConfig


def test_conditions_and_shared_rollouts():
    conds = ce.conditions(["tool_affordance", "call_format"])
    assert conds == {"current": frozenset({"call_format", "tool_affordance"}), "none": frozenset(),
                     "drop:call_format": frozenset({"tool_affordance"}),
                     "drop:tool_affordance": frozenset({"call_format"})}
    assert len(ce.distinct(conds)) == 4
    one = ce.conditions(["call_format"])
    assert ce.alias(one)["drop:call_format"] == "none"  # one kind on: its drop is "no cue", generated once
    assert list(ce.distinct(one)) == ["current", "none"]
    with pytest.raises(ValueError, match="unknown cue kind"):
        ce.conditions(["call_format", "hint_everything"])


@pytest.mark.parametrize("k1,n1,k2,n2", [(10, 20, 5, 20), (0, 8, 0, 8), (8, 8, 0, 8), (3, 7, 6, 9), (1, 1, 0, 1)])
def test_newcombe_interval_holds_the_difference(k1, n1, k2, n2):
    lo, hi = ce.newcombe_interval(k1, n1, k2, n2)
    d = k1 / n1 - k2 / n2
    assert -1.0 <= lo <= d <= hi <= 1.0
    assert hi - lo > 0  # never a zero-width interval, also at rates of 0 and 1


def test_newcombe_interval_reference_value():
    # Newcombe (1998), Statistics in Medicine 17:873-890, Table II, example (a): 56/70 - 48/80,
    # method 10 gives 0.0524 to 0.3339.
    lo, hi = ce.newcombe_interval(56, 70, 48, 80)
    assert lo == pytest.approx(0.0524, abs=5e-4) and hi == pytest.approx(0.3339, abs=5e-4)


def test_wider_at_higher_confidence_and_narrower_with_more_samples():
    lo90, hi90 = ce.newcombe_interval(6, 10, 3, 10, 0.90)
    lo99, hi99 = ce.newcombe_interval(6, 10, 3, 10, 0.99)
    assert lo99 < lo90 and hi99 > hi90
    lo_big, hi_big = ce.newcombe_interval(60, 100, 30, 100)
    assert hi_big - lo_big < hi90 - lo90


def _records(spec: dict[str, list[int]]) -> list[ce.ProbeRecord]:
    return [ce.ProbeRecord(cond, f"t{i % 3}", bool(v)) for cond, vals in spec.items() for i, v in enumerate(vals)]


def test_effects_from_records():
    recs = _records({"current": [1, 1, 1, 0], "none": [0, 0, 1, 0], "drop:call_format": [1, 0, 1, 0],
                     "drop:error_recovery": [1, 1, 1, 1]})
    found = ce.effects(recs, ["call_format", "error_recovery"])
    assert found["all"].with_ == 0.75 and found["all"].without == 0.25 and found["all"].diff == pytest.approx(0.5)
    assert found["call_format"].diff == pytest.approx(0.25)
    assert found["error_recovery"].diff == pytest.approx(-0.25)
    assert found["all"].n_with == 4 and found["all"].n_without == 4
    m = ce.metrics(found, len(recs))
    assert m["seal/cue_effect/all"] == pytest.approx(0.5)
    assert m["seal/cue_effect/call_format/lo"] == found["call_format"].lo
    assert m["seal/cue_effect/n_rollouts"] == 16.0


def test_one_kind_reads_the_none_rollouts():
    recs = _records({"current": [1, 1, 0, 1], "none": [0, 0, 0, 1]})
    found = ce.effects(recs, ["call_format"])
    assert found["call_format"] == found["all"]
    with pytest.raises(ValueError, match="unknown condition"):
        ce.effects(_records({"drop:schema_constraints": [1]}), ["call_format"])


@pytest.mark.parametrize("step,last,active,expected", [
    (1, None, ["call_format"], True), (1, None, [], False), (3, 1, ["call_format"], False),
    (6, 1, ["call_format"], True), (9, 1, [], False)])
def test_due(step, last, active, expected):
    assert ce.due(ce.CueEffectConfig(every=5), step, last, active) is expected
    assert ce.due(ce.CueEffectConfig(every=0), step, None, active) is False


def test_pick_tasks_is_deterministic_and_fits_the_budget():
    ids = [f"task_{i}" for i in range(40)]
    cfg = ce.CueEffectConfig(tasks=16, samples=2, max_rollouts=64)
    a = ce.pick_tasks(ids, cfg, 2, seed=0, probe_index=0)
    assert a == ce.pick_tasks(list(reversed(ids)), cfg, 2, seed=0, probe_index=0) and len(a) == 16
    assert len(ce.pick_tasks(ids, cfg, 7, seed=0, probe_index=0)) == 64 // 14  # 7 conditions x 2 samples: 4 fit
    with pytest.raises(ValueError, match="no training task"):
        ce.pick_tasks([], cfg, 2, seed=0, probe_index=0)

    with pytest.raises(ValueError, match="probe_index"):
        ce.pick_tasks(ids, cfg, 2, seed=0, probe_index=-1)


def test_pick_tasks_rotates_over_the_pool_between_probes():
    """Successive probes of one run take different tasks and cover the pool before a task comes again; the run's
    seed decides the order."""
    ids = [f"task_{i:02d}" for i in range(64)]
    cfg = ce.CueEffectConfig(tasks=8, samples=2, max_rollouts=224)
    probes = [ce.pick_tasks(ids, cfg, 7, seed=5, probe_index=i) for i in range(8)]
    drawn = [t for p in probes for t in p]
    assert all(len(p) == len(set(p)) == 8 for p in probes)
    assert sorted(drawn) == ids  # 8 probes x 8 tasks: every task exactly once
    again = ce.pick_tasks(ids, cfg, 7, seed=5, probe_index=8)
    assert set(again) & set(drawn) and again == probes[0]  # then the same order again
    other = [ce.pick_tasks(ids, cfg, 7, seed=6, probe_index=i) for i in range(2)]
    assert other != probes[:2]
    # a pool that the window does not divide: no task comes twice before all have come once
    odd = ids[:20]
    seen: list[str] = []
    for i in range(3):
        seen += ce.pick_tasks(odd, cfg, 7, seed=1, probe_index=i)
    assert sorted(set(seen[:20])) == sorted(odd) and len(seen) == 24


def test_paired_interval_by_hand():
    """Five tasks, two samples each under both conditions. Per-task differences 0.5, 0.5, 0, 0, 1: mean 0.4,
    sample variance 0.7 / 4 = 0.175, standard error sqrt(0.175 / 5) = 0.187083, t(0.975, 4) = 2.776445 (tables),
    half-width 0.519427."""
    cur = {"t1": [1, 0], "t2": [1, 1], "t3": [0, 0], "t4": [1, 0], "t5": [1, 1]}
    none = {"t1": [0, 0], "t2": [1, 0], "t3": [0, 0], "t4": [1, 0], "t5": [0, 0]}
    recs = [ce.ProbeRecord("current", t, bool(v)) for t, vs in cur.items() for v in vs]
    recs += [ce.ProbeRecord("none", t, bool(v)) for t, vs in none.items() for v in vs]
    e = ce.effects(recs, ["call_format"])["all"]
    assert e.diff == pytest.approx(0.4) and e.n_pairs == 5
    assert e.lo == pytest.approx(0.4 - 0.519427, abs=1e-5) and e.hi == pytest.approx(0.4 + 0.519427, abs=1e-5)
    # beside it the unpaired interval (Newcombe's, 6/10 against 2/10)
    assert (e.unpaired_lo, e.unpaired_hi) == pytest.approx(ce.newcombe_interval(6, 10, 2, 10))
    assert e.to_dict()["n_pairs"] == 5 and ce.Effect.from_dict(e.to_dict()) == e


def test_paired_interval_without_a_spread_keeps_the_unpaired_one():
    # one task: no variance from one difference
    one = ce.effect([1, 1, 0, 1], [0, 0, 0, 1], 0.95, ["t"] * 4, ["t"] * 4)
    assert one.n_pairs == 1 and (one.lo, one.hi) == (one.unpaired_lo, one.unpaired_hi)
    # the same difference on every task: a zero spread would claim certainty
    same = ce.effect([1, 0, 1, 0], [0, 0, 0, 0], 0.95, ["a", "a", "b", "b"], ["a", "a", "b", "b"])
    assert same.n_pairs == 2 and (same.lo, same.hi) == (same.unpaired_lo, same.unpaired_hi)
    assert same.hi > same.lo
    # no tasks given: the unpaired interval
    plain = ce.effect([1, 0], [0, 0])
    assert plain.n_pairs == 0 and (plain.lo, plain.hi) == (plain.unpaired_lo, plain.unpaired_hi)


def test_welch_interval_uses_the_t_quantile_with_welch_satterthwaite_df():
    """Means 0.5 and 0.25, both sample variances 1/24, four values a side: standard error sqrt(2 / 96) = 0.144338,
    Welch-Satterthwaite df = 6, t(0.975, 6) = 2.446912 (tables): half-width 0.353183 (a normal quantile would give
    0.282896, too narrow)."""
    lo, hi = ce.mean_difference_interval([0.5, 0.25, 0.75, 0.5], [0.25, 0.0, 0.25, 0.5])
    assert lo == pytest.approx(0.25 - 0.353183, abs=1e-5) and hi == pytest.approx(0.25 + 0.353183, abs=1e-5)


@pytest.mark.parametrize("p,df,expected", [(0.975, 1, 12.706205), (0.975, 7, 2.364624), (0.995, 2, 9.924843),
                                           (0.975, 30, 2.042272), (0.025, 7, -2.364624)])
def test_t_quantile_matches_the_tables(p, df, expected):
    assert ce.t_quantile(p, df) == pytest.approx(expected, abs=1e-6)


def test_effects_written_before_the_paired_interval_still_read():
    old = {"with": 0.5, "without": 0.25, "diff": 0.25, "lo": -0.1, "hi": 0.6, "n_with": 8, "n_without": 8}
    e = ce.Effect.from_dict(old)
    assert (e.lo, e.hi) == (e.unpaired_lo, e.unpaired_hi) == (-0.1, 0.6) and e.n_pairs == 0
    assert ce.short_line({"all": old}) == "effect all +.25 [-.10,+.60]"


def test_the_budget_follows_the_configured_kinds():
    cfg = ce.CueEffectConfig(samples=2, max_rollouts=10)
    cfg.validate(n_kinds=3)  # the paper's three triggers: 2 x (2 + 3) = 10
    with pytest.raises(ValueError, match="samples x 7"):
        ce.CueEffectConfig(samples=2, max_rollouts=10).validate()
    with pytest.raises(ValueError, match="samples x 8"):
        ce.CueEffectConfig(samples=2, max_rollouts=14).validate(n_kinds=6)


def test_pick_tasks_rotates_over_the_pool_with_the_runs_seed():
    """Successive probes of a run use different tasks and cover the pool before any task comes back; the draw is
    the same for the same (seed, probe index) and another for another seed."""
    ids = [f"task_{i}" for i in range(40)]
    cfg = ce.CueEffectConfig(tasks=16, samples=2, max_rollouts=224)
    probes = [ce.pick_tasks(ids, cfg, 2, seed=3, probe_index=i) for i in range(5)]
    assert probes[0] == ce.pick_tasks(ids, cfg, 2, seed=3, probe_index=0)
    assert all(len(p) == len(set(p)) == 16 for p in probes)
    assert not set(probes[0]) & set(probes[1])
    seen = [t for p in probes for t in p]
    first_repeat = next(i for i, t in enumerate(seen) if t in seen[:i])
    assert first_repeat == len(ids) and set(seen[:first_repeat]) == set(ids)
    assert probes[0] != ce.pick_tasks(ids, cfg, 2, seed=4, probe_index=0)
    # a budget that fits fewer tasks takes the first ones of the same share
    few = ce.pick_tasks(ids, ce.CueEffectConfig(tasks=16, samples=2, max_rollouts=64), 7, seed=3, probe_index=1)
    assert few == probes[1][: len(few)]


@pytest.mark.parametrize("d,msg", [
    ({"every": -1}, "every must be >= 0"), ({"samples": 0}, "samples must be >= 1"),
    ({"confidence": 1.0}, "confidence"), ({"confidence": math.nan}, "confidence"),
    ({"temperature": -0.5}, "temperature"), ({"max_rollouts": 5}, "max_rollouts"),
    ({"tasks": 10**9}, "tasks must be <= "), ({"every": True}, "every must be an integer"),
    ({"retire": "maybe"}, "retire"), ({"nope": 1}, "unknown cue_effect option"),
    # round 4: values that make no sense were accepted without a word
    ({"confidence": 1e-300}, r"confidence must be a number in \[0.5, 0.999\]"),
    ({"temperature": 1e308}, r"temperature must be null or a number in \[0, 10"),
    ({"max_rollouts": 1_000_000, "every": 1}, "max_rollouts must be <= 10000"),
    ({"retire": True, "every": 0}, "retire needs the probe")])
def test_config_errors(d, msg):
    with pytest.raises(ValueError, match=msg):
        ce.CueEffectConfig.from_dict(d)


def test_retire_update_counts_probes_in_a_row():
    bad = ce.Effect(0.1, 0.6, -0.5, -0.8, -0.1, 10, 10)
    unsure = ce.Effect(0.4, 0.5, -0.1, -0.5, 0.3, 10, 10)
    below, gone = ce.retire_update({}, {"all": bad, "call_format": bad}, after=2)
    assert below == {"call_format": 1} and gone == set()
    below, gone = ce.retire_update(below, {"call_format": bad, "tool_affordance": unsure}, after=2)
    assert below == {"call_format": 2, "tool_affordance": 0} and gone == {"call_format"}
    below, gone = ce.retire_update({"call_format": 1}, {"call_format": unsure}, after=2)
    assert below["call_format"] == 0 and not gone


def test_a_retired_kind_stays_off_and_survives_a_save(tmp_path):
    cfg = InterfaceConfig().validate()
    state = InterfaceState(active={k: k == "call_format" for k in InterfaceState().active})
    state = retire(state, {"call_format"}, {"call_format": 2})
    assert not state.active["call_format"]
    again = evolve(state, {"invalid_tool_call": 0.9}, cfg)  # a trigger rate that would switch it on
    assert not again.active["call_format"] and again.retired == {"call_format"}
    loop_state = ClosedLoopState.initial(SealSwitches(), cfg, WeightingConfig())
    loop_state.interface = again
    path = tmp_path / "state.json"
    loop_state.save(path)
    back = ClosedLoopState.load(path)
    assert back.interface.retired == {"call_format"} and back.interface.effect_below == {"call_format": 2}
    # an older state without the probe's fields reads as before, and to_dict of a state without them is unchanged
    assert "retired" not in ClosedLoopState.initial(SealSwitches(), cfg, WeightingConfig()).to_dict()["interface"]


@pytest.mark.parametrize("retired", [["nonsense"], "call_format", ["call_format"] * 9])
def test_damaged_retired_field_is_named(retired, tmp_path):
    d = ClosedLoopState.initial(SealSwitches(), InterfaceConfig(), WeightingConfig()).to_dict()
    d["interface"]["retired"] = retired
    with pytest.raises(StateFileError, match="interface.retired"):
        ClosedLoopState.from_dict(d)


def test_short_line():
    found = {"all": ce.Effect(0.75, 0.25, 0.5, 0.1, 0.8, 8, 8).to_dict(),
             "call_format": ce.Effect(0.75, 0.85, -0.1, -0.45, 0.3, 8, 8)}
    assert ce.short_line(found) == "effect all +.50 [+.10,+.80] fmt -.10 [-.45,+.30]"
    assert ce.short_line(None) == ""


@pytest.mark.parametrize("backbone", ["qwen2.5-3b", "qwen2.5-7b", "toolace2-8b"])
@pytest.mark.parametrize("preset", ["default", "paper"])
def test_gpu_recipe_composes_with_the_probe_on(backbone, preset):
    """The BFCL V3 recipe (GPU) composes and validates with the probe on, retirement off, in both presets."""
    import copy
    import os

    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from seal_verl.verl_glue.config import check_run_config

    repo = REPO
    recipe = os.path.join(repo, "recipes", "bfcl_v3")
    with initialize_config_dir(config_dir=os.path.join(recipe, "config"), version_base=None):
        cfg = compose(config_name="bfcl_v3", overrides=[f"backbone={backbone}", "variant=seal", f"preset={preset}",
                                                         f"recipe.dir={recipe}", "recipe.data_dir=/data/bfcl_v3"])
    resolved = copy.deepcopy(cfg)
    OmegaConf.resolve(resolved)
    seal = check_run_config(resolved)
    assert seal.cue_effect.enabled and seal.cue_effect.every == 5 and seal.cue_effect.retire is False
    # the budget covers one task under every condition the probe can need (five kinds on)
    assert seal.cue_effect.max_rollouts >= seal.cue_effect.samples * 7


def test_dense_reward_effect_uses_the_reward_and_a_welch_interval():
    """Under a dense reward a pass rate of 0 on both sides says nothing; the reward the run trains on does."""
    recs = [ce.ProbeRecord("current", f"t{i}", False, r) for i, r in enumerate([0.5, 0.75, 0.5, 1.0])] + \
        [ce.ProbeRecord("none", f"t{i}", False, r) for i, r in enumerate([0.0, 0.25, 0.5, 0.25])]
    e = ce.effects(recs, ["call_format"])["all"]
    assert (e.with_, e.without, e.diff) == (0.6875, 0.25, 0.4375)
    lo, hi = ce.mean_difference_interval([0.5, 0.75, 0.5, 1.0], [0.0, 0.25, 0.5, 0.25])
    assert (e.unpaired_lo, e.unpaired_hi) == (lo, hi) and lo < e.diff < hi and lo > 0  # resolved unpaired
    assert e.n_pairs == 4 and e.lo < e.diff < e.hi  # paired over the four tasks
    # 0/1 rewards are pass rates: Newcombe's interval, the same as without rewards
    binary = [ce.ProbeRecord(r.condition, r.task_id, r.reward >= 0.75, float(r.reward >= 0.75)) for r in recs]
    assert ce.effects(binary, ["call_format"])["all"] == ce.effects(
        [ce.ProbeRecord(r.condition, r.task_id, r.passed) for r in binary], ["call_format"])["all"]
