"""bench/bench_learning.py's reading of run folders (no training): per-step curves, the rise from the warm start
and over a window, the difference to GRPO, and which finished runs are reused."""

from __future__ import annotations

import json
import os

import pytest

from _bench_runs import fake_run, probe
from bench import bench_learning as bl


def test_rise_and_difference_to_grpo(tmp_path):
    fake_run(tmp_path / "grpo_s1", [0.2] * 5 + [0.5] * 5)
    fake_run(tmp_path / "seal_s1", [0.2] * 5 + [0.3] * 5)
    curves = {v: {1: bl.curve(str(tmp_path / f"{v}_s1"))} for v in ("grpo", "seal")}
    s = bl.summarise(curves, window=5)
    assert s["grpo"]["per_seed"][1]["rise"] == pytest.approx(0.3)
    assert s["grpo"]["seeds_meeting_goal"] == [1] and s["seal"]["seeds_meeting_goal"] == []
    assert s["seal"]["last_minus_grpo"]["mean"] == pytest.approx(-0.2)
    assert s["seal"]["last_minus_grpo"]["lo"] is None  # one seed: no interval
    assert s["grpo"]["per_seed"][1]["heldout_before"] == pytest.approx(0.1)
    assert s["grpo"]["per_seed"][1]["heldout_after"] == pytest.approx(0.4)
    assert curves["seal"][1]["steps"][3]["cues"] == ["schema_constraints"]
    # the unshaped measures beside the reward: turns labelled pass (training windows, held-out before/after)
    assert s["grpo"]["per_seed"][1]["pass_first"] == s["grpo"]["per_seed"][1]["pass_last"] == pytest.approx(0.5)
    assert s["grpo"]["per_seed"][1]["heldout_pass_before"] == pytest.approx(0.5)
    assert s["grpo"]["per_seed"][1]["heldout_pass_after"] == pytest.approx(1.0)
    md = bl.tables(curves, s, 5)
    assert "| grpo | 1 | 0.200 | 0.500 | +0.300 | +0.300 | 0.100 -> 0.400 | 0.500 -> 0.500 | 0.500 -> 1.000 |" in md
    assert "no measurement of the warm start's training reward" in md


def test_a_run_that_learns_in_its_first_steps_rises_from_the_warm_start(tmp_path):
    """GRPO on the ledger reaches most of its reward by step 3: a first-window mean then averages in policies
    already updated, and a run that went from 0.2 to 0.5 in one step showed a rise of 0.06. Measured from the
    warm start's own training reward, the rise is 0.3 and meets the goal; the window's rise stays beside it."""
    fake_run(tmp_path / "grpo_s1", [0.2] + [0.5] * 19)
    curves = {"grpo": {1: bl.curve(str(tmp_path / "grpo_s1"))}}
    r = bl.summarise(curves, window=5, start=0.2)["grpo"]
    assert r["per_seed"][1]["rise"] == pytest.approx(0.3) and r["per_seed"][1]["baseline"] == "warm start"
    assert r["per_seed"][1]["window_rise"] == pytest.approx(0.06)
    assert r["seeds_meeting_goal"] == [1]
    # without a measurement the first window is the baseline, and says so
    plain = bl.summarise(curves, window=5)["grpo"]
    assert plain["per_seed"][1]["rise"] == pytest.approx(0.06) and plain["seeds_meeting_goal"] == []
    assert plain["per_seed"][1]["baseline"] == "first window"
    md = bl.tables(curves, bl.summarise(curves, 5, 0.2), 5,
                   {"reward": 0.2, "n": 512, "source": "recipes/ledger_cpu/cue_effect.json"})
    assert "warm start's training reward without cues, 0.200 (512 rollouts" in md
    assert "| grpo | +0.300 | 1/1 | +0.060 |" in md


def _measurement(path, weights: bytes, none=(0.0, 0.5), model_sha=None):
    import hashlib

    with open(path, "w") as f:
        json.dump({"model_sha256": model_sha or hashlib.sha256(weights).hexdigest(),
                   "values": {"none": list(none), "current": [1.0, 1.0]}}, f)


