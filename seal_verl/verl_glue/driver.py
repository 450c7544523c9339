"""Driver-side SEAL bookkeeping shared by the V1 trainer subclass and the legacy-trainer wrappers.

One ``SealDriver`` lives in the trainer process. Per training step it

1. turns the step's per-trajectory profiles into weights with the current rho (``weights``);
2. collects the step's trajectory records (``add_records``);
3. after the advantages: runs ``closed_loop_step``, returns the ``seal/...`` metrics and publishes the new
   state to the rollout workers (``end_step``).

It also writes the state next to verl's checkpoint (``<global_step_N>/seal_state.json``) and reads it back
on resume. No verl import here: the trainer glue passes in what it needs.

With ``seal.run_dir`` set it keeps a run folder (``seal_verl.runs.folder``: the layout, its rows and the writer
shared with ``seal-verl dry-run``). This module turns what the trainer has (reward extras, agent-loop fields,
the states before and after the step) into those rows: :func:`trace_row`, :func:`val_row`, :func:`step_row`;
the state file of each step is written here, in ``end_step``.
"""

from __future__ import annotations

import json
import logging
import math
import os
import uuid
from typing import Any, Optional

from seal_verl.runs import folder as run_folder
from seal_verl.atomic import FileContentError, atomic_write_text, read_json_object
from seal_verl.runs.folder import StepRow, TraceRow, ValRow
from seal_verl.verl_glue.config import SealConfig
from seal_verl.verl_glue import state_actor

logger = logging.getLogger(__name__)

#: File written into verl's ``global_step_N`` checkpoint folder.
STATE_FILE = run_folder.CHECKPOINT_STATE
ENVELOPE_FORMAT = 1


class SealResumeError(RuntimeError):
    """The checkpoint to resume from has no (or a mismatching) SEAL state."""


def _shown(value: Any) -> str:
    """A value read from a damaged file, short enough for a one-line message."""
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


def _atomic_write_json(path: str, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=1, sort_keys=True), prefix=".seal_state.")


def resume_folder(trainer_cfg: Any, global_steps: int) -> Optional[str]:
    """The ``global_step_N`` folder verl resumed from, following verl's own rules
    (``trainer.resume_mode`` auto -> ``<default_local_dir>/global_step_N``; resume_path ->
    ``trainer.resume_from_path``; relative paths against the working directory). ``None`` when nothing was
    resumed (``global_steps == 0``)."""
    if global_steps <= 0:
        return None
    mode = trainer_cfg.get("resume_mode", "auto")
    if mode == "resume_path":
        folder = str(trainer_cfg.get("resume_from_path"))
    else:
        folder = os.path.join(str(trainer_cfg.get("default_local_dir")), f"global_step_{global_steps}")
    if not os.path.isabs(folder):
        folder = os.path.join(os.getcwd(), folder)
    return folder


# ------------------------------------------------------------------------------------------------ run folder

# The run folder's names, rows and writer live in ``seal_verl.runs.folder``; the writer is named here too because
# the step writer and the trainer glue reach it through the driver.
RunFolder = run_folder.RunFolder
_json_safe = run_folder.json_safe


def _json_value(value: Any) -> Any:
    """A reward extra that may be a JSON string (labels, abstention) as a Python object."""
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        value = value.item()
    if isinstance(value, (bytes, bytearray)):
        value = value.decode()
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def _float(value: Any, default: Optional[float] = None) -> Optional[float]:
    try:
        out = float(value.item() if hasattr(value, "item") else value)
    except (TypeError, ValueError):
        return default
    return out if math.isfinite(out) else default


def _profile_keys(reward_extras: dict) -> Optional[list]:
    """The turns' keys in the metrics' vocabulary (``correct_abstention`` for a pass on an abstention turn)."""
    from seal_verl.core.profile import profile_keys

    labels = _json_value(reward_extras.get("seal_labels"))
    abst = _json_value(reward_extras.get("seal_abstention"))
    if not isinstance(labels, list) or not isinstance(abst, list):
        return None
    try:
        return profile_keys([str(x) for x in labels], [bool(x) for x in abst])
    except ValueError:
        return None


