"""The cue-effect probe on the real path: probe rows through verl's agent-loop worker and reward worker (the dry
run, a scripted LLM standing in for the server), the run folder's rows, and the numbers recomputed from them."""

from __future__ import annotations

import json
import statistics

import pytest

from seal_verl.runs import folder as RF
from seal_verl.core.cue_effect import newcombe_interval, t_quantile


def _dry(tmp_path, policy: str, steps: int = 3, **probe):
    from seal_verl.dry_run.run import DryRunConfig, run_dry

    # a response budget every ground truth fits in (long-context tasks too, which the probes' rotation draws): a
    # cue_reader rollout under a cue passes
    cfg = DryRunConfig(out=str(tmp_path / policy), steps=steps, tasks_per_step=2, rollouts=4, val_tasks=0,
                       policy=policy, progress=False, verbose=False, response_length=131072)
    cfg.seal["cue_effect"] = {"every": 1, "tasks": 3, "samples": 2, "max_rollouts": 42, **probe}
    rows = run_dry(cfg)
    return rows, RF.load(cfg.out)


def _recompute(probe_rows: list[dict], active: list[str]) -> dict:
    """Pass rates per condition straight from the probe's rows; a drop condition that leaves no kind on reads the
    ``none`` rollouts (it is not generated twice)."""
    by: dict[str, list[float]] = {}
    for r in probe_rows:  # the reward the run trains on (here 0/1), else the verdict
        by.setdefault(r["condition"], []).append(float(r["passed"]) if r.get("reward") is None else r["reward"])

    def rate(name):
        vals = by[name]
        assert set(vals) <= {0.0, 1.0}  # the dry run's reward is 0/1: Newcombe's interval applies
        return sum(vals) / len(vals), int(sum(vals)), len(vals)

    def per_task(name):
        tasks: dict[str, list[float]] = {}
        for r in probe_rows:
            if r["condition"] == name:
                tasks.setdefault(r["task_id"], []).append(float(r["passed"]) if r.get("reward") is None else r["reward"])
        return {t: sum(v) / len(v) for t, v in tasks.items()}

    def paired(other, unpaired):
        """The t interval of the per-task differences; the unpaired one without a spread to estimate."""
        a, b = per_task("current"), per_task(other)
        diffs = [a[t] - b[t] for t in a if t in b]
        if len(diffs) < 2 or statistics.pstdev(diffs) == 0:
            return unpaired, len(diffs)
        half = t_quantile(0.975, len(diffs) - 1) * statistics.stdev(diffs) / len(diffs) ** 0.5
        m = statistics.fmean(diffs)
        return (max(-1.0, m - half), min(1.0, m + half)), len(diffs)

    out = {}
    cur = rate("current")
    pairs = {"all": "none"}
    pairs.update({k: (f"drop:{k}" if len(active) > 1 else "none") for k in active})
    for key, other in pairs.items():
        o = rate(other)
        unpaired = newcombe_interval(cur[1], cur[2], o[1], o[2])
        interval, n_pairs = paired(other, unpaired)
        out[key] = {"with": cur[0], "without": o[0], "diff": cur[0] - o[0], "unpaired": unpaired,
                    "interval": interval, "n_pairs": n_pairs}
    return out


@pytest.fixture(scope="module")
def cue_reader(tmp_path_factory):
    return _dry(tmp_path_factory.mktemp("probe"), "cue_reader")


def test_probe_numbers_recomputed_from_its_own_rollouts(cue_reader):
    rows, run = cue_reader
    probed = [r for r in rows if r.get("cue_effect")]
    assert probed, "no step ran the probe although a cue kind was on"
    assert not rows[0].get("cue_effect") and rows[0]["active_during"] == []  # nothing on, nothing to measure
    for row in probed:
        k = row["global_step"]
        summary = row["cue_effect"]
        assert summary["active"] == row["active_during"]
        probe_rows = run.probes[k]
        assert len(probe_rows) == summary["n_rollouts"] > 0
        again = _recompute(probe_rows, summary["active"])
        assert set(again) == set(summary["effects"]) == {"all", *summary["active"]}
        for key, e in summary["effects"].items():
            assert e["with"] == pytest.approx(again[key]["with"])
            assert e["without"] == pytest.approx(again[key]["without"])
            assert (e["lo"], e["hi"]) == pytest.approx(again[key]["interval"])  # paired by task
            assert (e["unpaired_lo"], e["unpaired_hi"]) == pytest.approx(again[key]["unpaired"])
            assert e["n_pairs"] == again[key]["n_pairs"] == len(summary["tasks"])
            assert row["metrics"][f"seal/cue_effect/{key}"] == pytest.approx(again[key]["diff"])
        # the same tasks under every condition, ``samples`` rollouts each
        per = {}
        for r in probe_rows:
            per.setdefault(r["condition"], []).append(r["task_id"])
        assert len({tuple(sorted(v)) for v in per.values()}) == 1
        assert all(len(v) == summary["samples"] * len(summary["tasks"]) for v in per.values())


