"""verl custom reward function for BFCL multi-turn: the generic SEAL reward with BFCL as the default.

Configure it in verl 0.9.1 with::

    reward.custom_reward_function.path=<repo>/reward_fns/bfcl_reward.py   # or pkg://reward_fns.bfcl_reward
    reward.custom_reward_function.name=compute_score
    +reward.custom_reward_function.reward_kwargs.strict_abstention=true  # optional (default true)
    +reward.custom_reward_function.reward_kwargs.dense_credit=false      # optional (default false)

Everything is :mod:`reward_fns.seal_reward` (keys, options, errors); the only difference is that a rollout
whose trace and row name no environment is graded as BFCL (the data written before environments had names).
BFCL's verdict is its official multi-turn semantics (``acc``; abstention turns unchecked), and ``score`` the
training reward (a call on an abstention turn fails the task under ``strict_abstention``).
"""

from __future__ import annotations

from typing import Any, Optional

from reward_fns.seal_reward import DEFAULTS, PROFILE_PREFIX, RESULT_KEYS, TASK_ID_KEY, TRACE_KEY, grade

__all__ = ["compute_score", "TRACE_KEY", "TASK_ID_KEY", "PROFILE_PREFIX", "RESULT_KEYS", "DEFAULTS"]

#: The environment of a rollout that names none.
DEFAULT_ENV = "bfcl"


def compute_score(data_source: Any = None, solution_str: Any = None, ground_truth: Any = None,
                  extra_info: Optional[dict] = None, **kwargs: Any) -> dict[str, Any]:
    """Grade one BFCL rollout from its trace; see :mod:`reward_fns.seal_reward` for keys, options, errors."""
    return grade(data_source, solution_str, ground_truth, extra_info, default_env=DEFAULT_ENV,
                 who="bfcl_reward", **kwargs)
