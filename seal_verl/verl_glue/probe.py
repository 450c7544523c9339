"""The cue-effect probe, once for every path: plan, rows to generate, records and run-folder rows, verdict.

A probe row is a training row of the dataset (the same task, prompt and agent loop) whose ``extra_info`` carries
the probe key (``seal_verl.core.extras.PROBE``): the condition's name, the cue kinds it runs with and the sampling
parameters of the training rollouts. The training agent loop renders exactly those kinds (``loop_rows.probe_of``).
The rows are generated with the current weights and never enter an update; verl samples validation rows
greedily, which is why a probe row carries the training sampling parameters itself.

:func:`run_probe` is the probe; what differs between paths is only how rows reach the agent-loop workers, which
the caller hands in as ``generate`` (the V1 trainer: the validation partition of TransferQueue, ``trainer.py``; the
dry run: its in-process worker, ``dry_run/run.py``). :class:`CueEffectProbe` says when a probe is due, draws its
tasks (rotating over the training set with the run's seed: ``cue_effect.pick_tasks``), and applies its verdict.
No verl import.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Mapping, Optional

from seal_verl.core import cue_effect as ce
from seal_verl.core import extras as X

#: sampling parameters a probe row may set
PROBE_SAMPLING = ("temperature", "top_p", "top_k")


@dataclass
class ProbePlan:
    """One probe: the kinds on now, every condition, the distinct ones to generate, the tasks, how to sample.

    Attributes:
        uid_prefix: the generated rows' uids are ``<uid_prefix><n>``, numbered in generation order.
        uids: uid of each generated row -> (condition, task id); filled by :func:`requests`.
    """

    step: int
    active: list[str]
    conditions: dict[str, frozenset]
    runs: dict[str, frozenset]
    tasks: list[str]
    samples: int
    sampling: dict = field(default_factory=dict)
    uid_prefix: str = ""
    uids: dict[str, tuple[str, str]] = field(default_factory=dict)

    @property
    def n_rollouts(self) -> int:
        return len(self.runs) * len(self.tasks) * self.samples


def plan(cfg: ce.CueEffectConfig, step: int, active: Iterable[str], task_ids: Iterable[str], *, seed: int = 0,
         probe_index: int = 0, sampling: Optional[dict] = None, uid_prefix: str = "") -> ProbePlan:
    """The probe of training step ``step`` under the kinds now ``active``, on tasks drawn from ``task_ids`` for the
    run's ``probe_index``-th probe with the run's ``seed``; rows sample with ``sampling`` (:func:`sampling`)."""
    on = sorted(active)
    conds = ce.conditions(on)
    runs = ce.distinct(conds)
    tasks = ce.pick_tasks(list(task_ids), cfg, len(runs), seed=seed, probe_index=probe_index)
    return ProbePlan(step=step, active=on, conditions=conds, runs=runs, tasks=tasks, samples=cfg.samples,
                     sampling=dict(sampling or {}), uid_prefix=uid_prefix)


def sampling(cfg: ce.CueEffectConfig, rollout_cfg: Any) -> dict:
    """The probe's sampling parameters: the training rollouts' (``actor_rollout_ref.rollout``), with the
    probe's own temperature when it sets one."""
    get = rollout_cfg.get if hasattr(rollout_cfg, "get") else lambda k, d=None: getattr(rollout_cfg, k, d)
    out = {"temperature": get("temperature", 1.0), "top_p": get("top_p", 1.0), "top_k": get("top_k", -1)}
    if cfg.temperature is not None:
        out["temperature"] = cfg.temperature
    return {k: (float(v) if k != "top_k" else int(v)) for k, v in out.items() if v is not None}


@dataclass(frozen=True)
class ProbeRequest:
    """One row to generate: its uid, task, condition, the cue kinds that condition runs with, how to sample it and
    how many rollouts of it to generate."""

    uid: str
    task_id: str
    condition: str
    kinds: tuple[str, ...]
    sampling: dict
    samples: int


