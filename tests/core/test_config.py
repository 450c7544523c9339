"""The ``seal`` section as dataclasses: one default per setting, the same for the core, the recipe, the dry run
and the docs table; bad values fail in one line naming the key."""

from __future__ import annotations

import os
import re

import pytest
import yaml

from _paths import REPO

from reward_fns.seal_reward import DEFAULTS
from seal_verl.core.interface import InterfaceConfig
from seal_verl.core.settings import RewardOptions, SealSettings, field_rows
from seal_verl.verl_glue.config import SealConfigError, parse_seal_config
from seal_verl.core.weighting import WeightingConfig

ROOT = REPO
RECIPE_YAML = os.path.join(ROOT, "recipes", "bfcl_v3", "config", "bfcl_v3.yaml")
DOC = os.path.join(ROOT, "docs", "config.md")


def _doc_rows() -> list[tuple[str, str, str]]:
    rows = []
    for line in open(DOC, encoding="utf-8"):
        m = re.match(r"\| `([a-z_.]+)` \| ([^|]+) \| `([^`]*)` \|", line)
        if m:
            rows.append((m.group(1), m.group(2).strip(), m.group(3)))
    return rows


def test_docs_table_lists_every_field_with_its_type_and_default():
    want = field_rows() + field_rows(RewardOptions, "reward.custom_reward_function.reward_kwargs")
    assert _doc_rows() == want


def test_weighting_dynamic_has_one_default_everywhere():
    """The core's dataclass, the parsed empty section and the recipe agree (they did not: core off, recipe on)."""
    recipe = yaml.safe_load(open(RECIPE_YAML, encoding="utf-8"))["seal"]
    assert WeightingConfig().dynamic is True
    assert parse_seal_config({}).weighting.dynamic is parse_seal_config(recipe).weighting.dynamic is True


def _leaves(d, prefix=""):
    for k, v in d.items():
        if isinstance(v, dict) and v and k not in ("rho", "resources"):
            yield from _leaves(v, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}", v


def test_recipe_lists_every_key_with_the_dataclass_default():
    recipe = yaml.safe_load(open(RECIPE_YAML, encoding="utf-8"))["seal"]
    defaults = dict(_leaves(SealSettings().to_dict()))
    given = dict(_leaves(recipe))
    assert sorted(given) == sorted(defaults)
    for key, value in given.items():
        if key == "weighting.rho":
            assert value == {}, "rho: {} stands for the default table"
        elif key == "state_actor.resources":
            assert value is None, "null stands for {}, and leaves the mapping open to an override"
        else:
            assert value == defaults[key], key
    assert parse_seal_config(recipe).to_dict() == SealSettings().validate().to_dict()


def test_dry_run_section_differs_from_the_defaults_only_where_it_says():
    from seal_verl.dry_run.run import DryRunConfig

    parsed = parse_seal_config(DryRunConfig().seal).to_dict()
    base = SealSettings().validate().to_dict()
    assert parsed["weighting"].pop("n_conf") == 4
    base["weighting"].pop("n_conf")
    # the dry run's cue-effect probe is small (its steps have a handful of rollouts), on as in the recipe
    small = {"every": 2, "tasks": 2, "samples": 2, "max_rollouts": 28}
    assert {k: parsed["cue_effect"].pop(k) for k in small} == small
    for k in small:
        base["cue_effect"].pop(k)
    assert parsed == base


def test_reward_defaults_come_from_the_dataclass():
    assert DEFAULTS == {"strict_abstention": True, "dense_credit": False, "near_miss_credit": 0.0, "argument_credit": 0.0}
    assert DEFAULTS == {f: getattr(RewardOptions(), f) for f in DEFAULTS}


@pytest.mark.parametrize("section,key", [
    ({"weighting": {"alpha": "strong"}}, "seal.weighting.alpha"),
    ({"weighting": {"n_conf": 2.5}}, "seal.weighting.n_conf"),
    ({"weighting": {"rho": {"pass": "high"}}}, "seal.weighting.rho.pass"),
    ({"interface": {"patience": "two"}}, "seal.interface.patience"),
    ({"interface": {"max_cue_chars": [600]}}, "seal.interface.max_cue_chars"),
    ({"state_actor": {"name": 7}}, "seal.state_actor.name"),
    ({"run_dir": ["a"]}, "seal.run_dir"),
    ({"weighting": {"w_max": True}}, "seal.weighting.w_max"),
])
def test_wrong_types_fail_in_one_line_naming_the_key(section, key):
    with pytest.raises(SealConfigError) as info:
        parse_seal_config(section)
    msg = str(info.value)
    assert "\n" not in msg and key in msg, msg


def test_unknown_keys_are_named_with_their_section_and_the_allowed_keys():
    with pytest.raises(SealConfigError, match=r"unknown key\(s\) \['ema'\] in seal.interface; allowed keys: "
                                              r"on_threshold"):
        parse_seal_config({"interface": {"ema": 0.5}})


def test_settings_are_the_cores_own_classes():
    cfg = parse_seal_config({"interface": {"patience": 3}})
    assert isinstance(cfg, SealSettings) and isinstance(cfg.interface, InterfaceConfig)
    assert cfg.interface.patience == 3 and cfg.weighting.rho_clip == (0.1, 5.0)


def test_a_parsed_section_is_the_callers_own_copy():
    """The glue caches parsed sections (the agent loops parse one per rollout); a caller that changes its
    copy changes nobody else's."""
    first = parse_seal_config({"weighting": {"alpha": 2.0}})
    first.weighting.alpha = 9.0
    first.weighting.rho["pass"] = 4.0
    again = parse_seal_config({"weighting": {"alpha": 2.0}})
    assert again.weighting.alpha == 2.0 and again.weighting.rho["pass"] == 1.0
    with pytest.raises(SealConfigError):  # errors are raised every time, never cached away
        parse_seal_config({"weighting": {"alpha": -1}})
    with pytest.raises(SealConfigError):
        parse_seal_config({"weighting": {"alpha": -1}})
