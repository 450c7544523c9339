"""Round-3 hostile input on the ``seal`` config, on resuming from a damaged state, and on ``seal-verl report``
reading rows of the wrong kind: each is one error line naming the key or file, or a warning and the rest kept."""

from __future__ import annotations

import json
import os

import pytest

from seal_verl.verl_glue.config import SealConfigError, parse_seal_config


# ----------------------------------------------------------------------------------------------- the config

@pytest.mark.parametrize("section,key", [
    ({"weighting": {"rho_clip": [0.5] * 1_000_000}}, "seal.weighting.rho_clip"),   # took minutes in the merge
    ({"weighting": {"rho_clip": {"a": 1}}}, "seal.weighting.rho_clip"),            # "seal.: Cannot merge ..."
    ({"weighting": {"rho": {f"k{i}": 1.0 for i in range(100_000)}}}, "seal.weighting.rho"),
    ({"state_actor": {"resources": {f"r{i}": 1 for i in range(100_000)}}}, "seal.state_actor.resources"),
    ({"weighting": {"w_min": 10 ** 400}}, "seal.weighting.w_min"),                  # OverflowError, multi-line
    ({"weighting": {"warmup_steps": 10 ** 30}}, "warmup_steps"),                    # accepted
    ({"weighting": {"n_conf": 10 ** 100}}, "n_conf"),
    ({"interface": {"patience": 10 ** 30}}, "patience"),
    ({"interface": {"max_cue_chars": 10 ** 20}}, "max_cue_chars"),
    ({"state_actor": {"resources": {"x": float("inf")}}}, "seal.state_actor.resources.x"),
    ({"state_dir": "a\x00b"}, "seal.state_dir"),
    ({"run_dir": "x" * 10_000}, "seal.run_dir"),
    ({"weighting": {"w_min": "???"}}, "seal.weighting.w_min"),                       # silently the default
    ({"weighting": {"rho": {"x" * 1_000_000: 1.0}}}, "seal.weighting"),              # a 1 MB message
])
def test_a_hostile_value_is_one_short_line_naming_the_key(section, key):
    with pytest.raises(SealConfigError) as info:
        parse_seal_config(section)
    msg = str(info.value)
    assert "\n" not in msg and key in msg and len(msg) < 500, msg[:600]


@pytest.mark.parametrize("value", ["${nope.x}", "${oc.env:SEAL_ROUND3_UNSET_VARIABLE}"])
def test_an_interpolation_that_fails_is_one_line_naming_the_key(value):
    """OmegaConf raised its own multi-line exception from ``to_container(resolve=True)``."""
    from omegaconf import OmegaConf

    with pytest.raises(SealConfigError) as info:
        parse_seal_config(OmegaConf.create({"run_dir": value}))
    assert "\n" not in str(info.value) and "seal.run_dir" in str(info.value)


def test_limits_leave_ordinary_values_alone():
    cfg = parse_seal_config({"weighting": {"warmup_steps": 1000, "n_conf": 64, "rho_clip": [0.2, 4.0]},
                             "state_actor": {"resources": {"seal": 0.01}}, "run_dir": ""})
    assert cfg.weighting.rho_clip == (0.2, 4.0) and cfg.weighting.warmup_steps == 1000 and cfg.run_dir == ""


# ------------------------------------------------------------------------------------------------- resume

def _state() -> dict:
    from seal_verl.core.interface import InterfaceConfig
    from seal_verl.core.loop import SealSwitches, initial
    from seal_verl.core.weighting import WeightingConfig

    return initial(SealSwitches(), InterfaceConfig(), WeightingConfig()).to_dict()


@pytest.mark.parametrize("field,value", [
    ("retired", [["call_format"]]),            # TypeError: unhashable type: 'list'
    ("retired", [{"a": 1}]),
    ("effect_below", {"call_format": 10 ** 30}),
    ("step", 10 ** 30),
])
def test_a_damaged_interface_field_is_a_state_file_error_naming_it(field, value):
    from seal_verl.core.loop import ClosedLoopState, StateFileError

    d = _state()
    d["interface"][field] = value
    with pytest.raises(StateFileError) as info:
        ClosedLoopState.from_dict(d)
    assert f"interface.{field}" in str(info.value) and "\n" not in str(info.value)


def test_a_huge_step_is_refused():
    from seal_verl.core.loop import ClosedLoopState, StateFileError

    with pytest.raises(StateFileError, match="'step'"):
        ClosedLoopState.from_dict(dict(_state(), step=10 ** 30))


@pytest.mark.parametrize("fmt", [True, 2])
def test_a_checkpoint_of_another_format_names_the_field(tmp_path, fmt):
    """``format: true`` passed as 1; the message did not name the field."""
    from seal_verl.verl_glue.driver import STATE_FILE, SealDriver, SealResumeError

    d = SealDriver(parse_seal_config({}))
    d.end_step(1)
    d.save_to(str(tmp_path))
    path = tmp_path / STATE_FILE
    path.write_text(json.dumps(dict(json.loads(path.read_text()), format=fmt)))
    with pytest.raises(SealResumeError) as info:
        SealDriver(parse_seal_config({})).load_from(str(tmp_path), 1)
    assert "field 'format'" in str(info.value) and str(path) in str(info.value)