@dataclass(frozen=True)
class ProbeOutput:
    """One generated probe rollout, as a ``generate`` adapter returns it.

    Attributes:
        uid: the uid of the request it answers.
        key: its name in the adapter's batch (kept in the run folder).
        extras: its reward extras.
        cue_tokens: the cue tokens the agent loop rendered (None: not in the batch).
    """

    uid: str
    key: str
    extras: Mapping[str, Any]
    cue_tokens: Any = None


#: ``generate(requests) -> outputs``: the probe's rows through the path's agent-loop workers, rollout order free
Generate = Callable[[list[ProbeRequest]], list[ProbeOutput]]


def requests(p: ProbePlan) -> list[ProbeRequest]:
    """The rows to generate, one per (distinct condition, task), each with a fresh uid recorded in ``p.uids``."""
    out = []
    for name, kinds in p.runs.items():
        for task in p.tasks:
            uid = f"{p.uid_prefix}{len(out)}"  # the numbering in_process.load_batch gives rows too
            p.uids[uid] = (name, task)
            out.append(ProbeRequest(uid=uid, task_id=task, condition=name, kinds=tuple(sorted(kinds)),
                                    sampling=dict(p.sampling), samples=p.samples))
    return out


def stamp(base_row: dict, request: ProbeRequest) -> dict:
    """The probe row of ``request`` from its task's dataset row (left unchanged): the probe key in its
    ``extra_info`` and the request's ``uid``."""
    row = copy.copy(base_row)
    info = dict(row.get("extra_info") or {})
    info[X.PROBE] = {"condition": request.condition, "kinds": list(request.kinds), "sampling": dict(request.sampling)}
    row["extra_info"] = info
    row["uid"] = request.uid
    return row


def uid_of_key(key: str) -> str:
    """The row uid of a TransferQueue key ``{uid}_{session}_{index}``."""
    parts = key.rsplit("_", 2)
    return parts[0] if len(parts) == 3 else key


def record(p: ProbePlan, uid: str, grade: Optional[X.Grade]) -> Optional[ce.ProbeRecord]:
    """The record of one probe rollout from its row uid and its decoded reward extras: the verdict (``acc``) and
    the training reward (``score``, clipped to [0, 1]). None: not a probe row of this plan, no usable extras or
    verdict, or a checker error (the verifier failed, not the policy)."""
    where = p.uids.get(uid)
    if where is None or grade is None or grade.acc is None or grade.checker_error:
        return None
    reward: Optional[float] = min(1.0, max(0.0, float(grade.score)))
    if reward != reward:  # NaN: no usable reward
        reward = None
    return ce.ProbeRecord(condition=where[0], task_id=where[1], passed=float(grade.acc) >= 1.0, reward=reward)


def run_probe(p: ProbePlan, generate: Generate) -> tuple[list[ce.ProbeRecord], list[dict]]:
    """Generate the probe's rows through ``generate`` and read them back: the records its numbers come from and
    the rows the run folder keeps of it (``probe_step_{k}.jsonl``)."""
    from seal_verl.runs.rows import probe_row

    records, rows = [], []
    for out in generate(requests(p)):
        try:
            grade: Optional[X.Grade] = X.decode(out.extras)
        except X.ExtrasError:
            grade = None
        rec = record(p, out.uid, grade)
        if rec is None:
            continue
        records.append(rec)
        rows.append(probe_row(p.step, out.key, rec.condition, list(p.runs.get(rec.condition, ())), rec.task_id,
                              rec.passed, rec.reward, grade, out.cue_tokens))
    return records, rows


def summary(p: ProbePlan, records: list[ce.ProbeRecord], confidence: float) -> dict:
    """What the run folder keeps of a probe: per key (``all`` and each kind) the effect's dict, plus the plan."""
    found = ce.effects(records, p.active, confidence)
    return {
        "step": p.step,
        "active": list(p.active),
        "tasks": list(p.tasks),
        "samples": p.samples,
        "n_rollouts": len(records),
        "confidence": confidence,
        "effects": {k: e.to_dict() for k, e in found.items()},
    }


@dataclass(frozen=True)
class ProbeResult:
    """A finished probe: its ``seal/cue_effect/...`` metrics, its run-folder rows, and the kinds it retired."""

    metrics: dict
    rows: list
    retired: list