def test_probe_conditions_render_exactly_their_cues(cue_reader):
    _, run = cue_reader
    for rows in run.probes.values():
        for r in rows:
            if r["condition"] == "none":
                assert r["kinds"] == [] and r["cue_tokens"] == 0
            if r["condition"] == "current":
                assert r["kinds"] and r["cue_tokens"] > 0


def test_a_policy_that_reads_cues_shows_a_positive_effect(cue_reader):
    """The cue_reader policy passes whenever its prompt carries a cue: under ``current`` every rollout passes; with
    two kinds on, leaving one out still leaves a cue, so no single kind has an effect of its own."""
    rows, _ = cue_reader
    for row in rows:
        summary = row.get("cue_effect")
        if not summary:
            continue
        effects = summary["effects"]
        assert effects["all"]["with"] == 1.0 and effects["all"]["diff"] >= 0
        if len(summary["active"]) > 1:
            assert all(effects[k]["diff"] == 0 for k in summary["active"])
    pooled = [r["cue_effect"]["effects"]["all"] for r in rows if r.get("cue_effect")]
    assert sum(e["diff"] for e in pooled) > 0


def test_probe_is_never_trained_on(cue_reader):
    rows, run = cue_reader
    for row in rows:
        k = row["global_step"]
        keys = {t["key"] for t in run.traces[k]}
        assert not keys & {p["key"] for p in run.probes.get(k, [])}
        assert row["n_rollouts"] == 2 * 4  # the step's own tasks x rollouts only


def test_console_line_shows_the_effect(cue_reader):
    from seal_verl.dry_run.console import format_row

    rows, _ = cue_reader
    probed = [r for r in rows if r.get("cue_effect")]
    line = format_row(probed[0])
    assert "effect all " in line and "[" in line


def test_retire_switches_a_harmful_kind_off():
    """finish(): a kind whose interval lies below zero on retire_after probes in a row is retired; the closed
    loop's evolve then keeps it off, whatever its trigger rate."""
    from seal_verl.core.cue_effect import ProbeRecord
    from seal_verl.core.interface import InterfaceState
    from seal_verl.core.loop import closed_loop_step
    from seal_verl.core.profile import TrajectoryRecord
    from seal_verl.verl_glue.config import parse_seal_config
    from seal_verl.verl_glue.driver import SealDriver
    from seal_verl.verl_glue.probe import CueEffectProbe

    cfg = parse_seal_config({"cue_effect": {"every": 1, "retire": True, "retire_after": 2}})
    driver = SealDriver(cfg)
    driver.state.interface = InterfaceState(active={k: k == "call_format" for k in InterfaceState().active})
    probe = CueEffectProbe(cfg)
    hurt = [ProbeRecord("current", f"t{i}", False) for i in range(12)] + \
        [ProbeRecord("none", f"t{i}", True) for i in range(12)]
    for step in (1, 2):
        plan = probe.plan_for(step, driver.state, [f"t{i}" for i in range(12)])
        assert plan is not None and plan.active == ["call_format"]
        m = probe.finish(plan, hurt, driver)
        assert m["seal/cue_effect/call_format/hi"] < 0
    assert driver.state.interface.retired == {"call_format"} and not driver.state.interface.active["call_format"]
    assert probe.take()["retired"] == ["call_format"]
    assert probe.plan_for(3, driver.state, ["t0"]) is None  # nothing on any more: nothing to probe
    failing = [TrajectoryRecord("multi_turn_base", ["invalid_tool_call"] * 4, [False] * 4, 0.0)] * 4
    state, _ = closed_loop_step(driver.state, failing, cfg.switches, cfg.interface, cfg.weighting)
    assert not state.interface.active["call_format"] and state.interface.active["schema_constraints"] is False
    assert state.interface.retired == {"call_format"}


def test_retire_is_off_in_both_presets_and_without_the_closed_loop():
    from seal_verl.core.cue_effect import ProbeRecord
    from seal_verl.verl_glue.config import parse_seal_config
    from seal_verl.verl_glue.driver import SealDriver
    from seal_verl.verl_glue.probe import CueEffectProbe

    assert parse_seal_config({}).cue_effect.retire is False
    cfg = parse_seal_config({"switches": {"closed_loop": False},
                             "cue_effect": {"every": 1, "retire": True, "retire_after": 1}})
    driver = SealDriver(cfg)
    assert driver.state.interface.active["call_format"]  # no closed loop: every kind on, fixed
    probe = CueEffectProbe(cfg)
    plan = probe.plan_for(1, driver.state, ["t0", "t1"])
    recs = [ProbeRecord(c, "t0", c != "current") for c in plan.runs for _ in range(20)]
    probe.finish(plan, recs, driver)
    assert driver.state.interface.retired == frozenset()  # measured, but nothing adapts without the closed loop
    assert isinstance(json.dumps(probe.take()), str)