# -------------------------------------------------------------------------------------------------- report

@pytest.fixture(scope="module")
def good_run(tmp_path_factory):
    from bench.bench_report import write_run

    path = str(tmp_path_factory.mktemp("run") / "run")
    write_run(path, steps=3, rollouts=2, val_every=1, probe_every=1)
    return path


def _copy_with(good_run, tmp_path, last_row=None, val_row=None, extra=None) -> str:
    import shutil

    run = str(tmp_path / "run")
    shutil.copytree(good_run, run)
    for name, change in (("metrics.jsonl", last_row), ("val_traces.jsonl", val_row)):
        if change:
            rows = [json.loads(x) for x in open(os.path.join(run, name))]
            rows[-1].update(change)
            open(os.path.join(run, name), "w").write("".join(json.dumps(r) + "\n" for r in rows))
    if extra:
        extra(run)
    return run


@pytest.mark.parametrize("change", [
    {"metrics": None}, {"metrics": [1, "a"]}, {"active_during": 5}, {"active_during": [1, "a"]},
    {"w_mean": "x"}, {"success_rate": {"a": 1}}, {"cue_tokens_max": [1]}, {"prevalence": ["x"]},
    {"rho": {"pass": "high"}}, {"global_step": "x"},
    {"cue_effect": 5}, {"cue_effect": {"effects": 5}}, {"cue_effect": {"effects": {"all": 5}}},
    {"cue_effect": {"effects": {"all": {"diff": "x", "lo": 0, "hi": 1}}}},
    {"cue_effect": {"effects": {"all": {"diff": 0.1, "lo": 0.0, "hi": 0.2, "with": "x", "without": None}}}},
    {"w_std": 1e308},
], ids=lambda c: json.dumps(c)[:40])
def test_a_step_row_of_the_wrong_kind_costs_that_field_only(good_run, tmp_path, change):
    from seal_verl.runs.report import build_report

    rep = build_report([_copy_with(good_run, tmp_path, last_row=change)], str(tmp_path / "out"))
    assert "Table 1 form" in rep.text and len(rep.pngs) >= 1
    assert rep.warnings or change == {"metrics": None}  # null is an absent field, not damage


@pytest.mark.parametrize("change", [{"global_step": "x"}, {"acc": "x"}, {"global_step": float("nan")}])
def test_a_validation_row_of_the_wrong_kind_is_skipped_with_a_warning(good_run, tmp_path, change):
    from seal_verl.runs.report import load_run

    run = load_run(_copy_with(good_run, tmp_path, val_row=change))
    assert any("val_traces.jsonl" in w for w in run.warnings) and run.validation


def test_a_nesting_too_deep_for_the_parser_is_a_skipped_line(good_run, tmp_path):
    """json raised RecursionError, which the readers did not catch."""
    def damage(run):
        with open(os.path.join(run, "metrics.jsonl"), "a") as fh:
            fh.write("[" * 100_000 + "]" * 100_000 + "\n")
        with open(os.path.join(run, "traces_step_2.jsonl"), "w") as fh:
            fh.write("[" * 100_000 + "\n")

    from seal_verl.runs.report import load_run

    run = load_run(_copy_with(good_run, tmp_path, extra=damage))
    assert len(run.steps) == 3 and run.weights[2] == [] and sum("not valid JSON" in w for w in run.warnings) == 2


def test_an_unreadable_trace_file_costs_its_weights_only(good_run, tmp_path):
    from seal_verl.runs.report import load_run

    run = load_run(_copy_with(good_run, tmp_path, extra=lambda r: os.mkdir(os.path.join(r, "traces_step_7.jsonl"))))
    assert len(run.steps) == 3 and run.weights[7] == [] and any("traces_step_7" in w for w in run.warnings)


def test_an_eval_folder_with_malformed_scores_and_labels(tmp_path):
    from seal_verl.runs.report import build_report

    ev = tmp_path / "eval"
    ev.mkdir()
    (ev / "scores.json").write_text(json.dumps({"protocol": 5, "categories": {
        "multi_turn_base": {"accuracy": 0.5, "n": 2}, "multi_turn_miss_func": 5,
        "multi_turn_miss_param": {"accuracy": "x", "n": 1}}}))
    (ev / "labels.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [
        {"id": "multi_turn_base_0", "category": "multi_turn_base", "valid": True, "labels": ["pass"]},
        {"id": 5, "category": [1], "labels": [[1]]}, {"labels": 5}]))
    rep = build_report([str(ev)], str(tmp_path / "out"))
    assert "50.00" in rep.text and len(rep.warnings) == 2


def test_a_10000_step_folder_reports_every_step(tmp_path):
    from bench.bench_report import write_run
    from seal_verl.runs.report import load_run

    write_run(str(tmp_path / "run"), steps=10_000, rollouts=1, val_every=0, probe_every=0)
    run = load_run(str(tmp_path / "run"))
    assert [r["step"] for r in run.steps] == list(range(1, 10_001)) and not run.warnings
