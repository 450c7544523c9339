"""The contract between a rollout, its reward and the trainer: the extras' key names and their one reading.

Two sets of per-rollout values travel with a rollout through verl:

- the agent loop's ``extra_fields`` (verl hands them to the reward function inside ``extra_info`` and keeps them
  in the batch): the trace, the task, the loop, the cue counts, the interface version the rollout ran under;
- the reward function's extras (verl stores them beside the score: ``reward_extra_info`` in TransferQueue, or
  ``DataProto.non_tensor_batch``): the verdict, Psi's labels, the trajectory profile.

Their names are defined here and nowhere else. :func:`encode` is what the reward function returns for a rollout;
:func:`decode` is how the trainer side (advantage hook, driver, dry run, probe) reads it back, once per rollout:
labels and abstention flags travel as JSON strings (verl stacks per-sample values and cannot stack ragged lists)
and come back as a :class:`Grade`. No verl import.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

from seal_verl.core import taxonomy as tx

# ------------------------------------------------------------------------------------------------ reward extras

#: the training reward (verl's score) and the environment's official verdict
SCORE = "score"
ACC = "acc"
#: Psi's label per ground-truth turn and the abstention flag per turn (JSON lists)
LABELS = "seal_labels"
ABSTENTION = "seal_abstention"
CATEGORY = "seal_category"
TASK_ID = "seal_task_id"
#: 1.0 when the verifier raised on a turn (the rollout leaves the update)
CHECKER_ERROR = "seal_checker_error"
#: cue tokens the training interface added to the rollout (also an agent-loop field)
CUE_TOKENS = "seal_cue_tokens"
#: prefix of the trajectory profile p_j(z), one key per profile key
PROFILE_PREFIX = "seal_p_"
PROFILE: tuple[str, ...] = tuple(PROFILE_PREFIX + k for k in tx.PROFILE_KEYS)
#: every key :func:`encode` writes, in order (every sample returns the same keys: verl stacks them)
KEYS: tuple[str, ...] = (SCORE, ACC, LABELS, ABSTENTION, CATEGORY, TASK_ID, CHECKER_ERROR, CUE_TOKENS) + PROFILE
#: the keys :func:`decode` cannot do without (the others have a meaning when absent)
REQUIRED: tuple[str, ...] = PROFILE + (LABELS, ABSTENTION, CATEGORY, SCORE)

# ------------------------------------------------------------------------------------------------ agent-loop fields

#: the rollout's trace (``Trace.to_json()``); the reward grades from it
TRACE = "seal_trace"
#: the dataset row's task id (the same name as the row's ``extra_info`` key)
ROW_TASK_ID = "task_id"
#: the registered name of the agent loop that ran the rollout
AGENT_LOOP = "seal_agent_loop"
#: cue blocks the interface rendered into the rollout
CUE_COUNT = "seal_cue_count"
#: the global step of the closed-loop state the rollout was generated under (-1: none published)
STATE_STEP = "seal_state_step"
#: every field the agent loops set, in both loops (so batches of either concatenate)
LOOP_FIELDS: tuple[str, ...] = (TRACE, ROW_TASK_ID, AGENT_LOOP, CUE_TOKENS, CUE_COUNT, STATE_STEP)

#: ``extra_info`` key of a cue-effect probe row: its condition, cue kinds and sampling parameters
PROBE = "seal_probe"


class ExtrasError(RuntimeError):
    """A rollout's extras are missing a key or hold a value the contract does not allow."""


class MissingExtras(ExtrasError):
    """Required keys are absent. Attributes: ``missing`` (in :data:`REQUIRED` order)."""

    def __init__(self, missing: Sequence[str], where: str):
        self.missing = list(missing)
        shown = ", ".join(self.missing[:6]) + (f" (+{len(self.missing) - 6} more)" if len(self.missing) > 6 else "")
        super().__init__(f"SEAL reward extras missing from {where}: {shown}")


def missing(keys: Any) -> list[str]:
    """The keys of :data:`REQUIRED` absent from ``keys``, in order."""
    present = set(keys)
    return [k for k in REQUIRED if k not in present]


# ------------------------------------------------------------------------------------------------ values

def plain(value: Any) -> Any:
    """A batched value as Python: numpy/torch scalars and one-element arrays unwrapped, other arrays as lists,
    bytes decoded."""
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes, bytearray)):
        value = value.tolist()
        while isinstance(value, list) and len(value) == 1:
            value = value[0]
    if isinstance(value, (bytes, bytearray)):
        value = value.decode()
    return value


def _json_list(value: Any, key: str, row: int) -> list:
    value = plain(value)
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise ExtrasError(f"reward extra {key!r} of row {row} is not valid JSON: {value[:200]!r}") from e
    if not isinstance(value, list):
        raise ExtrasError(f"reward extra {key!r} of row {row} must be a JSON list, got {value!r}")
    return value


