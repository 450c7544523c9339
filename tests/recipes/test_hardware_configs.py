"""The recipe's node shapes (``recipes/bfcl_v3/config/hardware``) compose and pass verl's validation on CPU, with
verl's synchronous trainer and with each of its asynchronous ones (``mode=colocate_async``, ``mode=separate_async``).

Each shape x backbone is composed on top of verl's ``ppo_trainer`` and run through what ``main_ppo`` and the
V1 TaskRunner check before any GPU work. On top, what verl only finds out on the cluster: the GPU count
matches the shape's name, tensor parallelism and the batch divide it, the token budget per GPU holds one
whole padded sequence (verl asserts that at the first micro-batch), and docs/gpu_training.md's table lists
exactly the shapes on disk.
"""

from __future__ import annotations

import copy
import os
import re

import pytest
from omegaconf import OmegaConf

import verl  # noqa: F401  (loads the seal plugin)

from _paths import REPO

RECIPE = os.path.join(REPO, "recipes", "bfcl_v3")
CONFIG_DIR = os.path.join(RECIPE, "config")
SHAPES = sorted(f[:-5] for f in os.listdir(os.path.join(CONFIG_DIR, "hardware")) if f.endswith(".yaml"))
BACKBONES = sorted(f[:-5] for f in os.listdir(os.path.join(CONFIG_DIR, "backbone")) if f.endswith(".yaml"))
NAME = re.compile(r"(?:(\d+)x)?(\d+)x(\d+)gb")


def _compose(*overrides):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        return compose(config_name="bfcl_v3", overrides=[f"recipe.dir={RECIPE}", "recipe.data_dir=/data/json",
                                                         *overrides])


def test_the_common_node_shapes_are_there():
    assert {"4x80gb", "8x80gb", "8x40gb", "2x8x80gb"} <= set(SHAPES)
    for shape in SHAPES:
        assert NAME.fullmatch(shape), f"{shape}: name it [nodes x] gpus x memory gb"


@pytest.mark.parametrize("backbone", BACKBONES)
@pytest.mark.parametrize("shape", SHAPES)
def test_shape_composes_and_passes_verl_validation(shape, backbone):
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.trainer.ppo.v1 import get_trainer_cls
    from verl.utils.config import omega_conf_to_dataclass, validate_config
    from verl.utils.device import auto_set_device

    nodes, gpus, gb = NAME.fullmatch(shape).groups()
    nodes = int(nodes or 1)
    overrides = [f"backbone={backbone}", "variant=seal", f"hardware={shape}"]
    if nodes > 1:
        overrides.append("trainer.default_local_dir=/shared/checkpoints/run")  # as the multi-node docs say
    cfg = _compose(*overrides)
    auto_set_device(cfg)
    validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    resolved = copy.deepcopy(cfg)
    OmegaConf.resolve(resolved)
    rollout = omega_conf_to_dataclass(resolved.actor_rollout_ref.rollout)
    get_trainer_cls(resolved.trainer.v1.trainer_mode)(config=resolved)  # runs the multi-node start-up check too

    trainer = resolved.trainer
    assert resolved.recipe.hardware == shape
    assert (trainer.nnodes, trainer.n_gpus_per_node) == (nodes, int(gpus))
    total = trainer.nnodes * trainer.n_gpus_per_node
    assert total % rollout.tensor_model_parallel_size == 0
    assert (resolved.data.train_batch_size * rollout.n) % total == 0
    assert (resolved.actor_rollout_ref.actor.ppo_mini_batch_size * rollout.n) % total == 0
    padded = resolved.data.max_prompt_length + resolved.data.max_response_length
    actor = resolved.actor_rollout_ref.actor
    assert actor.ppo_max_token_len_per_gpu >= padded, "verl refuses a budget below one padded sequence"
    assert resolved.actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu >= padded
    assert rollout.max_model_len >= padded
    assert 0 < rollout.gpu_memory_utilization <= 0.6
    if int(gb) < 80:  # 40/48 GB cards: the FSDP state cannot stay beside vLLM's share
        assert actor.fsdp_config.param_offload and actor.fsdp_config.optimizer_offload
        assert resolved.actor_rollout_ref.ref.fsdp_config.param_offload
    if int(gpus) <= 4:  # 4 x 80 GB: Adam states and the reference wait in CPU memory during the rollout
        assert actor.fsdp_config.optimizer_offload and resolved.actor_rollout_ref.ref.fsdp_config.param_offload


