"""``seal-verl preflight``: each check passes on a good set-up and fails, with its fix, on a bad one."""

from __future__ import annotations

import json

import pytest

from env_wrappers.bfcl.environment import preflight as P


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
    from env_wrappers.bfcl.environment.prepare_data import prepare_data

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
    from env_wrappers.bfcl.environment.prepare_data import prepare_data

    split = str(tmp_path / "split.json")
    with pytest.raises(ValueError, match="holds call_format=json data; write call_format=python to its own folder"):
        prepare_data(out, call_format="python", split_file=split)
    prepare_data(out, call_format="json", split_file=split)  # rewriting the same format is fine


@pytest.mark.parametrize("backbone,fmt", [("qwen2.5-7b", "json"), ("toolace2-8b", "python")])
def test_preflight_on_a_tiny_real_vocabulary_model(tmp_path, backbone, fmt):
    from _backbones import tiny_model_dir

    from seal_verl.models.backbones import spec

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


# ------------------------------------------------------------------ what the run itself uses (issue: preflight truth)


def test_budget_defaults_to_the_backbones_own_group():
    """toolace2-8b's group raises the prompt budget to 10240; preflight used to read bfcl_v3.yaml's 8192."""
    import yaml

    with open("recipes/bfcl_v3/config/backbone/toolace2-8b.yaml") as f:
        own = yaml.safe_load(f)["data"]["max_prompt_length"]
    assert own > P.recipe_max_prompt_length() and P.recipe_max_prompt_length("toolace2-8b") == own
    assert P.recipe_max_prompt_length("toolace2") == own  # the tokenizer family's name finds the same group
    assert P.recipe_max_prompt_length("qwen2.5-7b") == P.recipe_max_prompt_length()


def test_preflight_passes_toolace2_on_its_own_budget(tmp_path, capsys):
    """multi_turn_base_65's first prompt is 9,425 Llama 3.1 tokens: over 8192, within toolace2-8b's 10240."""
    from _backbones import tiny_model_dir

    from seal_verl.cli import main

    data = _data(tmp_path, "python", ids=("multi_turn_base_65", "multi_turn_base_1"))
    main(["preflight", "--backbone", "toolace2-8b", "--model", tiny_model_dir("toolace2"), "--data-dir", data,
          "--no-progress"])
    out = capsys.readouterr().out
    budget = [line for line in out.splitlines() if "prompt budget" in line]
    assert len(budget) == 1 and "data.max_prompt_length=10240" in budget[0], out
    assert budget[0].startswith(("[  ok]", "[warn]")) and "longest first prompt 9425 tokens" in budget[0], out
    assert "left with cues" in budget[0], out  # the margin with every start-of-task cue is reported


def test_prompts_are_measured_with_the_cues_a_run_renders(tmp_path):
    """A budget that holds the bare first prompts but not the same prompts with their start-of-task cues used to
    pass; a budget with under 5% left after the cues warns with the margin."""
    from _backbones import tiny_model_dir
    from transformers import AutoTokenizer

    model = tiny_model_dir("qwen2.5")
    tok = AutoTokenizer.from_pretrained(model)
    ids = ["multi_turn_base_0", "multi_turn_long_context_0"]
    bare = P.prompt_lengths(tok, "qwen2.5-7b", ids, progress=False)
    cued = P.prompt_lengths(tok, "qwen2.5-7b", ids, progress=False, cues=True,
                            interface={"max_cue_chars": 600, "max_schema_cue_chars": 2400})
    assert all(cued[t] > bare[t] + 50 for t in ids), (bare, cued)  # schema, call-format and capability blocks
    data = _data(tmp_path, "json", ids=tuple(ids))
    seen = []
    between = max(bare.values()) + 1
    assert P.run("qwen2.5-7b", model, data, between, "sdpa", False, 0, progress=False, emit=seen.append) == 1
    c = {c.name: c for c in seen}["prompt budget"]
    assert c.status == "fail" and "exceed it with cues" in c.detail and f">={max(cued.values())}" in c.fix
    seen.clear()
    tight = max(cued.values()) + 10
    P.run("qwen2.5-7b", model, data, tight, "sdpa", False, 0, progress=False, emit=seen.append)
    c = {c.name: c for c in seen}["prompt budget"]
    assert c.status == "warn" and "10 tokens (0.1%) left with cues" in c.detail
    assert "fix:" in P.format_check(c)


def _driver_files(root, gpus, version_line):
    for bus in gpus:
        (root / "gpus" / bus).mkdir(parents=True)
    (root / "version").write_text(version_line + "\nGCC version:  gcc version 12.2.0\n")
    return str(root)


def test_gpus_the_driver_shows_but_torch_cannot_use_fail_naming_the_driver(tmp_path):
    """Used to say "skip" (as on a machine without GPUs) when torch's CUDA build did not match the driver."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("torch sees a GPU here")
    root = _driver_files(tmp_path, ["0000:3b:00.0", "0000:86:00.0"],
                         "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024")
    assert P.nvidia_gpus(root, smi=None) == (2, "550.54.15")
    c = P.check_gpus(None, proc_root=root, smi=None)
    assert c.status == "fail" and "none of the 2 NVIDIA GPU(s)" in c.detail and "550.54.15" in c.detail
    assert "CUDA 13.0" in c.fix and "driver 580 or newer" in c.fix and "PyTorch's own wheel index" in c.fix
    open_module = _driver_files(tmp_path / "open", ["0000:01:00.0"], "NVRM version: NVIDIA UNIX Open Kernel Module "
                                "for x86_64  580.65.06  Release Build  (dvs-builder@U16-I3-B03-4-3)")
    assert P.nvidia_gpus(open_module, smi=None) == (1, "580.65.06")
    none_here = P.check_gpus(None, proc_root=str(tmp_path / "no_driver"), smi=None)
    assert none_here.status == "skip"


def test_gpu_count_is_not_assumed(monkeypatch):
    """--gpus used to default to 4 whatever the node had; now the node's count is compared with the run's."""
    from seal_verl.cli import build_parser

    args = build_parser().parse_args(["preflight", "--backbone", "qwen2.5-7b", "--model", "m"])
    assert args.gpus is None
