"""The SEAL V1 trainers: verl's V1 trainers plus SEAL's trainer side (:class:`SealTrainerMixin`).

Registered with ``verl.trainer.ppo.v1.register_trainer``, one per verl mode they extend:

- ``trainer.v1.trainer_mode=seal``: verl's synchronous trainer (``sync``);
- ``seal_colocate_async``: ``colocate_async`` (rollout and training on the same GPUs, generation paused for the
  update and resumed after it, partial rollouts kept);
- ``seal_separate_async``: ``separate_async`` (a rollout pool of its own, the trainer's GPUs lent to it when idle).

Under the asynchronous modes verl trains a step on rollouts that may have been generated under the state of an
earlier step (at most ``trainer.v1.sampler.max_off_policy_threshold`` steps behind). Every rollout carries the
global step of the closed-loop state it ran under (its cues came from that state; its labels are the verifier's,
from its own trace), the driver weights it with that step's rho and keeps as many steps' rho as the bound allows
(``driver.history_for``), and the closed loop counts it once, in the step that trains it. verl's async ``step()``
samples one or more mini-batches (``parameter_sync_step``), each through ``_compute_advantage``, so a step's
rollouts reach the driver in several parts before the step closes.

The mixin overrides these methods of ``verl/trainer/ppo/v1/trainer_base.py:PPOTrainer``:

- ``_compute_advantage``: reads the batch's rollouts from TransferQueue once (``batch_read.TQReader``: the reward
  extras verl's agent-loop workers put into ``extra_fields['reward_extra_info']``, decoded once), runs the SEAL
  step around verl's own ``_compute_advantage`` (``step.seal_step``: weights for ``seal_grpo``, checker-error
  exclusion for every estimator), reads the advantages back once, and hands the rollouts with their updates to
  the driver;
- ``step``: first the cue-effect probe when one is due (``probe.CueEffectProbe``, through the validation
  partition, never trained on; a kind it retires is published before the step's own rollouts start); after
  verl's step the driver closes the step (closed-loop update, ``seal/...`` metrics, the new state published to
  the rollout workers) and the step's record rides on the returned batch (``batch.extra_info``, as verl passes
  its own batch-level data) to ``_compute_metrics``;
- ``_save_checkpoint`` / ``_load_checkpoint``: the state goes into ``global_step_N/seal_state.json`` and
  comes back on resume; after loading (also on a fresh start) it is published before the first rollout.

With ``seal.run_dir`` set, two more hooks keep the run folder (``driver.RunFolder``, the dry run's layout):

- ``_load_checkpoint``: ``config.json`` and ``provenance.json`` (``run_start.record_start``);
- ``_compute_metrics`` (after verl's own, when the step's metrics dict is complete): ``traces_step_{k}.jsonl``
  and one ``metrics.jsonl`` row from the step's record, with every logged scalar (``seal/...``,
  ``timing_s/...``, ``training/...``); ``state_step_{k}.json`` is written by the driver;
- ``_validate``: the validation rollouts (``val_traces.jsonl``), read from TransferQueue right after verl's
  validation samples them from its replay buffer, before verl clears them.

The trainer keeps no state of a step between these methods: the driver holds the step's rollouts until it closes
the step, and the closed record travels with the batch.

verl compares ``trainer_mode`` with ``"sync"`` in several places (replay buffer, checkpointing of the
TransferQueue, dataloader granularity); the trainer therefore runs with ``self.trainer_mode`` set to the mode
it extends, so those code paths behave exactly as in the stock sync trainer.
"""

from __future__ import annotations

import logging
import os

import numpy as np

from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_colocate_async import PPOTrainerColocateAsync
from verl.trainer.ppo.v1.trainer_separate_async import PPOTrainerSeparateAsync
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

from seal_verl.core import extras as X
from seal_verl.runs.rows import val_row
from seal_verl.verl_glue import compat, state_actor
from seal_verl.verl_glue.advantage import SealWiringError
from seal_verl.verl_glue.batch_read import (AGENT_LOOP_TIMERS, SYNC_PAIRS, TQReader, as_list, reward_extras,
                                            tq_advantages, unpadded_rows)
from seal_verl.verl_glue.config import SEAL_TRAINER_MODES, check_run_config, estimator_name, staleness_bound
from seal_verl.verl_glue.driver import SealDriver, history_for, resume_folder
from seal_verl.verl_glue.multinode import check_multinode
from seal_verl.verl_glue.probe import CueEffectProbe, ProbeOutput, stamp, uid_of_key
from seal_verl.verl_glue.probe import sampling as probe_sampling
from seal_verl.verl_glue.run_start import record_start
from seal_verl.verl_glue.step import StepWriter, seal_step

