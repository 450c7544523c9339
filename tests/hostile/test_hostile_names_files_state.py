"""Hostile input on the third round's remaining surfaces (the reward function, the config, resume and the report
are ``tests/hostile/test_hostile_reward_eval_diagnose.py`` and ``tests/hostile/test_hostile_config_resume_report.py``):

- environment names: import paths that are not import paths, code that fails while it loads (by import path and
  by entry point), built-ins named as factories, huge and multi-line names: one line naming the environment;
- the files of ``diagnose`` and ``prepare-data``: a missing, unreadable or wrong kind of input is one line and exit
  status 2 before any work; an output that is the input is refused before anything is written;
- ``diagnose`` given one result file twice (by path, link or folder) judges it once and says so;
- the closed-loop state on disk stays the same size however long the run, and a resume restores what it did.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

from _paths import TESTS

from env_wrappers.registry import EnvironmentLoadError, get_environment
from seal_verl.cli import main

TASK = "multi_turn_base_0"


def _one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), err[:2000]
    assert "Traceback" not in err
    return lines[0]


def _module(folder, monkeypatch, name: str, body: str) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.py").write_text(body)
    monkeypatch.syspath_prepend(str(folder))
    return name


# -------------------------------------------------------------------------------------- environment names

MARKER = "import pathlib\npathlib.Path(__file__).with_name('imported').write_text('yes')\nclass E:\n    pass\n"


FORMS = ["{m}:E/../x", "{m}:E x", "{m}:E;x", "{m}.:E", "../{m}:E", "{m}:E\n"]


@pytest.mark.parametrize("form", FORMS)
def test_a_name_that_is_no_import_path_imports_nothing(tmp_path, monkeypatch, form):
    """``module:E/../x`` and the like imported ``module`` (running its top-level code) and then failed on the
    attribute; ``../module:E`` failed inside importlib with an unrelated TypeError."""
    m = _module(tmp_path / "mods", monkeypatch, f"seal_r3_marker_{FORMS.index(form)}", MARKER)
    with pytest.raises(KeyError) as err:
        get_environment(form.format(m=m))
    assert len(str(err.value).splitlines()) == 1 and len(str(err.value)) < 400
    assert not (tmp_path / "mods" / "imported").exists(), "the module was imported"


BROKEN = {
    "raises": "raise RuntimeError('broken at import')\n",
    "syntax": "def f(:\n",
    "exits": "import sys\nsys.exit(3)\n",
    "constructor": ("from env_wrappers.protocol import Environment\nclass E(Environment):\n"
                    "    def __init__(self):\n        raise OSError('no data here')\n"),
}


@pytest.fixture
def entry_point_dist(tmp_path, monkeypatch):
    """Declares entry points in the group ``seal_verl.environments`` from an installed-looking dist-info folder."""
    def declare(name: str, value: str) -> str:
        dist = tmp_path / "site" / "seal_r3_broken-0.1.dist-info"
        dist.mkdir(parents=True)
        (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: seal-r3-broken\nVersion: 0.1\n")
        (dist / "entry_points.txt").write_text(f"[seal_verl.environments]\n{name} = {value}\n")
        monkeypatch.syspath_prepend(str(tmp_path / "site"))
        return name

    return declare


@pytest.mark.parametrize("via", ["import-path", "entry-point"])
@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_code_that_fails_to_load_is_one_line_naming_the_environment(tmp_path, monkeypatch, capsys,
                                                                    entry_point_dist, kind, via):
    """The module's own exception (RuntimeError, SyntaxError, SystemExit, OSError) came through with its
    traceback, from the dry run's ``--env`` check too; ``sys.exit`` at import ended the command with status 3."""
    m = _module(tmp_path / "mods", monkeypatch, f"seal_r3_{kind}_{via.replace('-', '_')}", BROKEN[kind])
    name = f"{m}:E" if via == "import-path" else entry_point_dist(f"seal_r3_{kind}_ep", f"{m}:E")
    with pytest.raises(EnvironmentLoadError) as err:
        get_environment(name)
    text = str(err.value)
    assert len(text.splitlines()) == 1 and repr(name) in text and "cannot be loaded" in text, text

    out = tmp_path / "run"
    assert main(["dry-run", "--env", name, "--out", str(out), "--no-progress"]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert repr(name) in line
    assert not out.exists()


@pytest.mark.parametrize("name", ["sys:exit", "builtins:input", "os:getcwd", "os.path:sep"])
def test_what_is_neither_an_environment_nor_its_factory_is_never_called(capsys, name):
    """Anything callable at the path was called to see whether it made an environment: ``sys:exit`` ended the
    command (status 0, no message), ``builtins:input`` read the terminal."""
    with pytest.raises(EnvironmentLoadError, match="not an environment"):
        get_environment(name)
    assert main(["dry-run", "--env", name, "--no-progress"]) == 2
    assert repr(name) in _one_error_line(capsys.readouterr().err)


@pytest.mark.parametrize("name", ["x" * 200_000, "a." * 1000 + "b:C", "bfcl\nerror: a line of its own"],
                         ids=["huge", "deep-import-path", "line-break"])
def test_a_huge_or_multi_line_name_is_one_short_line(tmp_path, capsys, name):
    """The huge name came back twice in a 400 KB line, the deep path was a RecursionError traceback, and a line
    break in the name printed a second line of its own choosing."""
    assert main(["dry-run", "--env", name, "--out", str(tmp_path / "run"), "--no-progress"]) == 2
    assert len(_one_error_line(capsys.readouterr().err)) < 400


@pytest.mark.parametrize("env", ["x" * 100_000, "sys:exit", "seal_r3_reward_broken:E"])
def test_the_reward_function_names_a_hostile_environment_in_one_line(tmp_path, monkeypatch, env):
    """The environment a dataset row names (``extra_info.env``), as the reward function resolves it."""
    from reward_fns.seal_reward import compute_score

    _module(tmp_path, monkeypatch, "seal_r3_reward_broken", BROKEN["raises"])
    trace = json.dumps({"task_id": "t", "turns": [], "meta": {}})
    with pytest.raises((KeyError, EnvironmentLoadError)) as err:
        compute_score("d", "", None, {"seal_trace": trace, "env": env, "task_id": "t"})
    assert len(str(err.value).splitlines()) == 1 and len(str(err.value)) < 400


# ------------------------------------------------------------------------------------ input and output files


@pytest.fixture()
def results(tmp_path):
    src = tmp_path / "results" / "r.jsonl"
    src.parent.mkdir()
    src.write_text(json.dumps({"id": TASK, "result": [[] for _ in range(4)]}) + "\n")
    return src


def _unreadable(path):
    if os.geteuid() == 0:
        pytest.skip("root reads a file whatever its mode")
    path.chmod(0)
    return path


@pytest.mark.parametrize("case", ["missing", "missing-beside-a-good-one", "device", "unreadable"])
def test_diagnose_refuses_an_input_it_cannot_read_before_judging(tmp_path, capsys, results, case):
    """A missing input was a warning: alone it ended in "no valid result entries" (status 1, three lines), beside
    a readable file the run went on without it (status 0)."""
    bad = {"missing": lambda: str(tmp_path / "missing.jsonl"),
           "missing-beside-a-good-one": lambda: str(tmp_path / "missing.jsonl"),
           "device": lambda: os.devnull,
           "unreadable": lambda: str(_unreadable(tmp_path / "locked.jsonl"))}[case]
    if case == "unreadable":
        (tmp_path / "locked.jsonl").write_text(results.read_text())
    inputs = [str(results), bad()] if case == "missing-beside-a-good-one" else [bad()]
    out = tmp_path / "labels.jsonl"
    rc = main(["diagnose", *inputs, "--out", str(out), "--no-progress"])
    line = _one_error_line(capsys.readouterr().err)
    assert rc == 2 and bad() in line
    assert not out.exists()


@pytest.mark.parametrize("which", ["train.parquet", "eval.parquet"])
def test_prepare_data_refuses_to_write_over_its_split_file(tmp_path, capsys, which):
    """With ``--force`` the split file was read and then replaced by the parquet file made from it."""
    out = tmp_path / "data"
    out.mkdir()
    split = out / which
    text = json.dumps({"train": [TASK], "eval": ["multi_turn_base_1"]})
    split.write_text(text)
    rc = main(["prepare-data", "--out", str(out), "--split-file", str(split), "--force"])
    line = _one_error_line(capsys.readouterr().err)
    assert rc == 2 and "is the input" in line
    assert split.read_text() == text


@pytest.mark.parametrize("case", ["folder", "device", "unreadable"])
def test_prepare_data_names_a_split_file_it_cannot_read(tmp_path, capsys, case):
    """A folder given as the split file was "split file not found"."""
    split = {"folder": lambda: tmp_path,
             "device": lambda: os.devnull,
             "unreadable": lambda: _unreadable(tmp_path / "split.json")}
    if case == "unreadable":
        (tmp_path / "split.json").write_text(json.dumps({"train": [TASK], "eval": ["multi_turn_base_1"]}))
    path = str(split[case]())
    rc = main(["prepare-data", "--out", str(tmp_path / "data"), "--split-file", path])
    line = _one_error_line(capsys.readouterr().err)
    assert rc == 2 and f"--split-file {path}:" in line
    assert {"folder": "is a folder", "device": "not a regular file", "unreadable": "permission"}[case] in line


def test_report_and_eval_outputs_guard(tmp_path, capsys):
    """A guard (this held before the round): ``report`` and ``eval`` with ``--out`` a file, below a file, or in a
    folder that does not exist yet."""
    sys.path.insert(0, TESTS)
    from _replay_server import ReplayServer

    from bench.bench_report import write_run

    run = str(tmp_path / "run")
    write_run(run, steps=2, rollouts=2, val_every=1, probe_every=1)
    plain = tmp_path / "plain.txt"
    plain.write_text("keep\n")
    with ReplayServer({"m": {}}, {}) as server:
        for cmd in (["report", run], ["eval", "--base-url", server.url, "--model", "m", "--ids", TASK,
                                      "--retries", "0", "--no-progress"]):
            for out in (plain, plain / "sub"):
                assert main([*cmd, "--out", str(out)]) == 2
                _one_error_line(capsys.readouterr().err)
        assert main(["report", run, "--out", str(tmp_path / "new" / "report")]) == 0
    assert plain.read_text() == "keep\n"
    assert (tmp_path / "new" / "report" / "report.html").exists()


# ------------------------------------------------------------------------------------- one file named twice


@pytest.mark.parametrize("how", ["same-path", "symlink", "its-folder"])
def test_diagnose_judges_a_file_named_twice_once(tmp_path, capsys, results, how):
    """It was judged twice: two rows of one result in ``--out`` and the task counted twice in the table."""
    second = {"same-path": lambda: results, "its-folder": lambda: results.parent}.get(how)
    if second is None:
        os.symlink(results, tmp_path / "link.jsonl")
        second = lambda: tmp_path / "link.jsonl"  # noqa: E731
    out = tmp_path / "labels.jsonl"
    rc = main(["diagnose", str(results), str(second()), "--out", str(out), "--no-progress"])
    captured = capsys.readouterr()
    assert rc == 0
    assert len(out.read_text().splitlines()) == 1
    warnings = [x for x in captured.err.splitlines() if x.startswith("warning:")]
    assert len(warnings) == 1 and "judged once" in warnings[0] and str(results) in warnings[0]
    assert " 1 " in next(x for x in captured.out.splitlines() if x.startswith("multi_turn_base"))


# ---------------------------------------------------------------------------------- the closed-loop state


def _run_loop(steps: int, state=None):
    from seal_verl.core.interface import InterfaceConfig
    from seal_verl.core.loop import SealSwitches, closed_loop_step, initial
    from seal_verl.core.profile import TrajectoryRecord
    from seal_verl.core.weighting import WeightingConfig

    sw, icfg, wcfg = SealSwitches(), InterfaceConfig(), WeightingConfig()
    state = state or initial(sw, icfg, wcfg)
    labels = ["pass", "argument_mismatch", "state_mismatch", "missing_tool_call"]
    for _ in range(steps):
        k = state.step
        recs = [TrajectoryRecord(labels=[labels[(k + i) % 4], labels[(k * i) % 4]], abstention=[False, False],
                                 category="multi_turn_base", reward=float(i % 2)) for i in range(4)]
        state, _ = closed_loop_step(state, recs, sw, icfg, wcfg)
    return state


def _size(state) -> int:
    return len(json.dumps(state.to_dict(), indent=1, sort_keys=True))


def test_a_state_file_stays_the_same_size_however_long_the_run(tmp_path):
    """Every state carried the whole history: 1.7 MB a file after 1,000 steps, 17 MB after 10,000, and the run
    folder's per-step state files 84 GB together (``python -m bench.bench_state``)."""
    from seal_verl.core import loop
    at_100 = _run_loop(100)
    at_600 = _run_loop(500, at_100)
    assert _size(at_600) <= _size(at_100) * 1.05, (_size(at_100), _size(at_600))
    assert len(at_600.history) == loop.HISTORY_WINDOW
    assert at_600.history_start + len(at_600.history) == at_600.step == 600
    assert [r["step"] for r in at_600.history] == list(range(600 - loop.HISTORY_WINDOW, 600))


def test_a_resume_restores_the_same_state_and_continues_alike(tmp_path):
    """A guard: the saved checkpoint state restores what the loop uses (interface, rho, EMAs, step), and the
    resumed driver's next steps equal those of the run that never stopped."""
    from seal_verl.verl_glue.config import parse_seal_config
    from seal_verl.verl_glue.driver import SealDriver

    d = SealDriver(parse_seal_config({}))
    d.state = _run_loop(40)
    d.global_step = 40
    d.save_to(str(tmp_path))
    resumed = SealDriver(parse_seal_config({}))
    resumed.load_from(str(tmp_path), 40)
    assert resumed.state.to_dict() == d.state.to_dict()
    assert _run_loop(5, resumed.state).to_dict() == _run_loop(5, d.state).to_dict()


def test_a_state_saved_with_its_whole_history_still_resumes(tmp_path):
    """A state file written before the history was bounded loads as it was and is bounded from its next step."""
    from seal_verl.core import loop
    long = _run_loop(40)
    old = long.to_dict()
    old.pop("history_start")
    old["history"] = [dict(old["history"][0], step=i) for i in range(40)]
    (tmp_path / "s.json").write_text(json.dumps(old))
    state = loop.ClosedLoopState.load(tmp_path / "s.json")
    assert len(state.history) == 40 and state.history_start == 0 and state.rho == long.rho
    nxt = _run_loop(1, state)
    assert nxt.history_start + len(nxt.history) == 41 and len(nxt.history) == loop.HISTORY_WINDOW


def test_check_accepts_bounded_states_and_their_resume(tmp_path):
    """``seal-verl check``'s state and resume checks read the bounded history (the row counts they compared
    with the step would fail every run past the window)."""
    from seal_verl.runs import check as run_check
    from seal_verl.runs import folder as RF
    folder = RF.RunFolder(str(tmp_path / "run"))
    states = {}
    state = None
    for k in range(1, 41):
        state = _run_loop(1, state)
        folder.write_state(k, state)
        folder.append_metrics({"step": k, "global_step": k, "prevalence": state.history[-1]["prevalence"]})
        states[k] = state.to_dict()
    rep = run_check.Report()
    run_check.check_state(run_check.Run(folder.path), rep)
    assert rep.ok, rep.text()
    assert run_check._continues(states[40], states[30]) and not run_check._continues(states[40], states[3])
    changed = json.loads(json.dumps(states[40]))
    changed["history"][-5]["success_rate"] = 0.123
    assert not run_check._continues(changed, states[39])
