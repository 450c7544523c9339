"""Driver-side SEAL bookkeeping shared by the V1 trainer subclass, the legacy-trainer wrappers and the dry run.

One ``SealDriver`` lives in the trainer process. Per training step it

1. turns the step's per-trajectory profiles into weights with the rho of the state each rollout was generated
   under (``weights``; under the synchronous trainer that is the current rho);
2. collects the step's rollouts after the update (``add_trained``: their records enter C_t once each);
3. closes the step: runs ``closed_loop_step``, writes the state file, publishes the new state to the rollout
   workers, and returns the ``seal/...`` metrics with the step's record (``close_step``), from which the run
   folder's rows are built (``seal_verl.runs.rows``).

It also writes the state next to verl's checkpoint (``<global_step_N>/seal_state.json``) and reads it back on
resume. No verl import here: the trainer glue passes in what it needs.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from typing import Any, Optional, Sequence

from seal_verl.atomic import FileContentError, atomic_write_text, read_json_object
from seal_verl.core.step_record import StepRecord, Trained
from seal_verl.runs import folder as run_folder
from seal_verl.verl_glue import state_actor
from seal_verl.verl_glue.config import SealConfig

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


#: the run folder's writer (``seal_verl.runs.folder``), named here for the trainer glue that reaches it through the
#: driver
RunFolder = run_folder.RunFolder
#: the least number of steps' rho the driver keeps for rollouts generated under them (an asynchronous trainer's);
#: a run whose rollouts may lag further behind keeps more (``history_for``)
RHO_HISTORY = 8


def history_for(staleness: Optional[int]) -> int:
    """How many steps' rho a run keeps when its rollouts lag at most ``staleness`` steps behind the step that trains
    them (``config.staleness_bound``). A prompt submitted at step p reads the state published after step p - 1 or a
    later one, and verl trains it by step p + staleness - 1 (one step more where a batch of prompts at the bound
    waits for its slot): the current state and ``staleness`` before it."""
    return max(RHO_HISTORY, int(staleness or 0) + 1)


class SealDriver:
    """Holds the ``ClosedLoopState`` of a run and does SEAL's per-step work on the driver.

    Args:
        cfg: the validated ``seal`` section.
        actor: ``(name, namespace, detached)`` of the state actor to publish to, or ``None`` to publish
            nowhere (unit tests; a run without rollout-side readers).
        history: how many steps' rho to keep for rollouts generated under them (``history_for``; at least
            :data:`RHO_HISTORY`).
    """

    def __init__(self, cfg: SealConfig, actor: Optional[tuple[str, Optional[str], bool]] = None,
                 history: int = RHO_HISTORY):
        from seal_verl.core.loop import ClosedLoopState

        self.cfg = cfg
        self.actor = actor
        self.history = max(RHO_HISTORY, int(history))
        self.run_id = uuid.uuid4().hex
        self.state = ClosedLoopState.initial(cfg.switches, cfg.interface, cfg.weighting)
        #: number of training steps the state reflects (verl's ``global_steps`` after the step's update)
        self.global_step = 0
        self._records: list = []
        self._trained: list[Trained] = []
        self._keys: set[str] = set()
        #: global step -> the rho of the state published after it (the current one included)
        self._rho_by_step: dict[int, dict] = {0: dict(self.state.rho)}
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

    def rho_for(self, state_step: Optional[int]) -> dict:
        """The rho of the state published after global step ``state_step`` (None: the current one).

        Raises:
            SealWiringError: a rollout of a state older than the driver keeps (``history`` steps).
        """
        if state_step is None or int(state_step) == self.global_step:
            return self.state.rho
        rho = self._rho_by_step.get(int(state_step))
        if rho is None:
            from seal_verl.verl_glue.advantage import SealWiringError

            raise SealWiringError(f"a rollout was generated under the closed-loop state of step {state_step}; the "
                                  f"driver keeps the states of steps {sorted(self._rho_by_step)}")
        return rho

    def weights(self, profiles: list[dict], step0: int, state_steps: Optional[Sequence[Optional[int]]] = None):
        """Per-trajectory weights (float32 tensor), each with the rho of the state its rollout was generated under;
        ones without reweighting.

        Args:
            profiles: p_j(z) per row, in batch order.
            step0: 0-based index of the current training step (for ``warmup_steps``).
            state_steps: per row, the global step of the state it ran under (None, or omitted: the current).
        """
        import torch

        from seal_verl.core.weighting import weights_for_batch

        if not self.reweighting:
            return torch.ones(len(profiles), dtype=torch.float32)
        steps = list(state_steps) if state_steps is not None else [None] * len(profiles)
        out = torch.ones(len(profiles), dtype=torch.float32)
        for version in dict.fromkeys(steps):
            rows = [i for i, v in enumerate(steps) if v == version]
            out[rows] = weights_for_batch([profiles[i] for i in rows], self.rho_for(version), self.cfg.weighting,
                                          int(step0))
        return out

    def in_warmup(self, step0: int) -> bool:
        return int(step0) < int(self.cfg.weighting.warmup_steps)

    def add_records(self, records: list) -> None:
        """Trajectory records for this step's C_t."""
        self._records.extend(records)

    def add_trained(self, trained: Sequence[Trained]) -> None:
        """Rollouts of this step after the update (one advantage computation's): their records enter C_t, each
        once, and they become part of the step's record.

        Raises:
            SealWiringError: a rollout (by key) was added to this step before.
        """
        again = [t.rollout.key for t in trained if t.rollout.key in self._keys]
        if again:
            from seal_verl.verl_glue.advantage import SealWiringError

            raise SealWiringError(f"{len(again)} rollouts (e.g. {again[0]!r}) reached the closed loop twice in one step")
        self._keys.update(t.rollout.key for t in trained)
        self._trained.extend(trained)
        self.add_records([t.rollout.grade.record for t in trained])

    def close_step(self, global_step: int) -> tuple[dict[str, float], StepRecord]:
        """:meth:`end_step`, and the step's record: its rollouts with their updates, the states around it."""
        trained = tuple(self._trained)
        out = self.end_step(global_step)
        return out, StepRecord(step=int(global_step), trained=trained, state_before=self.state_before,
                               state_after=self.state)

    def end_step(self, global_step: int) -> dict[str, float]:
        """Close the step: closed-loop update with the collected records, metrics, state file, publish."""
        from seal_verl.core.loop import closed_loop_step, metrics

        records, self._records = self._records, []
        self._trained, self._keys = [], set()
        self.state_before = self.state
        self.state, step_profile = closed_loop_step(
            self.state, records, self.cfg.switches, self.cfg.interface, self.cfg.weighting
        )
        self.global_step = int(global_step)
        self._remember_rho()
        out = metrics(self.state, step_profile)
        if self.cfg.state_dir:
            _atomic_write_json(os.path.join(self.cfg.state_dir, f"step_{self.global_step}.json"), self.envelope())
        if self.run_folder is not None:
            self.run_folder.write_state(self.global_step, self.state)
        self.publish()
        return out

    def _remember_rho(self) -> None:
        self._rho_by_step[self.global_step] = dict(self.state.rho)
        for old in sorted(self._rho_by_step)[:-self.history]:
            del self._rho_by_step[old]

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
        """Write ``<folder>/seal_state.json`` atomically; returns the path. Beside the state it keeps the rho of the
        earlier steps the driver holds (``rho_history``): an asynchronous trainer restores rollouts generated under
        them with verl's checkpoint and trains them after the resume."""
        path = os.path.join(folder, STATE_FILE)
        env = self.envelope()
        env["rho_history"] = {str(k): dict(v) for k, v in sorted(self._rho_by_step.items()) if k != self.global_step}
        _atomic_write_json(path, env)
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
        self._rho_by_step = {}
        history = env.get("rho_history") or {}  # absent in a state saved before it was kept
        if not isinstance(history, dict):
            raise SealResumeError(f"{path}: field 'rho_history' is {_shown(history)}; expected step -> rho")
        for key, rho in history.items():
            try:
                step = int(key)
            except (TypeError, ValueError):
                raise SealResumeError(f"{path}: field 'rho_history' has the step {_shown(key)}") from None
            if not isinstance(rho, dict) or step >= self.global_step:
                raise SealResumeError(f"{path}: field 'rho_history' step {step}: {_shown(rho)} (a rho of a step "
                                      f"before {self.global_step} expected)")
            self._rho_by_step[step] = {str(z): float(v) for z, v in rho.items()}
        self._remember_rho()
