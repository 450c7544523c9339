"""The ``paper`` preset and the deviations table (docs/paper_settings.md).

- every preset composes with every backbone and variant, passes verl's start-up validation and the project's
  ``check_run_config``, and leaves the method (switches, estimator, trainer mode) to the variant;
- ``preset=paper`` trains on BFCL's verdict unchanged (a spurious call on an abstention turn is not punished,
  through verl's own reward-function loader) and keeps rho static at the paper's Table 6;
- the two value columns of the docs table equal what the composed recipe puts into effect, for every row
  whose switch is a config key, so the table cannot drift from the code;
- one short dry run under ``preset=paper``: verl's agent-loop and reward workers with the preset's reward
  options, static rho, the weights from the paper's table.
"""

from __future__ import annotations

import copy
import json
import os
import re

import pytest
import yaml
from omegaconf import OmegaConf

import verl  # noqa: F401  (loads the seal plugin: seal_grpo estimator and `seal` trainer)

from _paths import REPO

from seal_verl.verl_glue.config import check_run_config

RECIPE = os.path.join(REPO, "recipes", "bfcl_v3")
CONFIG_DIR = os.path.join(RECIPE, "config")
DOC = os.path.join(REPO, "docs", "paper_settings.md")

BACKBONES = ("qwen2.5-3b", "qwen2.5-7b", "toolace2-8b")
VARIANTS = ("seal", "grpo", "no_env_side", "no_reweighting", "no_closed_loop")
PRESETS = ("default", "paper")
REWARD_KWARGS = "reward.custom_reward_function.reward_kwargs."

#: The paper's utility table (Appendix C.2, Table 6) in this project's labels (docs/paper_settings.md), with the
#: two values the paper does not give and the preset takes from the reference code (state_mismatch, response_mismatch).
TABLE_6 = {"spurious_tool_call": 2.0, "correct_abstention": 1.8, "missing_tool_call": 1.5, "state_mismatch": 1.0,
           "response_mismatch": 0.9, "pass": 1.0}

#: The paper's three cue triggers: failure label -> the cue it switches on.
PAPER_TRIGGERS = {"argument_mismatch": "schema_constraints", "missing_tool_call": "tool_affordance",
                  "recovery_failure": "error_recovery"}


def _compose(backbone="qwen2.5-7b", variant="seal", preset=None):
    from hydra import compose, initialize_config_dir

    ov = [f"backbone={backbone}", f"variant={variant}", f"recipe.dir={RECIPE}", "recipe.data_dir=/data/bfcl_v3"]
    if preset is not None:
        ov.append(f"preset={preset}")
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        cfg = compose(config_name="bfcl_v3", overrides=ov)
    resolved = copy.deepcopy(cfg)
    OmegaConf.resolve(resolved)
    return cfg, resolved


#: Every leaf of the resolved config in which preset=paper differs from preset=default.
PAPER_KEYS = {"recipe.preset", "trainer.experiment_name", "trainer.default_local_dir",
              "actor_rollout_ref.rollout.trace.experiment_name", "seal.weighting.dynamic",
              REWARD_KWARGS + "strict_abstention", REWARD_KWARGS + "dense_credit",
              REWARD_KWARGS + "near_miss_credit", REWARD_KWARGS + "argument_credit"} | {
              f"seal.weighting.rho.{k}" for k in ("invalid_tool_call", "argument_mismatch", "state_mismatch",
                                                  "recovery_failure", "missing_tool_call", "response_mismatch",
                                                  "pass", "spurious_tool_call", "correct_abstention")} | {
              "seal.interface.placement", "seal.interface.triggers.invalid_tool_call",
              "seal.interface.triggers.spurious_tool_call"}


def _leaves(node, prefix=""):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _leaves(v, f"{prefix}{k}.")
    else:
        yield prefix[:-1], node


def _differing_keys(a, b):
    la, lb = dict(_leaves(OmegaConf.to_container(a))), dict(_leaves(OmegaConf.to_container(b)))
    missing = object()
    return {k for k in set(la) | set(lb) if la.get(k, missing) != lb.get(k, missing)}


