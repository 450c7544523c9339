"""``seal-verl diagnose`` on result files in every form ``bfcl generate`` writes, and on broken input."""

import json
import os
import subprocess
import sys


from env_wrappers.bfcl.environment.examples import examples
from env_wrappers.bfcl.environment.perturb import ground_truth_steps, to_result
from seal_verl.cli import main


def _write(path, lines):
    with open(path, "w") as f:
        for line in lines:
            f.write((line if isinstance(line, str) else json.dumps(line)) + "\n")


def _read(path):
    return [json.loads(l) for l in open(path)]


def test_three_forms_mixed_with_text(tmp_path, tasks):
    lines = []
    for fmt in ("json", "python", "fc"):
        task_id, result = examples(fmt)["response_mismatch"]
        lines.append({"id": task_id, "result": result})
    src, out = tmp_path / "r.json", tmp_path / "labels.jsonl"
    _write(src, lines)
    assert main(["diagnose", str(src), "--out", str(out), "--no-progress"]) == 0
    rows = _read(out)
    assert len(rows) == 3
    for r in rows:
        assert r["id"] == "multi_turn_base_0"
        assert r["valid"] is False
        assert r["labels"] == ["pass", "response_mismatch", "pass", "pass"]


def test_inference_error_and_turn_count(tmp_path, tasks, capsys):
    task = tasks["multi_turn_base_0"]
    good = to_result(task, ground_truth_steps(task), "python")
    lines = [
        {"id": "multi_turn_base_0", "result": "Error during inference: timeout"},
        {"id": "multi_turn_base_0", "result": good[:2]},
        {"id": "multi_turn_base_0", "result": good},
    ]
    src, out = tmp_path / "r.json", tmp_path / "o.jsonl"
    _write(src, lines)
    assert main(["diagnose", str(src), "--out", str(out), "--no-progress"]) == 0
    rows = _read(out)
    assert [r["valid"] for r in rows] == [False, False, True]
    assert rows[0]["error_type"] == "multi_turn:inference_error"
    assert rows[1]["error_type"] == "multi_turn:force_terminated"
    assert all(len(r["labels"]) == 4 for r in rows)
    assert rows[1]["labels"][:2] == ["pass", "pass"]  # the turns it did produce are still judged
    assert rows[1]["labels"][2:] == ["missing_tool_call", "missing_tool_call"]


def test_bad_lines_are_reported_and_skipped(tmp_path, tasks, capsys):
    task = tasks["multi_turn_base_0"]
    good = {"id": "multi_turn_base_0", "result": to_result(task, ground_truth_steps(task), "json")}
    src = tmp_path / "r.json"
    with open(src, "wb") as f:
        f.write(b"{not json\n")
        f.write(json.dumps({"id": "multi_turn_base_99999", "result": []}).encode() + b"\n")
        f.write(b"\xff\xfe broken utf8\n")
        f.write(json.dumps({"id": "multi_turn_base_0"}).encode() + b"\n")
        f.write(json.dumps(good).encode() + b"\n")
    out = tmp_path / "o.jsonl"
    assert main(["diagnose", str(src), "--out", str(out), "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert f"{src}:1: not valid JSON" in err
    assert f"{src}:2: unknown task id 'multi_turn_base_99999'" in err
    assert f"{src}:3: not valid UTF-8" in err
    assert f"{src}:4: entry 'multi_turn_base_0' has no 'result'" in err
    assert [r["valid"] for r in _read(out)] == [True]


def test_table_plot_and_progress(tmp_path, tasks):
    from env_wrappers.bfcl.evaluation.demo import write_demo_results

    src = tmp_path / "demo.jsonl"
    n = write_demo_results(str(src), per_category=3)
    png = tmp_path / "p.png"
    proc = subprocess.run([sys.executable, "-m", "seal_verl.cli", "diagnose", str(src), "--plot", str(png), "--progress-min", "10"],
                          capture_output=True, text=True, env={**os.environ}, timeout=300)
    assert proc.returncode == 0, proc.stderr
    for cat in ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context"):
        assert cat in proc.stdout
    assert "multi-turn score" in proc.stdout
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"
    assert "diagnosing" in proc.stderr and f"{n}/{n}" in proc.stderr  # progress bar on a long input


def test_nothing_valid_is_an_error(tmp_path):
    src = tmp_path / "r.json"
    src.write_text("garbage\n")
    assert main(["diagnose", str(src), "--no-progress"]) == 1
