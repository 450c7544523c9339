"""``seal-verl preflight``: each check passes on a good set-up and fails, with its fix, on a bad one."""

from __future__ import annotations

import json

import pytest

from env_wrappers.bfcl import preflight as P


def test_attention_without_flash_attn_points_at_sdpa(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n: None if n == "flash_attn" else real(n))
    bad = P.check_attention("flash_attention_2", True)
    assert bad.status == "fail" and "attn_implementation=sdpa" in bad.fix and "use_remove_padding=false" in bad.fix
    assert P.check_attention("sdpa", True).status == "fail"  # packed (remove-padding) path needs flash-attn too
    assert P.check_attention("sdpa", False).status == "ok"


def test_recipe_budget_is_read_from_the_recipe():
    import yaml

    with open("recipes/bfcl_v3/config/bfcl_v3.yaml") as f:
        assert P.recipe_max_prompt_length() == yaml.safe_load(f)["data"]["max_prompt_length"]


def _data(tmp_path, fmt, ids=("multi_turn_base_0", "multi_turn_long_context_0")):
    from env_wrappers.bfcl.prepare_data import prepare_data

    split = tmp_path / "split.json"
    split.write_text(json.dumps({"train": [ids[0]], "eval": [ids[1]]}))
    out = tmp_path / fmt
    prepare_data(str(out), call_format=fmt, split_file=str(split))
    return str(out)


def test_data_of_the_other_call_format_fails(tmp_path):
    good, ids = P.check_data(_data(tmp_path, "json"), "qwen2.5-7b")
    assert good.status == "ok" and len(ids) == 2
    bad, _ = P.check_data(_data(tmp_path, "json"), "toolace2-8b")
    assert bad.status == "fail" and "--call-format python" in bad.fix
    missing, _ = P.check_data(str(tmp_path / "nowhere"), "qwen2.5-7b")
    assert missing.status == "fail" and "prepare-data" in missing.fix


def test_prepare_data_keeps_call_formats_in_their_own_folders(tmp_path):
    """Writing the second format over the first used to overwrite it silently; now it is refused."""
    out = _data(tmp_path, "json")
    from env_wrappers.bfcl.prepare_data import prepare_data

    split = str(tmp_path / "split.json")
    with pytest.raises(ValueError, match="holds call_format=json data; write call_format=python to its own folder"):
        prepare_data(out, call_format="python", split_file=split)
    prepare_data(out, call_format="json", split_file=split)  # rewriting the same format is fine


@pytest.mark.parametrize("backbone,fmt", [("qwen2.5-7b", "json"), ("toolace2-8b", "python")])
def test_preflight_on_a_tiny_real_vocabulary_model(tmp_path, backbone, fmt):
    from _backbones import tiny_model_dir

    from seal_verl.backbones import spec

    model = tiny_model_dir(spec(backbone).name)
    data = _data(tmp_path, fmt)
    seen = []
    rc = P.run(backbone, model, data, 100000, "sdpa", False, 0, progress=False, emit=seen.append)
    by = {c.name: c for c in seen}
    assert by["chat template"].status == "ok" and by["data"].status == "ok" and by["prompt budget"].status == "ok"
    assert by["gpus"].status in ("skip", "ok")
    assert rc == (1 if any(c.status == "fail" for c in seen) else 0)
    seen.clear()
    assert P.run(backbone, model, data, 1000, "sdpa", False, 0, progress=False, emit=seen.append) == 1
    over = {c.name: c for c in seen}["prompt budget"]
    assert over.status == "fail" and "2 of 2 first prompts exceed" in over.detail and "max_prompt_length>=" in over.fix


def test_preflight_rejects_a_tokenizer_of_the_wrong_backbone(tmp_path):
    from _backbones import tiny_model_dir
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir("toolace2"))
    c = P.check_template(tok, "qwen2.5-7b")
    assert c.status == "fail" and "Qwen/Qwen2.5-3B-Instruct" in c.fix


def test_prepare_data_rejects_prompts_over_the_budget(tmp_path, capsys):
    """A first prompt longer than data.max_prompt_length is left out when the data are written (with a warning),
    so it can never reach a training step."""
    from _backbones import tiny_model_dir

    from seal_verl.cli import main

    split = tmp_path / "split.json"
    split.write_text(json.dumps({"train": ["multi_turn_base_0", "multi_turn_base_1"], "eval": ["multi_turn_miss_param_1"]}))
    model = tiny_model_dir("qwen2.5")
    with pytest.warns(UserWarning, match="multi_turn_base_0: first prompt of 6238 tokens exceeds max_prompt_length=5000"):
        rc = main(["prepare-data", "--out", str(tmp_path / "json"), "--split-file", str(split),
                   "--model", model, "--max-prompt-length", "5000"])
    assert rc == 0
    assert "left out 1 task(s)" in capsys.readouterr().out
    import pandas as pd

    ids = [i["task_id"] for i in pd.read_parquet(tmp_path / "json" / "train.parquet")["extra_info"]]
    assert ids == ["multi_turn_base_1"]
    assert main(["prepare-data", "--out", str(tmp_path / "x"), "--max-prompt-length", "5000"]) == 2
