"""The recipe's ``lora`` option (``recipes/bfcl_v3/config/lora``) composes and passes verl's validation with every GPU
backbone at every hardware preset, and sets what verl's FSDP engine and vLLM read.

verl reads the top-level ``actor_rollout_ref.model.lora_rank`` (the FSDP engine wraps the model with peft when it
is above 0, and the reference then runs inside the actor with the adapter switched off), ``lora.merge`` (merge
before each sync, or give vLLM the adapter: then vLLM's ``max_lora_rank`` must be a rank it supports, checked by
verl's ``validate_config``), ``lora_alpha`` and ``target_modules``.
"""

from __future__ import annotations

import copy
import importlib.util
import os
import re

import pytest
from omegaconf import OmegaConf

import verl  # noqa: F401  (loads the seal plugin)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RECIPE = os.path.join(REPO, "recipes", "bfcl_v3")
CONFIG_DIR = os.path.join(RECIPE, "config")


def _names(group: str) -> list[str]:
    return sorted(f[:-5] for f in os.listdir(os.path.join(CONFIG_DIR, group)) if f.endswith(".yaml"))


SHAPES, BACKBONES, MODES = _names("hardware"), _names("backbone"), _names("lora")
#: the ranks vLLM's LoRA support accepts (vllm.config.lora.MaxLoRARanks; verl rounds lora_rank up to one of them)
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def _compose(*overrides):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        return compose(config_name="bfcl_v3", overrides=[f"recipe.dir={RECIPE}", "recipe.data_dir=/data/json",
                                                         *overrides])


def test_the_modes_are_adapter_and_merged():
    assert MODES == ["adapter", "merged"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("backbone", BACKBONES)
@pytest.mark.parametrize("shape", [None] + SHAPES)
def test_lora_composes_and_passes_verl_validation(shape, backbone, mode):
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.trainer.ppo.v1 import get_trainer_cls
    from verl.utils.config import omega_conf_to_dataclass, validate_config
    from verl.utils.device import auto_set_device

    overrides = [f"backbone={backbone}", "variant=seal", f"lora={mode}"]
    if shape is not None:
        overrides.append(f"hardware={shape}")
        if re.fullmatch(r"\d+x\d+x\d+gb", shape):  # multi-node: a shared checkpoint folder, as the multi-node docs say
            overrides.append("trainer.default_local_dir=/shared/checkpoints/run")
    cfg = _compose(*overrides)
    auto_set_device(cfg)
    checked = cfg
    if mode == "adapter" and importlib.util.find_spec("vllm") is None:
        # verl's validation of adapter mode imports vLLM to round the rank (max_lora_rank); without vLLM (this lean
        # environment) every other check runs on the same config with the merge flag flipped, and the rank is
        # checked against vLLM's supported ranks below
        checked = copy.deepcopy(cfg)
        checked.actor_rollout_ref.model.lora.merge = True
    validate_config(config=checked, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    resolved = copy.deepcopy(cfg)
    OmegaConf.resolve(resolved)
    omega_conf_to_dataclass(resolved.actor_rollout_ref.rollout)
    model = resolved.actor_rollout_ref.model  # (its dataclass would fetch the model config from the hub)
    get_trainer_cls(resolved.trainer.v1.trainer_mode)(config=resolved)

    assert resolved.recipe.lora == mode and resolved.recipe.hardware == shape
    assert model.lora_rank == 32 and model.lora_alpha == 64 and model.target_modules == "all-linear"
    assert model.lora["merge"] is (mode == "merged")
    assert model.lora_rank in VLLM_LORA_RANKS  # vLLM serves it as it is (max_lora_rank = lora_rank)
    assert resolved.actor_rollout_ref.actor.optim.lr == pytest.approx(1e-5)
    # what the hardware preset chose stays: LoRA changes the model, not the node's memory settings
    if shape is not None:
        plain = _compose(f"backbone={backbone}", "variant=seal", f"hardware={shape}",
                         *[o for o in overrides if o.startswith("trainer.")])
        for path in ("actor_rollout_ref.rollout.gpu_memory_utilization", "trainer.n_gpus_per_node",
                     "actor_rollout_ref.actor.ppo_max_token_len_per_gpu"):
            assert OmegaConf.select(cfg, path) == OmegaConf.select(plain, path), path


def test_without_the_option_every_weight_trains():
    cfg = _compose("backbone=qwen2.5-7b", "variant=seal")
    assert cfg.recipe.lora is None and cfg.actor_rollout_ref.model.lora_rank == 0
    assert cfg.actor_rollout_ref.actor.optim.lr == pytest.approx(1e-6)


def test_the_docs_give_the_memory_arithmetic_of_both_modes():
    with open(os.path.join(REPO, "docs", "gpu_training.md"), encoding="utf-8") as f:
        text = f.read()
    section = text[text.index("## LoRA"):]
    section = section[: section.index("\n## ", 4)] if "\n## " in section[4:] else section
    for needle in ("lora=adapter", "lora=merged", "seal-verl check"):
        assert needle in section, needle
    assert re.search(r"\| `qwen2\.5-7b` \|", section) and re.search(r"\| `toolace2-8b` \|", section)
