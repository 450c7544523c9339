"""Failure profiles: p_j(z) per trajectory and C_t per training step.

Psi gives one label per user turn. Two consumers need those labels in aggregated form:

- the policy side needs p_j(z), the share of trajectory j's turns carrying label z, to compute the
  trajectory weight ``w_j = clip(sum_z p_j(z) rho(z))``;
- the environment side and dynamic rho need C_t, the step's label prevalence overall and per task category,
  with the counts and rewards that say how much evidence stands behind each number.

This module is pure Python (no verl, no BFCL, no torch) so that it can run inside the reward worker, the
trainer hook and offline analysis alike.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Optional

from seal_verl.core import taxonomy as tx
__all__ = [
    "trajectory_profile",
    "TrajectoryRecord",
    "StepProfile",
    "aggregate",
    "ema_update",
    "zero_profile",
    "ABSTENTION_KEYS",
    "eligible_on_abstention",
    "profile_keys",
]

#: The profile keys only an abstention turn (empty ground truth) can carry; every other key can only occur on
#: a turn whose ground truth calls a function.
ABSTENTION_KEYS: tuple[str, ...] = (tx.SPURIOUS_TOOL_CALL, tx.CORRECT_ABSTENTION)


def eligible_on_abstention(key: str) -> bool:
    """Whether ``key`` is possible on abstention turns (else only on turns with a ground-truth call)."""
    return key in ABSTENTION_KEYS


def zero_profile() -> dict[str, float]:
    """A profile with every key of ``taxonomy.PROFILE_KEYS`` at 0.0 (a trajectory with no labelled turn)."""
    return {k: 0.0 for k in tx.PROFILE_KEYS}


def _profile_key(label: str, abstention: bool) -> Optional[str]:
    """Map one turn's label to its profile key; ``None`` for turns that profiles exclude.

    Raises ``ValueError`` for unknown labels and for label/turn-kind combinations Psi cannot emit (an
    abstention turn carries only ``spurious_tool_call``, ``pass`` or ``checker_error``; ``spurious_tool_call``
    only occurs on abstention turns). Such a combination means the diagnosis and the profile disagree about
    what a turn is, and silently accepting it would mis-weight the trajectory.
    """
    tx.check_label(label)
    if label == tx.CHECKER_ERROR:
        return None
    if abstention:
        if label not in tx.ABSTENTION_LABELS:
            raise ValueError(
                f"label {label!r} on an abstention turn; abstention turns can only carry "
                f"{', '.join(tx.ABSTENTION_LABELS)} or {tx.CHECKER_ERROR}"
            )
        return tx.CORRECT_ABSTENTION if label == tx.PASS else label
    if label == tx.SPURIOUS_TOOL_CALL:
        raise ValueError(f"label {tx.SPURIOUS_TOOL_CALL!r} on a non-abstention turn; it is reserved for abstention turns")
    return label


def profile_keys(labels: list[str], abstention: list[bool]) -> list[Optional[str]]:
    """Per turn, the key it counts under in p_j(z), C_t, the metrics and rho: Psi's label, except that a ``pass``
    on an abstention turn is ``correct_abstention``; ``None`` for a ``checker_error`` turn (left out)."""
    _check_lengths(labels, abstention)
    return [_profile_key(label, bool(abst)) for label, abst in zip(labels, abstention)]


def _check_lengths(labels: list[str], abstention: list[bool]) -> None:
    if len(labels) != len(abstention):
        raise ValueError(f"labels and abstention flags differ in length: {len(labels)} != {len(abstention)}")


def trajectory_profile(labels: list[str], abstention: list[bool]) -> dict[str, float]:
    """p_j(z): the share of the trajectory's labelled turns that carry each profile key.

    Args:
        labels: one Psi label per ground-truth user turn, in turn order (``taxonomy.LABELS``).
        abstention: one flag per turn, true where the ground truth of the turn is empty (the agent should
            ask or wait rather than call). A ``pass`` there counts under ``correct_abstention``, not
            ``pass``, because the utility table values a correct abstention apart from an ordinary pass.

    Returns:
        A dict with every key of ``taxonomy.PROFILE_KEYS`` (zeros included, so consumers never need a
        default). ``checker_error`` turns are dropped from numerator and denominator: a verifier failure says
        nothing about the agent. With no labelled turn at all (empty, or only checker errors) every share is
        0.0; the weighting treats that as "no evidence" (neutral weight).

    Raises:
        ValueError: unknown label, mismatched lengths, or a label impossible for the turn kind.
    """
    _check_lengths(labels, abstention)
    counts = zero_profile()
    n = 0
    for label, abst in zip(labels, abstention):
        key = _profile_key(label, bool(abst))
        if key is None:
            continue
        counts[key] += 1.0
        n += 1
    if n == 0:
        return counts
    return {k: v / n for k, v in counts.items()}


@dataclass
class TrajectoryRecord:
    """What the closed loop needs to know about one rollout: its category, turn labels and reward.

    Attributes:
        category: the task category (e.g. ``multi_turn_base``); C_t is reported per category.
        labels: Psi's label per ground-truth user turn.
        abstention: per turn, whether its ground truth is empty (see ``trajectory_profile``).
        reward: the training reward of the rollout; dynamic rho uses the mean reward of trajectories that
            carry a label as its "how unsolved is this failure" signal, so rewards are expected in [0, 1].
    """

    category: str
    labels: list[str]
    abstention: list[bool]
    reward: float

    def __post_init__(self) -> None:
        # Validate once, at construction, so that a bad record fails where it is made, not steps later.
        _check_lengths(self.labels, self.abstention)
        for label, abst in zip(self.labels, self.abstention):
            _profile_key(label, bool(abst))
        r = float(self.reward)
        if not math.isfinite(r):
            raise ValueError(f"reward must be finite, got {self.reward!r}")
        self.reward = r

    def profile(self) -> dict[str, float]:
        """This trajectory's p_j(z) (see ``trajectory_profile``)."""
        return trajectory_profile(self.labels, self.abstention)

    def turn_counts(self) -> tuple[dict[str, int], int]:
        """Turns per profile key and the number of labelled (non checker-error) turns."""
        counts = {k: 0 for k in tx.PROFILE_KEYS}
        n = 0
        for label, abst in zip(self.labels, self.abstention):
            key = _profile_key(label, bool(abst))
            if key is not None:
                counts[key] += 1
                n += 1
        return counts, n


