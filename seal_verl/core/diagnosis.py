"""Psi: the deterministic, verifier-grounded diagnosis of a rollout, one label per ground-truth turn.

Psi reads two things: the trace (what the agent attempted, what parsed, what was available, what the
schema said, what executed and failed) and the verifier's per-turn checks. It applies the rules of the
SEAL taxonomy in priority order (``seal_verl.core.taxonomy.PRIORITY``); the first that matches labels the turn. Every turn is labelled, also after the first
failure; the verifier makes later turns independent of earlier mistakes (counterfactual judgement), so a
correct turn before or after a failing one is ``pass``.

A turn that verifies is ``pass``; rules 1-6 explain why a turn failed. (Read literally, the priority
list would put rule 1 ahead of ``pass`` even for a verifying turn; then BFCL's own ground truth gets failure
labels on five tasks: it passes a string where the schema says integer, and calls a miss_func function one
turn before it is revealed. A label is a diagnosis of a failure, so a verifying turn passes.) No verl, no
BFCL: an environment supplies :class:`TurnCheck` objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from . import taxonomy as T
from .trace import Trace, TurnTrace


@dataclass
class TurnCheck:
    """The verifier's verdict on one ground-truth turn, in environment-neutral terms.

    Args:
        abstention: the ground truth calls nothing in this turn.
        passed: the turn verifies (always true for an abstention turn the official score skips).
        state_ok: the environment state after the turn equals the ground-truth state.
        response_ok: every ground-truth execution result of the turn is among the model's results.
        gt_functions: names of the functions the ground truth calls in this turn (with repeats).
        checker_error: non-empty when the verifier itself failed on this turn.
        argument_share: the share of the ground truth's call arguments that the model's calls of the same
            function match exactly, in [0, 1]; None where the verifier does not measure it. It grades how near a
            wrong call came (``near_miss_credit`` / ``argument_credit``); Psi's labels do not use it.
    """

    abstention: bool
    passed: bool
    state_ok: bool = True
    response_ok: bool = True
    gt_functions: list = field(default_factory=list)
    checker_error: str = ""
    argument_share: Optional[float] = None


@dataclass
class Diagnosis:
    """Psi's output for one trajectory: labels per turn plus which turns were abstention turns."""

    labels: list
    abstention: list
    reasons: list = field(default_factory=list)

    def profile(self) -> dict[str, float]:
        """p_j(z): the share of labelled turns per profile key (see :mod:`seal_verl.core.profile`)."""
        from .profile import trajectory_profile

        return trajectory_profile(self.labels, self.abstention)


def _invalid_reason(turn: TurnTrace) -> str | None:
    for a in turn.attempts:
        for c in a.calls:
            if not c.parsed:
                return f"unparseable call ({c.parse_status}: {c.parse_error[:80]})"
            if not c.available:
                return f"function {c.name!r} not available at this point"
    return None


def _schema_reason(turn: TurnTrace) -> str | None:
    for a in turn.attempts:
        for c in a.calls:
            if c.parsed and c.available and c.schema_errors:
                return f"{c.name}: {c.schema_errors[0]}"
    return None


def _unrecovered_error(turn: TurnTrace) -> str | None:
    calls = [c for a in turn.attempts for c in a.calls if c.parsed]
    for i, c in enumerate(calls):
        if c.executed and c.is_error:
            if not any(d.name == c.name and d.executed and not d.is_error for d in calls[i + 1:]):
                return f"{c.name} returned an error and was not retried successfully"
    return None


def label_turn(turn: TurnTrace, check: TurnCheck) -> tuple[str, str]:
    """Label one turn; returns ``(label, reason)``."""
    if check.checker_error:
        return T.CHECKER_ERROR, check.checker_error
    attempted = any(a.has_call_attempt for a in turn.attempts)
    if check.abstention:
        if attempted:
            return T.SPURIOUS_TOOL_CALL, "tool call attempted on a turn that requires none"
        return T.PASS, "correct abstention"
    if check.passed:
        return T.PASS, "turn verifies"
    reason = _invalid_reason(turn)
    if reason:
        return T.INVALID_TOOL_CALL, reason
    reason = _schema_reason(turn)
    if reason:
        return T.ARGUMENT_MISMATCH, reason
    called = [c.name for a in turn.attempts for c in a.calls if c.parsed]
    if called and set(called) == set(check.gt_functions):
        return T.ARGUMENT_MISMATCH, "right functions, wrong arguments"
    if not check.state_ok:
        if not attempted:
            return T.MISSING_TOOL_CALL, "no tool call attempted; state differs as a consequence"
        return T.STATE_MISMATCH, "environment state differs from the ground truth"
    reason = _unrecovered_error(turn)
    if reason:
        return T.RECOVERY_FAILURE, reason
    missing = set(check.gt_functions) - set(called)
    if missing or not attempted:
        names = ", ".join(sorted(missing)) or "any"
        return T.MISSING_TOOL_CALL, f"ground truth calls {names}, the model did not"
    if not check.response_ok:
        return T.RESPONSE_MISMATCH, "ground-truth results missing from the model's results"
    # Failing turn with none of the above (cannot happen with BFCL's checks; kept total and explicit).
    return T.RESPONSE_MISMATCH, "turn fails verification"


def diagnose(trace: Trace, checks: list[TurnCheck]) -> Diagnosis:
    """Label every ground-truth turn of ``trace``. ``checks`` has one entry per ground-truth turn."""
    if len(trace.turns) != len(checks):
        raise ValueError(f"trace has {len(trace.turns)} turns but the verifier checked {len(checks)}")
    labels, reasons = [], []
    for turn, check in zip(trace.turns, checks):
        label, reason = label_turn(turn, check)
        labels.append(label)
        reasons.append(reason)
    return Diagnosis(labels=labels, abstention=[c.abstention for c in checks], reasons=reasons)
