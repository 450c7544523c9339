"""Every BFCL V3 recipe (backbone x variant) composes and passes verl's start-up validation on CPU.

For each of the 15 combinations this runs what ``python -m verl.trainer.main_ppo`` and the V1 TaskRunner do
before any GPU work: Hydra composition of the recipe on top of verl's ``ppo_trainer``, ``auto_set_device``,
``verl.utils.config.validate_config`` (which builds verl's actor/critic dataclasses), full resolution of the
config, the trainer lookup ``get_trainer_cls(trainer.v1.trainer_mode)`` and the trainer's constructor, and
verl's dataclass conversion of the rollout config. On top: the ``seal`` section's validation and its
consistency with the estimator and trainer mode, the agent-loop file, the reward function path, and the
launch scripts.
"""

from __future__ import annotations

import copy
import importlib.util
import os
import shlex
import subprocess

import pytest
from omegaconf import OmegaConf

import verl  # noqa: F401  (loads the seal plugin: seal_grpo estimator and `seal` trainer)

from _paths import REPO

from seal_verl.verl_glue.config import SealConfigError, check_run_config, parse_seal_config

RECIPE = os.path.join(REPO, "recipes", "bfcl_v3")
CONFIG_DIR = os.path.join(RECIPE, "config")

BACKBONES = {
    "qwen2.5-3b": ("Qwen/Qwen2.5-3B-Instruct", "json"),
    "qwen2.5-7b": ("Qwen/Qwen2.5-7B-Instruct", "json"),
    "qwen3-4b": ("Qwen/Qwen3-4B", "json"),
    "qwen3-8b": ("Qwen/Qwen3-8B", "json"),
    "toolace2-8b": ("Team-ACE/ToolACE-2-Llama-3.1-8B", "python"),
}
# variant -> (adv_estimator, env_side, reweighting, closed_loop)
VARIANTS = {
    "seal": ("seal_grpo", True, True, True),
    "grpo": ("grpo", False, False, False),
    "no_env_side": ("seal_grpo", False, True, True),
    "no_reweighting": ("grpo", True, False, True),
    "no_closed_loop": ("seal_grpo", True, True, False),
}


def _compose(overrides):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        return compose(config_name="bfcl_v3", overrides=list(overrides))


def _recipe(backbone, variant, extra=()):
    return _compose(
        [f"backbone={backbone}", f"variant={variant}", f"recipe.dir={RECIPE}", "recipe.data_dir=/data/bfcl_v3", *extra]
    )


def test_recipe_groups_on_disk_match_the_matrix():
    assert sorted(f[:-5] for f in os.listdir(os.path.join(CONFIG_DIR, "backbone"))) == sorted(BACKBONES)
    assert sorted(f[:-5] for f in os.listdir(os.path.join(CONFIG_DIR, "variant"))) == sorted(VARIANTS)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("backbone", sorted(BACKBONES))
def test_recipe_composes_and_passes_verl_validation(backbone, variant):
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.trainer.ppo.v1 import get_trainer_cls
    from verl.utils.config import omega_conf_to_dataclass, validate_config
    from verl.utils.device import auto_set_device

    cfg = _recipe(backbone, variant)

    # what main_ppo.main runs
    auto_set_device(cfg)
    validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    assert cfg.trainer.use_v1 is True
    # what TaskRunnerV1.run runs before starting workers
    trainer_cls = get_trainer_cls(cfg.trainer.v1.trainer_mode)
    resolved = copy.deepcopy(cfg)
    OmegaConf.resolve(resolved)
    rollout = omega_conf_to_dataclass(resolved.actor_rollout_ref.rollout)
    trainer = trainer_cls(config=resolved)  # the SEAL trainer validates the seal section here

    # paper settings
    model, fmt = BACKBONES[backbone]
    adv, env_side, reweighting, closed_loop = VARIANTS[variant]
    assert resolved.actor_rollout_ref.model.path == model
    assert resolved.algorithm.adv_estimator == adv
    assert rollout.n == 8 and rollout.name == "vllm" and rollout.mode == "async"
    assert rollout.val_kwargs.n == 1 and rollout.val_kwargs.do_sample is False and rollout.val_kwargs.temperature == 0
    assert resolved.actor_rollout_ref.actor.optim.lr == pytest.approx(1e-6)
    assert resolved.data.train_batch_size == 32
    assert resolved.trainer.n_gpus_per_node == 4
    actor = resolved.actor_rollout_ref.actor
    assert actor.use_kl_loss is True and actor.kl_loss_coef == pytest.approx(0.001) and actor.kl_loss_type == "low_var_kl"
    assert actor.clip_ratio == pytest.approx(0.2)
    assert resolved.data.train_files == "/data/bfcl_v3/train.parquet"
    assert resolved.data.val_files == "/data/bfcl_v3/eval.parquet"
    assert resolved.trainer.experiment_name == f"{variant}_{backbone}"
    assert resolved.reward.custom_reward_function.path == "pkg://reward_fns.bfcl_reward"
    assert resolved.reward.custom_reward_function.name == "compute_score"

    # SEAL section
    seal_cfg = check_run_config(resolved)
    assert seal_cfg is not None and trainer.seal.cfg.switches_dict() == seal_cfg.switches_dict()
    assert seal_cfg.switches_dict() == {"env_side": env_side, "reweighting": reweighting, "closed_loop": closed_loop}
    assert resolved.trainer.v1.trainer_mode == "seal" and trainer.trainer_mode == "sync"

    # agent loops: both names, the backbone's tool-call format, targets that exist
    loops_path = resolved.actor_rollout_ref.rollout.agent.agent_loop_config_path
    assert loops_path == os.path.join(RECIPE, "agent_loops", f"{fmt}.yaml")
    loops = {entry.name: entry for entry in OmegaConf.load(loops_path)}
    assert set(loops) == {"seal_bfcl", "bfcl"}
    for entry in loops.values():
        assert entry["_target_"].startswith("seal_verl.verl_glue.agent_loop.")
        assert entry.call_format == fmt
        assert entry.tool_role == ("ipython" if fmt == "python" else "tool")


