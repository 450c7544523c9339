"""verl custom reward function for BFCL multi-turn: verifier score + SEAL turn labels + profile.

Configure it in verl 0.9.1 with::

    reward.custom_reward_function.path=<repo>/reward_fns/bfcl_reward.py   # or pkg://reward_fns.bfcl_reward
    reward.custom_reward_function.name=compute_score
    +reward.custom_reward_function.reward_kwargs.strict_abstention=true  # optional (default true)
    +reward.custom_reward_function.reward_kwargs.dense_credit=false      # optional (default false)

(``reward_kwargs`` is not in verl's default config, hence the ``+``; in a YAML file it is a plain mapping.)
verl loads the file with ``verl.trainer.ppo.reward.get_custom_reward_fn`` and wraps the function so that
``reward_kwargs`` are merged into every call (they take precedence). The reward loop's ``naive`` manager
(``verl.experimental.reward_loop.reward_manager.naive``) calls it synchronously in a thread executor, once
per sample, as ``compute_score(data_source=, solution_str=, ground_truth=, extra_info=)``, where
``extra_info`` is the parquet row's ``extra_info`` updated with the agent loop's ``extra_fields``
(``tool_extra_fields``) and ``num_turns`` / ``rollout_reward_scores``. The agent loop must put the rollout's
trace there: ``extra_fields["seal_trace"] = trace.to_json()``.

The function grades from the trace, never from ``solution_str`` (which also contains the tool
observations and any cue text): it rebuilds the :class:`~seal_verl.trace.Trace`, looks the task up, and runs
:func:`env_wrappers.bfcl.judge.judge_trace` (BFCL's verifier + Psi). Every sample returns the same keys:

- ``score``: the training reward: 1.0 / 0.0 (task passes under the reward semantics); with ``dense_credit``
  the share of checked turns that pass (1.0 for a passing task);
- ``acc``: the official BFCL verdict (abstention turns unchecked), what verl's validation reports per
  ``data_source`` (= BFCL category);
- ``seal_labels`` / ``seal_abstention``: JSON lists (one entry per ground-truth turn) of Psi's labels and of
  the abstention flags (JSON strings, because ragged per-turn lists cannot be stacked by verl);
- ``seal_category``, ``seal_task_id``: strings; ``seal_checker_error``: 1.0 if the verifier failed on a turn; ``seal_cue_tokens``: cue tokens in the rollout;
- ``seal_p_<key>`` for each key of :data:`seal_verl.taxonomy.PROFILE_KEYS`: the trajectory profile p_j(z).

Options (``reward_kwargs``, DESIGN 2.7):

- ``strict_abstention`` (default True): a tool-call attempt on an abstention turn (``spurious_tool_call``)
  fails the task for ``score``; ``acc`` always keeps the official semantics, which do not check those turns;
- ``dense_credit`` (default False): ``score`` = passing checked turns / checked turns for a failing task.
  Checked turns are the turns the reward semantics judge: turns whose ground truth calls something, plus
  abstention turns when ``strict_abstention`` is on; ``checker_error`` turns are left out. A turn passes
  when its Psi label is ``pass``. A failing task never gets 1.0 (at most (n-1)/n of n checked turns).

Problems are errors, never a silent 0: a missing or malformed trace, an unknown task id, a task id or
category that disagrees with the trace, a ground truth that disagrees with the installed BFCL data, an
unknown option.
"""

from __future__ import annotations

import json
import threading
from typing import Any, Optional

from env_wrappers.bfcl.judge import judge_trace
from env_wrappers.bfcl.tasks import CATEGORIES, BFCLTask, load_tasks
from seal_verl import taxonomy as tx
from seal_verl.profile import trajectory_profile
from seal_verl.trace import Trace

__all__ = ["compute_score", "TRACE_KEY", "TASK_ID_KEY", "PROFILE_PREFIX", "RESULT_KEYS", "DEFAULTS"]