def test_no_shape_keeps_the_recipes_own_values():
    """Without a hardware group nothing changes for the recipe (and the CPU overlay composed on top of it)."""
    cfg = _compose("backbone=qwen2.5-7b", "variant=seal")
    assert cfg.recipe.hardware is None and cfg.trainer.n_gpus_per_node == 4 and cfg.trainer.nnodes == 1
    assert cfg.actor_rollout_ref.actor.fsdp_config.optimizer_offload is False


def test_the_docs_table_lists_the_shapes_on_disk():
    with open(os.path.join(REPO, "docs", "gpu_training.md"), encoding="utf-8") as f:
        text = f.read()
    section = text[text.index("## Node shapes"):text.index("## More than one node")]
    listed = re.findall(r"^\| `([^`]+)`", section, flags=re.M)
    assert sorted(listed) == SHAPES


MODES = sorted(f[:-5] for f in os.listdir(os.path.join(CONFIG_DIR, "mode")) if f.endswith(".yaml"))


def test_the_async_modes_are_there():
    assert MODES == ["colocate_async", "separate_async"]


@pytest.mark.parametrize("backbone", BACKBONES)
@pytest.mark.parametrize("shape", SHAPES + [None])
@pytest.mark.parametrize("mode", MODES)
def test_async_mode_composes_and_passes_verl_validation(mode, shape, backbone):
    """Each of verl's async trainers with SEAL on top, for every backbone at every node shape (and the recipe's own
    4 GPUs): verl's validation, its trainer's constructor (which asserts what separate_async needs: batch =
    parameter_sync_step x mini-batch, a standalone rollout pool, a checkpoint engine other than "naive"), the GPU
    split adding up to the shape, and SEAL keeping as many steps' rho as verl's staleness bound allows."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.trainer.ppo.v1 import get_trainer_cls
    from verl.utils.config import omega_conf_to_dataclass, validate_config
    from verl.utils.device import auto_set_device

    overrides = [f"backbone={backbone}", "variant=seal", f"mode={mode}"]
    nodes, gpus = 1, 4
    if shape is not None:
        n, g, _ = NAME.fullmatch(shape).groups()
        nodes, gpus = int(n or 1), int(g)
        overrides.append(f"hardware={shape}")
        if nodes > 1:
            overrides.append("trainer.default_local_dir=/shared/checkpoints/run")
    cfg = _compose(*overrides)
    auto_set_device(cfg)
    validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    resolved = copy.deepcopy(cfg)
    OmegaConf.resolve(resolved)
    rollout = omega_conf_to_dataclass(resolved.actor_rollout_ref.rollout)
    trainer = get_trainer_cls(resolved.trainer.v1.trainer_mode)(config=resolved)

    assert resolved.recipe.mode == mode and trainer.trainer_mode == mode
    assert resolved.trainer.v1.trainer_mode == f"seal_{mode}"
    bound = resolved.trainer.v1.sampler.max_off_policy_threshold
    assert trainer.seal.history >= bound + 1
    t = resolved.trainer
    trainer_gpus = t.nnodes * t.n_gpus_per_node
    if mode == "separate_async":
        r = resolved.actor_rollout_ref.rollout
        assert trainer_gpus + r.nnodes * r.n_gpus_per_node == nodes * gpus  # the shape's GPUs, split
        assert r.n_gpus_per_node % rollout.tensor_model_parallel_size == 0
        assert resolved.data.train_batch_size == (resolved.trainer.v1.separate_async.parameter_sync_step
                                                  * resolved.actor_rollout_ref.actor.ppo_mini_batch_size)
    else:
        assert trainer_gpus == nodes * gpus
    assert trainer_gpus % rollout.tensor_model_parallel_size == 0
    assert (resolved.actor_rollout_ref.actor.ppo_mini_batch_size * rollout.n) % trainer_gpus == 0


def test_separate_async_refuses_the_naive_weight_sync():
    """Why separate_async cannot run on CPU: verl asks for a checkpoint engine other than "naive" (and each of the
    others needs a GPU library); its own check, before any worker starts."""
    from verl.trainer.ppo.v1 import get_trainer_cls

    cfg = _compose("backbone=qwen2.5-7b", "variant=seal", "mode=separate_async",
                   "actor_rollout_ref.rollout.checkpoint_engine.backend=naive")
    resolved = copy.deepcopy(cfg)
    OmegaConf.resolve(resolved)
    with pytest.raises(AssertionError, match="please use nccl/nixl/mooncake"):
        get_trainer_cls(resolved.trainer.v1.trainer_mode)(config=resolved)
