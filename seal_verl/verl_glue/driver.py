"""Driver-side SEAL bookkeeping shared by the V1 trainer subclass and the legacy-trainer wrappers.

One ``SealDriver`` lives in the trainer process. Per training step it

1. turns the step's per-trajectory profiles into weights with the current rho (``weights``);
2. collects the step's trajectory records (``add_records``);
3. after the advantages: runs ``closed_loop_step``, returns the ``seal/...`` metrics and publishes the new
   state to the rollout workers (``end_step``).

It also writes the state next to verl's checkpoint (``<global_step_N>/seal_state.json``) and reads it back
on resume. No verl import here: the trainer glue passes in what it needs.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import uuid
from typing import Any, Optional

from seal_verl.verl_glue.config import SealConfig
from seal_verl.verl_glue import state_actor

logger = logging.getLogger(__name__)

#: File written into verl's ``global_step_N`` checkpoint folder.
STATE_FILE = "seal_state.json"
ENVELOPE_FORMAT = 1


class SealResumeError(RuntimeError):
    """The checkpoint to resume from has no (or a mismatching) SEAL state."""


def _atomic_write_json(path: str, obj: Any) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    text = json.dumps(obj, indent=1, sort_keys=True)
    fd, tmp = tempfile.mkstemp(prefix=".seal_state.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


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


class SealDriver:
    """Holds the ``ClosedLoopState`` of a run and does SEAL's per-step work on the driver.

    Args:
        cfg: the validated ``seal`` section.
        actor: ``(name, namespace, detached)`` of the state actor to publish to, or ``None`` to publish
            nowhere (unit tests; a run without rollout-side readers).
    """

    def __init__(self, cfg: SealConfig, actor: Optional[tuple[str, Optional[str], bool]] = None):
        from seal_verl.loop import ClosedLoopState

        self.cfg = cfg
        self.actor = actor
        self.run_id = uuid.uuid4().hex
        self.state = ClosedLoopState.initial(cfg.switches, cfg.interface, cfg.weighting)
        #: number of training steps the state reflects (verl's ``global_steps`` after the step's update)
        self.global_step = 0
        self._records: list = []
        self.published_version: Optional[int] = None
        self._publisher = state_actor.StatePublisher(*actor) if actor is not None else None

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

        from seal_verl.weighting import weights_for_batch

        if not self.reweighting:
            return torch.ones(len(profiles), dtype=torch.float32)
        return weights_for_batch(profiles, self.state.rho, self.cfg.weighting, int(step0))

    def in_warmup(self, step0: int) -> bool:
        return int(step0) < int(self.cfg.weighting.warmup_steps)

    def add_records(self, records: list) -> None:
        self._records.extend(records)

    def end_step(self, global_step: int) -> dict[str, float]:
        """Close the step: closed-loop update with the collected records, metrics, state file, publish."""
        from seal_verl.loop import closed_loop_step, metrics

        records, self._records = self._records, []
        self.state, step_profile = closed_loop_step(
            self.state, records, self.cfg.switches, self.cfg.interface, self.cfg.weighting
        )
        self.global_step = int(global_step)
        out = metrics(self.state, step_profile)
        if self.cfg.state_dir:
            _atomic_write_json(os.path.join(self.cfg.state_dir, f"step_{self.global_step}.json"), self.envelope())
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
        from seal_verl.loop import ClosedLoopState

        path = os.path.join(folder, STATE_FILE)
        if not os.path.exists(path):
            raise SealResumeError(
                f"resuming from {folder} (step {expected_step}) but it has no {STATE_FILE}: the checkpoint was not "
                "written by a SEAL run, so the closed-loop state (interface, rho, history) cannot be restored. "
                "Start a fresh run (trainer.resume_mode=disable) or resume a SEAL checkpoint."
            )
        with open(path, encoding="utf-8") as fh:
            env = json.load(fh)
        if env.get("format") != ENVELOPE_FORMAT:
            raise SealResumeError(f"{path}: unsupported format {env.get('format')!r}")
        if int(env.get("global_step", -1)) != int(expected_step):
            raise SealResumeError(
                f"{path} holds the SEAL state of step {env.get('global_step')}, but the checkpoint is step {expected_step}"
            )
        saved_switches = env.get("switches")
        if saved_switches != self.cfg.switches_dict():
            logger.warning(
                "SEAL switches differ from the resumed run: saved %s, now %s", saved_switches, self.cfg.switches_dict()
            )
        self.state = ClosedLoopState.from_dict(env["state"])
        self.global_step = int(expected_step)