logger = logging.getLogger(__name__)

#: ``KVBatchMeta.extra_info`` key under which a closed step's record travels from ``step`` to ``_compute_metrics``
STEP_RECORD = "seal_step_record"


def tq_get(batch, fields: list[str]):
    """``fields`` of every row of ``batch`` (a ``KVBatchMeta``) from TransferQueue."""
    import transfer_queue as tq

    return tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields)


def step_metrics(record) -> dict:
    """What the V1 trainer logs of a step's rollouts beside verl's metrics: the agent loop's timers
    (``agent_loop/<timer>/{mean,max,sum}``, which verl's legacy trainer logs and the V1 trainer keeps per rollout
    only) and the mean |p - q| of the response tokens' probabilities between the rollout engine, the actor before
    the update and the reference (``seal/sync/...``; after a real weight sync the rollout is closer to the actor
    than to the initial weights as soon as the actor has moved). Rollouts kept out of the update do not count."""
    out: dict = {}
    rollouts = [t.rollout for t in record.trained]
    for name in AGENT_LOOP_TIMERS:
        values = [float(r.timing.get(name) or 0.0) for r in rollouts if r.timing is not None]
        if values:
            out[f"agent_loop/{name}/mean"] = float(np.mean(values))
            out[f"agent_loop/{name}/max"] = float(np.max(values))
            out[f"agent_loop/{name}/sum"] = float(np.sum(values))
    synced = [t.rollout.sync for t in record.trained if t.rollout.sync is not None and not t.update.excluded]
    n = sum(s["n"] for s in synced)
    if n:
        out.update({f"seal/sync/{k}": sum(s[k] for s in synced) / n for k in SYNC_PAIRS})
    return out


