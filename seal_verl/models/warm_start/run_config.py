"""What a warm start takes from the run it prepares a model for: the lengths, the sampling and the agent loops of
that run's own configuration, composed as its launch script composes it.

A warm start renders its training rows through verl's agent loop and samples its pass rates at the run's
temperature. Its budgets must be the run's: a ground-truth trajectory that the run would cut, or a prompt it would
refuse, must fail here and not in the middle of RL. So nothing is copied: the recipe's Hydra config is composed
with the overlays of the run (``+cpu=tiny`` for the BFCL CPU run, ``+cpu=tiny +learn=ledger`` for the ledger
benchmark) and the values are read from it.

The config files live in the repository's ``recipes/`` folder (present in a checkout, not in a wheel), as the dry
run's presets do.
"""

from __future__ import annotations

import dataclasses
import functools
import os

#: the repository checkout this package sits in
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
RECIPE_DIR = os.path.join(REPO, "recipes", "bfcl_v3")
CPU_DIR = os.path.join(RECIPE_DIR, "cpu")
LEDGER_DIR = os.path.join(REPO, "recipes", "ledger_cpu")

#: per run: the config folders searched after verl's and the group choices, as its launch script passes them
#: (recipes/bfcl_v3/cpu/run_cpu.sh, recipes/ledger_cpu/run_ledger.sh; tests/models/test_warm_start_config.py checks that
#: the scripts still pass these). The variant does not change a length or the sampling; ``seal`` is as good as any.
RUNS: dict[str, dict] = {
    "bfcl_cpu": {"search": (os.path.join(CPU_DIR, "config"),),
                 "overrides": ("backbone=qwen2.5-3b", "variant=seal", "+cpu=tiny", f"recipe.dir={RECIPE_DIR}")},
    "ledger": {"search": (os.path.join(CPU_DIR, "config"), os.path.join(LEDGER_DIR, "config")),
               "overrides": ("backbone=qwen2.5-3b", "variant=seal", "+cpu=tiny", "+learn=ledger",
                             f"recipe.dir={RECIPE_DIR}", f"recipe.ledger_dir={LEDGER_DIR}")},
}


@dataclasses.dataclass(frozen=True)
class RunSettings:
    """The settings of a run that its warm start must share."""

    run: str
    #: data.max_prompt_length, data.max_response_length
    prompt_length: int
    response_length: int
    #: actor_rollout_ref.rollout.max_model_len
    max_model_len: int
    #: the training rollouts' sampling: actor_rollout_ref.rollout.temperature, top_p
    temperature: float
    top_p: float
    #: actor_rollout_ref.rollout.agent.agent_loop_config_path (absolute)
    agent_loops: str
    #: reward.custom_reward_function.reward_kwargs: the training reward (the ledger's per-turn credit)
    reward_kwargs: tuple = ()


def compose(run: str):
    """The run's whole config (OmegaConf, unresolved), composed from the recipe as its launch script does."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    if run not in RUNS:
        raise ValueError(f"unknown run {run!r}; one of {', '.join(RUNS)}")
    spec = RUNS[run]
    search = ",".join(["pkg://verl.trainer.config"] + [f"file://{d}" for d in spec["search"]])
    overrides = [f"hydra.searchpath=[{search}]", *spec["overrides"], "recipe.data_dir=unused"]
    with initialize_config_dir(config_dir=os.path.join(RECIPE_DIR, "config"), version_base=None):
        return hydra_compose(config_name="bfcl_v3", overrides=overrides)


@functools.lru_cache(maxsize=None)
def run_settings(run: str) -> RunSettings:
    """The lengths, sampling and agent-loop file of ``run`` (``bfcl_cpu`` or ``ledger``), read from its config."""
    cfg = compose(run)
    rollout = cfg.actor_rollout_ref.rollout
    return RunSettings(run=run, prompt_length=int(cfg.data.max_prompt_length),
                       response_length=int(cfg.data.max_response_length), max_model_len=int(rollout.max_model_len),
                       temperature=float(rollout.temperature), top_p=float(rollout.top_p),
                       agent_loops=os.path.abspath(str(rollout.agent.agent_loop_config_path)),
                       reward_kwargs=tuple(sorted(_reward_kwargs(cfg).items())))


def _reward_kwargs(cfg) -> dict:
    from omegaconf import OmegaConf

    fn = OmegaConf.select(cfg, "reward.custom_reward_function.reward_kwargs")
    return dict(OmegaConf.to_container(fn, resolve=True)) if fn is not None else {}