def test_agent_loop_targets_import():
    from hydra.utils import get_class

    for fmt in ("json", "python"):
        for entry in OmegaConf.load(os.path.join(RECIPE, "agent_loops", f"{fmt}.yaml")):
            cls = get_class(entry["_target_"])
            assert cls.__name__ in entry["_target_"]


def test_reward_function_path_points_at_reward_fns_bfcl_reward():
    spec = importlib.util.find_spec("reward_fns.bfcl_reward")
    assert spec is not None, "reward_fns/bfcl_reward.py is missing"
    assert os.path.realpath(spec.origin) == os.path.realpath(os.path.join(REPO, "reward_fns", "bfcl_reward.py"))


@pytest.mark.parametrize(
    "script,env,variant",
    [
        ("run_seal.sh", {}, "seal"),
        ("run_grpo.sh", {"BACKBONE": "qwen2.5-3b"}, "grpo"),
        ("run_ablation.sh", {"ABLATION": "no_env_side", "BACKBONE": "toolace2-8b"}, "no_env_side"),
        ("run_ablation.sh", {"ABLATION": "no_reweighting"}, "no_reweighting"),
        ("run_ablation.sh", {"ABLATION": "no_closed_loop"}, "no_closed_loop"),
        ("run_seal.sh", {"MODE": "colocate_async"}, "seal"),
    ],
)
def test_launch_scripts_build_a_valid_main_ppo_command(tmp_path, script, env, variant):
    (tmp_path / "train.parquet").touch()
    (tmp_path / "eval.parquet").touch()
    (tmp_path / "call_format.txt").write_text(BACKBONES[env.get("BACKBONE", "qwen2.5-7b")][1] + "\n")
    full_env = dict(os.environ, PYTHON="echo", DATA_DIR=str(tmp_path), **env)
    proc = subprocess.run(
        ["bash", os.path.join(RECIPE, script), "trainer.total_epochs=2"],
        capture_output=True, text=True, env=full_env, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    argv = shlex.split(proc.stdout.strip())
    assert argv[:2] == ["-m", "verl.trainer.main_ppo"]
    assert f"--config-path={CONFIG_DIR}" in argv and "--config-name=bfcl_v3" in argv
    overrides = [a for a in argv[2:] if not a.startswith("--")]
    assert f"variant={variant}" in overrides
    cfg = _compose(overrides)
    assert cfg.recipe.variant == variant
    assert cfg.recipe.backbone == env.get("BACKBONE", "qwen2.5-7b")
    assert cfg.trainer.total_epochs == 2
    assert cfg.data.train_files == os.path.join(str(tmp_path), "train.parquet")
    assert cfg.recipe.mode == env.get("MODE")
    assert cfg.trainer.v1.trainer_mode == ("seal_" + env["MODE"] if "MODE" in env else "seal")


def test_launch_script_refuses_missing_data_and_bad_choices(tmp_path):
    base = dict(os.environ, PYTHON="echo")
    proc = subprocess.run(["bash", os.path.join(RECIPE, "run_seal.sh")], capture_output=True, text=True,
                          env=dict(base, DATA_DIR=str(tmp_path)), timeout=60)
    assert proc.returncode == 2 and "seal-verl prepare-data" in proc.stderr
    (tmp_path / "train.parquet").touch()
    (tmp_path / "eval.parquet").touch()
    proc = subprocess.run(["bash", os.path.join(RECIPE, "run_ablation.sh")], capture_output=True, text=True,
                          env=dict(base, DATA_DIR=str(tmp_path)), timeout=60)
    assert proc.returncode == 2 and "ABLATION" in proc.stderr
    proc = subprocess.run(["bash", os.path.join(RECIPE, "run_seal.sh")], capture_output=True, text=True,
                          env=dict(base, DATA_DIR=str(tmp_path), BACKBONE="gpt-2"), timeout=60)
    assert proc.returncode == 2 and "unknown BACKBONE" in proc.stderr


def test_requirements_pin_verl_with_vllm_extra():
    lines = [l.split("#")[0].strip() for l in open(os.path.join(RECIPE, "requirements.txt"))]
    assert "verl[vllm]==0.9.1" in lines


# ----------------------------------------------------------------------------------- seal section


def test_seal_defaults_and_recipe_values():
    cfg = parse_seal_config(None)
    assert cfg.switches_dict() == {"env_side": True, "reweighting": True, "closed_loop": True}
    seal = _recipe("qwen2.5-7b", "seal").seal
    parsed = parse_seal_config(seal)
    assert parsed.weighting.w_min == 0.5 and parsed.weighting.w_max == 2.0 and parsed.weighting.dynamic is True
    from seal_verl.core import taxonomy
    assert parsed.weighting.rho == taxonomy.DEFAULT_RHO


@pytest.mark.parametrize(
    "section,match",
    [
        ({"weigthing": {}}, r"unknown key\(s\) \['weigthing'\] in seal"),
        ({"switches": {"env": True}}, "seal.switches"),
        ({"switches": {"env_side": "maybe"}}, "boolean"),
        ({"weighting": {"w_minimum": 1}}, "seal.weighting"),
        ({"weighting": {"w_min": 3.0, "w_max": 2.0}}, "w_min"),
        ({"weighting": {"apply_to": "some"}}, "apply_to"),
        ({"weighting": {"rho": {"not_a_label": 1.0}}}, "not_a_label"),
        ({"weighting": {"rho": {"pass": 99.0}}}, "outside the allowed range"),
        ({"weighting": {"beta": 0}}, "beta"),
        ({"interface": {"on_threshold": 0.1, "off_threshold": 0.2}}, "off_threshold"),
        ({"interface": {"patience": 0}}, "patience"),
        ({"interface": {"colour": "red"}}, "seal.interface"),
        ({"state_actor": {"host": "x"}}, r"seal.state_actor"),
        ({"state_actor": {"detached": "sometimes"}}, "detached"),
        ({"state_actor": {"resources": ["seal_node_b"]}}, r"seal.state_actor.resources must be a mapping"),
        ({"state_actor": {"resources": {"seal_node_b": 0}}}, r"seal.state_actor.resources.seal_node_b must be a positive"),
        ({"state_actor": {"resources": {"seal_node_b": "x"}}}, r"seal.state_actor.resources.seal_node_b"),
        ({"state_actor": {"resources": {"CPU": 1}}}, "not a custom resource"),
        ({"state_dir": 3}, "state_dir"),
        ({"switches": []}, "must be a mapping"),
    ],
)
def test_seal_section_rejects_bad_values(section, match):
    with pytest.raises(SealConfigError, match=match):
        parse_seal_config(section)


def test_state_actor_resources_from_a_recipe_override():
    cfg = _recipe("qwen2.5-7b", "seal", ["seal.state_actor.resources={seal_node_b: 0.01}"])
    parsed = parse_seal_config(cfg.seal)
    assert parsed.state_actor.resources == {"seal_node_b": 0.01}
    assert parse_seal_config(_recipe("qwen2.5-7b", "seal", []).seal).state_actor.resources == {}


def test_seal_section_errors_surface_through_recipe_overrides():
    cfg = _recipe("qwen2.5-7b", "seal", ["seal.weighting.w_max=0.1"])
    with pytest.raises(SealConfigError, match="w_min"):
        check_run_config(cfg)
    from verl.trainer.ppo.v1 import get_trainer_cls

    resolved = copy.deepcopy(cfg)
    OmegaConf.resolve(resolved)
    with pytest.raises(SealConfigError):
        get_trainer_cls("seal")(config=resolved)


@pytest.mark.parametrize(
    "overrides,match",
    [
        (["algorithm.adv_estimator=grpo"], "reweighting=true but algorithm.adv_estimator=grpo"),
        (["seal.switches.reweighting=false"], "use algorithm.adv_estimator=grpo"),
        (["trainer.v1.trainer_mode=sync"], "set trainer.v1.trainer_mode"),
        (["trainer.use_v1=false"], "has no effect with trainer.use_v1=false"),
    ],
)
def test_inconsistent_run_configs_are_rejected(overrides, match):
    with pytest.raises(SealConfigError, match=match):
        check_run_config(_recipe("qwen2.5-7b", "seal", overrides))


def test_legacy_trainer_variant_is_consistent():
    cfg = _recipe("qwen2.5-7b", "seal", ["trainer.use_v1=false", "trainer.v1.trainer_mode=sync"])
    assert check_run_config(cfg).switches_dict()["reweighting"] is True
