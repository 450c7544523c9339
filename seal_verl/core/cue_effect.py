"""The cue effect: does the training-time interface help the policy that trains under it?

SEAL's environment side rests on one premise: under a cue the policy succeeds more often. The training traces
cannot show it, because cues follow failures: the rollouts that carried a cue are the ones that had already
failed. The probe therefore compares the *same* policy (same weights) on the *same* tasks under different
interfaces, and is never trained on:

- ``current``: the interface the next training rollouts run under (every kind that is on);
- ``none``: no cue at all (what the evaluation sees);
- ``drop:<kind>``: the current interface without one kind, for each kind that is on (leave one kind out).

The effect of the whole interface is ``r(current) - r(none)``; the effect of a kind is ``r(current) -
r(drop:<kind>)``, where ``r`` is the mean of the reward the run trains on: the pass rate under the recipe's 0/1
reward, the share of passing turns under a dense one (on a task few rollouts pass whole, a pass rate of 0 on both
sides would say nothing).

Every task of a probe is sampled under every condition, so the conditions are compared task by task: the interval
``lo``/``hi`` is the **paired** one, a t interval of the per-task differences (per task, the mean over its samples
under each condition). Tasks differ far more in difficulty than a cue changes them, and pairing takes that spread
out of the comparison. Beside it each effect keeps the **unpaired** interval, which treats the rollouts as
independent draws: for pass rates Newcombe's hybrid score interval for a difference of two proportions (Wilson
intervals of each side, combined), which stays sensible at rates of 0 and 1; for a dense reward Welch's interval
(the t quantile with Welch-Satterthwaite degrees of freedom). Where pairing cannot estimate a spread (fewer than
two tasks under both conditions, or the same difference on every task) the paired interval is the unpaired one.

The probe's tasks rotate (:func:`pick_tasks`): each probe of a run takes the next tasks of one shuffle of the pool
(the run's seed), so successive probes see different tasks and the whole pool before any task comes again.

Optionally (``retire``, beyond the paper) the closed loop retires a kind whose interval lies wholly below zero on
``retire_after`` probes in a row: it stays off for the rest of the run, whatever its trigger rate.

Pure Python; no verl or BFCL import. The trainer and the dry run run the rollouts (``verl_glue/probe.py``).
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Optional, Sequence

from seal_verl.core.intervals import (mean_difference_interval, newcombe_interval, paired_interval,  # noqa: F401
                                       t_quantile, wilson_interval)
from seal_verl.core.interface import CUE_KINDS, DEFAULT_TRIGGERS, SHORT_NAMES, check_kinds, ordered
from seal_verl.core.options import from_mapping, parse_bool

__all__ = [
    "ALL",
    "CURRENT",
    "NONE",
    "CueEffectConfig",
    "Effect",
    "ProbeRecord",
    "conditions",
    "drop_name",
    "due",
    "effects",
    "metrics",
    "mean_difference_interval",
    "effect",
    "newcombe_interval",
    "paired_interval",
    "t_quantile",
    "pick_tasks",
    "retire_update",
    "short_line",
    "wilson_interval",
]

#: Condition names: the interface as it is, and no cue at all.
CURRENT, NONE = "current", "none"
#: The key of the whole interface's effect (beside one key per cue kind).
ALL = "all"


def drop_name(kind: str) -> str:
    """The condition that leaves ``kind`` out of the current interface."""
    return f"drop:{kind}"


#: the levels an interval may have, and the largest probe and sampling temperature a run may ask for
CONFIDENCE_RANGE = (0.5, 0.999)
MAX_PROBE_ROLLOUTS = 10_000
MAX_TEMPERATURE = 10.0


@dataclass
class CueEffectConfig:
    """The cue-effect probe (``seal.cue_effect``).

    Attributes:
        every: probe every this many training steps (0 switches the probe off). A step with no cue kind on is
            not probed (there is nothing to compare) and the next step with one is.
        tasks: training tasks in one probe (successive probes of a run rotate over the training set:
            :func:`pick_tasks`), so they cover the pool before a task comes again.
        samples: rollouts per task and condition.
        max_rollouts: budget of one probe; when ``tasks x samples x conditions`` exceeds it, fewer tasks are
            probed (never fewer than one). At least ``samples x (2 + kinds)`` for the interface's configured kinds
            (current, none, one drop per kind: 7 with the default five), at most :data:`MAX_PROBE_ROLLOUTS`.
        confidence: level of the intervals, in [:data:`CONFIDENCE_RANGE`] (0.5 to 0.999: below, an interval says
            less than a coin; above, it covers everything a probe can measure).
        temperature: sampling temperature of the probe's rollouts, at most :data:`MAX_TEMPERATURE`; null takes
            the training rollouts' (``actor_rollout_ref.rollout.temperature``), so the probe measures the policy
            that trains.
        seed: with the run's seed, orders the training set the probes rotate over.
        retire: let the closed loop retire a kind whose effect stays below zero beyond its interval (beyond
            the paper; off by default and in the ``paper`` preset; needs the probe on, ``every`` > 0).
        retire_after: consecutive probes with the whole interval below zero before a kind is retired.
    """

    every: int = 5
    tasks: int = 16
    samples: int = 2
    max_rollouts: int = 224
    confidence: float = 0.95
    temperature: Optional[float] = None
    seed: int = 0
    retire: bool = False
    retire_after: int = 2

    def validate(self, n_kinds: Optional[int] = None) -> "CueEffectConfig":
        """Raise ``ValueError`` naming the field; return ``self`` (normalised).

        Args:
            n_kinds: how many cue kinds the interface can switch on (``InterfaceConfig.kinds()``); the budget
                must hold one task under every condition they can need. None: the default interface's.
        """
        for name, lo in (("every", 0), ("tasks", 1), ("samples", 1), ("max_rollouts", 1), ("seed", 0),
                         ("retire_after", 1)):
            v = getattr(self, name)
            if isinstance(v, bool) or not (isinstance(v, int) or isinstance(v, float) and v.is_integer()):
                raise ValueError(f"{name} must be an integer, got {v!r}")
            if int(v) < lo:
                raise ValueError(f"{name} must be >= {lo}, got {v!r}")
            if int(v) > 1_000_000:
                raise ValueError(f"{name} must be <= 1000000, got {v!r}")
            setattr(self, name, int(v))
        kinds = len(DEFAULT_TRIGGERS) if n_kinds is None else int(n_kinds)
        most = self.samples * (2 + kinds)
        if self.max_rollouts > MAX_PROBE_ROLLOUTS:
            raise ValueError(f"max_rollouts must be <= {MAX_PROBE_ROLLOUTS}, got {self.max_rollouts}: a probe that "
                             "size would take longer than the training it measures")
        if self.max_rollouts < most:
            raise ValueError(f"max_rollouts ({self.max_rollouts}) must be at least samples x {2 + kinds} "
                             f"= {most}: one task under every condition the probe can need ({kinds} cue kinds)")
        c, (c_lo, c_hi) = self.confidence, CONFIDENCE_RANGE
        if isinstance(c, bool) or not isinstance(c, (int, float)) or not math.isfinite(c) or not c_lo <= c <= c_hi:
            raise ValueError(f"confidence must be a number in [{c_lo}, {c_hi}], got {c!r}")
        self.confidence = float(c)
        t = self.temperature
        if t is not None:
            if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) \
                    or not 0 <= t <= MAX_TEMPERATURE:
                raise ValueError(f"temperature must be null or a number in [0, {MAX_TEMPERATURE}], got {t!r}")
            self.temperature = float(t)
        self.retire = parse_bool(self.retire, "retire")
        if self.retire and not self.enabled:
            raise ValueError("retire needs the probe (every > 0): with every: 0 no kind is ever measured, so none "
                             "can be retired")
        return self

    @property
    def enabled(self) -> bool:
        return self.every > 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Optional[dict[str, Any]]) -> "CueEffectConfig":
        """Build and validate from a plain dict; unknown keys raise ``ValueError``."""
        return from_mapping(cls, d, "cue_effect option").validate()


@dataclass(frozen=True)
class ProbeRecord:
    """One probe rollout: its condition, its task, whether the task passed (the official verdict) and the reward
    the run trains on (``None``: the run's reward is the verdict itself, 1 or 0)."""

    condition: str
    task_id: str
    passed: bool
    reward: Optional[float] = None

    @property
    def value(self) -> float:
        """What the effect compares: the training reward, else 1.0 for a pass and 0.0 for a failure."""
        return float(self.passed) if self.reward is None else float(self.reward)


@dataclass(frozen=True)
class Effect:
    """Mean reward with and without a cue (or the whole interface), their difference and its intervals.

    Attributes:
        with_, without: mean reward under the two conditions; ``diff`` their difference.
        lo, hi: the interval of the difference: task-paired (:func:`paired_interval`) where it can be estimated,
            else the unpaired one.
        n_with, n_without: rollouts under each condition.
        unpaired_lo, unpaired_hi: the unpaired interval (Newcombe's for pass rates, Welch's for a dense reward).
        n_pairs: tasks sampled under both conditions. 0 in a file written before the paired interval existed:
            its ``lo``/``hi`` are then the unpaired interval of that time.
    """

    with_: float
    without: float
    diff: float
    lo: float
    hi: float
    n_with: int
    n_without: int
    unpaired_lo: Optional[float] = None
    unpaired_hi: Optional[float] = None
    n_pairs: int = 0

    def __post_init__(self):
        if self.unpaired_lo is None:
            object.__setattr__(self, "unpaired_lo", self.lo)
        if self.unpaired_hi is None:
            object.__setattr__(self, "unpaired_hi", self.hi)

    def to_dict(self) -> dict[str, Any]:
        return {"with": self.with_, "without": self.without, "diff": self.diff, "lo": self.lo, "hi": self.hi,
                "n_with": self.n_with, "n_without": self.n_without, "unpaired_lo": self.unpaired_lo,
                "unpaired_hi": self.unpaired_hi, "n_pairs": self.n_pairs}

    @classmethod
    def from_dict(cls, d: dict) -> "Effect":
        """Inverse of ``to_dict``; also reads a dict written before the paired interval (no ``unpaired_*``, no
        ``n_pairs``), whose interval was the unpaired one."""
        lo, hi = float(d["lo"]), float(d["hi"])
        return cls(float(d["with"]), float(d["without"]), float(d["diff"]), lo, hi, int(d["n_with"]),
                   int(d["n_without"]), float(d.get("unpaired_lo", lo)), float(d.get("unpaired_hi", hi)),
                   int(d.get("n_pairs", 0)))


def due(cfg: CueEffectConfig, step: int, last_probe: Optional[int], active: Iterable[str]) -> bool:
    """Whether training step ``step`` (from 1) is probed: the probe is on, a kind is on, and ``every`` steps
    have passed since the last probe (the first probe comes at the first step with a kind on)."""
    if not cfg.enabled or not set(active):
        return False
    return last_probe is None or step - last_probe >= cfg.every


def conditions(active: Iterable[str]) -> dict[str, frozenset]:
    """Condition name -> the cue kinds on under it, for the kinds now ``active``: ``current``, ``none`` and one
    ``drop:<kind>`` per active kind. Conditions with the same kinds (one kind on: its drop is ``none``) are
    kept under every name; :func:`distinct` runs each set once."""
    on = frozenset(check_kinds(active))
    out = {CURRENT: on, NONE: frozenset()}
    for kind in ordered(on):
        out[drop_name(kind)] = on - {kind}
    return out


def distinct(conds: dict[str, frozenset]) -> dict[str, frozenset]:
    """The conditions that need rollouts of their own: the first name of each distinct set of kinds."""
    seen: dict[frozenset, str] = {}
    for name, kinds in conds.items():
        seen.setdefault(kinds, name)
    return {name: kinds for kinds, name in seen.items()}


def alias(conds: dict[str, frozenset]) -> dict[str, str]:
    """Condition name -> the name whose rollouts it shares (itself when it has its own)."""
    first = {}
    for name, kinds in conds.items():
        first.setdefault(kinds, name)
    return {name: first[kinds] for name, kinds in conds.items()}


def pick_tasks(task_ids: Sequence[str], cfg: CueEffectConfig, n_conditions: int, *, seed: int,
               probe_index: int) -> list[str]:
    """The tasks of the ``probe_index``-th probe of a run: ``cfg.tasks`` of ``task_ids`` (fewer when the rollout
    budget asks for it), rotating over the pool so that successive probes use different tasks and the whole
    pool is covered before a task comes back.

    The pool is put in one order drawn from ``seed`` and ``cfg.seed`` (the same for every probe of a run, another
    for another seed); probe ``i`` takes the ``cfg.tasks`` tasks after the first ``i * cfg.tasks`` of that order,
    wrapping around. Deterministic in (``seed``, ``probe_index``); the order of ``task_ids`` does not matter.

    Args:
        task_ids: the training tasks.
        n_conditions: conditions the probe generates (the budget divides among them).
        seed: the run's seed.
        probe_index: which probe of the run this is (from 0).
    """
    pool = sorted(dict.fromkeys(str(t) for t in task_ids))
    if not pool:
        raise ValueError("the cue-effect probe has no training task to draw from")
    if isinstance(probe_index, bool) or not isinstance(probe_index, int) or probe_index < 0:
        raise ValueError(f"probe_index must be a non-negative integer, got {probe_index!r}")
    share = min(cfg.tasks, len(pool))
    fit = max(1, cfg.max_rollouts // max(1, cfg.samples * n_conditions))
    order = random.Random(f"{cfg.seed}:{int(seed)}").sample(pool, len(pool))
    start = int(probe_index) * share
    return [order[(start + j) % len(pool)] for j in range(min(share, fit))]


def effect(a: Sequence[float], b: Sequence[float], confidence: float = 0.95, a_tasks: Optional[Sequence[str]] = None,
           b_tasks: Optional[Sequence[str]] = None) -> Effect:
    """The effect of ``a`` (values with the cue) against ``b`` (without).

    The unpaired interval is Newcombe's where every value is 0 or 1 (pass rates), else Welch's. Given the task of
    each value (``a_tasks``, ``b_tasks``, as long as ``a`` and ``b``), ``lo``/``hi`` is the paired interval
    (:func:`paired_interval`) where it can be estimated; otherwise, and without the tasks, the unpaired one. The
    paired interval centres on the mean per-task difference, which is ``diff`` when every task has as many
    samples under both conditions, as the probe draws them.
    """
    n1, n2 = len(a), len(b)
    p1 = sum(a) / n1 if n1 else 0.0
    p2 = sum(b) / n2 if n2 else 0.0
    if all(v in (0.0, 1.0) for v in list(a) + list(b)):  # pass rates: Newcombe's interval
        ulo, uhi = newcombe_interval(int(sum(a)), n1, int(sum(b)), n2, confidence)
    else:
        ulo, uhi = mean_difference_interval(a, b, confidence)
    paired, n_pairs = None, 0
    if a_tasks is not None and b_tasks is not None:
        if len(a_tasks) != n1 or len(b_tasks) != n2:
            raise ValueError("a_tasks and b_tasks must name the task of every value")
        paired, n_pairs = paired_interval(_by_task(a, a_tasks), _by_task(b, b_tasks), confidence)
    lo, hi = paired if paired is not None else (ulo, uhi)
    return Effect(p1, p2, p1 - p2, lo, hi, n1, n2, ulo, uhi, n_pairs)


def _by_task(values: Sequence[float], tasks: Sequence[str]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for v, t in zip(values, tasks):
        out.setdefault(str(t), []).append(float(v))
    return out


def effects(records: Iterable[ProbeRecord], active: Iterable[str], confidence: float = 0.95) -> dict[str, Effect]:
    """``{"all": ..., <kind>: ...}`` from a probe's rollouts, for the kinds that were ``active``, paired by the
    records' ``task_id``. A condition that shares its kinds with another (see :func:`conditions`) reads that
    one's rollouts."""
    conds = conditions(active)
    names = alias(conds)
    values: dict[str, list[float]] = {}
    tasks: dict[str, list[str]] = {}
    for r in records:
        if r.condition not in names:
            raise ValueError(f"probe record of an unknown condition {r.condition!r}; conditions: {sorted(names)}")
        values.setdefault(names[r.condition], []).append(r.value)
        tasks.setdefault(names[r.condition], []).append(str(r.task_id))

    def compare(other: str) -> Effect:
        a, b = names[CURRENT], names[other]
        return effect(values.get(a, []), values.get(b, []), confidence, tasks.get(a, []), tasks.get(b, []))

    out = {ALL: compare(NONE)}
    for name in conds:
        if name.startswith("drop:"):
            out[name.split(":", 1)[1]] = compare(name)
    return out


def metrics(found: dict[str, Effect], n_rollouts: int) -> dict[str, float]:
    """verl metrics: ``seal/cue_effect/<kind or all>`` (the difference) and its ``/lo``, ``/hi`` (the paired
    interval), ``/unpaired_lo``, ``/unpaired_hi``, ``/with``, ``/without``; ``seal/cue_effect/n_rollouts``."""
    out: dict[str, float] = {"seal/cue_effect/n_rollouts": float(n_rollouts)}
    for key, e in found.items():
        base = f"seal/cue_effect/{key}"
        out[base] = e.diff
        out[f"{base}/lo"] = e.lo
        out[f"{base}/hi"] = e.hi
        out[f"{base}/unpaired_lo"] = float(e.unpaired_lo)
        out[f"{base}/unpaired_hi"] = float(e.unpaired_hi)
        out[f"{base}/with"] = e.with_
        out[f"{base}/without"] = e.without
    return out


def retire_update(below: dict[str, int], found: dict[str, Effect], after: int) -> tuple[dict[str, int], set[str]]:
    """Count, per kind, the probes in a row whose interval lies wholly below zero; return the new counts and
    the kinds that reached ``after`` (to retire). A kind measured without such a result starts again at 0; a
    kind not measured this time keeps its count."""
    out = dict(below)
    retire = set()
    for kind, e in found.items():
        if kind == ALL:
            continue
        out[kind] = out.get(kind, 0) + 1 if e.hi < 0 else 0
        if out[kind] >= after:
            retire.add(kind)
    return out, retire


def short_line(found: Optional[dict]) -> str:
    """``effect all +.25 [+.05,+.45] fmt -.10 [-.30,+.10]`` for a console line; ``""`` without a probe.
    Accepts :class:`Effect` values or their dicts (as a run folder holds them)."""
    if not found:
        return ""
    parts = []
    for key in [ALL] + [k for k in CUE_KINDS if k in found]:
        e = found.get(key)
        if e is None:
            continue
        e = e if isinstance(e, Effect) else Effect.from_dict(e)
        name = "all" if key == ALL else SHORT_NAMES.get(key, key)
        parts.append(f"{name} {_signed(e.diff)} [{_signed(e.lo)},{_signed(e.hi)}]")
    return "effect " + " ".join(parts)


def _signed(x: float) -> str:
    s = f"{x:+.2f}"
    return s.replace("0.", ".", 1)