def _effective(resolved, key):
    """The value a run gets for ``key``: the recipe's where it sets it, else the reward function's or the
    core's own default (through the parsed seal section)."""
    from reward_fns.seal_reward import DEFAULTS

    if key.startswith(REWARD_KWARGS):
        name = key[len(REWARD_KWARGS):]
        kwargs = OmegaConf.to_container(resolved.reward.custom_reward_function).get("reward_kwargs") or {}
        return kwargs.get(name, DEFAULTS[name])
    assert key.startswith("seal."), key
    node = check_run_config(resolved).to_dict()
    for part in key.split(".")[1:]:
        node = node[part]
    return node


# --------------------------------------------------------------------------------------------- the group


def test_preset_group_on_disk():
    from seal_verl.dry_run.presets import load_preset, preset_names

    assert preset_names() == sorted(PRESETS)
    # the default preset changes nothing: it only names itself
    with open(os.path.join(CONFIG_DIR, "preset", "default.yaml")) as f:
        assert yaml.safe_load(f) == {"recipe": {"preset": "default"}}
    for name in PRESETS:
        preset = load_preset(name)  # refuses any key outside seal.weighting/interface and the reward options
        assert "switches" not in preset["seal"]
    with pytest.raises(ValueError, match="unknown preset 'papers'"):
        load_preset("papers")


@pytest.mark.parametrize("backbone", BACKBONES)
def test_paper_preset_composes_and_validates(backbone):
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config
    from verl.utils.device import auto_set_device

    for variant in VARIANTS:
        cfg, resolved = _compose(backbone, variant, "paper")
        auto_set_device(cfg)
        validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
        paper = check_run_config(resolved)
        _, default = _compose(backbone, variant)
        base = check_run_config(default)
        # the method is the variant's under both presets
        assert paper.switches_dict() == base.switches_dict()
        assert resolved.algorithm.adv_estimator == default.algorithm.adv_estimator
        assert resolved.trainer.v1.trainer_mode == default.trainer.v1.trainer_mode == "seal"
        # the paper's settings
        assert resolved.recipe.preset == "paper" and default.recipe.preset == "default"
        assert resolved.trainer.experiment_name == f"paper_{variant}_{backbone}"
        assert default.trainer.experiment_name == f"{variant}_{backbone}"
        assert _effective(resolved, REWARD_KWARGS + "strict_abstention") is False
        assert _effective(default, REWARD_KWARGS + "strict_abstention") is True  # every variant, GRPO too
        assert paper.weighting.dynamic is False and base.weighting.dynamic is True
        assert {k: paper.weighting.rho[k] for k in TABLE_6} == TABLE_6
        # nothing else differs (training settings, budgets, the rest of the interface): only the names and the
        # keys above
        assert _differing_keys(resolved, default) == PAPER_KEYS
        assert {k: v for k, v in paper.interface.to_dict().items() if k not in ("triggers", "placement")} == \
            {k: v for k, v in base.interface.to_dict().items() if k not in ("triggers", "placement")}


def test_paper_preset_switches_on_exactly_the_papers_three_triggers():
    """The paper names three failure-type-specific cues; the project's default adds two. Under preset=paper the
    composed recipe switches on exactly the three (the other two labels trigger nothing), with the paper's
    placement: the schema and capability cues with every observation."""
    from seal_verl.core.interface import DEFAULT_TRIGGERS

    _, paper = _compose(preset="paper")
    cfg = check_run_config(paper).interface
    assert {label: kind for label, kind in cfg.triggers.items() if kind is not None} == PAPER_TRIGGERS
    assert cfg.kinds() == ("schema_constraints", "tool_affordance", "error_recovery")
    assert cfg.placement == "every_observation"
    _, default = _compose(preset="default")
    base = check_run_config(default).interface
    assert base.triggers == DEFAULT_TRIGGERS and len(base.kinds()) == 5 and base.placement == "start_of_task"


