"""The run folder's rows: what each line of its files holds, and how a row is built from what the run has.

The row types name the keys of each file for readers and type checkers (plain JSON objects on disk, the same
bytes with or without them). The builders beside them are the only place a row is made, on every path that
writes a run folder (the V1 trainer, the legacy trainer, ``seal-verl dry-run``, the benchmarks): a training
step's rows from its :class:`~seal_verl.core.step_record.StepRecord`, a probe's rows from its records, a
validation row from the rollout's fields. No verl import.
"""

from __future__ import annotations

import json
import math
import statistics
from typing import Any, Mapping, Optional, TypedDict

from seal_verl.core import extras as X

#: one cell of the cue effect: mean reward of rollouts with and without a cue kind, their difference and interval
CueEffect = TypedDict("CueEffect", {"with": float, "without": float, "diff": float, "lo": float, "hi": float,
                                    "n_with": int, "n_without": int})


class TraceRow(TypedDict, total=False):
    """One rollout of a training step (``traces_step_{k}.jsonl``)."""

    step: int
    global_step: int
    key: str
    uid: str
    task_id: str
    category: Any
    agent_loop: Optional[str]
    plan: Optional[dict]            # the dry run's scripted plan; None in training
    labels: Optional[list]          # Psi's labels per turn (a correct abstention is "pass")
    abstention: Optional[list]
    profile_keys: Optional[list]    # the same turns in the metrics' vocabulary ("correct_abstention")
    reward: Optional[float]
    acc: Optional[float]
    w: float                        # the SEAL weight the advantage was multiplied by
    advantage: Optional[float]      # mean advantage over the response tokens
    grpo_advantage: Optional[float]  # verl's GRPO advantage before the weight
    advantage_range: Optional[list]  # [min, max] over the response tokens; None when kept out of the update
    excluded: bool                  # kept out of the update (its verification raised)
    cue_tokens: int
    cue_count: int
    hint_in_text: Optional[bool]    # the cue marker occurs in the decoded tokens
    interface_active: list
    state_step: Optional[int]       # the global step of the closed-loop state it ran under (None: the initial one)
    tokens: Optional[dict]
    trace: Any
    timing: dict                    # the agent loop's timers in seconds (only where the batch has them: V1)


class StepRow(TypedDict, total=False):
    """One training step (a ``metrics.jsonl`` line)."""

    step: int
    global_step: int
    n_rollouts: int
    tasks: list
    mix: Optional[dict]             # the dry run's scripted mix; None in training
    active_during: list             # cue kinds on during the step's rollouts
    active_next: list
    prevalence: Optional[dict]
    prevalence_ema: Optional[dict]
    rate: Optional[dict]
    rate_ema: Optional[dict]
    rho: dict
    rho_used: dict                  # the rho the step's weights used
    success_rate: Optional[float]
    w_mean: Optional[float]
    w_std: Optional[float]
    w_min: Optional[float]
    w_max: Optional[float]
    cue_tokens_mean: float
    cue_tokens_max: int
    seconds: Optional[float]
    metrics: dict                   # every scalar the trainer logged for the step
    cue_effect: Optional[dict]      # the step's cue-effect measurement (per cue kind or "all"); None without one


class ProbeRow(TypedDict, total=False):
    """One rollout of a cue-effect probe (a ``probe_step_{k}.jsonl`` line): enough to recompute its numbers."""

    step: int
    key: str
    condition: str                  # which cue kinds the rollout ran with
    kinds: list
    task_id: str
    passed: bool
    reward: Optional[float]         # what the effect compares: the training reward in [0, 1] (None: 1/0 by passed)
    acc: Optional[float]
    score: Optional[float]
    labels: Any
    cue_tokens: Any


class ValRow(TypedDict, total=False):
    """One validation rollout (a ``val_traces.jsonl`` line)."""

    global_step: int
    key: str
    task_id: str
    agent_loop: Optional[str]
    score: Optional[float]
    acc: Optional[float]
    labels: Optional[list]
    cue_tokens: int
    hint_in_text: Optional[bool]
    tokens: Optional[dict]
    trace: Any


class StateRow(TypedDict, total=False):
    """The closed-loop state after a step (``state_step_{k}.json``, ``ClosedLoopState.to_dict()``)."""

    version: int
    step: int
    interface: dict
    rho: dict
    base_rho: dict
    prevalence_ema: Optional[dict]
    rate_ema: Optional[dict]
    history: list  # the most recent rows (loop.HISTORY_WINDOW); metrics.jsonl has one row per step
    history_start: int  # the step of the first row kept


