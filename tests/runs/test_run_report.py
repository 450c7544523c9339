"""``seal-verl report`` on real run folders: two dry runs (SEAL and an ablation) and an eval folder.

Checks that the PNGs and the HTML page exist and open, that the page is self-contained, and that the tables
hold the runs' own numbers, recomputed here from the files the runs wrote.
"""

from __future__ import annotations

import json
import os
import re
from collections import defaultdict

import pytest

from seal_verl import dry_run as D
from seal_verl.cli import main as cli_main
from seal_verl.runs.report import ReportError, build_report, load_run


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("report")
    model = str(base / "model")
    seal = D.DryRunConfig(out=str(base / "seal"), steps=3, tasks_per_step=2, rollouts=2, val_tasks=4,
                          model=model, progress=False, verbose=False)
    D.run_dry(seal)
    abl = D.DryRunConfig(out=str(base / "noloop"), steps=2, tasks_per_step=2, rollouts=2, val_tasks=4,
                         model=model, progress=False, verbose=False)
    abl.seal["switches"] = {"env_side": True, "reweighting": True, "closed_loop": False}
    D.run_dry(abl)
    ev = base / "eval"
    ev.mkdir()
    scores = {"categories": {"multi_turn_base": {"accuracy": 0.25, "n": 4, "n_valid": 1},
                             "multi_turn_miss_func": {"accuracy": 0.5, "n": 2, "n_valid": 1}},
              "average": 0.375, "protocol": {"model": "ckpt", "mode": "fc", "call_format": "fc", "split": "eval",
                                             "temperature": 0.0}}
    (ev / "scores.json").write_text(json.dumps(scores))
    labels = [{"id": f"multi_turn_base_{i}", "category": "multi_turn_base", "valid": i == 0,
               "labels": ["pass"] if i == 0 else ["state_mismatch"]} for i in range(4)]
    labels += [{"id": f"multi_turn_miss_func_{i}", "category": "multi_turn_miss_func", "valid": i == 0,
                "labels": ["pass"] if i == 0 else ["spurious_tool_call"]} for i in range(2)]
    (ev / "labels.jsonl").write_text("".join(json.dumps(r) + "\n" for r in labels))
    return base, [str(base / "seal"), str(base / "noloop"), str(ev)]


def _val_accuracy(folder):
    cells = defaultdict(lambda: [0, 0])
    with open(os.path.join(folder, "val_traces.jsonl")) as f:
        for r in map(json.loads, f):
            c = cells[r["task_id"].rsplit("_", 1)[0]]
            c[0] += 1
            c[1] += int(r["score"] >= 1.0)
    return {k: nv / n for k, (n, nv) in cells.items()}


def test_report_files_and_numbers(runs, tmp_path):
    _, folders = runs
    rep = build_report(folders, str(tmp_path / "out"))
    assert os.path.basename(rep.html) == "report.html"
    import matplotlib.image as mpimg

    # per training run 3 (and the cue-effect panel where a probe ran: both runs had cue kinds on), the eval folder 1,
    # the comparison 1
    assert len(rep.pngs) == (3 + 1) + (3 + 1) + 1 + 1
    assert sum(p.endswith("_cue_effect.png") for p in rep.pngs) == 2
    for p in rep.pngs:
        img = mpimg.imread(p)
        assert img.shape[0] > 200 and img.shape[1] > 400 and img.std() > 0.01, p
    page = open(rep.html).read()
    assert page.count("data:image/png;base64,") == len(rep.pngs)
    assert not re.search(r'src="(?!data:)', page) and "<link" not in page  # self-contained
    # Table 1 holds each run's own numbers (percent, two decimals).
    for folder, variant in ((folders[0], "SEAL"), (folders[1], "SEAL w/o closed loop")):
        acc = _val_accuracy(folder)
        row = next(line for line in rep.text.splitlines() if line.startswith(os.path.basename(folder) + " "))
        assert f"({variant})" in row
        for v in acc.values():
            assert f"{100 * v:.2f}" in row
        assert f"{100 * sum(acc.values()) / len(acc):.2f}" in row
    eval_row = next(line for line in rep.text.splitlines() if line.startswith("eval "))
    assert "25.00" in eval_row and "50.00" in eval_row and "37.50*" in eval_row
    # Table 3: the ablation against full SEAL, with its difference.
    assert "Table 3 form" in rep.text
    d = 100 * (sum(_val_accuracy(folders[1]).values()) / len(_val_accuracy(folders[1]))
               - sum(_val_accuracy(folders[0]).values()) / len(_val_accuracy(folders[0])))
    assert f"{d:+.2f}" in rep.text.split("Table 3 form")[1]
    assert "<table>" in page and "Table 3 form" in page