class SealTrainerMixin:
    """SEAL's trainer side for a V1 ``PPOTrainer`` subclass. Put it first in the bases."""

    #: the verl trainer mode this class extends (what ``self.trainer_mode`` reports to verl's code)
    seal_base_mode = "sync"

    def __init__(self, config):
        seal_cfg = check_run_config(config)  # fail fast, before any worker starts
        check_multinode(config)  # on more than one node: shared checkpoint folder, recipe files on every node
        super().__init__(config)
        # Behave exactly like the base mode wherever verl compares trainer_mode with "sync".
        compat.run_as_trainer_mode(self, self.seal_base_mode)
        self.seal_adv_estimator = estimator_name(self.config.algorithm.adv_estimator)
        self.seal = SealDriver(seal_cfg, actor=state_actor.actor_coordinates(config),
                               history=history_for(staleness_bound(config)))
        self.seal_probe = CueEffectProbe(seal_cfg)
        self._seal_reader = TQReader(run_folder=self.seal.run_folder is not None)
        self._seal_task_rows: dict | None = None
        #: faults planted on purpose (SEAL_FAULT): announced now, recorded in every step's metrics and config.json
        self.seal_faults = compat.plant_faults()

    # ------------------------------------------------------------------ advantage

    def _seal_check_single_output_sessions(self, batch) -> None:
        sessions: dict[str, int] = {}
        for key in batch.keys:
            sk = compat.session_of_key(key)
            if sk is not None:
                sessions[sk] = sessions.get(sk, 0) + 1
        multi = [k for k, n in sessions.items() if n > 1]
        if multi:
            raise SealWiringError(
                f"SEAL's trainer side expects one agent-loop output per rollout; {len(multi)} sessions produced "
                f"several (e.g. {multi[0]})"
            )

    def _compute_advantage(self, batch, metrics: dict):
        read = self._seal_reader.read(batch, getattr(self, "tokenizer", None))
        base = super()._compute_advantage

        def exclude(b, flags):
            compat.exclude_rows_from_update(b, flags)
            return b

        result = seal_step(self.seal, read, lambda: base(batch, metrics=metrics),
                           step0=int(self.global_steps) - 1,  # verl counts training steps from 1
                           adv_estimator=self.seal_adv_estimator, exclude=exclude,
                           advantages=lambda b: tq_advantages(b, read.masks),
                           before_plan=lambda: self._seal_check_single_output_sessions(batch))
        metrics.update(result.metrics)
        return result.batch

    # ------------------------------------------------------------------ step: probe, then verl's step, then close

    def step(self, metrics: dict, timing_raw: dict):
        if self.seal_probe.runs:
            metrics.update(self._seal_cue_probe())
        batch = super().step(metrics, timing_raw)
        closed, record = self.seal.close_step(self.global_steps)
        metrics.update(closed)
        if isinstance(getattr(batch, "extra_info", None), dict):  # verl's KVBatchMeta, on to _compute_metrics
            batch.extra_info[STEP_RECORD] = record
        return batch

    # ------------------------------------------------------------------ cue-effect probe

    def _seal_task_index(self) -> dict:
        """Task id -> index of its row in the training dataset (read once)."""
        if self._seal_task_rows is None:
            infos = self.train_dataset.dataframe["extra_info"]
            self._seal_task_rows = {}
            for i, info in enumerate(infos):
                tid = info.get("task_id") if isinstance(info, dict) else None
                if tid is not None:
                    self._seal_task_rows.setdefault(str(tid), i)
        return self._seal_task_rows

    def _seal_cue_probe(self) -> dict:
        """The cue-effect probe of this step when one is due (``probe.py``), before this step's own rollouts;
        its ``seal/cue_effect/...`` metrics ({} when none is due). A kind it retires is published at once, so the
        step's own rollouts run without it."""
        import uuid

        step = int(self.global_steps)
        if not self.seal_probe.due(step, self.seal.state):
            return {}
        index = self._seal_task_index()
        seed = self.config.data.get("seed")
        found = self.seal_probe.measure(
            step, self.seal, index, lambda requests: self._seal_generate_probe(requests, index),
            seed=0 if seed is None else int(seed),
            sampling=probe_sampling(self.seal.cfg.cue_effect, self.config.actor_rollout_ref.rollout),
            uid_prefix=f"seal-probe-{step}-{uuid.uuid4().hex[:8]}-")
        if found is None:
            return {}
        if found.retired:
            self.seal.publish()
        if self.seal.run_folder is not None:
            self.seal.run_folder.write_probe(step, found.rows)
        logger.info("cue-effect probe at step %s: %s", step, found.metrics)
        return found.metrics

    def _seal_generate_probe(self, requests, index: dict) -> list[ProbeOutput]:
        """The V1 adapter of the probe: its rows through the validation partition of TransferQueue and the
        agent-loop workers (generated with the current weights, never trained on), read back and cleared."""
        import transfer_queue as tq
        from verl.utils import tensordict_utils as tu
        from verl.utils.dataset.rl_dataset import collate_fn

        rows = [stamp(self.train_dataset[index[r.task_id]], r) for r in requests]
        batch_dict = collate_fn(rows)
        batch_dict["uid"] = np.array([r["uid"] for r in rows], dtype=object)
        batch_dict["__rollout_n__"] = np.array([r.samples for r in requests], dtype=object)
        batch = tu.get_tensordict(batch_dict)
        tu.assign_non_tensor_data(batch, "global_steps", self.global_steps)
        tu.assign_non_tensor_data(batch, "validate", True)
        tags = [{"is_prompt": True, "status": "pending", "global_steps": self.global_steps} for _ in rows]
        tq.kv_batch_put(keys=list(batch["uid"]), partition_id="val", tags=tags)
        self.agent_loop_manager.generate_sequences(batch)
        out, _ = self.replay_buffer.sample(global_steps=self.global_steps, partition_id="val", batch_size=len(rows))
        if self.reward_loop_manager.reward_loop_worker_handles is None:
            self.checkpoint_manager.sleep_replicas()
            out = self._compute_reward_colocate(out)
            self.checkpoint_manager.update_weights()
        if not out.keys:
            return []
        data = tq.kv_batch_get(keys=out.keys, partition_id=out.partition_id, select_fields=["extra_fields"])
        outputs = []
        for key, ef in zip(out.keys, as_list(data["extra_fields"]), strict=True):
            ef = ef if isinstance(ef, dict) else {}
            outputs.append(ProbeOutput(uid=uid_of_key(key), key=key, extras=reward_extras(ef) or {},
                                       cue_tokens=ef.get(X.CUE_TOKENS)))
        tq.kv_clear(keys=out.keys, partition_id=out.partition_id)
        return outputs

    # ------------------------------------------------------------------ run folder

    def _compute_metrics(self, batch, metrics, timing_raw, global_steps, epoch):
        result = super()._compute_metrics(batch, metrics, timing_raw, global_steps, epoch)
        record = (batch.extra_info or {}).pop(STEP_RECORD, None)
        if self.seal.run_folder is not None and record is not None:
            # logged with the step: this runs before verl's logger call
            metrics.update(step_metrics(record))
            for fault in self.seal_faults:
                metrics[f"seal/fault/{fault}"] = 1.0
            writer = StepWriter(self.seal.run_folder)
            writer.write_traces(record)
            writer.write_metrics(record, seconds=(timing_raw or {}).get("step"), metrics=metrics,
                                 more={"cue_effect": self.seal_probe.take()})
        return result

    def _seal_val_rows(self, batch) -> list[dict]:
        if not batch.keys:  # every rollout of the batch failed: verl reports that itself
            return []
        from seal_verl.core.observation import CUE_MARKER

        data = tq_get(batch, ["extra_fields", "prompts", "responses", "rm_scores"])
        extra_fields = as_list(data["extra_fields"])
        prompts = unpadded_rows(data["prompts"])
        responses = unpadded_rows(data["responses"])
        scores = unpadded_rows(data["rm_scores"])
        rows = []
        for i, key in enumerate(batch.keys):
            ef = extra_fields[i] if isinstance(extra_fields[i], dict) else {}
            text = self.tokenizer.decode(prompts[i].tolist(), skip_special_tokens=False)
            text += self.tokenizer.decode(responses[i].tolist(), skip_special_tokens=False)
            rows.append(val_row(
                global_step=int(self.global_steps), key=key, reward_extras=reward_extras(ef) or {},
                extra_fields=ef, score=float(scores[i].sum()), hint_in_text=CUE_MARKER in text,
                tokens={"prompt": int(prompts[i].shape[0]), "response": int(responses[i].shape[0])},
            ))
        return rows

    def _validate(self):
        folder = self.seal.run_folder
        if folder is None:
            return super()._validate()
        captured: list[dict] = []
        with compat.wrap_replay_buffer_sample(self, "val", lambda out: captured.extend(self._seal_val_rows(out[0]))):
            result = super()._validate()
        folder.append_val(captured)
        return result

    # ------------------------------------------------------------------ checkpoints

    def _save_checkpoint(self):
        folder = os.path.join(self.config.trainer.default_local_dir, f"global_step_{self.global_steps}")
        if self.seal.global_step != self.global_steps:
            logger.warning(
                "saving SEAL state of step %s into the checkpoint of step %s", self.seal.global_step, self.global_steps
            )
        # Before verl's save: verl writes latest_checkpointed_iteration.txt last, so a checkpoint that the
        # tracker points at always has its SEAL state.
        self.seal.save_to(folder)
        return super()._save_checkpoint()

    def _load_checkpoint(self):
        result = super()._load_checkpoint()
        folder = resume_folder(self.config.trainer, int(self.global_steps))
        if folder is not None:
            self.seal.load_from(folder, expected_step=int(self.global_steps))
            logger.info("restored SEAL closed-loop state of step %s from %s", self.global_steps, folder)
        else:
            self.seal.global_step = 0
        self.seal.state_before = self.seal.state
        if self.seal.run_folder is not None:
            self._seal_write_config(resumed_from=folder)
        self.seal.publish()  # before any rollout of this run
        return result

    def _seal_write_config(self, resumed_from) -> None:
        record_start(self.seal, self.config, resumed_from=resumed_from, global_steps=int(self.global_steps),
                     faults=tuple(self.seal_faults))