def test_paper_weights_amplify_a_passing_rollout_with_a_spurious_call():
    """docs/paper_settings.md, row 37: under preset=paper a rollout that passes (abstention turns unchecked) with a
    call on its abstention turn weighs more than the same rollout that asked."""
    from seal_verl.core.profile import trajectory_profile
    from seal_verl.core.weighting import trajectory_weight

    _, paper = _compose(preset="paper")
    w = check_run_config(paper).weighting
    spurious = trajectory_weight(trajectory_profile(["pass", "pass", "spurious_tool_call"], [False, False, True]),
                                 w.rho, w.w_min, w.w_max)
    asked = trajectory_weight(trajectory_profile(["pass", "pass", "pass"], [False, False, True]), w.rho, w.w_min,
                              w.w_max)
    assert spurious == pytest.approx(4.0 / 3.0) and asked == pytest.approx(3.8 / 3.0) and spurious > asked > 1.0


def test_launch_script_passes_the_preset(tmp_path):
    import shlex
    import subprocess

    (tmp_path / "train.parquet").touch()
    (tmp_path / "eval.parquet").touch()
    (tmp_path / "call_format.txt").write_text("json\n")  # prepare-data's record of the folder's call format
    base = dict(os.environ, PYTHON="echo", DATA_DIR=str(tmp_path))
    for preset, expected in ((None, "default"), ("paper", "paper")):
        env = dict(base, **({"PRESET": preset} if preset else {}))
        proc = subprocess.run(["bash", os.path.join(RECIPE, "run_grpo.sh")], capture_output=True, text=True,
                              env=env, timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert f"preset={expected}" in shlex.split(proc.stdout.strip())
    proc = subprocess.run(["bash", os.path.join(RECIPE, "run_seal.sh")], capture_output=True, text=True,
                          env=dict(base, PRESET="papers"), timeout=60)
    assert proc.returncode == 2 and "unknown PRESET=papers" in proc.stderr


# ---------------------------------------------------------------------------------------------- reward


def test_paper_reward_is_the_verifier_unchanged():
    """Through verl's own loader of the composed config: a rollout whose only fault is a call on an abstention
    turn fails under the project's default reward and passes under the paper's (= BFCL's official verdict)."""
    from verl.trainer.ppo.reward import get_custom_reward_fn

    from _play import play

    from env_wrappers.bfcl.environment.examples import examples
    from env_wrappers.bfcl.environment.tasks import load_tasks

    tid, result = examples("json")["spurious_tool_call"]
    task = load_tasks()[tid]
    extra = {"index": 0, "task_id": tid, "split": "train", "call_format": "json",
             "seal_trace": play(task, result, "json").to_json()}
    scores = {}
    for preset in PRESETS:
        _, resolved = _compose(preset=preset)
        fn = get_custom_reward_fn(resolved)
        out = fn(data_source=task.category, solution_str="", ground_truth=json.dumps(task.ground_truth),
                 extra_info=dict(extra))
        assert "spurious_tool_call" in json.loads(out["seal_labels"]) and out["acc"] == 1.0
        scores[preset] = out["score"]
    assert scores == {"default": 0.0, "paper": 1.0}


# ------------------------------------------------------------------------------------------ docs table


def _table_rows():
    """(number, default cell, paper cell, switch cell) of each numbered row of the docs' tables that has five
    value columns after the number (the table of switchable deviations)."""
    rows = []
    with open(DOC, encoding="utf-8") as f:
        for line in f:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) == 6 and cells[0].isdigit():
                rows.append((int(cells[0]), cells[3], cells[4], cells[5]))
    return rows


def _code(cell):
    m = re.fullmatch(r"`([^`]+)`", cell)
    return None if m is None else m.group(1)