@dataclass
class StepProfile:
    """C_t: the failure profile of one training step.

    Attributes:
        n_trajectories: rollouts aggregated (including those whose turns were all checker errors).
        n_turns: labelled turns (checker errors excluded); the denominator of ``prevalence``.
        n_checker_errors: turns excluded because the verifier failed; reported so a broken checker shows.
        n_abstention_turns: labelled abstention turns (empty ground truth), part of ``n_turns``.
        prevalence: per profile key, share of all labelled turns of the step carrying it (all zeros when
            ``n_turns`` is 0).
        rate: per profile key, share of the labelled turns where the key is possible (abstention turns for
            ``ABSTENTION_KEYS``, the other turns for the rest) carrying it; 0 when there is no such turn. Cue
            triggers compare this with their thresholds: abstention turns are about 12% of the training split's
            turns, so a share of all turns could never make ``spurious_tool_call`` reach 0.15.
        counts: per profile key, number of turns carrying it.
        trajectories_with: per profile key, number of trajectories with at least one turn carrying it; the
            evidence count that dynamic rho compares against ``n_conf``.
        mean_reward_with: per profile key, mean reward of the trajectories carrying it, ``None`` when no
            trajectory carries it (undefined, and JSON has no NaN).
        success_rate: share of trajectories whose reward reached the success threshold.
        n_by_category, prevalence_by_category, counts_by_category, success_rate_by_category: the same,
            per task category.
    """

    n_trajectories: int = 0
    n_turns: int = 0
    n_checker_errors: int = 0
    n_abstention_turns: int = 0
    prevalence: dict[str, float] = field(default_factory=zero_profile)
    rate: dict[str, float] = field(default_factory=zero_profile)
    counts: dict[str, int] = field(default_factory=lambda: {k: 0 for k in tx.PROFILE_KEYS})
    trajectories_with: dict[str, int] = field(default_factory=lambda: {k: 0 for k in tx.PROFILE_KEYS})
    mean_reward_with: dict[str, Optional[float]] = field(default_factory=lambda: {k: None for k in tx.PROFILE_KEYS})
    success_rate: float = 0.0
    n_by_category: dict[str, int] = field(default_factory=dict)
    prevalence_by_category: dict[str, dict[str, float]] = field(default_factory=dict)
    counts_by_category: dict[str, dict[str, int]] = field(default_factory=dict)
    success_rate_by_category: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (plain dicts, ints, floats, ``None``)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "StepProfile":
        """Inverse of ``to_dict``.

        Args:
            d: a dict as produced by ``to_dict``; unknown keys raise ``ValueError`` so that a file written by
                a different version is not half-read silently.
        """
        allowed = {f.name for f in fields(cls)}
        unknown = set(d) - allowed
        if unknown:
            raise ValueError(f"unknown StepProfile keys {sorted(unknown)}; allowed keys: {', '.join(sorted(allowed))}")
        return cls(**{k: _copy_json(v) for k, v in d.items()})


