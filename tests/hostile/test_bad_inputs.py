"""Damaged state files, bad settings and command-line mistakes end in one clear line, never a traceback.

- a saved closed-loop state is checked field by field on load; every problem names the file and the field;
- boolean options accept booleans and YAML's spellings of them, nothing else; ``rho`` must be a mapping;
- temporary files of interrupted atomic saves are removed by the next save or load;
- the command line checks its outputs before any work, never replaces a file without ``--force``, never
  reads a device, and rejects out-of-range numbers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from _paths import REPO

from seal_verl.cli import build_parser, main
from seal_verl.core.interface import CUE_KINDS, InterfaceConfig
from seal_verl.core.loop import ClosedLoopState, SealSwitches
from seal_verl.verl_glue.config import SealConfigError, parse_seal_config
from seal_verl.core.weighting import WeightingConfig

ROOT = REPO


def _state_dict() -> dict:
    return ClosedLoopState.initial(SealSwitches(), InterfaceConfig(), WeightingConfig()).to_dict()


def _write(tmp_path, content) -> str:
    path = tmp_path / "seal_state.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return str(path)


def _one_line_naming(exc: BaseException, *parts: str) -> None:
    text = str(exc)
    assert "\n" not in text, text
    for p in parts:
        assert p in text, f"{p!r} not in {text!r}"


@pytest.mark.parametrize("content", ["", "   \n", '{"version": 1, "step": 3, "interf', "[]", "null", "[1, 2]", '"x"'],
                         ids=["empty", "blank", "truncated", "list", "null", "list2", "string"])
def test_damaged_state_files_name_the_file(tmp_path, content):
    path = _write(tmp_path, content)
    with pytest.raises(ValueError) as info:
        ClosedLoopState.load(path)
    _one_line_naming(info.value, path)


def _mutated(**changes) -> dict:
    d = _state_dict()
    for dotted, value in changes.items():
        cur = d
        parts = dotted.split("__")
        for p in parts[:-1]:
            cur = cur[p]
        cur[parts[-1]] = value
    return d


KIND = next(iter(CUE_KINDS))

BAD_STATES = {
    "ema_nan": (lambda: _mutated(prevalence_ema={"pass": float("nan")}), "prevalence_ema.pass"),
    "ema_above_one": (lambda: _mutated(prevalence_ema={"pass": 1.5}), "prevalence_ema.pass"),
    "ema_unknown_key": (lambda: _mutated(prevalence_ema={"no_such_label": 0.1}), "prevalence_ema"),
    "rate_ema_negative": (lambda: _mutated(rate_ema={"pass": -0.5}), "rate_ema.pass"),
    "active_string_false": (lambda: _mutated(interface__active={KIND: "false"}), f"interface.active.{KIND}"),
    "streak_negative": (lambda: _mutated(interface__streak_below={KIND: -1}), f"interface.streak_below.{KIND}"),
    "version_string": (lambda: _mutated(version="1"), "version"),
    "step_string": (lambda: _mutated(step="3"), "step"),
    "rho_list": (lambda: _mutated(rho=[1, 2]), "rho"),
    "interface_null": (lambda: _mutated(interface=None), "interface"),
    "missing_step": (lambda: {k: v for k, v in _state_dict().items() if k != "step"}, "step"),
}


@pytest.mark.parametrize("name", sorted(BAD_STATES))
def test_invalid_state_fields_fail_on_load_naming_file_and_field(tmp_path, name):
    make, field_name = BAD_STATES[name]
    path = _write(tmp_path, json.dumps(make()))
    with pytest.raises(ValueError) as info:
        ClosedLoopState.load(path)
    _one_line_naming(info.value, path, field_name)
    assert "this code reads 1" not in str(info.value) or "version" not in field_name or "'1'" in str(info.value)


def test_valid_state_round_trips(tmp_path):
    s = ClosedLoopState.initial(SealSwitches(), InterfaceConfig(), WeightingConfig())
    s.prevalence_ema = {"pass": 0.25}
    path = str(tmp_path / "s.json")
    s.save(path)
    assert ClosedLoopState.load(path).to_dict() == s.to_dict()


def test_leftover_temp_files_are_removed_by_the_next_save_and_load(tmp_path):
    s = ClosedLoopState.initial(SealSwitches(), InterfaceConfig(), WeightingConfig())
    path = str(tmp_path / "seal_state.json")
    old = time.time() - 3600

    def leave(n):
        for i in range(n):
            p = tmp_path / f".seal_state.killed{i}.tmp"
            p.write_text('{"partial')
            os.utime(p, (old, old))

    leave(12)
    s.save(path)
    assert sorted(os.listdir(tmp_path)) == ["seal_state.json"]
    leave(3)
    ClosedLoopState.load(path)
    assert sorted(os.listdir(tmp_path)) == ["seal_state.json"]


# ----------------------------------------------------------------------------------------------------------
# settings


@pytest.mark.parametrize("section,key", [("weighting", "dynamic"), ("interface", "enabled"),
                                         ("interface", "fixed_all_on"), ("interface", "proactive_cues")])
@pytest.mark.parametrize("spelling,value", [("false", False), ("False", False), ("no", False), ("off", False),
                                            ("true", True), ("yes", True), ("on", True)])
def test_boolean_options_read_yaml_spellings(section, key, spelling, value):
    cfg = parse_seal_config({section: {key: spelling}})
    assert getattr(getattr(cfg, section), key) is value


@pytest.mark.parametrize("section,key", [("weighting", "dynamic"), ("interface", "enabled"),
                                         ("interface", "fixed_all_on"), ("interface", "proactive_cues"),
                                         ("switches", "closed_loop")])
@pytest.mark.parametrize("bad", ["maybe", 1, 0, [True], "", None.__class__.__name__])
def test_boolean_options_reject_other_values(section, key, bad):
    with pytest.raises(SealConfigError) as info:
        parse_seal_config({section: {key: bad}})
    _one_line_naming(info.value, f"seal.{section}.{key}")


@pytest.mark.parametrize("rho", [[1, 2], "pass: 1", 3])
def test_rho_must_be_a_mapping(rho):
    with pytest.raises(SealConfigError) as info:
        parse_seal_config({"weighting": {"rho": rho}})
    _one_line_naming(info.value, "seal.weighting.rho")


# ----------------------------------------------------------------------------------------------------------
# command line


def _run_cli(capsys, *argv) -> tuple[int, str]:
    rc = main(list(argv))
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return rc, err


def _single_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), err
    return lines[0]


@pytest.fixture()
def a_file(tmp_path):
    p = tmp_path / "plain.txt"
    p.write_text("user data\n")
    return p


def test_prepare_data_output_mistakes(tmp_path, capsys, a_file):
    for out in (str(a_file), str(a_file / "sub"), "/proc/1/seal_out"):
        rc, err = _run_cli(capsys, "prepare-data", "--out", out)
        assert rc == 2
        _single_error_line(err)
    assert a_file.read_text() == "user data\n"


def test_prepare_data_never_overwrites_without_force(tmp_path, capsys):
    out = tmp_path / "data"
    out.mkdir()
    (out / "train.parquet").write_text("precious")
    rc, err = _run_cli(capsys, "prepare-data", "--out", str(out))
    assert rc == 2 and "--force" in _single_error_line(err)
    assert (out / "train.parquet").read_text() == "precious"
    rc, _ = _run_cli(capsys, "prepare-data", "--out", str(out), "--force")
    assert rc == 0
    assert (out / "train.parquet").read_bytes()[:4] == b"PAR1"


@pytest.fixture()
def results(tmp_path):
    src = tmp_path / "results.jsonl"
    src.write_text(json.dumps({"id": "multi_turn_base_0", "result": [[] for _ in range(3)]}) + "\n")
    return src


@pytest.mark.parametrize("option", ["--out", "--plot"])
def test_diagnose_output_mistakes(tmp_path, capsys, results, a_file, option):
    for target in (str(tmp_path), str(a_file / "x.out"), "/proc/1/seal/x.out"):
        rc, err = _run_cli(capsys, "diagnose", str(results), option, target, "--no-progress")
        assert rc == 2, target
        _single_error_line(err)
    rc, err = _run_cli(capsys, "diagnose", str(results), option, str(a_file), "--no-progress")
    assert rc == 2 and "--force" in _single_error_line(err)
    assert a_file.read_text() == "user data\n"


def test_diagnose_refuses_a_device_instead_of_reading_it_forever():
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))

    def cap_memory():  # the old reader grew without bound: keep a failure from taking the host with it
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (3 * 2**30, 3 * 2**30))

    proc = subprocess.run([sys.executable, "-m", "seal_verl.cli", "diagnose", "/dev/zero", "--no-progress"],
                          capture_output=True, text=True, timeout=120, env=env, preexec_fn=cap_memory)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    assert "not a regular file" in proc.stderr


def test_overlong_lines_are_skipped_with_a_warning(tmp_path, monkeypatch):
    from env_wrappers.bfcl.evaluation import result_files

    monkeypatch.setattr(result_files, "MAX_LINE_BYTES", 1000)
    p = tmp_path / "r.jsonl"
    good = json.dumps({"id": "multi_turn_base_0", "result": []})
    p.write_text("x" * 5000 + "\n" + good + "\n")
    items = list(result_files.read_entries(str(p), {"multi_turn_base_0"}))
    assert isinstance(items[0], result_files.ReadProblem) and "longer than" in items[0].message
    assert isinstance(items[1], result_files.ResultEntry) and items[1].line == 2


@pytest.mark.parametrize("argv", [["--steps", "-1"], ["--steps", "0"], ["--val-tasks", "-3"], ["--rollouts", "0"],
                                  ["--tasks-per-step", "0"], ["--ablation", "no_such"]])
def test_dry_run_rejects_out_of_range_numbers(argv, capsys):
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(["dry-run", *argv])
    assert info.value.code == 2
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize("spelling,switch", [("no_env_side", "env_side"), ("no-env-side", "env_side"),
                                             ("no_reweighting", "reweighting"), ("no-closed-loop", "closed_loop")])
def test_dry_run_ablation_uses_the_recipe_names(spelling, switch):
    from seal_verl.cli import ABLATIONS

    args = build_parser().parse_args(["dry-run", "--ablation", spelling])
    assert ABLATIONS[args.ablation] == switch


def test_dry_run_options_have_help():
    p = build_parser()
    sub = next(a for a in p._actions if a.dest == "command").choices["dry-run"]
    missing = [a.dest for a in sub._actions if a.dest != "help" and not a.help]
    assert not missing, f"dry-run options without help text: {missing}"


# ----------------------------------------------------------------------------------------------------------
# resuming from a checkpoint's seal_state.json


def _checkpoint_state(tmp_path, content) -> tuple:
    from seal_verl.verl_glue.config import parse_seal_config
    from seal_verl.verl_glue.driver import STATE_FILE, SealDriver

    d = SealDriver(parse_seal_config({}))
    folder = tmp_path / "global_step_1"
    folder.mkdir()
    d.end_step(1)
    d.save_to(str(folder))
    path = folder / STATE_FILE
    if content is not None:
        env = json.loads(path.read_text())
        path.write_text(content(env) if callable(content) else content)
    return SealDriver(parse_seal_config({})), str(folder), str(path)


@pytest.mark.parametrize("content", [
    "", '{"format": "seal', "[]", "null",
    lambda env: json.dumps(dict(env, state=None)),
    lambda env: json.dumps(dict(env, state=[1])),
    lambda env: json.dumps(dict(env, state=dict(env["state"], prevalence_ema={"pass": float("nan")}))),
    lambda env: json.dumps(dict(env, global_step="1")),
], ids=["empty", "truncated", "list", "null", "state_null", "state_list", "ema_nan", "step_string"])
def test_resume_from_a_damaged_checkpoint_state_names_the_file(tmp_path, content):
    from seal_verl.verl_glue.driver import SealResumeError

    driver, folder, path = _checkpoint_state(tmp_path, content)
    with pytest.raises(SealResumeError) as info:
        driver.load_from(folder, 1)
    _one_line_naming(info.value, path)


def test_resume_from_a_good_checkpoint_state(tmp_path):
    driver, folder, _ = _checkpoint_state(tmp_path, None)
    driver.load_from(folder, 1)
    assert driver.state.step == 1