#: ``extra_info`` key of the rollout's trace (``Trace.to_json()``), set by the agent loop's extra_fields.
TRACE_KEY = "seal_trace"
#: ``extra_info`` key of the task id (written by ``prepare-data``; the trace carries it too).
TASK_ID_KEY = "task_id"
PROFILE_PREFIX = "seal_p_"
#: The keys every call returns, in order.
RESULT_KEYS: tuple[str, ...] = (
    "score", "acc", "seal_labels", "seal_abstention", "seal_category", "seal_task_id", "seal_checker_error",
    "seal_cue_tokens",
) + tuple(PROFILE_PREFIX + k for k in tx.PROFILE_KEYS)
#: Option defaults (DESIGN 2.7: the training reward fails spurious calls; dense credit is off).
DEFAULTS: dict[str, bool] = {"strict_abstention": True, "dense_credit": False}
#: Keyword arguments verl's reward managers may pass that this function does not use.
_VERL_KWARGS = frozenset({"reward_router_address", "reward_model_tokenizer"})

# Module-level task cache. verl loads this file by path (a fresh module object per loader), so the cache is
# per loaded copy; loading the 800 tasks takes a few seconds, once per reward worker.
_TASKS: Optional[dict[str, BFCLTask]] = None
_TASKS_LOCK = threading.Lock()


def _tasks() -> dict[str, BFCLTask]:
    global _TASKS
    if _TASKS is None:
        with _TASKS_LOCK:
            if _TASKS is None:
                _TASKS = load_tasks()
    return _TASKS


