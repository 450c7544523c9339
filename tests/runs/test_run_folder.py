"""The run folder module (``seal_verl/runs/folder.py``): the writer's rows read back as written, damaged rows are
skipped and named instead of raised, ``clean`` removes exactly an earlier run's results, the run scripts ask the
module for the names, and no other installed or recipe module spells a run-folder file name."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from _paths import REPO

from seal_verl.runs import folder as RF
def _state():
    from seal_verl.core.interface import InterfaceConfig
    from seal_verl.core.loop import ClosedLoopState, SealSwitches
    from seal_verl.core.weighting import WeightingConfig

    return ClosedLoopState.initial(SealSwitches(), InterfaceConfig(), WeightingConfig())


def _trace(i: int):
    from _step_rows import trained

    extras = {"seal_labels": json.dumps(["pass", "argument_mismatch"]), "seal_abstention": json.dumps([True, False]),
              "score": np.float32(0.5), "acc": 0.0, "seal_category": "multi_turn_base"}
    fields = {"seal_trace": json.dumps({"task_id": "multi_turn_base_1", "meta": {"interface_active": ["call_format"]}}),
              "task_id": "multi_turn_base_1", "seal_agent_loop": "seal_bfcl", "seal_cue_tokens": np.int64(7)}
    return trained(key=f"u_{i}", uid="u", extras=extras, fields=fields, w=1.25, advantage=0.4, hint_in_text=True,
                   grpo_advantage=0.32, advantage_range=(0.4, 0.4))


EFFECT = {"all": {"with": 0.75, "without": np.float64(0.25), "diff": 0.5, "lo": 0.1, "hi": 0.9, "n_with": 8,
                  "n_without": np.int64(8)}}


def _write_run(path: str, cue_effect=None) -> dict:
    from _step_rows import record

    from seal_verl.runs.rows import step_row, trace_row, val_row

    folder = RF.RunFolder(path)
    state = _state()
    folder.write_config({"seal": {"switches": {"env_side": True}}, "variant": "seal"})
    folder.write_state(1, state)
    step_record = record(1, [_trace(0), _trace(1)], state, state)
    traces = [trace_row(1, t) for t in step_record.trained]
    folder.write_traces(1, traces)
    kwargs = {} if cue_effect is None else {"cue_effect": cue_effect}
    step = step_row(step_record, seconds=2.5, metrics={"seal/step": 1.0, "timing_s/gen": np.float32(0.5)}, **kwargs)
    folder.append_metrics(step)
    val = val_row(global_step=1, key="0", reward_extras={"acc": 1.0, "seal_labels": '["pass"]'},
                  extra_fields={"task_id": "multi_turn_base_9", "seal_agent_loop": "bfcl", "seal_cue_tokens": 0,
                                "seal_trace": "{}"}, score=1.0, hint_in_text=False)
    folder.append_val([val])
    probe = [{"step": 1, "key": "p1", "condition": "with", "kinds": ["call_format"], "task_id": "multi_turn_base_1",
              "passed": True, "acc": 1.0, "score": 1.0, "labels": ["pass"], "cue_tokens": 5}]
    folder.write_probe(1, probe)
    return {"state": state.to_dict(), "traces": traces, "step": step, "val": val, "probe": probe}


def test_what_the_writer_writes_the_reader_reads(tmp_path):
    wrote = _write_run(str(tmp_path))
    data = RF.load(str(tmp_path))
    assert data.damage == [] and data.warnings() == []
    assert data.config == {"seal": {"switches": {"env_side": True}}, "variant": "seal"}
    assert data.states == {1: wrote["state"]}
    # numpy scalars became plain numbers on the way out
    assert data.traces == {1: json.loads(json.dumps(RF.json_safe(wrote["traces"])))}
    assert data.traces[1][0]["reward"] == 0.5 and data.traces[1][0]["cue_tokens"] == 7
    assert data.steps == [json.loads(json.dumps(RF.json_safe(wrote["step"])))]
    assert data.steps[0]["metrics"] == {"seal/step": 1.0, "timing_s/gen": 0.5}
    assert data.validation[0]["task_id"] == "multi_turn_base_9" and data.validation[0]["labels"] == ["pass"]
    assert data.probes == {1: wrote["probe"]}
    assert data.timing is None


def test_rows_on_disk_are_one_json_object_per_line(tmp_path):
    """The bytes older readers (and older folders) rely on: ``json.dumps(row)`` and a newline per row."""
    wrote = _write_run(str(tmp_path))
    with open(tmp_path / RF.METRICS, encoding="utf-8") as f:
        text = f.read()
    assert text == json.dumps(RF.json_safe(wrote["step"]), allow_nan=False) + "\n"
    with open(tmp_path / RF.traces_name(1), encoding="utf-8") as f:
        assert f.read() == "".join(json.dumps(RF.json_safe(r)) + "\n" for r in wrote["traces"])


def test_cue_effect_rides_on_the_step_row(tmp_path):
    """``step_row(cue_effect=...)`` stores the measurement; without it the key is there and None, and a row of an
    older run that has no such key reads the same way."""
    _write_run(str(tmp_path / "with"), cue_effect=EFFECT)
    (row,) = RF.load(str(tmp_path / "with")).steps
    assert row["cue_effect"] == {"all": {"with": 0.75, "without": 0.25, "diff": 0.5, "lo": 0.1, "hi": 0.9,
                                         "n_with": 8, "n_without": 8}}
    _write_run(str(tmp_path / "without"))
    (row,) = RF.load(str(tmp_path / "without")).steps
    assert "cue_effect" in row and row["cue_effect"] is None
    old = tmp_path / "old"
    old.mkdir()
    (old / RF.METRICS).write_text(json.dumps({"step": 1, "global_step": 1, "metrics": {}}) + "\n")
    (row,) = RF.load(str(old)).steps
    assert row.get("cue_effect") is None


def test_damaged_rows_are_skipped_and_named(tmp_path):
    """A complete line that is not a JSON object, and a last line cut by a crash, are skipped; so are damaged
    whole-file JSON (config, state). Nothing raises."""
    _write_run(str(tmp_path))
    with open(tmp_path / RF.METRICS, "a", encoding="utf-8") as f:
        f.write("{not json\n")
        f.write("[1, 2]\n")
        f.write(json.dumps({"step": 2, "global_step": 2}) + "\n")
        f.write('{"step": 3, "glo')  # the write a crash cut short
    (tmp_path / RF.CONFIG).write_text("{")
    (tmp_path / RF.state_name(2)).write_text("[]")
    data = RF.load(str(tmp_path))
    assert [r["global_step"] for r in data.steps] == [1, 2]
    assert data.config == {} and list(data.states) == [1]
    found = {(os.path.basename(d.file), d.line, d.cut) for d in data.damage}
    assert found == {(RF.METRICS, 2, False), (RF.METRICS, 3, False), (RF.METRICS, 5, True),
                     (RF.CONFIG, None, False), (RF.state_name(2), None, False)}
    assert len(data.warnings()) == 5 and len(data.warnings(cut=False)) == 4
    assert any("not valid JSON" in w for w in data.warnings()) and any("not an object" in w for w in data.warnings())


def test_the_shell_interface(tmp_path):
    """What shell scripts call: ``path`` (a name the script never spells)."""
    def call(*args):
        return subprocess.run([sys.executable, "-m", "seal_verl.runs.folder", *args], capture_output=True, text=True,
                              cwd=REPO, timeout=60)

    out = call("path", str(tmp_path), "log")
    assert out.returncode == 0 and out.stdout.strip() == os.path.join(str(tmp_path), RF.LOG)
    bad = call("path", str(tmp_path), "nonsense")
    assert bad.returncode == 2 and "invalid choice" in bad.stderr and "Traceback" not in bad.stderr


def test_every_file_of_a_run_folder_gets_the_same_mode(tmp_path):
    """Round 4: files written whole were 0600 (mkstemp's mode), files appended to 0644."""
    old = os.umask(0o022)
    try:
        _write_run(str(tmp_path))
        RF.write_timing(str(tmp_path), {"exit_code": 0})
    finally:
        os.umask(old)
    modes = {name: oct(os.stat(tmp_path / name).st_mode & 0o777) for name in os.listdir(tmp_path)}
    assert set(modes.values()) == {"0o644"}, modes


def test_nothing_in_the_package_deletes_a_run_folders_files():
    """The clean-up that emptied run folders is gone: every writer claims its folder (seal_verl.outputs)."""
    assert not hasattr(RF, "clean") and not hasattr(RF, "used")


def test_run_cpu_refuses_a_folder_with_an_earlier_run(tmp_path):
    """run_cpu.sh's launcher refuses OUT with an earlier run before anything heavy starts (the lean venv stands in
    for the training venv: this step only needs seal_verl), and the run's files are all still there."""
    out = tmp_path / "run"
    _write_run(str(out))
    before = sorted(os.listdir(out))
    env = dict(os.environ, SEAL_CPU_VENV=sys.prefix, OUT=str(out))
    env.pop("FORCE", None)
    proc = subprocess.run(["bash", os.path.join(REPO, "recipes", "bfcl_v3", "cpu", "run_cpu.sh")], env=env,
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "holds the results of an earlier run" in proc.stderr and "FORCE=1 moves them aside" in proc.stderr
    assert sorted(os.listdir(out)) == before


#: the run-folder names no module but run_folder may spell ("config.json" and "prepare.json" are also a model's
#: and the data preparation's own files, so they are left out)
NAMES = (RF.METRICS, RF.VALIDATION, RF.TIMING, RF.LOG, RF.CHECKPOINT_STATE, "traces_step_", "state_step_",
         "probe_step_")


def _code_strings(path: str) -> list[tuple[int, str]]:
    """String constants of a Python file that are not docstrings (f-string parts included)."""
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    docs = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docs.add(id(first.value))
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs]


def _shell_code(path: str) -> list[tuple[int, str]]:
    return [(i, line) for i, line in enumerate(open(path, encoding="utf-8"), start=1)
            if line.strip() and not line.lstrip().startswith("#")]


def test_file_names_are_spelled_in_run_folder_only():
    found = []
    for top in ("seal_verl", "recipes", "bench", "env_wrappers", "reward_fns"):
        for root, _dirs, files in os.walk(os.path.join(REPO, top)):
            for name in files:
                path = os.path.join(root, name)
                if path == RF.__file__ or not name.endswith((".py", ".sh")):
                    continue
                pieces = _code_strings(path) if name.endswith(".py") else _shell_code(path)
                found += [f"{os.path.relpath(path, REPO)}:{n}" for n, text in pieces if any(x in text for x in NAMES)]
    assert found == [], found


def test_no_module_reads_json_lines_of_its_own():
    """The readers (report, watcher, check, benchmarks) go through run_folder: none opens a run-folder file."""
    for rel in ("seal_verl/runs/report_load.py", "seal_verl/runs/watch.py", "seal_verl/runs/check.py",
                "bench/bench_learning.py", "bench/bench_real_path.py"):
        src = open(os.path.join(REPO, rel), encoding="utf-8").read()
        assert "json.loads(" not in src, rel
        assert "seal_verl.runs.folder" in src or "from seal_verl.runs import folder" in src \
            or "from . import folder" in src, rel


@pytest.mark.parametrize("old", ["recipes/bfcl_v3/cpu/check_run.py"])
def test_the_check_lives_in_the_package(old):
    assert not os.path.exists(os.path.join(REPO, old))
    from seal_verl.cli import build_parser

    args = build_parser().parse_args(["check", "RUN", "--steps", "3"])
    assert args.run_dir == "RUN" and args.steps == 3