class CueEffectProbe:
    """When to probe, and what a finished probe changes: the metrics, the run folder's summary, and (with
    ``seal.cue_effect.retire`` and the closed loop on) the kinds the closed loop retires.

    Args:
        settings: the run's validated ``seal`` section.
    """

    def __init__(self, settings: Any):
        self.cfg: ce.CueEffectConfig = settings.cue_effect
        self.switches = settings.switches
        self.interface_cfg = settings.interface
        #: global step of the last probe (None: none yet in this process)
        self.last_step: Optional[int] = None
        #: the last probe's summary (``summary``), for the step's run-folder row; taken by :meth:`take`
        self.pending: Optional[dict] = None

    @property
    def runs(self) -> bool:
        """Whether this run probes at all: the probe is on and so is the environment side."""
        return self.cfg.enabled and bool(self.switches.env_side) and bool(self.interface_cfg.enabled)

    def due(self, step: int, state: Any) -> bool:
        """Whether training step ``step`` runs a probe under the closed-loop ``state``."""
        from seal_verl.core.interface import active_kinds

        return self.runs and ce.due(self.cfg, step, self.last_step, active_kinds(state.interface))

    def probe_index(self, step: int) -> int:
        """Which probe of the run step ``step``'s is, for the task rotation: its slot ``(step - 1) // every``.
        Probes are at least ``every`` steps apart, so successive probes get successive or later slots, and a
        resumed run continues the rotation where it was."""
        return (int(step) - 1) // max(1, self.cfg.every)

    def plan_for(self, step: int, state: Any, task_ids: Iterable[str], *, seed: int = 0,
                 sampling: Optional[dict] = None, uid_prefix: str = "") -> Optional[ProbePlan]:
        """The probe of training step ``step`` under the closed-loop ``state`` (tasks drawn with the run's
        ``seed``), or None when none is due."""
        from seal_verl.core.interface import active_kinds

        if not self.due(step, state):
            return None
        return plan(self.cfg, step, active_kinds(state.interface), task_ids, seed=seed,
                    probe_index=self.probe_index(step), sampling=sampling, uid_prefix=uid_prefix)

    def measure(self, step: int, driver: Any, task_ids: Iterable[str], generate: Generate, *, seed: int,
                sampling: dict, uid_prefix: str) -> Optional[ProbeResult]:
        """The probe of training step ``step`` when one is due (None otherwise): planned, generated through
        ``generate``, summarised, its verdict applied to ``driver.state`` (the caller publishes a retirement
        before the step's own rollouts)."""
        t0 = time.monotonic()
        p = self.plan_for(step, driver.state, task_ids, seed=seed, sampling=sampling, uid_prefix=uid_prefix)
        if p is None:
            return None
        records, rows = run_probe(p, generate)
        found = self.finish(p, records, driver)
        found["seal/cue_effect/seconds"] = time.monotonic() - t0
        return ProbeResult(metrics=found, rows=rows, retired=list(self.pending["retired"]))

    def finish(self, p: ProbePlan, records: list[ce.ProbeRecord], driver: Any) -> dict[str, float]:
        """Summarise a probe, retire kinds if asked to (``driver.state`` changes, the caller publishes it), and
        return its ``seal/cue_effect/...`` metrics."""
        from seal_verl.core.interface import retire

        out = summary(p, records, self.cfg.confidence)
        found = {k: ce.Effect.from_dict(v) for k, v in out["effects"].items()}
        m = ce.metrics(found, len(records))
        retired: list[str] = []
        if self.cfg.retire and self.switches.closed_loop:
            iface = driver.state.interface
            below, gone = ce.retire_update(iface.effect_below, found, self.cfg.retire_after)
            new = retire(iface, gone, below)
            retired = sorted(new.retired - iface.retired)
            driver.state = replace(driver.state, interface=new)  # a new object: readers of the old one keep it
            for kind in new.retired:
                m[f"seal/cue_effect/retired/{kind}"] = 1.0
        out["retired"] = retired
        self.last_step = p.step
        self.pending = out
        return m

    def take(self) -> Optional[dict]:
        """The summary of the probe of the step being written (once), or None."""
        out, self.pending = self.pending, None
        return out