def test_probe_row_with_a_bad_override_is_refused():
    from seal_verl.verl_glue.agent_loop import probe_of

    assert probe_of({"extra_info": {"task_id": "x"}}) is None
    got = probe_of({"extra_info": {"seal_probe": {"condition": "current", "kinds": ["call_format"],
                                                  "sampling": {"temperature": 1.0}}}})
    assert got["kinds"] == {"call_format"} and got["sampling"] == {"temperature": 1.0}
    with pytest.raises(ValueError, match="unknown cue kind"):
        probe_of({"extra_info": {"seal_probe": {"condition": "x", "kinds": ["print_everything"]}}})
    with pytest.raises(ValueError, match="may set only"):
        probe_of({"extra_info": {"seal_probe": {"condition": "x", "kinds": [], "sampling": {"max_tokens": 9}}}})
    with pytest.raises(ValueError, match="condition name"):
        probe_of({"extra_info": {"seal_probe": "current"}})


def test_report_draws_the_cue_effect(cue_reader, tmp_path):
    from seal_verl.runs.report import build_report
    from seal_verl.runs.report_tables import cue_effects

    rows, run = cue_reader
    report = build_report([run.path], str(tmp_path / "report"))
    assert any(p.endswith("_cue_effect.png") for p in report.pngs)
    assert "Cue effect" in report.text
    from seal_verl.runs.report import load_run

    found = cue_effects(load_run(run.path))
    probed = [r for r in rows if r.get("cue_effect")]
    assert [s for s, _ in found["all"]] == [r["step"] for r in probed]
    assert [e["diff"] for _, e in found["all"]] == [r["cue_effect"]["effects"]["all"]["diff"] for r in probed]


def test_check_recomputes_the_probe_and_catches_a_changed_row(cue_reader, tmp_path):
    import shutil

    from seal_verl.runs.check import Report, Run, check_cue_effect

    rows, run = cue_reader
    rep = Report()
    check_cue_effect(Run(run.path), rep)
    assert rep.ok and "numbers recomputed" in rep.items[0][2], rep.text()
    copy = str(tmp_path / "copy")
    shutil.copytree(run.path, copy)
    k = min(run.probes)
    lines = open(f"{copy}/{RF.probe_name(k)}").read().splitlines()
    first = json.loads(lines[0])
    first["passed"] = not first["passed"]
    first["reward"] = 1.0 - first["reward"]
    lines[0] = json.dumps(first)
    open(f"{copy}/{RF.probe_name(k)}", "w").write("\n".join(lines) + "\n")
    rep = Report()
    check_cue_effect(Run(copy), rep)
    assert not rep.ok and f"step {k}" in rep.items[0][2], rep.text()
    # a step that was due without a probe is named too
    import os

    os.remove(f"{copy}/{RF.probe_name(k)}")
    rep = Report()
    check_cue_effect(Run(copy), rep)
    assert not rep.ok and RF.probe_name(k) in rep.text()


def test_check_reads_a_run_folder_written_before_the_paired_interval(cue_reader, tmp_path):
    """A folder whose probe summaries hold only the unpaired interval of that time (no ``n_pairs``) still
    checks: its rates are recomputed, its interval is taken as written."""
    import shutil

    from seal_verl.runs.check import Report, Run, check_cue_effect

    _, run = cue_reader
    copy = str(tmp_path / "old")
    shutil.copytree(run.path, copy)
    path = f"{copy}/metrics.jsonl"
    rows = [json.loads(line) for line in open(path).read().splitlines() if line.strip()]
    for row in rows:
        for e in ((row.get("cue_effect") or {}).get("effects") or {}).values():
            e["lo"], e["hi"] = e.pop("unpaired_lo"), e.pop("unpaired_hi")
            e.pop("n_pairs")
    open(path, "w").write("".join(json.dumps(r) + "\n" for r in rows))
    rep = Report()
    check_cue_effect(Run(copy), rep)
    assert rep.ok, rep.text()
def test_probes_of_one_run_rotate_over_the_training_tasks(cue_reader):
    """Through the real probe path (the dry run's probe rows through verl's worker): successive probes of a run
    draw different tasks, each probe the same tasks under every condition."""
    rows, run = cue_reader
    probed = [r["global_step"] for r in rows if r.get("cue_effect")]
    assert len(probed) >= 2
    tasks = [sorted({p["task_id"] for p in run.probes[k]}) for k in probed]
    assert all(len(t) == len(set(t)) > 0 for t in tasks)
    for a, b in zip(tasks, tasks[1:]):
        assert not set(a) & set(b), (a, b)