def _flag(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("true", "false", "1", "0"):
        return value.strip().lower() in ("true", "1")
    raise ValueError(f"bfcl_reward: option {name!r} must be true or false, got {value!r}")


def _options(kwargs: dict) -> dict[str, bool]:
    unknown = sorted(set(kwargs) - set(DEFAULTS) - _VERL_KWARGS)
    if unknown:
        raise ValueError(
            f"bfcl_reward: unknown option(s) {unknown}; allowed reward_kwargs: {', '.join(DEFAULTS)} "
            "(reward.custom_reward_function.reward_kwargs)"
        )
    return {k: _flag(k, kwargs.get(k, v)) for k, v in DEFAULTS.items()}


def _load_trace(extra_info: Any) -> Trace:
    if not isinstance(extra_info, dict):
        raise ValueError(
            f"bfcl_reward: extra_info must be a dict carrying {TRACE_KEY!r}, got {type(extra_info).__name__}; "
            "the reward is computed from the rollout trace, which the BFCL agent loop puts in its extra_fields"
        )
    raw = extra_info.get(TRACE_KEY)
    if raw is None:
        raise KeyError(
            f"bfcl_reward: extra_info has no {TRACE_KEY!r} (keys: {sorted(extra_info)[:20]}). The BFCL agent loop "
            f"must set extra_fields[{TRACE_KEY!r}] = trace.to_json(); rows rolled out by another agent loop "
            "cannot be graded"
        )
    if isinstance(raw, Trace):
        return raw
    if hasattr(raw, "item") and getattr(raw, "shape", None) == ():  # a 0-d numpy object array
        raw = raw.item()
    if isinstance(raw, (bytes, bytearray)):
        raw = raw.decode("utf-8")
    try:
        data = json.loads(raw) if isinstance(raw, str) else raw
        if not isinstance(data, dict):
            raise TypeError(f"expected a JSON object, got {type(data).__name__}")
        return Trace.from_dict(data)
    except (ValueError, TypeError, KeyError) as exc:
        raise ValueError(f"bfcl_reward: extra_info[{TRACE_KEY!r}] is not a valid trace: {exc}") from exc


def _check_ground_truth(task: BFCLTask, ground_truth: Any) -> None:
    """If the row carries the ground truth (``prepare-data`` writes it as JSON), it must match the task's."""
    if not isinstance(ground_truth, str):
        return
    try:
        gt = json.loads(ground_truth)
    except ValueError:
        return
    if isinstance(gt, list) and gt != task.ground_truth:
        raise ValueError(
            f"bfcl_reward: the row's reward_model.ground_truth differs from the installed BFCL data for {task.id}; "
            "the parquet was written from another bfcl-eval version: rerun `seal-verl prepare-data`"
        )


def _dense(labels: list[str], abstention: list[bool], strict: bool) -> float:
    checked = passed = 0
    for label, abst in zip(labels, abstention):
        if label == tx.CHECKER_ERROR or (abst and not strict):
            continue
        checked += 1
        passed += label == tx.PASS
    if not checked:
        return 0.0
    # A failing task never earns full credit (possible when every judged turn passes but the rollout was
    # force-terminated): one turn's worth is withheld.
    return min(passed, checked - 1) / checked


def compute_score(data_source: Any = None, solution_str: Any = None, ground_truth: Any = None,
                  extra_info: Optional[dict] = None, **kwargs: Any) -> dict[str, Any]:
    """Grade one BFCL rollout from its trace; see the module docstring for the keys and options.

    Args:
        data_source: the row's ``data_source`` (the BFCL category); checked against the task when it is one.
        solution_str: ignored (it mixes model text, observations and cues).
        ground_truth: the row's ``reward_model.ground_truth``; a JSON list is checked against the task.
        extra_info: must hold ``seal_trace`` (``Trace.to_json()`` or its dict); ``task_id`` optional.
        **kwargs: ``strict_abstention`` / ``dense_credit`` (from ``reward_kwargs``); verl's own extra
            arguments are ignored; anything else raises ``ValueError``.

    Raises:
        KeyError: no trace, or an unknown task id.
        ValueError: a malformed trace, inconsistent ids/category/ground truth, or a bad option.
    """
    opts = _options(kwargs)
    trace = _load_trace(extra_info)
    task_id = extra_info.get(TASK_ID_KEY) or trace.task_id
    if not task_id:
        raise KeyError(f"bfcl_reward: no task id: neither extra_info[{TASK_ID_KEY!r}] nor the trace names one")
    task_id = str(task_id)
    if trace.task_id and trace.task_id != task_id:
        raise ValueError(f"bfcl_reward: extra_info task_id {task_id!r} differs from the trace's {trace.task_id!r}")
    tasks = _tasks()
    if task_id not in tasks:
        raise KeyError(f"bfcl_reward: unknown BFCL V3 multi-turn task id {task_id!r}")
    task = tasks[task_id]
    if isinstance(data_source, str) and data_source in CATEGORIES and data_source != task.category:
        raise ValueError(f"bfcl_reward: data_source {data_source!r} does not match task {task_id} ({task.category})")
    _check_ground_truth(task, ground_truth)
    if len(trace.turns) != task.n_turns:
        raise ValueError(
            f"bfcl_reward: the trace of {task_id} has {len(trace.turns)} turns, the task has {task.n_turns}; "
            "an agent loop must record every turn (call env.terminate() when it stops early)"
        )

    j = judge_trace(task, trace, strict_abstention=opts["strict_abstention"])
    labels = list(j.labels)
    abstention = [bool(a) for a in j.diagnosis.abstention]
    if j.reward_valid:
        score = 1.0
    elif opts["dense_credit"]:
        score = _dense(labels, abstention, opts["strict_abstention"])
    else:
        score = 0.0
    profile = trajectory_profile(labels, abstention)
    out: dict[str, Any] = {
        "score": float(score),
        "acc": float(bool(j.valid)),
        "seal_labels": json.dumps(labels),
        "seal_abstention": json.dumps(abstention),
        "seal_category": str(task.category),
        "seal_task_id": task_id,
        "seal_checker_error": float(tx.CHECKER_ERROR in labels),
        # Cue tokens the training interface added to this rollout (0 without cues): carried to the trainer
        # with the labels so that it can log cue cost per step.
        "seal_cue_tokens": float((trace.meta.get("cues") or {}).get("tokens", 0) or 0),
    }
    for key in tx.PROFILE_KEYS:
        out[PROFILE_PREFIX + key] = float(profile[key])
    return out