def trace_row(*, step: int, global_step: int, key: str, uid: Any, reward_extras: dict, extra_fields: dict,
              w: float, advantage: Optional[float], hint_in_text: Optional[bool],
              tokens: Optional[dict] = None, grpo_advantage: Optional[float] = None,
              advantage_range: Optional[tuple] = None, excluded: bool = False) -> TraceRow:
    """One rollout of a training step, as ``traces_step_{k}.jsonl`` holds it (the dry run's keys, ``plan`` None,
    plus ``global_step``, ``key``, ``category``, ``acc``, ``cue_count``, ``tokens``).

    ``labels`` are Psi's labels (a correct abstention is ``pass``, as in ``seal-verl diagnose``); ``profile_keys``
    are the same turns in the vocabulary of the metrics, the state and rho (``correct_abstention`` there).

    Args:
        reward_extras: the reward function's extras of the rollout (``seal_labels``, ``score``, ...).
        extra_fields: the agent loop's extra fields (``seal_trace``, ``seal_cue_tokens``, ``seal_agent_loop``, ...).
        w: the SEAL weight the advantage was multiplied by (1 without reweighting).
        advantage: mean advantage over the rollout's response tokens (mask 1).
        hint_in_text: whether the cue marker occurs in the rollout's decoded tokens (prompt or response).
        grpo_advantage: verl's GRPO advantage of the rollout before the SEAL weight (group-normalised reward).
        advantage_range: (min, max) of the advantage the update used over the rollout's response tokens
            (``None`` when no token has mask 1, e.g. an excluded rollout).
        excluded: the rollout was kept out of the update (its verification raised: a checker error).
    """
    trace = _json_value(extra_fields.get("seal_trace"))
    meta = trace.get("meta", {}) if isinstance(trace, dict) else {}
    return {
        "step": int(step),
        "global_step": int(global_step),
        "key": str(key),
        "uid": str(uid),
        "task_id": str(extra_fields.get("task_id") or reward_extras.get("seal_task_id") or
                        (trace.get("task_id") if isinstance(trace, dict) else "")),
        "category": _json_value(reward_extras.get("seal_category")),
        "agent_loop": extra_fields.get("seal_agent_loop"),
        "plan": None,
        "labels": _json_value(reward_extras.get("seal_labels")),
        "abstention": _json_value(reward_extras.get("seal_abstention")),
        "profile_keys": _profile_keys(reward_extras),
        "reward": _float(reward_extras.get("score")),
        "acc": _float(reward_extras.get("acc")),
        "w": float(w),
        "advantage": advantage,
        "grpo_advantage": grpo_advantage,
        "advantage_range": None if advantage_range is None else [float(advantage_range[0]), float(advantage_range[1])],
        "excluded": bool(excluded),
        "cue_tokens": int(_float(extra_fields.get("seal_cue_tokens"), 0.0)),
        "cue_count": int(_float(extra_fields.get("seal_cue_count"), 0.0)),
        "hint_in_text": hint_in_text,
        "interface_active": list(meta.get("interface_active", [])) if isinstance(meta, dict) else [],
        "tokens": tokens,
        "trace": trace,
    }


def val_row(*, global_step: int, key: str, reward_extras: dict, extra_fields: dict, score: Optional[float],
            hint_in_text: Optional[bool], tokens: Optional[dict] = None) -> ValRow:
    """One validation rollout, as ``val_traces.jsonl`` holds it (the dry run's keys plus ``global_step``, ``key``,
    ``acc``, ``labels``, ``tokens``)."""
    trace = _json_value(extra_fields.get("seal_trace"))
    return {
        "global_step": int(global_step),
        "key": str(key),
        "task_id": str(extra_fields.get("task_id") or reward_extras.get("seal_task_id") or ""),
        "agent_loop": extra_fields.get("seal_agent_loop"),
        "score": score,
        "acc": _float(reward_extras.get("acc")),
        "labels": _json_value(reward_extras.get("seal_labels")),
        "cue_tokens": int(_float(extra_fields.get("seal_cue_tokens"), 0.0)),
        "hint_in_text": hint_in_text,
        "tokens": tokens,
        "trace": trace,
    }


