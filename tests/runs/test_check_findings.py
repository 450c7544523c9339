"""``seal-verl check`` checks what it says it checks (round 4): the probe's numbers recomputed at the run's configured
confidence (NaN, a wrong difference, a wrong count fail), a retired cue kind expected, the run's settings read with
their defaults (a config without a ``cue_effect`` section still has the probe), an unreadable config named instead
of judged as "every switch off", two runs in one folder, fault injection, an exit code that is a string, NaN
rewards, and step files of steps no run logged. The folders are written by the run folder's own writer
(``seal_verl.runs.folder.RunFolder``); the probe's numbers come from ``seal_verl.core.cue_effect``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from _paths import REPO
from seal_verl.core import cue_effect as ce
from seal_verl.core.interface import InterfaceState, retire
from seal_verl.core.settings import SealSettings
from seal_verl.runs import check as CHECK
from seal_verl.runs import folder as RF

CF = "call_format"


def _probe(step: int, active: list, passed: dict, confidence: float, retire_after: int = 0) -> tuple[dict, list]:
    """A probe's summary and rollout rows as the run folder keeps them: ``passed[condition]`` the verdicts of its
    rollouts (two tasks); with ``retire_after``, the kinds the closed loop retires on it."""
    conds = ce.conditions(active)
    rows = []
    for name in ce.distinct(conds):
        for i, ok in enumerate(passed[name]):
            rows.append({"step": step, "key": f"{name}-{i}", "condition": name, "kinds": sorted(conds[name]),
                         "task_id": f"t{i % 2}", "passed": bool(ok), "reward": float(ok), "acc": float(ok),
                         "score": float(ok), "labels": ["pass" if ok else "invalid_tool_call"],
                         "cue_tokens": 4 if conds[name] else 0})
    records = [ce.ProbeRecord(r["condition"], r["task_id"], r["passed"], r["reward"]) for r in rows]
    found = ce.effects(records, active, confidence)
    retired = []
    if retire_after:
        _, gone = ce.retire_update({}, found, retire_after)
        retired = sorted(retire(InterfaceState(), gone, {}).retired)
    summary = {"step": step, "active": list(active), "tasks": ["t0", "t1"], "samples": len(passed[ce.NONE]) // 2,
               "n_rollouts": len(rows), "confidence": confidence,
               "effects": {k: e.to_dict() for k, e in found.items()}, "retired": retired}
    return summary, rows


def _run(tmp_path, steps: list[dict], seal: dict, **config) -> str:
    """A run folder: config.json (``seal`` a section of SealSettings.to_dict, the rest defaults) and one
    metrics row per step: ``{"active": [...], "probe": (summary, rows) or None}``."""
    path = str(tmp_path / "run")
    folder = RF.RunFolder(path)
    folder.write_config({"seal": seal, "dry_run": {}, **config})
    for k, step in enumerate(steps, start=1):
        probe = step.get("probe")
        metrics = step.get("metrics", {})
        if probe:
            folder.write_probe(k, probe[1])
            if "metrics" not in step:
                metrics = ce.metrics({key: ce.Effect.from_dict(e) for key, e in probe[0]["effects"].items()},
                                     probe[0]["n_rollouts"])
        folder.append_metrics({"step": k, "global_step": k, "active_during": step["active"], "metrics": metrics,
                               "cue_effect": probe[0] if probe else None})
    return path


def _seal(**cue_effect) -> dict:
    """The ``seal`` section of a config.json (every default), with these cue-effect settings."""
    seal = SealSettings().to_dict()
    seal["cue_effect"].update(cue_effect)
    return seal


def _effect(path) -> tuple[bool, str]:
    rep = CHECK.Report()
    run = CHECK.Run(path)
    CHECK.check_cue_effect(run, rep)
    (_name, ok, detail), = rep.items
    return ok, detail


PROBE_ON = _seal(every=1)
HURTS = {ce.CURRENT: [0, 0, 0, 0, 0, 0], ce.NONE: [1, 1, 1, 1, 1, 1]}


def _cues(path) -> tuple[bool, str]:
    rep = CHECK.Report()
    CHECK.check_cues(CHECK.Run(path), rep)
    (_name, ok, detail), = rep.items
    return ok, detail


def _rollout(task: str, state_step, active: list, cue_tokens: int) -> dict:
    return {"step": 2, "global_step": 2, "key": task, "uid": task, "task_id": task, "agent_loop": "seal_env",
            "cue_tokens": cue_tokens, "hint_in_text": bool(cue_tokens), "interface_active": active,
            "state_step": state_step}


@pytest.mark.parametrize("own_state_on,ok", [(False, True), (True, False)])
def test_cues_are_expected_from_the_state_each_rollout_ran_under(tmp_path, own_state_on, ok):
    """An asynchronous trainer trains at step 2 rollouts generated under step 0's state: the interface the step
    switched on is not theirs. Only a rollout whose own state had a kind on must carry cue text."""
    path = _run(tmp_path, [{"active": []}, {"active": [CF]}], _seal())
    folder = RF.RunFolder(path)
    rows = [_rollout(f"t{i}", 0, [CF] if own_state_on else [], 0) for i in range(2)]
    folder.write_traces(2, rows)
    folder.append_val([{"global_step": 2, "task_id": "v", "agent_loop": "env", "cue_tokens": 0}])
    found, detail = _cues(path)
    assert found == ok, detail
    if not ok:
        assert "ran with the interface on at steps [2], but none carried a cue" in detail


def test_a_consistent_probe_passes(tmp_path):
    path = _run(tmp_path, [{"active": [CF], "probe": _probe(1, [CF], HURTS, 0.95)}], PROBE_ON)
    ok, detail = _effect(path)
    assert ok and "confidence 0.95" in detail, detail


def _edited(tmp_path, change) -> str:
    summary, rows = _probe(1, [CF], HURTS, 0.95)
    metrics = ce.metrics({key: ce.Effect.from_dict(e) for key, e in summary["effects"].items()}, len(rows))
    change(summary)
    path = _run(tmp_path, [{"active": [CF], "probe": (summary, rows), "metrics": metrics}], PROBE_ON)
    if summary.get("_nan"):  # json_safe writes NaN as null: write the token itself, as a hand edit would
        metrics = open(os.path.join(path, RF.METRICS)).read().replace('"diff": -1.0', '"diff": NaN', 1)
        open(os.path.join(path, RF.METRICS), "w").write(metrics)
    return path


@pytest.mark.parametrize("name, change, says", [
    ("nan", lambda s: s.update(_nan=True), "all diff nan on file"),
    ("null", lambda s: s["effects"]["all"].update(diff=None), "diff None on file"),
    ("shown difference against its interval",
     lambda s: s["effects"]["all"].update({"diff": 0.5, "lo": -0.33, "hi": -0.05}), "all diff 0.5 on file"),
    ("count", lambda s: s["effects"][CF].update(n_with=60), "n_with 60 on file"),
    ("confidence of the file", lambda s: s.update(confidence=0.5), "states confidence 0.5, the run was configured "
                                                                    "with 0.95"),
])
def test_a_probe_whose_numbers_do_not_recompute_fails(tmp_path, name, change, says):
    """Round 4: check called the cue effect "recomputed" and passed with every number NaN, or with a difference of
    +0.50 shown against an interval of [-0.33, -0.05]; it compared neither the difference nor the counts and took
    the confidence level from the file it checked."""
    ok, detail = _effect(_edited(tmp_path, change))
    assert not ok and says in detail, detail


def test_the_interval_is_recomputed_at_the_runs_confidence(tmp_path):
    """A probe file written consistently at 0.5 in a run configured with 0.95 fails on its interval too."""
    summary, rows = _probe(1, [CF], HURTS, 0.5)
    path = _run(tmp_path, [{"active": [CF], "probe": (summary, rows)}], PROBE_ON)
    ok, detail = _effect(path)
    assert not ok and "lo" in detail and "from the probe's rollouts" in detail


def test_a_retired_kind_is_expected_off_and_said(tmp_path, capsys):
    """Round 4: every run in which ``retire`` retired a kind failed its check (the step ran without the kind the
    probe had measured); retirement was never announced."""
    retiring = _seal(every=1, retire=True, retire_after=1)
    probe = _probe(1, [CF], HURTS, 0.95, retire_after=1)
    assert probe[0]["retired"] == [CF]
    steps = [{"active": [], "probe": probe}, {"active": []}]
    ok, detail = _effect(_run(tmp_path / "a", steps, retiring))
    assert ok and f"retired as expected: {CF} at step 1" in detail, detail
    ok, detail = _effect(_run(tmp_path / "b", steps + [{"active": [CF]}], retiring))
    assert not ok and f"step 3: {CF} on again after the probe retired it (step 1)" in detail, detail
    # the console says it at that step, the report shows it
    from seal_verl.runs.report import build_report
    from seal_verl.runs.watch import Watcher

    path = str(tmp_path / "a" / "run")
    Watcher(path, None, 2, out=sys.stdout, progress=False).poll(final=True)
    assert f"step 1: the cue-effect probe retired {CF}" in capsys.readouterr().out
    rep = build_report([path], str(tmp_path / "report"))
    assert any(f"retired {CF} at step 1" in n for n in rep.notes)
    assert f"retired {CF} at step 1" in open(rep.html).read()


def test_retire_under_the_paper_preset_is_said(tmp_path, capsys):
    retiring = _seal(every=1, retire=True)
    path = _run(tmp_path, [{"active": []}], retiring, preset="paper")
    rep = CHECK.check_run(path)
    assert any("leaves the paper's settings" in n for n in rep.notes) and "[NOTE]" in rep.text()
    from seal_verl.runs.watch import Watcher

    Watcher(path, None, 1, out=sys.stdout, progress=False).poll()
    assert "seal.cue_effect.retire is on under preset=paper" in capsys.readouterr().out
    path = _run(tmp_path / "default", [{"active": []}], retiring, preset="default")
    assert CHECK.check_run(path).notes == []


def test_a_config_without_a_cue_effect_section_has_the_probe_at_its_default_cadence(tmp_path):
    """Round 4: with no ``cue_effect`` section the check treated the probe as off (its default cadence is 5)."""
    seal = SealSettings().to_dict()
    del seal["cue_effect"]
    path = _run(tmp_path, [{"active": [CF]}], seal)
    ok, detail = _effect(path)
    assert not ok and "a probe was due" in detail, detail


@pytest.mark.parametrize("damage", ["not json {", "unreadable"])
def test_an_unreadable_config_is_one_failure_not_a_cascade(tmp_path, damage):
    """Round 4: with config.json unreadable the run was judged as if every switch were off, with misleading
    FAILs; now the config check names the file and the checks that need the settings are not run."""
    path = _run(tmp_path, [{"active": []}], SealSettings().to_dict())
    cfg = os.path.join(path, RF.CONFIG)
    if damage == "unreadable":
        if os.geteuid() == 0:
            pytest.skip("root reads every file")
        os.chmod(cfg, 0)
    else:
        open(cfg, "w").write(damage)
    rep = CHECK.check_run(path)
    names = [n for n, _ok, _d in rep.items]
    assert "config" in names and not {"weights", "cues", "effect"} & set(names)
    assert RF.CONFIG in dict((n, d) for n, _ok, d in rep.items)["config"]


def test_two_runs_in_one_folder_are_named_by_check_and_report(tmp_path):
    """Round 4: two runs into one folder left steps [1,2,3,2,3,4,4]; report drew it without a warning."""
    path = str(tmp_path / "run")
    folder = RF.RunFolder(path)
    folder.write_config({"seal": SealSettings().to_dict()})
    for k in (1, 2, 3, 2, 3, 4, 4):
        folder.append_metrics({"step": k, "global_step": k, "metrics": {}})
    rep = CHECK.Report()
    CHECK.check_steps(CHECK.Run(path), rep, None)
    assert not rep.ok and "two runs wrote into this folder" in rep.items[0][2]
    from seal_verl.runs.report import build_report

    out = build_report([path], str(tmp_path / "report"))
    assert any("two runs wrote into this folder" in w for w in out.warnings)


def test_a_run_with_fault_injection_never_passes(tmp_path, monkeypatch):
    monkeypatch.setenv("SEAL_BFCL_FAULTS", "judge_call=overrun")
    path = _run(tmp_path, [{"active": []}], SealSettings().to_dict())
    monkeypatch.delenv("SEAL_BFCL_FAULTS")
    recorded = {"SEAL_BFCL_FAULTS": "judge_call=overrun"}
    assert json.load(open(os.path.join(path, RF.CONFIG)))[RF.FAULT_SETTINGS] == recorded
    assert RF.load(path).steps[0][RF.FAULT_SETTINGS] == recorded
    rep = CHECK.check_run(path)
    assert ("faults", False) in [(n, ok) for n, ok, _d in rep.items]
    from seal_verl.runs.report import build_report

    assert any("fault injection" in n for n in build_report([path], str(tmp_path / "report")).notes)


def test_an_exit_code_that_is_a_string_is_named(tmp_path):
    """Round 4: ``"exit_code": "0"`` gave ``[FAIL] exit main_ppo exit code 0``."""
    path = _run(tmp_path, [], SealSettings().to_dict())
    with open(os.path.join(path, RF.TIMING), "w") as fh:
        json.dump({"exit_code": "0", "main_ppo_s": 3}, fh)
    rep = CHECK.Report()
    CHECK.check_exit(CHECK.Run(path), rep)
    assert not rep.ok and "exit_code is '0', not an exit status" in rep.items[0][2]


def test_nan_rewards_are_a_failure_not_a_traceback(tmp_path):
    """Round 4: NaN rewards in a traces file gave ``AttributeError: 'float' object has no attribute 'numerator'``."""
    path = _run(tmp_path, [{"active": []}], SealSettings().to_dict())
    rows = [{"uid": "g", "task_id": f"t{i}", "reward": r, "w": 1.0, "labels": ["pass"], "abstention": [False],
             "grpo_advantage": 0.0, "advantage_range": [0.0, 0.0]} for i, r in enumerate((1.0, 0.0))]
    text = "".join(json.dumps(r) + "\n" for r in rows).replace('"reward": 0.0', '"reward": NaN')
    open(os.path.join(path, RF.traces_name(1)), "w").write(text)
    run = CHECK.Run(path)
    run.metrics[0]["rho_used"] = {"pass": 1.0}
    rep = CHECK.Report()
    CHECK.check_weights(run, rep, None)
    assert not rep.ok and "reward nan is not a number" in rep.items[0][2], rep.text()


@pytest.mark.parametrize("name", [f"probe_step_{10 ** 30}.jsonl", f"traces_step_{10 ** 200}.jsonl", "state_step_7.json"])
def test_step_files_of_no_logged_step_are_named(tmp_path, name):
    """Round 4: ``probe_step_<10^30>.jsonl`` and ``traces_step_<10^200>.jsonl`` were ignored silently."""
    path = _run(tmp_path, [{"active": []}], SealSettings().to_dict())
    open(os.path.join(path, name), "w").write("{}\n")
    rep = CHECK.check_run(path)
    files = [d for n, _ok, d in rep.items if n == "files"]
    assert files and name[:12] in files[0], rep.text()


def test_the_check_command_says_it_all_in_one_run(tmp_path):
    path = _run(tmp_path, [{"active": [CF], "probe": _probe(1, [CF], HURTS, 0.95)}], PROBE_ON)
    proc = subprocess.run([sys.executable, "-m", "seal_verl.cli", "check", path], capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, PYTHONPATH=REPO))
    assert proc.returncode == 1 and "[PASS] effect" in proc.stdout and "Traceback" not in proc.stderr