def test_run_contents(runs):
    _, folders = runs
    run = load_run(folders[0])
    assert run.kind == "training" and run.variant == "SEAL" and len(run.steps) == 3
    with open(os.path.join(folders[0], "traces_step_1.jsonl")) as f:
        assert run.weights[1] == [json.loads(x)["w"] for x in f]


def test_bad_folder_is_one_line_error(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ReportError, match="neither a training run folder"):
        load_run(str(tmp_path / "empty"))
    assert cli_main(["report", str(tmp_path / "empty"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and str(tmp_path / "empty") in err[0]
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "metrics.jsonl").write_text("{not json\n")
    with pytest.raises(ReportError, match=r"metrics.jsonl:1: not valid JSON"):
        load_run(str(tmp_path / "bad"))


def test_damaged_rows_are_warned_about_and_the_rest_reported(runs, tmp_path, capsys):
    """A run folder with a garbage line and a line cut by a crash still gives its report from the readable rows;
    each skipped line is one warning on stderr (only a file with nothing readable but damage is an error)."""
    import shutil

    _, folders = runs
    run = str(tmp_path / "seal")
    shutil.copytree(folders[0], run)
    with open(os.path.join(run, "metrics.jsonl"), "a", encoding="utf-8") as f:
        f.write("{not json\n")
    with open(os.path.join(run, "val_traces.jsonl"), "a", encoding="utf-8") as f:
        f.write('{"task_id": "multi_turn_base_1", "sc')
    loaded = load_run(run)
    assert len(loaded.steps) == 3 and loaded.validation == load_run(folders[0]).validation
    assert [w.split(": ", 1)[1] for w in loaded.warnings] == ["not valid JSON", "cut short (no end of line)"]
    assert cli_main(["report", run, "--out", str(tmp_path / "o")]) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning: ")]
    assert len(err) == 2 and "metrics.jsonl:4: not valid JSON" in err[0]


def test_a_dry_run_into_a_used_folder_is_refused_or_moves_the_earlier_run_aside(runs, tmp_path):
    """A shorter dry run into the folder of a longer one (round 4: it left 13 of 60 entries, every earlier step file
    gone): refused without --force, the earlier run untouched; with it, the earlier run moved whole into a dated
    sibling folder, and the folder holds this run's steps only."""
    import shutil

    from seal_verl.outputs import OutputRefused

    base, folders = runs
    run = str(tmp_path / "again")
    shutil.copytree(folders[0], run)  # 3 steps
    before = sorted(os.listdir(run))
    again = D.DryRunConfig(out=run, steps=1, tasks_per_step=2, rollouts=2, val_tasks=0, model=str(base / "model"),
                           progress=False, verbose=False)
    with pytest.raises(OutputRefused, match="holds the results of an earlier run.*--force moves them aside"):
        D.run_dry(again)
    assert sorted(os.listdir(run)) == before
    again.force = True
    D.run_dry(again)
    aside = [p for p in os.listdir(tmp_path) if p.startswith("again.earlier-")]
    assert len(aside) == 1 and sorted(os.listdir(tmp_path / aside[0])) == before
    assert not any(os.path.exists(os.path.join(run, f"{kind}_step_{k}.{ext}"))
                   for k in (2, 3) for kind, ext in (("traces", "jsonl"), ("state", "json")))
    loaded = load_run(run)
    assert len(loaded.steps) == 1 and list(loaded.weights) == [1] and loaded.validation == {}
    assert len(load_run(str(tmp_path / aside[0])).steps) == 3


def test_a_step_row_without_a_step_number_is_a_warning(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text(json.dumps({"global_step": 1, "metrics": {}}) + "\n"
                                       + json.dumps({"step": 2, "global_step": 2, "metrics": {}}) + "\n")
    loaded = load_run(str(run))
    assert [r["step"] for r in loaded.steps] == [2] and "without a step number" in loaded.warnings[0]
    rep = build_report([str(run)], str(tmp_path / "out"))
    assert rep.warnings == [f"run: {loaded.warnings[0]}"] and os.path.exists(rep.html)
