"""The cue-effect probe's rollouts: rows to generate and records to summarise (``seal_verl.cue_effect``).

A probe row is a training row of the dataset (the same task, prompt and agent loop) whose ``extra_info`` carries
``seal_probe``: the condition's name, the cue kinds it runs with and the sampling parameters of the training
rollouts. The training agent loop renders exactly those kinds (``agent_loop.probe_of``). The rows go through the
validation partition, so they are generated with the current weights and never enter an update; verl samples
validation rows greedily, which is why the probe row carries the training sampling parameters itself.

The V1 trainer (``trainer.py``) and the dry run (``dry_run/run.py``) both build their rows here and read their
results back here; only how the rows reach the agent-loop workers differs. No verl import.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Optional

from seal_verl import cue_effect as ce

#: extra_info key of a probe row: the condition and the kinds it runs with (read by ``agent_loop.probe_of``)
PROBE_KEY = "seal_probe"
#: sampling parameters a probe row may set
PROBE_SAMPLING = ("temperature", "top_p", "top_k")


@dataclass
class ProbePlan:
    """One probe: the kinds on now, every condition, the distinct ones to generate, and the tasks."""

    step: int
    active: list[str]
    conditions: dict[str, frozenset]
    runs: dict[str, frozenset]
    tasks: list[str]
    samples: int
    #: uid of each generated row -> (condition, task id); filled by :func:`rows`
    uids: dict[str, tuple[str, str]] = field(default_factory=dict)

    @property
    def n_rollouts(self) -> int:
        return len(self.runs) * len(self.tasks) * self.samples


def plan(cfg: ce.CueEffectConfig, step: int, active: Iterable[str], task_ids: Iterable[str]) -> ProbePlan:
    """The probe of training step ``step`` under the kinds now ``active``, on tasks drawn from ``task_ids``."""
    on = sorted(active)
    conds = ce.conditions(on)
    runs = ce.distinct(conds)
    tasks = ce.pick_tasks(list(task_ids), cfg, len(runs), seed=cfg.seed, probe_index=0)
    return ProbePlan(step=step, active=on, conditions=conds, runs=runs, tasks=tasks, samples=cfg.samples)


def sampling(cfg: ce.CueEffectConfig, rollout_cfg: Any) -> dict:
    """The probe's sampling parameters: the training rollouts' (``actor_rollout_ref.rollout``), with the
    probe's own temperature when it sets one."""
    get = rollout_cfg.get if hasattr(rollout_cfg, "get") else lambda k, d=None: getattr(rollout_cfg, k, d)
    out = {"temperature": get("temperature", 1.0), "top_p": get("top_p", 1.0), "top_k": get("top_k", -1)}
    if cfg.temperature is not None:
        out["temperature"] = cfg.temperature
    return {k: (float(v) if k != "top_k" else int(v)) for k, v in out.items() if v is not None}


def rows(p: ProbePlan, base_rows: dict[str, dict], params: dict, uid_prefix: str) -> list[dict]:
    """The rows to generate, one per (distinct condition, task), each with a fresh ``uid`` recorded in
    ``p.uids``; ``base_rows`` maps each task id to its dataset row (left unchanged)."""
    out = []
    for name, kinds in p.runs.items():
        for task in p.tasks:
            row = copy.copy(base_rows[task])
            info = dict(row.get("extra_info") or {})
            info[PROBE_KEY] = {"condition": name, "kinds": sorted(kinds), "sampling": dict(params)}
            row["extra_info"] = info
            uid = f"{uid_prefix}{len(out)}"  # the numbering in_process.load_batch gives rows too
            row["uid"] = uid
            p.uids[uid] = (name, task)
            out.append(row)
    return out


def uid_of_key(key: str) -> str:
    """The row uid of a TransferQueue key ``{uid}_{session}_{index}``."""
    parts = key.rsplit("_", 2)
    return parts[0] if len(parts) == 3 else key


def record(p: ProbePlan, uid: str, extras: dict) -> Optional[ce.ProbeRecord]:
    """The record of one probe rollout from its row uid and its reward extras: the verdict (``acc``) and the
    training reward (``score``, clipped to [0, 1]). None: not a probe row of this plan, no verdict, or a checker
    error (the verifier failed, not the policy)."""
    where = p.uids.get(uid)
    acc = extras.get("acc")
    if where is None or acc is None or _truthy(extras.get("seal_checker_error")):
        return None
    try:
        passed = float(acc) >= 1.0
        score = extras.get("score")
        reward = None if score is None else min(1.0, max(0.0, float(score)))
    except (TypeError, ValueError):
        return None
    if reward is not None and reward != reward:  # NaN: no usable reward
        reward = None
    return ce.ProbeRecord(condition=where[0], task_id=where[1], passed=passed, reward=reward)


def _truthy(value: Any) -> bool:
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes")
    return bool(value)


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
        from seal_verl.interface import active_kinds

        return self.runs and ce.due(self.cfg, step, self.last_step, active_kinds(state.interface))

    def plan_for(self, step: int, state: Any, task_ids: Iterable[str]) -> Optional[ProbePlan]:
        """The probe of training step ``step`` under the closed-loop ``state``, or None when none is due."""
        from seal_verl.interface import active_kinds

        if not self.due(step, state):
            return None
        return plan(self.cfg, step, active_kinds(state.interface), task_ids)

    def finish(self, p: ProbePlan, records: list[ce.ProbeRecord], driver: Any) -> dict[str, float]:
        """Summarise a probe, retire kinds if asked to (``driver.state`` changes, the caller publishes it), and
        return its ``seal/cue_effect/...`` metrics."""
        from seal_verl.interface import retire

        out = summary(p, records, self.cfg.confidence)
        found = {k: ce.Effect.from_dict(v) for k, v in out["effects"].items()}
        m = ce.metrics(found, len(records))
        retired: list[str] = []
        if self.cfg.retire and self.switches.closed_loop:
            iface = driver.state.interface
            below, gone = ce.retire_update(iface.effect_below, found, self.cfg.retire_after)
            new = retire(iface, gone, below)
            retired = sorted(new.retired - iface.retired)
            driver.state = replace(driver.state, interface=new)  # a new object: state_before stays as it was
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


def trace_row(rec: ce.ProbeRecord, key: str, p: ProbePlan, extras: dict, extra_fields: dict) -> dict:
    """One probe rollout as the run folder keeps it (``probe_step_{k}.jsonl``): enough to recompute the
    probe's numbers (condition, task, verdict) and to read what happened (labels, cue tokens)."""
    labels = extras.get("seal_labels")
    return {
        "step": p.step,
        "key": key,
        "condition": rec.condition,
        "kinds": sorted(p.runs.get(rec.condition, ())),
        "task_id": rec.task_id,
        "passed": rec.passed,
        "reward": rec.reward,
        "acc": extras.get("acc"),
        "score": extras.get("score"),
        "labels": labels,
        "cue_tokens": extra_fields.get("seal_cue_tokens"),
    }
