"""The SEAL V1 trainer: verl's synchronous V1 trainer plus SEAL's trainer side.

Registered as ``trainer.v1.trainer_mode=seal`` (``verl.trainer.ppo.v1.register_trainer``). It differs from
``PPOTrainerSync`` in four overridden methods of ``verl/trainer/ppo/v1/trainer_base.py:PPOTrainer``:

- ``_compute_advantage``: first reads the reward extras of the batch from TransferQueue (field
  ``extra_fields`` -> ``reward_extra_info``, where verl's agent-loop workers put the reward function's
  extras), computes the weights and activates them for the ``seal_grpo`` estimator, then runs verl's own
  ``_compute_advantage`` unchanged; the step's trajectory records are collected;
- ``step``: after verl's step (advantages and policy update), runs the closed-loop update, adds the
  ``seal/...`` metrics to the step's metrics dict and publishes the new state to the rollout workers;
- ``_save_checkpoint`` / ``_load_checkpoint``: the state goes into ``global_step_N/seal_state.json`` and
  comes back on resume; after loading (also on a fresh start) it is published before the first rollout.

With ``seal.run_dir`` set, two more hooks keep the run folder (``driver.RunFolder``, the dry run's layout):

- ``_compute_metrics`` (after verl's own, when the step's metrics dict is complete and the batch is still in
  TransferQueue): ``traces_step_{k}.jsonl`` (per rollout: trace, labels, reward, w, advantage, cue tokens,
  whether cue text occurs in the decoded tokens) and one ``metrics.jsonl`` row with every logged scalar
  (``seal/...``, ``timing_s/...``, ``training/...``); ``state_step_{k}.json`` is written by the driver;
- ``_validate``: the validation rollouts (``val_traces.jsonl``), read from TransferQueue right after verl's
  validation samples them from its replay buffer, before verl clears them.

verl compares ``trainer_mode`` with ``"sync"`` in several places (replay buffer, checkpointing of the
TransferQueue, dataloader granularity); the trainer therefore runs with ``self.trainer_mode`` set to the mode
it extends, so those code paths behave exactly as in the stock sync trainer.
"""

from __future__ import annotations

import logging
import os

import numpy as np

from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

from seal_verl.verl_glue import compat, state_actor
from seal_verl.verl_glue.advantage import REQUIRED_FIELDS, SealWiringError, row_identities
from seal_verl.verl_glue.config import SEAL_TRAINER_MODES, check_run_config, estimator_name
from seal_verl.verl_glue.driver import SealDriver, resume_folder, val_row
from seal_verl.verl_glue.multinode import check_multinode
from seal_verl.verl_glue.probe import CueEffectProbe
from seal_verl.verl_glue.step import StepWriter, seal_step

logger = logging.getLogger(__name__)


def _as_list(value) -> list:
    """A non-tensor TransferQueue field as a plain list (a LinkedList, NonTensorStack or numpy array)."""
    if hasattr(value, "tolist"):
        return list(value.tolist())
    return list(value)


def _unpadded_rows(value) -> list:
    """Per-row tensors of a TransferQueue tensor field (nested/jagged: unbound; padded: rows as they are)."""
    if getattr(value, "is_nested", False):
        return list(value.unbind())
    return list(value)


#: the agent loop's per-rollout timers (verl's ``AgentLoopMetrics``), summarised per step in the run folder
AGENT_LOOP_TIMERS = ("generate_sequences", "tool_calls", "compute_score")


def _resolved(cfg):
    from omegaconf import OmegaConf

    try:
        return OmegaConf.to_container(cfg, resolve=True)
    except Exception:  # noqa: BLE001 - an unresolvable interpolation: keep the unresolved form
        return OmegaConf.to_container(cfg, resolve=False)


def _cue_marker() -> str:
    from seal_verl.core.observation import CUE_MARKER

    return CUE_MARKER


