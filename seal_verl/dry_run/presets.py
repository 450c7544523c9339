"""The recipe's presets (``recipes/bfcl_v3/config/preset/<name>.yaml``) as the dry run applies them.

A preset sets the SEAL section (``seal.weighting``, ``seal.interface``) and the reward function's options
(``reward.custom_reward_function.reward_kwargs``), never the switches (those belong to the variant). The dry
run builds its own small verl config rather than composing the GPU recipe, so it takes exactly those two
parts of a preset file; a preset that set anything else the dry run cannot mirror is an error here, not a
silent difference. Keys that only name the run (``recipe.preset``, ``trainer.experiment_name``) are skipped.
"""

from __future__ import annotations

import copy
import os
from typing import Any

#: The recipe folder holding the preset group (present in a checkout; not shipped in a wheel).
PRESET_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                          "recipes", "bfcl_v3", "config", "preset")

#: Keys of a preset file that only name the run; the dry run has its own names.
_NAMING = {("recipe", "preset"), ("trainer", "experiment_name")}


def preset_names() -> list[str]:
    """The presets on disk (``default``, ``paper``), sorted; empty where the recipe folder is absent."""
    if not os.path.isdir(PRESET_DIR):
        return []
    return sorted(f[:-5] for f in os.listdir(PRESET_DIR) if f.endswith(".yaml"))


def _leaves(d: Any, prefix: tuple = ()) -> list[tuple]:
    if isinstance(d, dict) and d:
        return [leaf for k, v in d.items() for leaf in _leaves(v, prefix + (k,))]
    return [prefix]


def load_preset(name: str) -> dict[str, dict]:
    """``{"seal": {...}, "reward_kwargs": {...}}`` of preset ``name``.

    Raises:
        ValueError: unknown preset (the message lists the ones there are), or a preset file that sets a key
            other than ``seal.weighting``, ``seal.interface``, ``reward.custom_reward_function.reward_kwargs``
            and the naming keys.
    """
    import yaml

    names = preset_names()
    if name not in names:
        where = PRESET_DIR if names else f"{PRESET_DIR} (not found: presets need the repository's recipes/ folder)"
        raise ValueError(f"unknown preset {name!r}; presets in {where}: {', '.join(names) or 'none'}")
    path = os.path.join(PRESET_DIR, f"{name}.yaml")
    with open(path, encoding="utf-8") as f:
        data = yaml.safe_load(f) or {}
    seal = copy.deepcopy((data.get("seal") or {}))
    reward_kwargs = dict(((data.get("reward") or {}).get("custom_reward_function") or {}).get("reward_kwargs") or {})
    allowed = ("seal", "weighting"), ("seal", "interface"), ("reward", "custom_reward_function", "reward_kwargs")
    for leaf in _leaves(data):
        if leaf[:2] in _NAMING:
            continue
        if not any(leaf[:len(a)] == a for a in allowed):
            raise ValueError(f"{path}: the dry run cannot apply {'.'.join(map(str, leaf))}; a preset sets only "
                             "seal.weighting, seal.interface and reward.custom_reward_function.reward_kwargs")
    return {"seal": seal, "reward_kwargs": reward_kwargs}


def merge(base: dict, over: dict) -> dict:
    """``base`` with ``over`` merged in, mapping by mapping (a copy; neither argument changes)."""
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out
