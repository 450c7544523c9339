"""The cue effect measured at a model before any RL step (seal_verl.models.warm_start.cue_reading): the probe's own
conditions with every cue kind on, sampled from a real model through verl's real agent loop and graded by the
run's training reward; and the shipped ledger warm start's recorded effect, which the closed loop starts from."""

from __future__ import annotations

import json
import os

import pytest

from _paths import REPO

from seal_verl.core import cue_effect as ce
from seal_verl.core.interface import DEFAULT_TRIGGERS, ordered
from seal_verl.models.warm_start import cue_reading as CR

#: the kinds a measurement switches on unless told otherwise: those of the default trigger map
CUE_KINDS = tuple(ordered(DEFAULT_TRIGGERS.values()))

SHIPPED = os.path.join(REPO, "recipes", "ledger_cpu", "model")


def test_every_subset_of_the_kinds_once_the_empty_one_first():
    subsets = CR.all_subsets(tuple(CUE_KINDS))
    assert len(subsets) == 2 ** len(CUE_KINDS) == len(set(subsets))
    assert subsets[0] == () and subsets[-1] == tuple(CUE_KINDS)
    assert all(list(s) == sorted(s, key=list(CUE_KINDS).index) for s in subsets)


def test_measure_samples_each_condition_and_its_numbers_recompute(tmp_path):
    from seal_verl import dry_run as dr
    from seal_verl.models.warm_start import ledger as L

    tasks = dr.environment("ledger").task_ids("train")[:2]
    progress = str(tmp_path / "progress.json")
    result = CR.measure(L.TARGET, SHIPPED, tasks, samples=2, seed=0, progress=progress)
    # the probe's conditions with every kind on: current, none, and one leave-one-out per kind
    assert set(result["conditions"]) == {ce.CURRENT, ce.NONE} | {ce.drop_name(k) for k in CUE_KINDS}
    assert result["conditions"][ce.CURRENT] == list(CUE_KINDS) and result["conditions"][ce.NONE] == []
    assert all(len(v) == 4 for v in result["values"].values())
    assert set(result["effects"]) == {ce.ALL, *CUE_KINDS}
    values = result["values"]
    for name, e in result["effects"].items():
        without = values[ce.NONE] if name == ce.ALL else values[ce.drop_name(name)]
        again = ce.effect(values[ce.CURRENT], without, result["confidence"])
        assert e["with"] == again.with_ and e["without"] == again.without, name
        assert (e["unpaired_lo"], e["unpaired_hi"]) == pytest.approx((again.lo, again.hi)), name
    # every value's task is recorded, so the effects pair by task (two tasks sampled under every condition)
    assert all(sorted(set(t)) == sorted(tasks) for t in result["task_ids"].values())
    assert all(e["n_pairs"] == 2 for e in result["effects"].values())
    again = CR.recomputed(result)
    assert set(again) == set(result["effects"])
    assert all(again[k] == pytest.approx(result["effects"][k]) for k in again)
    table = CR.format_table(result)
    assert "all" in table and "fmt" in table and len(table.splitlines()) == 2 + len(CUE_KINDS) + 1
    assert "paired interval" in table and "unpaired interval" in table
    # a measurement that stopped resumes from its progress file: here every condition was done, none is sampled again
    again = CR.measure(L.TARGET, SHIPPED, tasks, samples=2, seed=0, progress=progress)
    assert again["values"] == result["values"] and again["effects"] == result["effects"]
    saved = json.load(open(progress))
    assert set(saved["done"]) == set(result["conditions"]) and saved["key"]["kinds"] == list(CUE_KINDS)
    assert CR._load_progress(progress, dict(saved["key"], samples=3)) == {}  # another measurement starts afresh


def test_the_recorded_cue_effect_is_of_the_shipped_ledger_warm_start_and_recomputes():
    """recipes/ledger_cpu/cue_effect.json (``make cue-effect``'s numbers, written with ``--out``) measures the
    model that ships, and its effects follow from the rewards it recorded."""
    from seal_verl.models.shipped import file_sha256

    with open(os.path.join(REPO, "recipes", "ledger_cpu", "cue_effect.json"), encoding="utf-8") as f:
        result = json.load(f)
    assert result["model_sha256"] == file_sha256(os.path.join(SHIPPED, "model.safetensors"))
    assert result["tasks"] * result["samples"] >= 256
    assert set(result["effects"]) == {ce.ALL, *result["conditions"][ce.CURRENT]}
    values = result["values"]
    assert all(len(v) == result["tasks"] * result["samples"] for v in values.values())
    for name, e in result["effects"].items():
        without = values[ce.NONE] if name == ce.ALL else values[ce.drop_name(name)]
        again = ce.effect(values[ce.CURRENT], without, result["confidence"])
        # written before the paired interval: its interval is the unpaired one, the same up to Welch's t quantile
        # (Welch-Satterthwaite df near 1,000 here, where the earlier normal quantile differs in the fourth digit)
        assert (e["with"], e["without"], e["diff"]) == pytest.approx((again.with_, again.without, again.diff)), name
        assert (e["lo"], e["hi"]) == pytest.approx((again.unpaired_lo, again.unpaired_hi), abs=2e-4), name


def test_the_shipped_measurement_pairs_by_task_and_narrows_the_intervals():
    """The shipped file holds its rewards in sampling order (each training task ``samples`` times in a row); paired
    by task, every interval is narrower than the unpaired one."""
    from seal_verl import dry_run as dr
    with open(os.path.join(REPO, "recipes", "ledger_cpu", "cue_effect.json"), encoding="utf-8") as f:
        result = json.load(f)
    found = CR.recomputed(result, dr.environment("ledger").task_ids("train"))
    for name, e in found.items():
        assert e["n_pairs"] == result["tasks"], name
        assert e["diff"] == pytest.approx(result["effects"][name]["diff"]), name
        assert e["hi"] - e["lo"] < e["unpaired_hi"] - e["unpaired_lo"], name
    table = CR.format_table(result, found)
    assert table.count("[") == 2 * len(found)


def test_the_cue_reading_stage_trains_on_every_cue_subset_right_and_failing(tmp_path):
    from seal_verl import dry_run as dr
    tasks = dr.environment("ledger").task_ids("train")[:4]
    info = CR.cue_stage(str(tmp_path / "cues"), SHIPPED, epochs=1, samples=0, effect_samples=0, tasks=tasks)
    assert os.path.isfile(tmp_path / "cues" / "model.safetensors")
    by = {}
    for r in info["rows"]:
        by.setdefault((r["task_id"], r["failure"] is None), set()).add(r["interface"])
    from seal_verl.models.warm_start.ledger import WARM_KINDS

    subsets = {",".join(s) or "none" for s in CR.all_subsets(WARM_KINDS)}  # the kinds the ledger run switches on
    # every task: its ground truth and its labelled failure, each under all 32 cue states
    assert {k for k in by} == {(t, right) for t in tasks for right in (True, False)}
    assert all(v == subsets for v in by.values()), {k: len(v) for k, v in by.items()}