def _reward_extras(extra_field) -> dict | None:
    if isinstance(extra_field, dict):
        info = extra_field.get("reward_extra_info")
        if isinstance(info, dict):
            return info
    return None


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
        self.seal = SealDriver(seal_cfg, actor=state_actor.actor_coordinates(config))
        self.seal_probe = CueEffectProbe(seal_cfg)
        self._seal_probe_index: dict | None = None
        #: TransferQueue key -> (uid, w, reward extras) of the current step's rollouts (for the run folder)
        self._seal_step_rows: dict = {}
        #: faults planted on purpose (SEAL_FAULT): announced now, recorded in every step's metrics and config.json
        self.seal_faults = compat.plant_faults()

    # ------------------------------------------------------------------ advantage

    def _seal_read_extras(self, batch):
        """(uids, extras per row or None for padding rows) of a KVBatchMeta, in ``batch.keys`` order. The rows'
        identities (``advantage.row_identities``) come from the same read and are kept for the weight plan, so
        the estimator can check that it weights exactly these rows."""
        import transfer_queue as tq

        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id,
                               select_fields=["uid", "extra_fields", "response_mask"])
        uids = np.array(_as_list(data["uid"]), dtype=object)
        self._seal_row_ids = row_identities(uids, data["response_mask"])
        extra_fields = _as_list(data["extra_fields"])
        padding = [bool(tag.get("is_padding", False)) for tag in batch.tags]
        rows = []
        missing = []
        for i, (ef, pad) in enumerate(zip(extra_fields, padding, strict=True)):
            if pad:
                rows.append(None)
                continue
            info = _reward_extras(ef)
            if info is None or any(k not in info for k in REQUIRED_FIELDS):
                missing.append(i)
                info = None
            rows.append(info)
        if missing:
            # A colocated reward model writes the extras as top-level fields instead (_compute_reward_colocate).
            rows = self._seal_read_toplevel_extras(batch, rows, missing)
        return uids, rows

    def _seal_read_toplevel_extras(self, batch, rows, missing):
        """Fallback for rows without ``reward_extra_info``: the extras as top-level TransferQueue fields."""
        import transfer_queue as tq

        from seal_verl.verl_glue.advantage import check_extras_present

        try:
            data = tq.kv_batch_get(
                keys=[batch.keys[i] for i in missing], partition_id=batch.partition_id, select_fields=list(REQUIRED_FIELDS)
            )
        except (ValueError, KeyError, RuntimeError) as e:  # TransferQueue: "Some fields are not ready ..." (ValueError)
            raise SealWiringError(
                f"{len(missing)} of {len(rows)} trajectories have no SEAL reward extras, neither in "
                f"extra_fields['reward_extra_info'] nor as TransferQueue fields ({type(e).__name__}: {e}). "
                "The reward function must return every seal_* key for every sample "
                "(reward.custom_reward_function -> reward_fns/bfcl_reward.py:compute_score)."
            ) from e
        check_extras_present(data.keys(), "the TransferQueue fields of the batch")
        for j, i in enumerate(missing):
            rows[i] = {k: _as_list(data[k])[j] for k in REQUIRED_FIELDS}
        return rows

    def _seal_check_single_output_sessions(self, batch) -> None:
        sessions: dict[str, int] = {}
        for key in batch.keys:
            sk = compat.session_of_key(key)
            if sk is not None:
                sessions[sk] = sessions.get(sk, 0) + 1
        multi = [k for k, n in sessions.items() if n > 1]
        if multi:
            raise SealWiringError(
                f"seal_grpo expects one agent-loop output per rollout; {len(multi)} sessions produced several "
                f"(e.g. {multi[0]})"
            )

    def _compute_advantage(self, batch, metrics: dict):
        uids, rows = self._seal_read_extras(batch)
        row_ids = self.__dict__.pop("_seal_row_ids", None)
        base = super()._compute_advantage

        def exclude(b, flags):
            compat.exclude_rows_from_update(b, flags)
            return b

        result = seal_step(self.seal, rows, uids, lambda: base(batch, metrics=metrics),
                           step0=int(self.global_steps) - 1,  # verl counts training steps from 1
                           adv_estimator=self.seal_adv_estimator, exclude=exclude, row_ids=row_ids,
                           before_plan=lambda: self._seal_check_single_output_sessions(batch))
        metrics.update(result.metrics)
        if self.seal.run_folder is not None:
            pending = self.__dict__.setdefault("_seal_step_rows", {})
            for r in result.rollouts:
                pending[result.batch.keys[r.index]] = r
        return result.batch

    # ------------------------------------------------------------------ step end: closed loop

    def step(self, metrics: dict, timing_raw: dict):
        self._seal_step_rows = {}
        if self.seal_probe.runs:
            import time

            t0 = time.monotonic()
            found = self._seal_cue_probe()
            if found:
                found["seal/cue_effect/seconds"] = time.monotonic() - t0
            metrics.update(found)
        batch = super().step(metrics, timing_raw)
        metrics.update(self.seal.end_step(self.global_steps))
        return batch

    # ------------------------------------------------------------------ cue-effect probe

    def _seal_task_index(self) -> dict:
        """Task id -> index of its row in the training dataset (read once)."""
        if self._seal_probe_index is None:
            infos = self.train_dataset.dataframe["extra_info"]
            self._seal_probe_index = {}
            for i, info in enumerate(infos):
                tid = info.get("task_id") if isinstance(info, dict) else None
                if tid is not None:
                    self._seal_probe_index.setdefault(str(tid), i)
        return self._seal_probe_index

    def _seal_cue_probe(self) -> dict:
        """The cue-effect probe of this step when one is due (``verl_glue/probe.py``): the current weights on
        the probe's tasks under each condition, through the validation partition (never trained on), before
        this step's own rollouts. Returns its ``seal/cue_effect/...`` metrics ({} when none is due)."""
        import uuid

        import transfer_queue as tq
        from verl.utils import tensordict_utils as tu
        from verl.utils.dataset.rl_dataset import collate_fn

        from seal_verl.verl_glue import probe

        step = int(self.global_steps)
        if not self.seal_probe.due(step, self.seal.state):
            return {}
        index = self._seal_task_index()
        plan = self.seal_probe.plan_for(step, self.seal.state, index)
        if plan is None:
            return {}
        params = probe.sampling(self.seal.cfg.cue_effect, self.config.actor_rollout_ref.rollout)
        base = {t: self.train_dataset[index[t]] for t in plan.tasks}
        rows = probe.rows(plan, base, params, uid_prefix=f"seal-probe-{step}-{uuid.uuid4().hex[:8]}-")
        batch_dict = collate_fn(rows)
        batch_dict["uid"] = np.array([r["uid"] for r in rows], dtype=object)
        batch_dict["__rollout_n__"] = np.array([plan.samples] * len(rows), dtype=object)
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
        records, trace_rows = [], []
        if out.keys:
            data = tq.kv_batch_get(keys=out.keys, partition_id=out.partition_id, select_fields=["extra_fields"])
            for key, ef in zip(out.keys, _as_list(data["extra_fields"]), strict=True):
                extras = _reward_extras(ef) or {}
                uid = probe.uid_of_key(key)
                rec = probe.record(plan, uid, extras)
                if rec is not None:
                    records.append(rec)
                    trace_rows.append(probe.trace_row(rec, key, plan, extras, ef if isinstance(ef, dict) else {}))
            tq.kv_clear(keys=out.keys, partition_id=out.partition_id)
        before = set(self.seal.state.interface.retired)
        found = self.seal_probe.finish(plan, records, self.seal)
        if set(self.seal.state.interface.retired) != before:
            self.seal.publish()  # this step's rollouts run without the retired kinds
        if self.seal.run_folder is not None:
            self.seal.run_folder.write_probe(step, trace_rows)
        logger.info("cue-effect probe at step %s: %s", step, found)
        return found

    # ------------------------------------------------------------------ run folder

    def _seal_fetch_rollouts(self, batch, fields: list[str]) -> dict:
        import transfer_queue as tq

        return tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields)

    def _seal_decode_has_marker(self, prompt_ids, response_ids) -> bool:
        marker = _cue_marker()
        text = self.tokenizer.decode(prompt_ids.tolist(), skip_special_tokens=False)
        text += self.tokenizer.decode(response_ids.tolist(), skip_special_tokens=False)
        return marker in text

    def _seal_write_step(self, batch, metrics: dict, timing_raw: dict, global_steps: int) -> None:
        """Fill the step's rollouts from TransferQueue (the V1 layout) and hand them to the run-folder writer."""
        pending = self.__dict__.get("_seal_step_rows", {})
        data = self._seal_fetch_rollouts(batch, ["extra_fields", "prompts", "responses", "response_mask", "advantages"])
        loop_metrics = self._seal_agent_loop_metrics(batch)
        metrics.update(self._seal_sync_metrics(batch))
        extra_fields = _as_list(data["extra_fields"])
        prompts = _unpadded_rows(data["prompts"])
        responses = _unpadded_rows(data["responses"])
        masks = _unpadded_rows(data["response_mask"])
        advantages = _unpadded_rows(data["advantages"])
        k = int(global_steps)
        rollouts = []
        for i, key in enumerate(batch.keys):
            if key not in pending:  # padding row (no evidence, not part of C_t)
                continue
            r = pending[key]
            mask = masks[i].bool()
            adv = advantages[i]
            n = min(int(mask.shape[0]), int(adv.shape[0]))
            sel = adv[:n][mask[:n]]
            r.key = key
            r.extra_fields = extra_fields[i] if isinstance(extra_fields[i], dict) else {}
            r.advantage = float(sel.float().mean()) if sel.numel() else 0.0
            r.advantage_range = (float(sel.min()), float(sel.max())) if sel.numel() else None
            r.hint_in_text = self._seal_decode_has_marker(prompts[i], responses[i])
            r.tokens = {"prompt": int(prompts[i].shape[0]), "response": int(responses[i].shape[0]),
                        "llm": int(mask.sum())}
            if loop_metrics is not None:
                r.more["timing"] = {name: loop_metrics[i].get(name) for name in AGENT_LOOP_TIMERS}
            rollouts.append(r)
        if loop_metrics is not None:
            # verl's legacy trainer logs these (agent_loop/<timer>/{min,max,mean}); the V1 trainer keeps them per
            # rollout in TransferQueue only. Logged here with the step (this runs before verl's logger call).
            for name in AGENT_LOOP_TIMERS:
                values = [float(m.get(name) or 0.0) for m in loop_metrics if isinstance(m, dict)]
                if values:
                    metrics[f"agent_loop/{name}/mean"] = float(np.mean(values))
                    metrics[f"agent_loop/{name}/max"] = float(np.max(values))
                    metrics[f"agent_loop/{name}/sum"] = float(np.sum(values))
        for fault in self.seal_faults:
            metrics[f"seal/fault/{fault}"] = 1.0
        writer = StepWriter(self.seal.run_folder)
        rows = writer.write_traces(k, rollouts)
        writer.write_metrics(k, self.seal, rows, seconds=(timing_raw or {}).get("step"), metrics=metrics,
                             more={"cue_effect": self.seal_probe.take()})
        self._seal_step_rows = {}

    def _seal_sync_metrics(self, batch) -> dict:
        """Mean |p - q| of the response tokens' probabilities between the rollout engine, the actor before the
        update and the reference (the initial weights): ``seal/sync/{rollout_vs_actor,rollout_vs_ref,actor_vs_ref}``.
        After a real weight sync the rollout is closer to the actor than to the initial weights as soon as the
        actor has moved; a rollout engine that kept the initial weights would show the opposite. Empty when the
        run computes no rollout or reference log-probs."""
        fields = ["response_mask", "rollout_log_probs", "old_log_probs", "ref_log_prob"]
        try:
            data = self._seal_fetch_rollouts(batch, fields)
        except (KeyError, ValueError, RuntimeError):
            return {}
        rows = {f: _unpadded_rows(data[f]) for f in fields}
        sums = {"rollout_vs_actor": 0.0, "rollout_vs_ref": 0.0, "actor_vs_ref": 0.0}
        n = 0
        pairs = {"rollout_vs_actor": ("rollout_log_probs", "old_log_probs"),
                 "rollout_vs_ref": ("rollout_log_probs", "ref_log_prob"),
                 "actor_vs_ref": ("old_log_probs", "ref_log_prob")}
        for i, mask in enumerate(rows["response_mask"]):
            m = mask.bool()
            length = min(int(m.shape[0]), *(int(rows[f][i].shape[0]) for f in fields[1:]))
            m = m[:length]
            if not bool(m.any()):
                continue
            probs = {f: rows[f][i][:length][m].float().exp() for f in fields[1:]}
            for name, (a, b) in pairs.items():
                sums[name] += float((probs[a] - probs[b]).abs().sum())
            n += int(m.sum())
        return {f"seal/sync/{k}": v / n for k, v in sums.items()} if n else {}

    def _seal_agent_loop_metrics(self, batch) -> list | None:
        """Per rollout: the agent loop's own timers (``AgentLoopMetrics``: generate_sequences, tool_calls,
        compute_score seconds), or None when the batch has no ``metrics`` field."""
        try:
            data = self._seal_fetch_rollouts(batch, ["metrics"])
        except (KeyError, ValueError, RuntimeError):
            return None
        rows = _as_list(data["metrics"])
        return [r if isinstance(r, dict) else {} for r in rows]

    def _compute_metrics(self, batch, metrics, timing_raw, global_steps, epoch):
        result = super()._compute_metrics(batch, metrics, timing_raw, global_steps, epoch)
        if self.seal.run_folder is not None:
            self._seal_write_step(batch, metrics, timing_raw, global_steps)
        return result

    def _seal_val_rows(self, batch) -> list[dict]:
        if not batch.keys:  # every rollout of the batch failed: verl reports that itself
            return []
        data = self._seal_fetch_rollouts(batch, ["extra_fields", "prompts", "responses", "rm_scores"])
        extra_fields = _as_list(data["extra_fields"])
        prompts = _unpadded_rows(data["prompts"])
        responses = _unpadded_rows(data["responses"])
        scores = _unpadded_rows(data["rm_scores"])
        rows = []
        for i, key in enumerate(batch.keys):
            ef = extra_fields[i] if isinstance(extra_fields[i], dict) else {}
            rows.append(val_row(
                global_step=int(self.global_steps), key=key, reward_extras=_reward_extras(ef) or {},
                extra_fields=ef, score=float(scores[i].sum()),
                hint_in_text=self._seal_decode_has_marker(prompts[i], responses[i]),
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
        cfg = self.config
        recipe = cfg.get("recipe") or {}
        self.seal.run_folder.write_config({
            "trainer": f"verl main_ppo, trainer.v1.trainer_mode={cfg.trainer.v1.get('trainer_mode')}",
            "variant": recipe.get("variant") if hasattr(recipe, "get") else None,
            "preset": recipe.get("preset") if hasattr(recipe, "get") else None,
            "model": cfg.actor_rollout_ref.model.path,
            "seal": self.seal.cfg.to_dict(),
            "resumed_from": resumed_from,
            "resumed_from_step": int(self.global_steps) if resumed_from else None,
            "faults": list(self.seal_faults),
            "verl": _resolved(cfg),
        })


class SealPPOTrainer(SealTrainerMixin, PPOTrainerSync):
    """``trainer.v1.trainer_mode=seal``: the stock synchronous V1 trainer plus SEAL's trainer side."""

    seal_base_mode = "sync"
    __seal_trainer__ = True


#: trainer_mode name -> class; the plugin registers these with verl.
SEAL_TRAINERS = {"seal": SealPPOTrainer}


def register() -> None:
    """Register the SEAL trainers with verl's V1 trainer registry (idempotent)."""
    from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY

    for name, cls in SEAL_TRAINERS.items():
        assert SEAL_TRAINER_MODES[name] == cls.seal_base_mode
        existing = TRAINER_REGISTRY.get(name)
        if existing is not None and getattr(existing, "__seal_trainer__", False):
            continue  # registered before (possibly by an earlier copy of this module)
        register_trainer(name)(cls)
