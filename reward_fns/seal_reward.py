"""verl custom reward function for any registered tool environment: verifier score + SEAL labels + profile.

Configure it in verl 0.9.1 with::

    reward.custom_reward_function.path=<repo>/reward_fns/seal_reward.py   # or pkg://reward_fns.seal_reward
    reward.custom_reward_function.name=compute_score
    +reward.custom_reward_function.reward_kwargs.strict_abstention=true  # optional (default true)
    +reward.custom_reward_function.reward_kwargs.dense_credit=false      # optional (default false)
    +reward.custom_reward_function.reward_kwargs.near_miss_credit=0.0    # optional (default 0.0)
    +reward.custom_reward_function.reward_kwargs.argument_credit=0.0     # optional (default 0.0)
    +reward.custom_reward_function.reward_kwargs.env=<name>              # optional fallback environment

(``reward_kwargs`` is not in verl's default config, hence the ``+``; in a YAML file it is a plain mapping.)
verl loads the file with ``verl.trainer.ppo.reward.get_custom_reward_fn`` and merges ``reward_kwargs`` into
every call. The reward loop's ``naive`` manager calls it once per sample as ``compute_score(data_source=,
solution_str=, ground_truth=, extra_info=)``, where ``extra_info`` is the parquet row's ``extra_info`` updated
with the agent loop's ``extra_fields``; the SEAL agent loops put the rollout's trace there
(``extra_fields["seal_trace"] = trace.to_json()``) and the environment's name in ``trace.meta["env"]``.

The function grades from the trace, never from ``solution_str`` (which also contains the tool observations
and any cue text). The environment (``trace.meta["env"]``, else the row's ``extra_info.env``, else the
``env`` option) looks the task up, checks the row against it and verifies the trace
(:class:`env_wrappers.protocol.Environment`); Psi (:func:`seal_verl.core.diagnosis.diagnose`) labels the turns
from the verifier's per-turn checks. Every sample returns the same keys (:data:`RESULT_KEYS`):

- ``score``: the training reward: 1.0 / 0.0 (task passes under the reward semantics); with ``dense_credit``
  the share of checked turns that pass (1.0 for a passing task);
- ``acc``: the environment's official verdict, what verl's validation reports per ``data_source``;
- ``seal_labels`` / ``seal_abstention``: JSON lists (one entry per ground-truth turn) of Psi's labels and of
  the abstention flags (JSON strings, because ragged per-turn lists cannot be stacked by verl);
- ``seal_category``, ``seal_task_id``: strings; ``seal_checker_error``: 1.0 if the verifier failed on a
  turn; ``seal_cue_tokens``: cue tokens in the rollout;
- ``seal_p_<key>`` for each key of :data:`seal_verl.core.taxonomy.PROFILE_KEYS`: the trajectory profile p_j(z).

Options (``reward_kwargs``; docs/config.md lists them with their defaults):

- ``strict_abstention`` (default True): a tool-call attempt on an abstention turn (``spurious_tool_call``)
  fails the task for ``score``; ``acc`` always keeps the official semantics;
- ``dense_credit`` (default False): ``score`` = passing checked turns / checked turns for a failing task.
  Checked turns are turns whose ground truth calls something, plus abstention turns when
  ``strict_abstention`` is on; ``checker_error`` turns are left out. A failing task never gets 1.0.
- ``near_miss_credit`` (default 0.0, in [0, 1), needs ``dense_credit``): an ``argument_mismatch`` turn counts
  this fraction of a passing turn, so that an attempt with the right tools earns more than no attempt.
- ``argument_credit`` (default 0.0, in [0, 1), needs ``dense_credit``; ``near_miss_credit + argument_credit < 1``):
  an ``argument_mismatch`` turn earns in addition this fraction times the share of the ground truth's arguments
  its calls match (the verifier's ``TurnCheck.argument_share``, 0 where it is not measured).

Problems are errors, never a silent 0: a missing or malformed trace, an unknown environment or task id, a
task id or category that disagrees with the trace, a row that disagrees with the environment's data, an
unknown option.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, fields
from typing import Any, Optional

from env_wrappers.registry import get_environment
from seal_verl import env_vars
from seal_verl.core import extras as X
from seal_verl.core import taxonomy as tx
from seal_verl.core.diagnosis import diagnose
from seal_verl.core.settings import RewardOptions
from seal_verl.core.trace import Trace

# The project's SEAL_ settings, parsed when verl's reward worker loads this file: a bad value stops the worker with
# one line naming its variable, before any rollout is graded under it.
env_vars.check()

__all__ = ["compute_score", "grade", "parse_options", "TRACE_KEY", "TASK_ID_KEY", "ENV_KEY", "PROFILE_PREFIX", "RESULT_KEYS",
           "DEFAULTS", "RewardOptions"]

#: ``extra_info`` key of the rollout's trace (``Trace.to_json()``), set by the agent loop's extra_fields.
TRACE_KEY = X.TRACE
#: ``extra_info`` key of the task id (written by ``prepare-data``; the trace carries it too).
TASK_ID_KEY = X.ROW_TASK_ID
#: ``extra_info`` key (and ``trace.meta`` key) naming the row's environment.
ENV_KEY = "env"
PROFILE_PREFIX = X.PROFILE_PREFIX
#: The keys every call returns, in order (``seal_verl.core.extras``, the contract with the trainer side).
RESULT_KEYS: tuple[str, ...] = X.KEYS

#: Option defaults as a dict (from :class:`seal_verl.core.settings.RewardOptions`, their one source).
DEFAULTS: dict[str, Any] = asdict(RewardOptions())
#: Keyword arguments verl's reward managers may pass that this function does not use.
_VERL_KWARGS = frozenset({"reward_router_address", "reward_model_tokenizer"})


def _flag(who: str, name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("true", "false", "1", "0"):
        return value.strip().lower() in ("true", "1")
    raise ValueError(f"{who}: option {name!r} must be true or false, got {value!r}")


def _number(who: str, name: str, value: Any) -> float:
    if hasattr(value, "item") and getattr(value, "shape", None) == ():
        value = value.item()
    if isinstance(value, bool) or value is None:
        raise ValueError(f"{who}: option {name!r} must be a number, got {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{who}: option {name!r} must be a number, got {value!r}") from None


def parse_options(who: str, kwargs: dict) -> dict[str, Any]:
    """The reward options in ``kwargs`` (``reward_kwargs``) with their defaults, checked; errors start with ``who``."""
    unknown = sorted(set(kwargs) - set(DEFAULTS) - _VERL_KWARGS - {ENV_KEY})
    if unknown:
        raise ValueError(
            f"{who}: unknown option(s) {unknown}; allowed reward_kwargs: {', '.join(DEFAULTS)}, {ENV_KEY} "
            "(reward.custom_reward_function.reward_kwargs)"
        )
    opts = {f.name: (_flag if isinstance(f.default, bool) else _number)(who, f.name, kwargs.get(f.name, f.default))
            for f in fields(RewardOptions)}
    try:
        RewardOptions(**opts).validate()
    except ValueError as exc:
        where = "" if "reward_kwargs" in who else " (reward.custom_reward_function.reward_kwargs)"
        raise ValueError(f"{who}: {exc}{where}") from None
    return opts


def _load_trace(who: str, extra_info: Any) -> Trace:
    if not isinstance(extra_info, dict):
        raise ValueError(
            f"{who}: extra_info must be a dict carrying {TRACE_KEY!r}, got {type(extra_info).__name__}; "
            "the reward is computed from the rollout trace, which the SEAL agent loops put in their extra_fields"
        )
    raw = extra_info.get(TRACE_KEY)
    if raw is None:
        raise KeyError(
            f"{who}: extra_info has no {TRACE_KEY!r} (keys: {sorted(extra_info)[:20]}). The agent loop "
            f"must set extra_fields[{TRACE_KEY!r}] = trace.to_json(); rows rolled out by another agent loop "
            "cannot be graded"
        )
    if isinstance(raw, Trace):
        return raw
    if hasattr(raw, "item") and getattr(raw, "shape", None) == ():  # a 0-d numpy object array
        raw = raw.item()
    try:
        if isinstance(raw, (bytes, bytearray)):
            raw = raw.decode("utf-8")
        data = json.loads(raw) if isinstance(raw, str) else raw
        if not isinstance(data, dict):
            raise TypeError(f"expected a JSON object, got {type(data).__name__}")
        return Trace.from_dict(data)
    # A trace is data from the rollout: any shape it may take (wrong types anywhere, nesting deeper than the
    # parser's recursion limit) is one clear error naming the key, never a stray traceback.
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
        raise ValueError(f"{who}: extra_info[{TRACE_KEY!r}] is not a valid trace: "
                         f"{type(exc).__name__}: {str(exc)[:300]}") from None


def _cue_tokens(who: str, trace: Trace) -> float:
    """The cue tokens the interface recorded in ``trace.meta['cues']['tokens']`` (0 without cues)."""
    cues = trace.meta.get("cues") if isinstance(trace.meta, dict) else None
    if not cues:
        return 0.0
    tokens = cues.get("tokens") if isinstance(cues, dict) else "not a mapping"
    if tokens is None:
        return 0.0
    if isinstance(tokens, bool) or not isinstance(tokens, (int, float)) or not math.isfinite(tokens) or tokens < 0:
        raise ValueError(f"{who}: extra_info[{TRACE_KEY!r}] is not a valid trace: meta.cues must be "
                         f"{{'tokens': count}}, got {str(cues)[:80]!r}")
    return float(tokens)


def _env_name(extra_info: dict, trace: Trace, fallback: Optional[str]) -> str:
    for value in (trace.meta.get(ENV_KEY), extra_info.get(ENV_KEY), fallback):
        if hasattr(value, "item") and getattr(value, "shape", None) == ():
            value = value.item()
        if value:
            return str(value)
    raise KeyError(
        f"no environment named for this rollout: neither trace.meta[{ENV_KEY!r}] nor extra_info[{ENV_KEY!r}] is "
        f"set; pass +reward.custom_reward_function.reward_kwargs.{ENV_KEY}=<name>"
    )


def _dense(labels: list[str], abstention: list[bool], strict: bool, near_miss: float = 0.0,
           argument: float = 0.0, shares: Optional[list] = None) -> float:
    checked = 0
    credit = 0.0
    shares = list(shares or [])[:len(labels)] + [None] * max(0, len(labels) - len(shares or []))
    for label, abst, share in zip(labels, abstention, shares):
        if label == tx.CHECKER_ERROR or (abst and not strict):
            continue
        checked += 1
        if label == tx.PASS:
            credit += 1.0
        elif label == tx.ARGUMENT_MISMATCH:
            credit += near_miss + argument * min(1.0, max(0.0, share or 0.0))
    if not checked:
        return 0.0
    # A failing task never earns full credit (possible when every judged turn passes but the rollout was
    # force-terminated): one turn's worth is withheld.
    return (checked - 1 if credit >= checked else credit) / checked


def grade(data_source: Any = None, solution_str: Any = None, ground_truth: Any = None,
          extra_info: Optional[dict] = None, *, default_env: Optional[str] = None, who: str = "seal_reward",
          **kwargs: Any) -> dict[str, Any]:
    """:func:`compute_score` with a fallback environment and the name error messages start with."""
    opts = parse_options(who, kwargs)
    trace = _load_trace(who, extra_info)
    env = get_environment(_env_name(extra_info, trace, kwargs.get(ENV_KEY) or default_env))
    task_id = extra_info.get(TASK_ID_KEY) or trace.task_id
    if hasattr(task_id, "item") and getattr(task_id, "shape", None) == ():
        task_id = task_id.item()
    if not task_id:
        raise KeyError(f"{who}: no task id: neither extra_info[{TASK_ID_KEY!r}] nor the trace names one")
    task_id = str(task_id)
    if trace.task_id and trace.task_id != task_id:
        raise ValueError(f"{who}: extra_info task_id {task_id!r} differs from the trace's {trace.task_id!r}")
    try:
        task = env.load_task(task_id)
        env.check_row(task, trace, data_source=data_source, ground_truth=ground_truth)
    except KeyError as exc:
        raise KeyError(f"{who}: {exc.args[0] if exc.args else exc}") from exc
    except ValueError as exc:
        raise ValueError(f"{who}: {exc}") from exc

    cue_tokens = _cue_tokens(who, trace)
    v = env.verify(task, trace, strict_abstention=opts["strict_abstention"])
    diagnosis = diagnose(trace, v.checks)
    labels = list(diagnosis.labels)
    abstention = [bool(a) for a in diagnosis.abstention]
    if v.reward_valid:
        score = 1.0
    elif opts["dense_credit"]:
        score = _dense(labels, abstention, opts["strict_abstention"], opts["near_miss_credit"],
                       opts["argument_credit"], [getattr(c, "argument_share", None) for c in v.checks])
    else:
        score = 0.0
    # The cue tokens the training interface added (0 without cues) travel with the labels so that the trainer
    # can log cue cost per step.
    return X.encode(diagnosis, score=score, acc=float(bool(v.valid)), category=v.category, task_id=task_id,
                    cue_tokens=cue_tokens)


def compute_score(data_source: Any = None, solution_str: Any = None, ground_truth: Any = None,
                  extra_info: Optional[dict] = None, **kwargs: Any) -> dict[str, Any]:
    """Grade one rollout of any registered environment from its trace (see the module docstring).

    Raises:
        KeyError: no trace, an unknown environment, or an unknown task id.
        ValueError: a malformed trace, inconsistent ids / category / ground truth, or a bad option.
    """
    return grade(data_source, solution_str, ground_truth, extra_info, **kwargs)