class SealPPOTrainer(SealTrainerMixin, PPOTrainerSync):
    """``trainer.v1.trainer_mode=seal``: the stock synchronous V1 trainer plus SEAL's trainer side."""

    seal_base_mode = "sync"
    __seal_trainer__ = True


class SealPPOTrainerColocateAsync(SealTrainerMixin, PPOTrainerColocateAsync):
    """``trainer.v1.trainer_mode=seal_colocate_async``: verl's ``colocate_async`` plus SEAL's trainer side."""

    seal_base_mode = "colocate_async"
    __seal_trainer__ = True


class SealPPOTrainerSeparateAsync(SealTrainerMixin, PPOTrainerSeparateAsync):
    """``trainer.v1.trainer_mode=seal_separate_async``: verl's ``separate_async`` plus SEAL's trainer side."""

    seal_base_mode = "separate_async"
    __seal_trainer__ = True


#: trainer_mode name -> class; the plugin registers these with verl.
SEAL_TRAINERS = {"seal": SealPPOTrainer, "seal_colocate_async": SealPPOTrainerColocateAsync,
                 "seal_separate_async": SealPPOTrainerSeparateAsync}


def register() -> None:
    """Register the SEAL trainers with verl's V1 trainer registry (idempotent)."""
    from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY

    for name, cls in SEAL_TRAINERS.items():
        assert SEAL_TRAINER_MODES[name] == cls.seal_base_mode
        existing = TRAINER_REGISTRY.get(name)
        if existing is not None and getattr(existing, "__seal_trainer__", False):
            continue  # registered before (possibly by an earlier copy of this module)
        register_trainer(name)(cls)