def _copy_json(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _copy_json(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_copy_json(x) for x in v]
    return v


def eligible_rates(counts: dict[str, int], n_turns: int, n_abstention_turns: int) -> dict[str, float]:
    """Per key: its count over the number of labelled turns where it is possible (see ``StepProfile.rate``)."""
    out = {}
    for k, c in counts.items():
        n = n_abstention_turns if eligible_on_abstention(k) else n_turns - n_abstention_turns
        out[k] = c / n if n > 0 else 0.0
    return out


def _shares(counts: dict[str, int], n: int) -> dict[str, float]:
    return {k: (c / n if n else 0.0) for k, c in counts.items()}


def aggregate(records: list[TrajectoryRecord], success_threshold: float = 1.0) -> StepProfile:
    """Aggregate one step's rollouts into C_t.

    Prevalence is turn-weighted (share of all labelled turns), not the mean of per-trajectory profiles, so
    that a category with long tasks is not under-counted and a trajectory with one labelled turn does not
    count as much as one with eight.

    Args:
        records: the step's trajectories.
        success_threshold: a trajectory counts as a success when its reward is >= this. The default 1.0
            matches the binary task reward (1 = task passes); with dense partial credit only full passes count.

    Returns:
        The step profile; with no records, or no labelled turns, prevalences are zeros.
    """
    counts = {k: 0 for k in tx.PROFILE_KEYS}
    traj_with = {k: 0 for k in tx.PROFILE_KEYS}
    reward_sum = {k: 0.0 for k in tx.PROFILE_KEYS}
    n_turns = 0
    n_abst = 0
    n_checker = 0
    n_success = 0
    cat_n: dict[str, int] = {}
    cat_success: dict[str, int] = {}
    cat_counts: dict[str, dict[str, int]] = {}
    cat_turns: dict[str, int] = {}

    for rec in records:
        rc, rn = rec.turn_counts()
        n_checker += sum(1 for label in rec.labels if label == tx.CHECKER_ERROR)
        n_turns += rn
        n_abst += sum(1 for label, abst in zip(rec.labels, rec.abstention) if abst and label != tx.CHECKER_ERROR)
        success = rec.reward >= success_threshold
        n_success += int(success)
        cat = rec.category
        cat_n[cat] = cat_n.get(cat, 0) + 1
        cat_success[cat] = cat_success.get(cat, 0) + int(success)
        cc = cat_counts.setdefault(cat, {k: 0 for k in tx.PROFILE_KEYS})
        cat_turns[cat] = cat_turns.get(cat, 0) + rn
        for k, c in rc.items():
            if c:
                counts[k] += c
                cc[k] += c
                traj_with[k] += 1
                reward_sum[k] += rec.reward

    n_traj = len(records)
    return StepProfile(
        n_trajectories=n_traj,
        n_turns=n_turns,
        n_checker_errors=n_checker,
        n_abstention_turns=n_abst,
        prevalence=_shares(counts, n_turns),
        rate=eligible_rates(counts, n_turns, n_abst),
        counts=counts,
        trajectories_with=traj_with,
        mean_reward_with={k: (reward_sum[k] / traj_with[k] if traj_with[k] else None) for k in tx.PROFILE_KEYS},
        success_rate=(n_success / n_traj if n_traj else 0.0),
        n_by_category=dict(sorted(cat_n.items())),
        prevalence_by_category={c: _shares(cat_counts[c], cat_turns[c]) for c in sorted(cat_counts)},
        counts_by_category={c: dict(cat_counts[c]) for c in sorted(cat_counts)},
        success_rate_by_category={c: cat_success[c] / cat_n[c] for c in sorted(cat_n)},
    )


def ema_update(prev: Optional[dict[str, float]], new: dict[str, float], beta: float) -> dict[str, float]:
    """Exponential moving average of prevalence across steps: ``(1 - beta) * prev + beta * new``.

    One step's prevalence is noisy (a few hundred turns); the interface reads the EMA so that a cue does not
    switch on because of one unlucky batch.

    Args:
        prev: the previous EMA, or ``None`` before the first step (then the EMA starts at ``new``, rather
            than at zero, which would bias early steps towards "no failures").
        new: this step's values.
        beta: weight of the new values, in (0, 1]; 1.0 means no smoothing.

    Returns:
        A new dict; inputs are not modified. A key only in ``new`` takes its new value; a key only in
        ``prev`` keeps its previous value (no new evidence about it).
    """
    beta = float(beta)
    if not (0.0 < beta <= 1.0):
        raise ValueError(f"EMA beta must be in (0, 1], got {beta}")
    if prev is None:
        return {k: float(v) for k, v in new.items()}
    out = {k: float(v) for k, v in prev.items()}
    for k, v in new.items():
        out[k] = (1.0 - beta) * float(prev[k]) + beta * float(v) if k in prev else float(v)
    return out
