"""bench-premise is made in parts on different machines: a finished run's curve is kept in a committed record, read
where its run folder is gone, not made again under the same settings, and never read under other settings."""

from __future__ import annotations

import json
import os

import pytest

from _bench_runs import fake_run
from bench import bench_learning as bl
from bench import bench_premise as bp

REWARDS = [0.2, 0.3, 0.4, 0.5]


def finished_run(out, variant="grpo", seed=1, model="files:m1", extra=()):
    """A finished 4-step run folder with the settings record bench_learning writes after a run exits 0."""
    path = bl.run_dir(str(out), variant, seed)
    fake_run(path, REWARDS, heldout=(0.6, 0.65))
    overrides = [*bp.LORA_OVERRIDES, *extra]
    with open(os.path.join(path, bl.SETTINGS_FILE), "w") as f:
        json.dump({"settings": bl.settings(overrides, model=model), "overrides": overrides, "model": model}, f)
    return path


@pytest.fixture
def records(tmp_path, monkeypatch):
    where = tmp_path / "records"
    monkeypatch.setattr(bp, "RECORDS", str(where))
    return where


def plot_only(out, *more):
    return bp.main(["--plot-only", "--no-plot", "--steps", "4", "--window", "2", "--seeds", "1",
                    "--variants", "grpo", "--out", str(out), *more])


def test_a_finished_run_is_read_from_its_record_where_its_folder_is_gone(tmp_path, records):
    """The runs of one session are read by the next, on a machine without their run folders (before, the reading
    found nothing there: the curves lived in an ignored folder only)."""
    finished_run(tmp_path / "first")
    assert plot_only(tmp_path / "first") == 0
    [kept] = os.listdir(records)
    assert kept.startswith("grpo_s1_4steps_") and kept.endswith(".json")
    assert plot_only(tmp_path / "second") == 0
    learned = json.loads((tmp_path / "second" / "learning.json").read_text())
    steps = learned["curves"]["grpo"]["1"]["steps"]
    assert [round(x["reward"], 3) for x in steps] == REWARDS
    assert learned["summary"]["grpo"]["per_seed"]["1"]["heldout_after"] == pytest.approx(0.65)
    assert json.loads((tmp_path / "second" / "progress.json").read_text())["runs"] == {"grpo_s1": "recorded"}
    # the baseline of the rise is the premise measurement's, on any machine
    assert learned["warm_start_reward"]["source"] == os.path.relpath(bp.PREMISE, bp.REPO)


def test_a_record_under_other_settings_is_named_and_not_read(tmp_path, records, capsys):
    finished_run(tmp_path / "first", extra=["actor_rollout_ref.actor.optim.lr=1e-3"])
    assert plot_only(tmp_path / "first", "--", "actor_rollout_ref.actor.optim.lr=1e-3") == 0
    [kept] = os.listdir(records)
    assert plot_only(tmp_path / "second") == 0
    learned = json.loads((tmp_path / "second" / "learning.json").read_text())
    assert learned["curves"] == {}
    assert kept in capsys.readouterr().err
    assert f"Records not read (made under other settings, another warm start or another adapter): {kept}." in (
        tmp_path / "second" / "premise.md").read_text()


def test_a_record_is_reused_only_for_the_same_warm_start_and_adapter(tmp_path, records, monkeypatch):
    finished_run(tmp_path / "out", model="files:m1")
    assert bp.record_run(str(tmp_path / "out"), "grpo", 1, 4) is not None
    assert bp.recorded("grpo", 1, 4, [], model="files:m1") is not None
    assert bp.recorded("grpo", 1, 4, [], model="files:m2") is None  # another warm start built here
    assert bp.recorded("grpo", 1, 4, []) is not None  # nothing built here: the record's own warm start
    assert bp.recorded("grpo", 1, 3, []) is None and bp.recorded("seal", 1, 4, []) is None
    monkeypatch.setattr(bp, "adapter_digest", lambda shipped=None: "another adapter")
    assert bp.recorded("grpo", 1, 4, []) is None


def test_a_record_is_never_replaced(tmp_path, records):
    finished_run(tmp_path / "out")
    path = bp.record_run(str(tmp_path / "out"), "grpo", 1, 4)
    kept = json.loads(open(path).read())
    kept["note"] = "a person's annotation"
    with open(path, "w") as f:
        json.dump(kept, f)
    assert bp.record_run(str(tmp_path / "out"), "grpo", 1, 4) == path
    assert json.loads(open(path).read())["note"] == "a person's annotation"


def test_an_unfinished_run_is_not_recorded(tmp_path, records):
    path = finished_run(tmp_path / "out")
    with open(os.path.join(path, "timing.json"), "w") as f:
        json.dump({"exit_code": 1, "steps": 2}, f)
    assert bp.record_run(str(tmp_path / "out"), "grpo", 1, 4) is None
    assert not os.path.exists(records)


def test_a_damaged_record_is_named_and_skipped(tmp_path, records, capsys):
    os.makedirs(records)
    (records / "grpo_s1_4steps_0123456789abcdef.json").write_text("{not json")
    assert bp.recorded("grpo", 1, 4, []) is None
    assert "skipped the damaged record grpo_s1_4steps_0123456789abcdef.json" in capsys.readouterr().err


def test_the_shipped_records_are_current():
    """Every record committed with the code still stands for a run under today's settings: a change to the recipe's
    config files, the LoRA overrides or the shipped adapter makes its runs stale, and the benchmark would quietly
    stop reading them (run them again, or keep the change out of the benchmark's settings)."""
    found = [n for n in os.listdir(bp.RECORDS) if n.endswith(".json")] if os.path.isdir(bp.RECORDS) else []
    stale = [n for n in found if not bp.current(json.loads(open(os.path.join(bp.RECORDS, n)).read()), [])]
    assert stale == []