def step_row(*, step: int, global_step: int, state_before: Any, state_after: Any, rows: list[dict],
             seconds: Optional[float], metrics: dict, cue_effect: Optional[dict] = None) -> StepRow:
    """One ``metrics.jsonl`` row: the dry run's keys (``mix`` None) plus ``global_step``; ``metrics`` holds every
    scalar the trainer logged for the step (``seal/...``, verl's ``timing_s/...``, ``training/...``, ...).

    Args:
        cue_effect: the step's cue effect, cue kind (or ``"all"``) -> ``run_folder.CueEffect``; stored as given
            (``None`` when the step did not measure it).
    """
    import statistics

    hist = state_after.history[-1] if state_after.history else {}
    ws = [float(r["w"]) for r in rows]
    cues = [int(r.get("cue_tokens") or 0) for r in rows]
    tasks: list[str] = []
    for r in rows:
        if r.get("task_id") not in tasks:
            tasks.append(r.get("task_id"))
    return {
        "step": int(step),
        "global_step": int(global_step),
        "n_rollouts": len(rows),
        "tasks": tasks,
        "mix": None,
        "active_during": sorted(k for k, on in state_before.interface.active.items() if on),
        "active_next": hist.get("active", sorted(k for k, on in state_after.interface.active.items() if on)),
        "prevalence": hist.get("prevalence"),
        "prevalence_ema": hist.get("prevalence_ema"),
        "rate": hist.get("rate"),
        "rate_ema": hist.get("rate_ema"),
        "rho": hist.get("rho", dict(state_after.rho)),
        "rho_used": dict(state_before.rho),
        "success_rate": hist.get("success_rate"),
        "w_mean": statistics.fmean(ws) if ws else None,
        "w_std": statistics.pstdev(ws) if ws else None,
        "w_min": min(ws) if ws else None,
        "w_max": max(ws) if ws else None,
        "cue_tokens_mean": statistics.fmean(cues) if cues else 0.0,
        "cue_tokens_max": max(cues) if cues else 0,
        "seconds": None if seconds is None else round(float(seconds), 3),
        "metrics": {k: v for k, v in _json_safe(dict(metrics)).items() if isinstance(v, (int, float)) or v is None},
        "cue_effect": None if cue_effect is None else _json_safe(dict(cue_effect)),
    }