class Timing(TypedDict, total=False):
    """What the CPU runs' launcher records when verl's launcher exits (``timing.json``), the same keys for both
    recipes."""

    recipe: str                     # bfcl | ledger
    variant: str
    seed: int
    steps: int
    exit_code: int                  # main_ppo's exit status (130: interrupted)
    venv_s: int                     # seconds building the training venv (0: it was there)
    prepare_s: int                  # the model and the data
    main_ppo_s: int
    fault_settings: dict            # fault-injection variables set during the run (none: {})


class Prepared(TypedDict, total=False):
    """The model and data a CPU run starts from (``prepare.json``), written by the recipe's preparation."""

    model: str                      # the model folder the run trains (never written by the run)
    model_check: str                # how it was verified (its build.json, its warm-start record, or not at all)
    env: str                        # the environment (the ledger's); BFCL runs name their split instead
    split_file: str
    prompt_tokens: dict             # task id -> first-prompt tokens (BFCL)
    max_prompt_length: int
    max_model_len: int


def json_safe(value: Any) -> Any:
    """Plain JSON types: numpy/torch scalars -> Python numbers, non-finite floats -> None, containers walked."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if hasattr(value, "item") and callable(value.item) and getattr(value, "ndim", 0) == 0:
        try:
            value = value.item()
        except (TypeError, ValueError):
            return str(value)
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if hasattr(value, "tolist"):
        return json_safe(value.tolist())
    return str(value)


# ------------------------------------------------------------------------------------------------ builders

def _json_value(value: Any) -> Any:
    """A field that may be a JSON string (a trace, labels) as a Python object; the string itself if it is not JSON."""
    value = X.plain(value)
    if isinstance(value, str):
        try:
            return json.loads(value)
        except (json.JSONDecodeError, RecursionError):
            return value
    return value


def _float(value: Any, default: Optional[float] = None) -> Optional[float]:
    try:
        out = float(X.plain(value))
    except (TypeError, ValueError):
        return default
    return out if math.isfinite(out) else default


def _profile_keys(labels: list, abstention: list) -> Optional[list]:
    from seal_verl.core.profile import profile_keys

    try:
        return profile_keys([str(x) for x in labels], [bool(x) for x in abstention])
    except ValueError:
        return None


def interface_active(trace: Any) -> list:
    """The cue kinds a rollout's trace says were on (``trace.meta.interface_active``; [] without one)."""
    meta = trace.get("meta", {}) if isinstance(trace, dict) else {}
    return list(meta.get("interface_active", [])) if isinstance(meta, dict) else []


def trace_row(step: int, trained: Any, more: Optional[Mapping] = None) -> TraceRow:
    """One rollout of training step ``step`` (a :class:`~seal_verl.core.step_record.Trained`), as
    ``traces_step_{k}.jsonl`` holds it.

    ``labels`` are Psi's labels (a correct abstention is ``pass``, as in ``seal-verl diagnose``); ``profile_keys``
    are the same turns in the vocabulary of the metrics, the state and rho (``correct_abstention`` there).

    Args:
        more: keys added last (the dry run's scripted ``plan``).
    """
    r, u, g = trained.rollout, trained.update, trained.rollout.grade
    row: TraceRow = {
        "step": int(step),
        "global_step": int(step),
        "key": str(r.key),
        "uid": str(r.uid),
        "task_id": str(r.task_id),
        "category": g.category,
        "agent_loop": r.agent_loop,
        "plan": None,
        "labels": list(g.labels),
        "abstention": list(g.abstention),
        "profile_keys": _profile_keys(list(g.labels), list(g.abstention)),
        "reward": _float(g.score),
        "acc": _float(g.acc),
        "w": float(u.w),
        "advantage": u.advantage,
        "grpo_advantage": u.grpo_advantage,
        "advantage_range": None if u.advantage_range is None else [float(x) for x in u.advantage_range],
        "excluded": bool(u.excluded),
        "cue_tokens": int(r.cue_tokens),
        "cue_count": int(r.cue_count),
        "hint_in_text": r.hint_in_text,
        "interface_active": interface_active(r.trace),
        "state_step": r.state_step,
        "tokens": r.tokens,
        "trace": r.trace,
    }
    if r.timing is not None:
        row["timing"] = dict(r.timing)
    row.update(more or {})
    return row