def test_deviation_table_matches_the_recipe():
    rows = _table_rows()
    assert [r[0] for r in rows] == list(range(1, len(rows) + 1))
    _, default = _compose(preset="default")
    _, paper = _compose(preset="paper")
    checked = {}
    for number, default_cell, paper_cell, switch_cell in rows:
        key = _code(switch_cell)
        assert key is not None and (key.startswith("seal.") or key.startswith(REWARD_KWARGS)), (number, switch_cell)
        for preset, resolved, cell in (("default", default, default_cell), ("paper", paper, paper_cell)):
            text = _code(cell)
            assert text is not None, f"row {number}: the {preset} column must be one `value`, got {cell!r}"
            documented = yaml.safe_load(text)
            actual = _effective(resolved, key)
            assert documented == actual, f"row {number} ({key}): docs say {documented!r} under preset={preset}, " \
                                         f"the composed recipe gives {actual!r}"
        checked[key] = yaml.safe_load(_code(default_cell))
    # the deviations the table must keep covering
    must = {REWARD_KWARGS + "strict_abstention", "seal.weighting.dynamic", "seal.interface.on_threshold",
            "seal.interface.off_threshold", "seal.interface.patience", "seal.interface.ema_beta",
            "seal.weighting.rho.invalid_tool_call", "seal.weighting.rho.argument_mismatch",
            "seal.weighting.rho.recovery_failure"}
    assert must <= set(checked), sorted(must - set(checked))
    # every rho entry the paper has no value for is in the table; every one it has is the paper's in the preset
    from seal_verl.core import taxonomy as tx
    assert {k for k in tx.PROFILE_KEYS if k not in TABLE_6} == {
        k.rsplit(".", 1)[1] for k in checked if k.startswith("seal.weighting.rho.")}
    # the text's claim about the core: dynamic rho is the one default, in the core as in the recipe
    from seal_verl.core.weighting import WeightingConfig

    assert WeightingConfig().dynamic is True


def test_no_switch_rows_name_what_exists():
    """The labels the table says come from the reference code are the project's labels and profile keys."""
    from seal_verl.core import taxonomy as tx
    with open(DOC, encoding="utf-8") as f:
        text = f.read()
    for label in ("spurious_tool_call", "checker_error", "correct_abstention"):
        assert f"`{label}`" in text
    assert tx.SPURIOUS_TOOL_CALL in tx.LABELS and tx.CHECKER_ERROR in tx.LABELS
    assert tx.CORRECT_ABSTENTION in tx.PROFILE_KEYS and tx.CHECKER_ERROR not in tx.PROFILE_KEYS


def test_readme_names_the_preset_of_the_reference_numbers():
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
        text = f.read()
    i = text.index("40.25 SEAL")
    assert "preset=paper" in text[i - 800:i + 800] and "docs/paper_settings.md" in text[i - 800:i + 800]


# -------------------------------------------------------------------------------------------- dry run


def test_dry_run_under_the_paper_preset(tmp_path):
    from seal_verl import dry_run as D
    from seal_verl.core.loop import ClosedLoopState
    from seal_verl.core.profile import trajectory_profile
    from seal_verl.core.weighting import trajectory_weight

    cfg = D.DryRunConfig(out=str(tmp_path / "run"), steps=1, tasks_per_step=2, rollouts=2, val_tasks=0,
                         model=str(tmp_path / "model"), progress=False, verbose=False, preset="paper")
    rows = D.run_dry(cfg)
    assert len(rows) == 1
    with open(os.path.join(cfg.out, "config.json")) as f:
        written = json.load(f)
    assert written["reward_kwargs"] == {"strict_abstention": False, "dense_credit": False, "near_miss_credit": 0.0,
                                         "argument_credit": 0.0}
    assert written["seal"]["weighting"]["dynamic"] is False
    assert {k: v for k, v in written["seal"]["interface"]["triggers"].items() if v} == PAPER_TRIGGERS
    rho = written["seal"]["weighting"]["rho"]
    assert {k: rho[k] for k in TABLE_6} == TABLE_6
    state = ClosedLoopState.load(os.path.join(cfg.out, "state_step_1.json"))
    assert state.rho == rho and rows[0]["rho_used"] == rho  # static: the step's update leaves rho alone
    with open(os.path.join(cfg.out, "traces_step_1.jsonl")) as f:
        traces = [json.loads(line) for line in f if line.strip()]
    assert len(traces) == 4
    for t in traces:
        # the reward is BFCL's verdict: every turn the official score checks passes (abstention turns unchecked)
        official = all(lab == "pass" for lab, abst in zip(t["labels"], t["abstention"]) if not abst)
        assert t["reward"] == float(official)
        w = trajectory_weight(trajectory_profile(t["labels"], t["abstention"]), rho, 0.5, 2.0)
        assert t["w"] == pytest.approx(w, rel=1e-5)


def test_dry_run_cli_refuses_an_unknown_preset(tmp_path, capsys):
    from seal_verl.cli import main

    assert main(["dry-run", "--preset", "papers", "--out", str(tmp_path / "a")]) == 2
    assert "--preset papers" in capsys.readouterr().err
    assert not (tmp_path / "a").exists()
