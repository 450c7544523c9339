"""docs/add_seal_to_verl.md: the documented additions turn verl's own GRPO config into a working SEAL run.

The flag blocks are read from the page itself, so the page cannot drift from what the code needs: verl's
``ppo_trainer`` config (composed from verl's own config directory) plus a plain GRPO command plus exactly the
documented additions must pass ``check_run_config`` and run one dry-run step.
"""

from __future__ import annotations

import json
import os
import re

import pytest

from _paths import REPO

DOC = os.path.join(REPO, "docs", "add_seal_to_verl.md")
README = os.path.join(REPO, "README.md")


def _block(marker: str) -> list[str]:
    """The overrides of the first ```bash block after the HTML comment ``<!-- marker``: one per token, with
    comments and line continuations dropped and ``$SEAL_VERL`` replaced by this checkout."""
    with open(DOC, encoding="utf-8") as f:
        text = f.read()
    i = text.index(f"<!-- {marker}")
    m = re.compile(r"```bash\n(.*?)```", re.S).search(text, i)
    assert m is not None, f"no bash block after {marker}"
    out = []
    for line in m.group(1).splitlines():
        line = line.split("#", 1)[0].replace("\\", " ")
        out += line.split()
    return [tok.replace("$SEAL_VERL", REPO) for tok in out]


ADDITIONS = _block("seal-additions")
PAPER = _block("seal-paper-settings")


def _grpo_command(model: str = "unused-model", rollouts: int = 2) -> list[str]:
    """A user's plain GRPO run (step 1 of the page) with the settings an in-process CPU run needs."""
    return [
        "algorithm.adv_estimator=grpo",
        f"actor_rollout_ref.model.path={model}",
        "actor_rollout_ref.rollout.name=vllm",
        f"actor_rollout_ref.rollout.n={rollouts}",
        # in-process on CPU (the dry run): one agent-loop worker, no dataloader or reward worker processes
        "actor_rollout_ref.rollout.agent.num_workers=1",
        "data.max_prompt_length=16384",
        "data.max_response_length=8192",
        "data.dataloader_num_workers=0",
        "reward.num_workers=1",
        "trainer.device=cpu",
        "trainer.project_name=add_seal_to_verl",
        "trainer.experiment_name=test",
    ]


def _compose(overrides: list[str]):
    import verl
    from hydra import compose, initialize_config_dir

    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose(config_name="ppo_trainer", overrides=list(overrides))


def _key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+")


def test_the_page_lists_the_additions():
    keys = {_key(o) for o in ADDITIONS}
    assert {"algorithm.adv_estimator", "trainer.v1.trainer_mode", "actor_rollout_ref.rollout.mode",
            "actor_rollout_ref.rollout.agent.agent_loop_config_path",
            "actor_rollout_ref.rollout.agent.default_agent_loop", "reward.custom_reward_function.path",
            "seal.switches.env_side", "seal.switches.reweighting", "seal.switches.closed_loop"} <= keys
    path = dict(o.split("=", 1) for o in ADDITIONS)["actor_rollout_ref.rollout.agent.agent_loop_config_path"]
    assert os.path.isfile(path)
    with open(DOC, encoding="utf-8") as f:
        text = f.read()
    for column in ("agent_name", "extra_info.task_id", "extra_info.env"):
        assert f"`{column}`" in text
    with open(README, encoding="utf-8") as f:
        assert "docs/add_seal_to_verl.md" in f.read()


def test_grpo_plus_the_additions_passes_check_run_config():
    from seal_verl.verl_glue.config import check_run_config

    cfg = _compose(_grpo_command() + ADDITIONS)
    seal = check_run_config(cfg)
    assert seal is not None and seal.switches_dict() == {"env_side": True, "reweighting": True, "closed_loop": True}
    assert cfg.algorithm.adv_estimator == "seal_grpo" and cfg.trainer.v1.trainer_mode == "seal"
    # the plain GRPO command alone is not a SEAL run
    assert check_run_config(_compose(_grpo_command())) is None


@pytest.mark.parametrize("dropped, match", [
    ("algorithm.adv_estimator", "seal.switches.reweighting=true but algorithm.adv_estimator=grpo"),
    ("trainer.v1.trainer_mode", "need the SEAL trainer"),
])
def test_each_rule_on_the_page_is_enforced(dropped, match):
    from seal_verl.verl_glue.config import SealConfigError, check_run_config

    cfg = _compose(_grpo_command() + [o for o in ADDITIONS if _key(o) != dropped])
    with pytest.raises(SealConfigError, match=re.escape(match)):
        check_run_config(cfg)


def test_the_paper_settings_are_the_recipes_paper_preset():
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from seal_verl.verl_glue.config import check_run_config

    cfg = _compose(_grpo_command() + ADDITIONS + PAPER)
    seal = check_run_config(cfg)
    assert seal.weighting.dynamic is False
    with initialize_config_dir(config_dir=os.path.join(REPO, "recipes", "bfcl_v3", "config"), version_base=None):
        recipe = compose(config_name="bfcl_v3", overrides=["backbone=qwen2.5-7b", "variant=seal", "preset=paper"])
    for o in PAPER:
        key = _key(o)
        assert OmegaConf.select(recipe, key) == OmegaConf.select(cfg, key), key


def test_one_dry_run_step_with_the_documented_config(tmp_path, monkeypatch):
    """The dry run (verl's agent-loop and reward workers in this process, a scripted policy) on the config the
    page describes instead of its own: 1 step, 2 tasks x 2 rollouts."""
    from seal_verl import dry_run as D
    from seal_verl.dry_run import run as run_module
    from seal_verl.verl_glue.config import check_run_config

    used = {}

    def documented_config(model_path, *, rollouts=2, **_ignored):
        cfg = _compose(_grpo_command(model_path, rollouts) + ADDITIONS)
        check_run_config(cfg)
        used["cfg"] = cfg
        return cfg

    monkeypatch.setattr(run_module, "verl_config", documented_config)
    cfg = D.DryRunConfig(out=str(tmp_path / "run"), steps=1, tasks_per_step=2, rollouts=2, val_tasks=0,
                         model=str(tmp_path / "model"), progress=False, verbose=False)
    rows = D.run_dry(cfg)
    assert "cfg" in used and len(rows) == 1 and rows[0]["n_rollouts"] == 4
    with open(os.path.join(cfg.out, "config.json")) as f:
        written = json.load(f)
    assert written["seal"]["switches"] == {"env_side": True, "reweighting": True, "closed_loop": True}
    with open(os.path.join(cfg.out, "traces_step_1.jsonl")) as f:
        traces = [json.loads(line) for line in f if line.strip()]
    assert len(traces) == 4
    for t in traces:
        assert t["agent_loop"] == "seal_bfcl" and t["labels"]
        # seal_grpo: the advantage the update gets is w x the GRPO advantage
        assert t["advantage"] == pytest.approx(t["w"] * t["grpo_advantage"], rel=1e-4, abs=1e-6)
