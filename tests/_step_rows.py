"""A training step's records built the way the trainer side builds them, for tests that write run-folder rows
without running a step: a rollout's reward extras (the trajectory profile filled in from its labels, as the reward
function writes it) and agent-loop fields become a ``Trained`` record, rows come from ``seal_verl.runs.rows``."""

from __future__ import annotations

import json
from typing import Any, Optional


def trained(*, key: str, uid: str, extras: dict, fields: dict, w: float, advantage: Optional[float],
            hint_in_text: Optional[bool] = None, grpo_advantage: Optional[float] = None,
            advantage_range: Optional[tuple] = None, excluded: bool = False, tokens: Optional[dict] = None,
            index: int = 0) -> Any:
    """One rollout and its update (``seal_verl.core.step_record.Trained``)."""
    from seal_verl.core import extras as X
    from seal_verl.core.profile import trajectory_profile
    from seal_verl.core.step_record import Rollout, Trained, Update

    full = dict(extras)
    labels, abstention = json.loads(full[X.LABELS]), json.loads(full[X.ABSTENTION])
    for key_, value in trajectory_profile(labels, abstention).items():
        full.setdefault(X.PROFILE_PREFIX + key_, value)
    grade = X.decode(full)
    trace = fields.get(X.TRACE)
    trace = json.loads(trace) if isinstance(trace, str) else trace
    task_id = fields.get(X.ROW_TASK_ID) or grade.task_id or (trace or {}).get("task_id") or ""
    rollout = Rollout(index=index, key=key, uid=uid, grade=grade, task_id=str(task_id),
                      agent_loop=fields.get(X.AGENT_LOOP), cue_tokens=int(fields.get(X.CUE_TOKENS) or 0),
                      cue_count=int(fields.get(X.CUE_COUNT) or 0), trace=trace, hint_in_text=hint_in_text,
                      tokens=tokens)
    return Trained(rollout, Update(w=w, grpo_advantage=grpo_advantage, advantage=advantage,
                                   advantage_range=advantage_range, excluded=excluded))


def record(step: int, trained_rollouts: list, state_before: Any, state_after: Any) -> Any:
    """A closed step (``seal_verl.core.step_record.StepRecord``)."""
    from seal_verl.core.step_record import StepRecord

    return StepRecord(step=step, trained=tuple(trained_rollouts), state_before=state_before, state_after=state_after)
