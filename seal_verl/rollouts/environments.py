"""Which environment and which agent loops in-process rollouts use (the dry run, the warm starts, the recipe tools)."""

from __future__ import annotations

from typing import Optional

from env_wrappers.protocol import ABSTAIN_TEXT, CLOSING_TEXT  # noqa: F401 - the scripted texts, re-exported

TRAIN_LOOP = "seal_bfcl"
EVAL_LOOP = "bfcl"
#: The loops of any other environment (rows name their environment in ``extra_info.env``).
GENERIC_TRAIN_LOOP = "seal_env"
GENERIC_EVAL_LOOP = "env"
#: The environment used unless told otherwise.
DEFAULT_ENV = "bfcl"


def environment(name: Optional[str] = None):
    """The registered environment ``name`` (default :data:`DEFAULT_ENV`)."""
    from env_wrappers.registry import get_environment

    return get_environment(name or DEFAULT_ENV)


def loop_names(env: Optional[str] = None) -> tuple[str, str]:
    """(training loop, evaluation loop) for an environment: BFCL keeps its own names."""
    return (TRAIN_LOOP, EVAL_LOOP) if (env or DEFAULT_ENV) == "bfcl" else (GENERIC_TRAIN_LOOP, GENERIC_EVAL_LOOP)
#: Failure targets a scripted rollout can be built to show, in the order used for tie-breaking.
