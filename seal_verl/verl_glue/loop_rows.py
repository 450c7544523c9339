"""What a dataset row tells an agent loop: its task, its environment, and whether it is a cue-effect probe row.

verl passes every non-tensor field of a row to ``AgentLoopBase.run`` as keyword arguments; the SEAL loops read
``extra_info`` (written by ``seal-verl prepare-data`` or an environment's row builder): ``task_id``, ``env``,
``call_format`` and, on a probe row, ``seal_probe``. No verl import.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from seal_verl.core.extras import PROBE as PROBE_KEY


def plain(value: Any) -> Any:
    """Unwrap the numpy containers verl puts row values in (0-d object arrays, numpy scalars)."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value.item()
    if isinstance(value, np.generic):
        value = value.item()
    return value


def row_extra_info(kwargs: dict) -> dict:
    info = plain(kwargs.get("extra_info"))
    if info is None:
        return {}
    if not isinstance(info, dict):
        raise ValueError(f"dataset row extra_info must be a mapping, got {type(info).__name__}")
    return info


def task_id_of(kwargs: dict) -> str:
    """The task id of a dataset row (``extra_info.task_id``)."""
    info = row_extra_info(kwargs)
    task_id = plain(info.get("task_id"))
    if not task_id:
        raise ValueError(
            "the SEAL agent loops need extra_info.task_id in every dataset row (write the data with "
            "`seal-verl prepare-data`); got extra_info keys: " + ", ".join(sorted(map(str, info)))
        )
    return str(task_id)


def probe_of(kwargs: dict) -> Optional[dict]:
    """A probe row's ``{"condition", "kinds", "sampling"}`` (checked), or None for an ordinary row."""
    from seal_verl.core.interface import check_kinds
    from seal_verl.verl_glue.probe import PROBE_SAMPLING

    value = plain(row_extra_info(kwargs).get(PROBE_KEY))
    if value is None:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("condition"), str):
        raise ValueError(f"extra_info.{PROBE_KEY} must be a mapping with a condition name, got {value!r:.200}")
    kinds = value.get("kinds")
    kinds = list(kinds.tolist() if isinstance(kinds, np.ndarray) else kinds or [])
    sampling = value.get("sampling") or {}
    if not isinstance(sampling, dict) or set(sampling) - set(PROBE_SAMPLING):
        raise ValueError(f"extra_info.{PROBE_KEY}.sampling may set only {', '.join(PROBE_SAMPLING)}, got "
                         f"{sampling!r:.200}")
    return {"condition": value["condition"], "kinds": check_kinds(str(k) for k in kinds),
            "sampling": {k: v for k, v in sampling.items() if v is not None}}


def env_name_of(kwargs: dict, default: Optional[str]) -> str:
    """The environment of a dataset row: ``extra_info.env``, else ``default`` (the loop's)."""
    name = plain(row_extra_info(kwargs).get("env")) or default
    if not name:
        raise ValueError(
            "this agent loop serves any environment, so every dataset row needs extra_info.env (a name "
            "registered in env_wrappers.registry), or give the loop an `env` in the agent-loop YAML"
        )
    return str(name)