def test_start_reward_is_the_no_cue_reward_measured_on_the_same_weights(tmp_path):
    prepared, model = _prepared(str(tmp_path), "a", weights=b"w1")
    shipped = str(tmp_path / "shipped.json")
    assert bl.start_reward(prepared, shipped) is None  # no measurement at all
    _measurement(shipped, b"other weights")
    assert bl.start_reward(prepared, shipped) is None  # a measurement of other weights is not this model's
    _measurement(shipped, b"w1", none=(0.25, 0.5, 0.0, 0.25))
    got = bl.start_reward(prepared, shipped)
    assert got["reward"] == pytest.approx(0.25) and got["n"] == 4
    # one the benchmark made in the prepared folder comes first; a damaged one is passed over
    _measurement(os.path.join(prepared, bl.MEASURED_EFFECT), b"w1", none=(1.0, 1.0))
    assert bl.start_reward(prepared, shipped)["reward"] == pytest.approx(1.0)
    with open(os.path.join(prepared, bl.MEASURED_EFFECT), "w") as f:
        f.write('{"model_sha256": ')
    assert bl.start_reward(prepared, shipped)["reward"] == pytest.approx(0.25)


def test_the_shipped_measurement_is_of_the_shipped_warm_start(tmp_path):
    """make bench-learning reads the shipped warm start's reward from recipes/ledger_cpu/cue_effect.json: the
    file must be of the weights that ship beside it (a rebuilt model without a new measurement fails here)."""
    prepared = tmp_path / "prepare"
    prepared.mkdir()
    (prepared / "prepare.json").write_text(json.dumps({"model": os.path.join(bl.REPO, "recipes", "ledger_cpu",
                                                                             "model")}))
    got = bl.start_reward(str(prepared))
    assert got is not None and got["source"] == os.path.join("recipes", "ledger_cpu", "cue_effect.json")
    assert got["n"] >= 256 and 0.0 < got["reward"] < 1.0


def test_difference_to_grpo_is_paired_by_seed_with_a_t_interval(tmp_path):
    """Three seeds: SEAL's last window ends 0.1, 0.2 and 0.3 below GRPO's on the same seed; held-out after 0.1
    above on each. The interval is the t-interval of the per-seed differences (2 degrees of freedom: 4.303)."""
    for seed, gap in ((1, 0.1), (2, 0.2), (3, 0.3)):
        fake_run(tmp_path / f"grpo_s{seed}", [0.2] * 5 + [0.6] * 5, heldout=(0.1, 0.5))
        fake_run(tmp_path / f"seal_s{seed}", [0.2] * 5 + [0.6 - gap] * 5, heldout=(0.1, 0.6))
    curves = {v: {k: bl.curve(str(tmp_path / f"{v}_s{k}")) for k in (1, 2, 3)} for v in ("grpo", "seal")}
    d = bl.summarise(curves, window=5)["seal"]
    half = 4.303 * 0.1 / 3 ** 0.5
    assert d["last_minus_grpo"]["mean"] == pytest.approx(-0.2)
    assert (d["last_minus_grpo"]["lo"], d["last_minus_grpo"]["hi"]) == pytest.approx((-0.2 - half, -0.2 + half))
    assert d["last_minus_grpo"]["below"] == 3 and d["last_minus_grpo"]["above"] == 0
    assert d["heldout_minus_grpo"]["mean"] == pytest.approx(0.1) and d["heldout_minus_grpo"]["above"] == 3
    assert d["heldout_minus_grpo"]["sd"] == pytest.approx(0.0, abs=1e-12)
    md = bl.tables(curves, bl.summarise(curves, 5), 5)
    assert f"| -0.200 [{-0.2 - half:+.3f}, {-0.2 + half:+.3f}] (0 of 3 above) | +0.100 [+0.100, +0.100] (3 of 3 above) | 0.600 |" in md