def step_row(record: Any, *, seconds: Optional[float], metrics: Mapping,
             cue_effect: Optional[dict] = None) -> StepRow:
    """One ``metrics.jsonl`` row of a closed step (a :class:`~seal_verl.core.step_record.StepRecord`): the closed
    loop before and after, the weights and cues of its rollouts; ``metrics`` holds every scalar the trainer logged
    for the step (``seal/...``, verl's ``timing_s/...``, ``training/...``, ...).

    Args:
        seconds: the step's wall time (None: not measured on this path).
        cue_effect: the step's cue-effect probe summary (None: the step ran none).
    """
    before, after = record.state_before, record.state_after
    hist = after.history[-1] if after.history else {}
    ws = [float(t.update.w) for t in record.trained]
    cues = [int(t.rollout.cue_tokens) for t in record.trained]
    tasks: list = []
    for t in record.trained:
        if t.rollout.task_id not in tasks:
            tasks.append(t.rollout.task_id)
    return {
        "step": int(record.step),
        "global_step": int(record.step),
        "n_rollouts": len(record.trained),
        "tasks": tasks,
        "mix": None,
        "active_during": sorted(k for k, on in before.interface.active.items() if on),
        "active_next": hist.get("active", sorted(k for k, on in after.interface.active.items() if on)),
        "prevalence": hist.get("prevalence"),
        "prevalence_ema": hist.get("prevalence_ema"),
        "rate": hist.get("rate"),
        "rate_ema": hist.get("rate_ema"),
        "rho": hist.get("rho", dict(after.rho)),
        "rho_used": dict(before.rho),
        "success_rate": hist.get("success_rate"),
        "w_mean": statistics.fmean(ws) if ws else None,
        "w_std": statistics.pstdev(ws) if ws else None,
        "w_min": min(ws) if ws else None,
        "w_max": max(ws) if ws else None,
        "cue_tokens_mean": statistics.fmean(cues) if cues else 0.0,
        "cue_tokens_max": max(cues) if cues else 0,
        "seconds": None if seconds is None else round(float(seconds), 3),
        "metrics": {k: v for k, v in json_safe(dict(metrics)).items() if isinstance(v, (int, float)) or v is None},
        "cue_effect": None if cue_effect is None else json_safe(dict(cue_effect)),
    }


def val_row(*, global_step: int, key: str, reward_extras: Mapping, extra_fields: Mapping, score: Optional[float],
            hint_in_text: Optional[bool], tokens: Optional[dict] = None) -> ValRow:
    """One validation rollout, as ``val_traces.jsonl`` holds it.

    Args:
        reward_extras: the reward function's extras of the rollout (read leniently: validation may run a reward
            without SEAL's keys).
        extra_fields: the agent loop's fields of the rollout.
        score: the reward verl scored it with.
    """
    return {
        "global_step": int(global_step),
        "key": str(key),
        "task_id": str(X.plain(extra_fields.get(X.ROW_TASK_ID)) or X.plain(reward_extras.get(X.TASK_ID)) or ""),
        "agent_loop": X.plain(extra_fields.get(X.AGENT_LOOP)),
        "score": score,
        "acc": _float(reward_extras.get(X.ACC)),
        "labels": _json_value(reward_extras.get(X.LABELS)),
        "cue_tokens": int(_float(extra_fields.get(X.CUE_TOKENS), 0.0)),
        "hint_in_text": hint_in_text,
        "tokens": tokens,
        "trace": _json_value(extra_fields.get(X.TRACE)),
    }


def probe_row(step: int, key: str, condition: str, kinds: list, task_id: str, passed: bool,
              reward: Optional[float], grade: Any, cue_tokens: Any) -> ProbeRow:
    """One probe rollout, as ``probe_step_{k}.jsonl`` holds it: enough to recompute the probe's numbers
    (condition, task, verdict, reward) and to read what happened (labels, cue tokens).

    Args:
        grade: the rollout's decoded reward extras (:class:`~seal_verl.core.extras.Grade`).
        cue_tokens: the cue tokens the agent loop rendered (None: not in the batch).
    """
    return {
        "step": int(step),
        "key": str(key),
        "condition": condition,
        "kinds": sorted(kinds),
        "task_id": str(task_id),
        "passed": bool(passed),
        "reward": reward,
        "acc": grade.acc,
        "score": grade.score,
        "labels": list(grade.labels),
        "cue_tokens": None if cue_tokens is None else int(_float(cue_tokens, 0.0)),
    }
