"""The shipped SmolLM2 ledger warm start (``recipes/ledger_cpu/smollm2_adapter``) and its premise measurement
(``recipes/ledger_cpu/smollm2_cue_effect.json``): verified like the other shipped models, trained without cue text,
and the measurement's summary is what its own rollout records give.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from seal_verl.models import shipped as sm
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ADAPTER = os.path.join(REPO, "recipes", "ledger_cpu", "smollm2_adapter")
PREMISE = os.path.join(REPO, "recipes", "ledger_cpu", "smollm2_cue_effect.json")


def test_the_adapter_ships_intact_and_small():
    build = sm.verify(ADAPTER)
    assert build["command"] == "make ship-smollm2-warm-start"
    assert {"adapter_model.safetensors", "adapter_config.json"} <= set(build["files"])
    assert os.path.getsize(os.path.join(ADAPTER, "adapter_model.safetensors")) < 25 * 2**20
    cfg = json.load(open(os.path.join(ADAPTER, "adapter_config.json")))
    assert cfg["r"] == 8 and cfg["peft_type"] == "LORA"
    record = json.load(open(os.path.join(ADAPTER, sm.WARM_START_RECORD)))
    assert record["cue_text_in_rows"] is False and record["env"] == "ledger"


def test_a_changed_adapter_file_is_refused(tmp_path):
    copy = str(tmp_path / "adapter")
    shutil.copytree(ADAPTER, copy)
    with open(os.path.join(copy, "adapter_config.json"), "a") as fh:
        fh.write(" ")
    with pytest.raises(sm.ShippedModelError, match="adapter_config.json differs from the model as built"):
        sm.verify(copy)


def test_the_premise_summary_is_its_records():
    from seal_verl.models.premise import summarise

    result = json.load(open(PREMISE))
    records = result["records"]
    assert {r["split"] for r in records} == {"train", "eval"}
    assert all({"split", "condition", "task_id", "sample", "reward", "passed"} <= set(r) for r in records)
    assert set(result["conditions"]) == {r["condition"] for r in records}
    assert summarise(records, result["conditions"]["current"], result["confidence"]) == result["summary"]
    sha = json.load(open(os.path.join(ADAPTER, sm.WARM_START_RECORD))).get("merged_sha256")
    assert sha is None or sha == result["model_sha256"]