@pytest.mark.parametrize("n, t", [(2, 12.706), (5, 2.776), (12, 2.201), (27, 2.060), (200, 1.96)])
def test_the_interval_uses_students_t_for_the_number_of_seeds(n, t):
    diffs = [0.0, 1.0] * (n // 2) + [0.5] * (n % 2)
    d = bl.paired(diffs)
    sd = __import__("statistics").stdev(diffs)
    assert d["hi"] - d["mean"] == pytest.approx(t * sd / n ** 0.5)


def test_cue_effect_probes_are_read_per_kind_over_steps_and_seeds(tmp_path):
    """The probes of every seed: per kind the mean effect, and the probes whose interval lies wholly below or
    above zero; a run without probes (GRPO) has none."""
    fake_run(tmp_path / "seal_s1", [0.3] * 10, probes={
        2: probe(2, all=(-0.2, -0.3, -0.1), call_format=(-0.1, -0.2, 0.05)),
        4: probe(4, all=(0.1, -0.05, 0.25), call_format=(0.3, 0.1, 0.5))})
    fake_run(tmp_path / "seal_s2", [0.3] * 10, probes={2: probe(2, all=(-0.3, -0.4, -0.2))})
    fake_run(tmp_path / "grpo_s1", [0.3] * 10)
    curves = {"grpo": {1: bl.curve(str(tmp_path / "grpo_s1"))},
              "seal": {k: bl.curve(str(tmp_path / f"seal_s{k}")) for k in (1, 2)}}
    assert [p["step"] for p in curves["seal"][1]["cue_effect"]] == [2, 4]
    s = bl.summarise(curves, window=5)
    assert s["grpo"]["cue_effect"] == {}
    e = s["seal"]["cue_effect"]
    assert list(e) == ["all", "call_format"]  # "all" first
    assert e["all"] == {"probes": 3, "mean": pytest.approx(-0.4 / 3), "below": 2, "above": 0}
    assert e["call_format"] == {"probes": 2, "mean": pytest.approx(0.1), "below": 0, "above": 1}
    md = bl.tables(curves, s, 5)
    assert "| seal | all | 3 | -0.133 | 2 | 0 |" in md and "| seal | call_format | 2 | +0.100 | 0 | 1 |" in md
    per_step = bl._cue_effect_per_step(curves["seal"])
    assert per_step["all"] == ([2, 4], [pytest.approx(-0.25), pytest.approx(0.1)])


def test_too_short_run_has_no_rise(tmp_path):
    fake_run(tmp_path / "grpo_s1", [0.2] * 6)
    assert bl.rise(bl.curve(str(tmp_path / "grpo_s1")), window=5) is None


def test_only_finished_runs_of_the_same_length_are_reused(tmp_path):
    fake_run(tmp_path / "a", [0.1] * 4)
    fake_run(tmp_path / "b", [0.1] * 4, exit_code=1)
    assert bl.finished(str(tmp_path / "a"), 4)
    assert not bl.finished(str(tmp_path / "a"), 6)
    assert not bl.finished(str(tmp_path / "b"), 4)
    assert not bl.finished(str(tmp_path / "missing"), 4)


@pytest.mark.parametrize("argv, message", [
    (["--variants", "grpo", "sael"], "unknown variant(s) sael"),
    (["--jobs", "0"], "--jobs must be at least 1"),
])
def test_bad_arguments_stop_before_any_run(argv, message, tmp_path, monkeypatch, capsys):
    started = []
    monkeypatch.setattr(bl, "run_one", lambda *a, **k: started.append(a) or 0)
    monkeypatch.setattr(bl, "prepare", lambda out: started.append(out) or 0)
    with pytest.raises(SystemExit) as e:
        bl.main(argv + ["--steps", "10", "--out", str(tmp_path)])
    assert e.value.code == 2 and message in capsys.readouterr().err and started == []


def test_runs_side_by_side_prepare_first_and_every_failure_named(tmp_path, monkeypatch):
    """--jobs 2: the warm start is prepared once before any run, every (variant, seed) runs once, in priority
    order, each with its console lines prefixed, and a failed run is named."""
    calls = []
    monkeypatch.setattr(bl, "prepare", lambda out: calls.append("prepare") or 0)

    def fake_run_one(out, v, s, steps, force, extra, prefix=False, model=None):
        calls.append((v, s, prefix))
        return 1 if (v, s) == ("seal", 2) else 0

    monkeypatch.setattr(bl, "run_one", fake_run_one)
    failed = bl.run_all(str(tmp_path), ["grpo", "seal"], [1, 2], 20, False, [], jobs=2)
    assert calls[0] == "prepare"
    assert sorted(calls[1:]) == sorted([("grpo", 1, True), ("seal", 1, True), ("grpo", 2, True), ("seal", 2, True)])
    assert failed == ["seal seed 2"]
    # one at a time: prepared first as well (the warm start's identity decides reuse), no prefix, the same order
    calls.clear()
    assert bl.run_all(str(tmp_path), ["grpo", "seal"], [1, 2], 20, False, [], jobs=1) == ["seal seed 2"]
    assert calls == ["prepare", ("grpo", 1, False), ("seal", 1, False), ("grpo", 2, False), ("seal", 2, False)]


def _config_tree(root):
    for d in bl.SETTINGS_DIRS:
        os.makedirs(os.path.join(root, d), exist_ok=True)
    path = os.path.join(root, "recipes", "bfcl_v3", "cpu", "config", "tiny.yaml")
    with open(path, "w") as f:
        f.write("rollout:\n  dtype: bfloat16\n")
    return path


def test_settings_fingerprint_follows_config_files_and_overrides(tmp_path):
    yaml_path = _config_tree(tmp_path)
    before = bl.settings([], root=str(tmp_path))
    assert bl.settings([], root=str(tmp_path)) == before
    assert bl.settings(["actor_rollout_ref.actor.optim.lr=1e-3"], root=str(tmp_path)) != before
    with open(yaml_path, "w") as f:
        f.write("rollout:\n  dtype: float32\n")
    assert bl.settings([], root=str(tmp_path)) != before


def _record_runs(monkeypatch) -> list:
    """run_ledger.sh replaced by a writer of a finished run's files; returns the list of run folders it made
    (a preparation, PREPARE_ONLY, succeeds and is not counted)."""
    runs = []

    def fake_subprocess_run(cmd, env=None, cwd=None):
        assert env is None or env.get("FORCE") == "1" or env.get("PREPARE_ONLY")  # moved aside, never cleaned
        if "seal_verl.models.warm_start.cue_reading" in cmd:  # the warm start's measurement: of the weights it names
            with open(os.path.join(cmd[cmd.index("measure") + 1], "model.safetensors"), "rb") as f:
                _measurement(cmd[cmd.index("--out") + 1], f.read(), none=(0.2, 0.2))
            runs.append("measure")
        elif not env.get("PREPARE_ONLY"):
            runs.append(env["OUT"])
            fake_run(env["OUT"], [0.3] * int(env["STEPS"]))
        return type("P", (), {"returncode": 0})()

    monkeypatch.setattr(bl.subprocess, "run", fake_subprocess_run)
    return runs


def test_a_finished_run_made_under_other_settings_is_kept_unless_forced(tmp_path, monkeypatch, capsys):
    """A finished run is reused only under the settings it was made with: after an overlay edit (here the
    real config files stand still and the fingerprint is patched) it is not reused, and not replaced either
    (round 4: it was run again into its folder, the finished run lost) unless --force, which has the run script
    move it aside (FORCE=1)."""
    runs = _record_runs(monkeypatch)
    out = str(tmp_path)
    assert bl.run_one(out, "grpo", 1, 4, False, []) == 0 and len(runs) == 1
    assert bl.run_one(out, "grpo", 1, 4, False, []) == 0 and len(runs) == 1  # reused
    assert "reusing" in capsys.readouterr().out
    monkeypatch.setattr(bl, "settings", lambda extra, root=bl.REPO, model=None: "changed")
    assert bl.run_one(out, "grpo", 1, 4, False, []) == 2 and len(runs) == 1
    assert "made under other settings" in capsys.readouterr().err
    assert bl.run_one(out, "grpo", 1, 4, True, []) == 0 and len(runs) == 2
    os.remove(os.path.join(bl.run_dir(out, "grpo", 1), bl.SETTINGS_FILE))  # a run from before the record
    assert not bl.finished(bl.run_dir(out, "grpo", 1), 4, "changed")
    assert bl.finished(bl.run_dir(out, "grpo", 1), 4)


def _prepared(root, name, warm_fingerprint=None, weights=b"w1"):
    """A prepared run folder whose prepare.json names a model folder (with a warm_start.json when given)."""
    model = os.path.join(root, "models", name)
    os.makedirs(model, exist_ok=True)
    with open(os.path.join(model, "model.safetensors"), "wb") as f:
        f.write(weights)
    if warm_fingerprint:
        with open(os.path.join(model, "warm_start.json"), "w") as f:
            json.dump({"fingerprint": warm_fingerprint}, f)
    prepared = os.path.join(root, "prepare_" + name)
    os.makedirs(prepared, exist_ok=True)
    with open(os.path.join(prepared, "prepare.json"), "w") as f:
        json.dump({"model": model, "env": "ledger"}, f)
    return prepared, model


def test_model_identity_is_the_warm_start_fingerprint_or_the_files(tmp_path):
    a, _ = _prepared(str(tmp_path), "a", "f00d")
    assert bl.model_identity(a) == "warm-start:f00d"
    b, model_b = _prepared(str(tmp_path), "b")
    first = bl.model_identity(b)
    assert first.startswith("files:") and bl.model_identity(b) == first
    with open(os.path.join(model_b, "model.safetensors"), "wb") as f:
        f.write(b"w2")
    assert bl.model_identity(b) != first
    assert bl.model_identity(str(tmp_path / "not_prepared")) is None


def test_a_finished_run_from_another_warm_start_is_not_reused(tmp_path, monkeypatch, capsys):
    """The settings include the model: a run finished from one warm start is not reused once the warm start
    changed (the config files and overrides being the same), and run_all passes the prepared model's identity."""
    runs = _record_runs(monkeypatch)
    out = str(tmp_path / "bench")
    assert bl.settings([], model="warm-start:a") != bl.settings([], model="warm-start:b")
    assert bl.run_one(out, "grpo", 1, 4, False, [], model="warm-start:a") == 0 and len(runs) == 1
    assert bl.run_one(out, "grpo", 1, 4, False, [], model="warm-start:a") == 0 and len(runs) == 1  # reused
    assert bl.run_one(out, "grpo", 1, 4, False, [], model="warm-start:b") == 2 and len(runs) == 1
    assert "the warm start changed" in capsys.readouterr().err
    assert bl.run_one(out, "grpo", 1, 4, True, [], model="warm-start:b") == 0 and len(runs) == 2
    with open(os.path.join(bl.run_dir(out, "grpo", 1), bl.SETTINGS_FILE)) as f:
        assert json.load(f)["model"] == "warm-start:b"
    # through run_all: the identity comes from out/prepare, here a warm start with fingerprint "b"
    prepared, _ = _prepared(str(tmp_path), "b", "b")
    os.makedirs(os.path.join(out, "prepare"), exist_ok=True)
    os.replace(os.path.join(prepared, "prepare.json"), os.path.join(out, "prepare", "prepare.json"))
    assert bl.run_all(out, ["grpo"], [1], 4, False, [], jobs=1) == [] and runs[2:] == ["measure"]  # reused
    # the warm start (not the shipped one) was measured once, into the prepared folder, and read from there
    assert bl.start_reward(os.path.join(out, "prepare"))["reward"] == pytest.approx(0.2)
    assert bl.run_all(out, ["grpo"], [1], 4, False, [], jobs=1) == [] and runs[2:] == ["measure"]


def test_a_failed_measurement_of_the_warm_start_is_named_and_the_runs_go_on(tmp_path, monkeypatch):
    prepared, _ = _prepared(str(tmp_path), "a")
    out = str(tmp_path / "bench")
    os.makedirs(os.path.join(out, "prepare"))
    os.replace(os.path.join(prepared, "prepare.json"), os.path.join(out, "prepare", "prepare.json"))
    monkeypatch.setattr(bl, "prepare", lambda out: 0)
    monkeypatch.setattr(bl.subprocess, "run", lambda cmd, cwd=None: type("P", (), {"returncode": 1})())
    done = []
    monkeypatch.setattr(bl, "run_one", lambda out, v, s, *a, **k: done.append((v, s)) or 0)
    failed = bl.run_all(out, ["grpo"], [1, 2], 4, False, [], jobs=1)
    assert done == [("grpo", 1), ("grpo", 2)]
    assert len(failed) == 1 and failed[0].startswith("measuring the warm start's training reward")


def test_the_figure_plots_reward_held_out_score_labels_cues_and_the_difference_to_grpo(tmp_path, monkeypatch):
    """The panels get the means over the seeds: held-out score (not only the pass share), the label mix, the
    number of cue kinds on and the cue effect per kind, per variant; the last panel each variant's difference to
    GRPO with its interval."""
    pytest.importorskip("matplotlib")
    import matplotlib.axes

    for seed in (1, 2):
        fake_run(tmp_path / f"grpo_s{seed}", [0.2] * 5 + [0.5] * 5, heldout=(0.2, 0.6))
        fake_run(tmp_path / f"seal_s{seed}", [0.2] * 5 + [0.3] * 5, heldout=(0.2, 0.4 + 0.1 * seed),
                 probes={4: probe(4, all=(-0.1 * seed, -0.3, 0.0)), 8: probe(8, all=(0.1, 0.0, 0.2))})
    curves = {v: {s: bl.curve(str(tmp_path / f"{v}_s{s}")) for s in (1, 2)} for v in ("grpo", "seal")}
    drawn, bars = [], []
    real_plot = matplotlib.axes.Axes.plot
    real_errorbar = matplotlib.axes.Axes.errorbar

    def record_bar(ax, x, y, *a, **k):
        bars.append((list(x), list(y), k.get("xerr")))
        return real_errorbar(ax, x, y, *a, **k)

    monkeypatch.setattr(matplotlib.axes.Axes, "errorbar", record_bar)

    def record(ax, x, y, *a, **k):
        drawn.append((ax, k.get("label"), list(x), list(y)))  # titles are set after the lines
        return real_plot(ax, x, y, *a, **k)

    monkeypatch.setattr(matplotlib.axes.Axes, "plot", record)
    lines = []
    real_axhline = matplotlib.axes.Axes.axhline
    monkeypatch.setattr(matplotlib.axes.Axes, "axhline",
                        lambda ax, y=0, *a, **k: lines.append((y, k.get("label"))) or real_axhline(ax, y, *a, **k))
    path = tmp_path / "learning.png"
    bl.plot(curves, str(path), start=0.2)
    assert (0.2, "warm start, no cue (0.200)") in lines  # the rise's baseline, drawn in the reward panel
    assert path.stat().st_size > 10_000
    panel = {(ax.get_title().split(",")[0].split(" (")[0], label): (xs, ys) for ax, label, xs, ys in drawn if label}
    held = panel[("held-out greedy score", "grpo")]
    assert held[0] == [0, 10] and held[1] == pytest.approx([0.2, 0.6])  # the score, mean of the seeds
    assert panel[("training turns by label", "seal: right tool, wrong argument")][1] == pytest.approx([0.5] * 10)
    assert panel[("training turns by label", "seal: missing or malformed call")][1] == pytest.approx([0.0] * 10)
    # schema_constraints from step 3 on
    assert panel[("cue kinds on during the step", "seal")][1] == pytest.approx([0.0, 0.0] + [1.0] * 8)
    assert panel[("training reward per step", "grpo (2 seeds)")][1] == pytest.approx([0.2] * 5 + [0.5] * 5)
    assert panel[("cue effect per kind at each probe", "seal: all")] == ([4, 8], pytest.approx([-0.15, 0.1]))
    # seal minus grpo: last-window reward -0.2 on both seeds (no spread), held-out after -0.1 and 0.0
    (x1, y1, e1), (x2, y2, e2) = bars
    assert x1 == pytest.approx([-0.2]) and e1 == [[pytest.approx(0.0)], [pytest.approx(0.0)]]
    assert x2 == pytest.approx([-0.05]) and y2 == [1]
    half = 12.706 * 0.1 / 2 ** 0.5 / 2 ** 0.5  # sd of (-0.1, 0.0) over sqrt(2), times t with 1 degree of freedom
    assert e2 == [[pytest.approx(half)], [pytest.approx(half)]]


def test_a_damaged_row_costs_that_row_only(tmp_path, capsys):
    """A garbage line in the middle of metrics.jsonl is skipped (and named on stderr); the steps after it stay in
    the curve."""
    fake_run(tmp_path / "grpo_s1", [0.2] * 5 + [0.5] * 5)
    path = tmp_path / "grpo_s1" / "metrics.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:3]) + "{garbage\n" + "".join(lines[3:]))
    c = bl.curve(str(tmp_path / "grpo_s1"))
    assert [x["step"] for x in c["steps"]] == list(range(1, 11))
    assert "metrics.jsonl:4: not valid JSON" in capsys.readouterr().err


def test_the_premise_reading_names_a_run_that_logged_no_step():
    """bench-premise's plain reading over a benchmark where one run was killed before its first step (its seed has
    no row): the reading says what the finished run gave instead of failing (it raised AttributeError)."""
    from bench import bench_premise as bp

    summary = {"grpo": {"per_seed": {1: {"heldout_before": 0.6, "heldout_after": 0.62}}},
               "seal": {"per_seed": {1: None}}}
    text = bp.reading(summary, None, {"grpo": {1: [0.5, 0.5]}})
    assert "grpo (seeds [1]): held-out score without cues 0.600 -> 0.620." in text