def _number(extras: Mapping, key: str, row: int) -> float:
    value = extras[key]
    try:
        return float(plain(value))
    except (TypeError, ValueError):
        raise ExtrasError(f"reward extra {key!r} of row {row} is not a number: {value!r}") from None


def _optional_number(extras: Mapping, key: str, row: int) -> Optional[float]:
    return None if extras.get(key) is None else _number(extras, key, row)


# ------------------------------------------------------------------------------------------------ the grade

@dataclass(frozen=True)
class Grade:
    """What the reward function said about one rollout, read back once.

    Attributes:
        score: the training reward.
        labels, abstention: Psi's label and the abstention flag of each turn.
        category: the task's category.
        profile: p_j(z) as the reward function computed it (profile key -> share).
        record: the closed loop's ``TrajectoryRecord`` of the rollout (category, labels, abstention, reward).
        acc: the official verdict (None: not in the extras).
        task_id: the task id the reward graded (None: not in the extras).
        checker_error: the verifier raised on a turn; the rollout leaves the update.
        cue_tokens: cue tokens the interface added.
    """

    score: float
    labels: tuple[str, ...]
    abstention: tuple[bool, ...]
    category: str
    profile: Mapping[str, float]
    record: Any = field(repr=False)
    acc: Optional[float] = None
    task_id: Optional[str] = None
    checker_error: bool = False
    cue_tokens: float = 0.0


def encode(diagnosis: Any, *, score: float, acc: float, category: str, task_id: str,
           cue_tokens: float) -> dict[str, Any]:
    """The reward extras of a rollout (every key of :data:`KEYS`, in order).

    Args:
        diagnosis: Psi's output (``labels`` and ``abstention`` per turn).
        score: the training reward; acc: the official verdict (1.0 / 0.0).
        category, task_id: the task's.
        cue_tokens: cue tokens the interface added to the rollout (0 without cues).
    """
    from seal_verl.core.profile import trajectory_profile

    labels = [str(x) for x in diagnosis.labels]
    abstention = [bool(a) for a in diagnosis.abstention]
    out: dict[str, Any] = {
        SCORE: float(score),
        ACC: float(acc),
        LABELS: json.dumps(labels),
        ABSTENTION: json.dumps(abstention),
        CATEGORY: str(category),
        TASK_ID: str(task_id),
        CHECKER_ERROR: float(tx.CHECKER_ERROR in labels),
        CUE_TOKENS: float(cue_tokens),
    }
    profile = trajectory_profile(labels, abstention)
    for key, name in zip(tx.PROFILE_KEYS, PROFILE):
        out[name] = float(profile[key])
    return out


def decode(extras: Mapping[str, Any], row: int = 0) -> Grade:
    """Read one rollout's reward extras (as the reward function wrote them, or batched by verl).

    Args:
        extras: the rollout's extras.
        row: the rollout's row in its batch, for the messages.

    Raises:
        MissingExtras: a key of :data:`REQUIRED` is absent.
        ExtrasError: a value is not what :func:`encode` writes (not a number, not a JSON list, labels that do
            not form a trajectory record).
    """
    from seal_verl.core.profile import TrajectoryRecord

    absent = missing(extras.keys())
    if absent:
        raise MissingExtras(absent, f"the reward extras of row {row}")
    profile = {key: _number(extras, name, row) for key, name in zip(tx.PROFILE_KEYS, PROFILE)}
    labels = [str(x) for x in _json_list(extras[LABELS], LABELS, row)]
    abstention = [bool(x) for x in _json_list(extras[ABSTENTION], ABSTENTION, row)]
    category = str(plain(extras[CATEGORY]))
    score = _number(extras, SCORE, row)
    try:
        record = TrajectoryRecord(category=category, labels=labels, abstention=abstention, reward=score)
    except ValueError as e:
        raise ExtrasError(f"reward extras of row {row} do not form a valid trajectory record: {e}") from e
    flag = _optional_number(extras, CHECKER_ERROR, row)
    checker_error = flag > 0 if flag is not None else tx.CHECKER_ERROR in labels
    task_id = plain(extras.get(TASK_ID))
    cue_tokens = _optional_number(extras, CUE_TOKENS, row)
    return Grade(score=score, labels=tuple(labels), abstention=tuple(abstention), category=category,
                 profile=profile, record=record, acc=_optional_number(extras, ACC, row),
                 task_id=None if task_id in (None, "") else str(task_id), checker_error=bool(checker_error),
                 cue_tokens=0.0 if cue_tokens is None or not math.isfinite(cue_tokens) else cue_tokens)