class SealDriver:
    """Holds the ``ClosedLoopState`` of a run and does SEAL's per-step work on the driver.

    Args:
        cfg: the validated ``seal`` section.
        actor: ``(name, namespace, detached)`` of the state actor to publish to, or ``None`` to publish
            nowhere (unit tests; a run without rollout-side readers).
    """

    def __init__(self, cfg: SealConfig, actor: Optional[tuple[str, Optional[str], bool]] = None):
        from seal_verl.core.loop import ClosedLoopState

        self.cfg = cfg
        self.actor = actor
        self.run_id = uuid.uuid4().hex
        self.state = ClosedLoopState.initial(cfg.switches, cfg.interface, cfg.weighting)
        #: number of training steps the state reflects (verl's ``global_steps`` after the step's update)
        self.global_step = 0
        self._records: list = []
        self.published_version: Optional[int] = None
        placement = getattr(getattr(cfg, "state_actor", None), "resources", None)
        self._publisher = state_actor.StatePublisher(*actor, resources=placement) if actor is not None else None
        run_dir = getattr(cfg, "run_dir", None)
        #: the run folder (``seal.run_dir``), or None
        self.run_folder: Optional[RunFolder] = RunFolder(run_dir) if run_dir else None
        #: the state the last closed step's rollouts ran under (``end_step`` sets it)
        self.state_before = self.state

    # ---------------------------------------------------------------- per step

    @property
    def reweighting(self) -> bool:
        return bool(self.cfg.switches.reweighting)

    def weights(self, profiles: list[dict], step0: int):
        """Per-trajectory weights (float32 tensor) with the current rho_t; ones without reweighting.

        Args:
            profiles: p_j(z) per row, in batch order.
            step0: 0-based index of the current training step (for ``warmup_steps``).
        """
        import torch

        from seal_verl.core.weighting import weights_for_batch

        if not self.reweighting:
            return torch.ones(len(profiles), dtype=torch.float32)
        return weights_for_batch(profiles, self.state.rho, self.cfg.weighting, int(step0))

    def in_warmup(self, step0: int) -> bool:
        return int(step0) < int(self.cfg.weighting.warmup_steps)

    def add_records(self, records: list) -> None:
        self._records.extend(records)

    def end_step(self, global_step: int) -> dict[str, float]:
        """Close the step: closed-loop update with the collected records, metrics, state file, publish."""
        from seal_verl.core.loop import closed_loop_step, metrics

        records, self._records = self._records, []
        self.state_before = self.state
        self.state, step_profile = closed_loop_step(
            self.state, records, self.cfg.switches, self.cfg.interface, self.cfg.weighting
        )
        self.global_step = int(global_step)
        out = metrics(self.state, step_profile)
        if self.cfg.state_dir:
            _atomic_write_json(os.path.join(self.cfg.state_dir, f"step_{self.global_step}.json"), self.envelope())
        if self.run_folder is not None:
            self.run_folder.write_state(self.global_step, self.state)
        self.publish()
        return out

    # ---------------------------------------------------------------- sharing and persistence

    def envelope(self) -> dict:
        """What is published and saved: the state plus the step it belongs to."""
        return {
            "format": ENVELOPE_FORMAT,
            "global_step": int(self.global_step),
            "run_id": self.run_id,
            "switches": self.cfg.switches_dict(),
            "state": self.state.to_dict(),
        }

    @property
    def publishes(self) -> bool:
        """Whether the state goes to the state actor: an actor is configured and Ray runs. Without Ray there
        is no rollout worker in another process to read it (in-process runs hand the state over directly).
        It is published whatever the switches: the rollout side decides what it uses."""
        if self.actor is None:
            return False
        import ray

        return ray.is_initialized()

    def publish(self) -> Optional[int]:
        """Store the envelope in the state actor (when the environment side is on); returns its version."""
        if not self.publishes:
            return None
        payload = dict(self.envelope(), format=state_actor.PAYLOAD_FORMAT)
        self.published_version = self._publisher.publish(payload)
        return self.published_version

    def save_to(self, folder: str) -> str:
        """Write ``<folder>/seal_state.json`` atomically; returns the path."""
        path = os.path.join(folder, STATE_FILE)
        _atomic_write_json(path, self.envelope())
        return path

    def load_from(self, folder: str, expected_step: int) -> None:
        """Restore the state saved in ``folder`` by ``save_to``.

        Raises:
            SealResumeError: no state file, or it belongs to another step than the checkpoint.
        """
        from seal_verl.core.loop import ClosedLoopState

        path = os.path.join(folder, STATE_FILE)
        if not os.path.exists(path):
            raise SealResumeError(
                f"resuming from {folder} (step {expected_step}) but it has no {STATE_FILE}: the checkpoint was not "
                "written by a SEAL run, so the closed-loop state (interface, rho, history) cannot be restored. "
                "Start a fresh run (trainer.resume_mode=disable) or resume a SEAL checkpoint."
            )
        try:
            env = read_json_object(path, "SEAL checkpoint state", temp_prefix=".seal_state.")
        except FileContentError as exc:
            raise SealResumeError(str(exc)) from None
        fmt = env.get("format")
        if isinstance(fmt, bool) or fmt != ENVELOPE_FORMAT:  # True == 1 in Python; not in the file's format
            raise SealResumeError(f"{path}: field 'format' is {_shown(fmt)}; this code reads format {ENVELOPE_FORMAT} "
                                  "(a state written by another version of seal-verl)")
        step = env.get("global_step", -1)
        if isinstance(step, bool) or not isinstance(step, int) or step != int(expected_step):
            raise SealResumeError(
                f"{path}: field 'global_step' is {_shown(step)}, but the checkpoint is step {expected_step}"
            )
        saved_switches = env.get("switches")
        if saved_switches != self.cfg.switches_dict():
            logger.warning(
                "SEAL switches differ from the resumed run: saved %s, now %s", _shown(saved_switches),
                self.cfg.switches_dict()
            )
        try:
            self.state = ClosedLoopState.from_dict(env.get("state"))
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise SealResumeError(f"{path}: field 'state': {exc}") from None
        self.global_step = int(expected_step)
