"""A step's rollouts as the trainer side reads them, once: from TransferQueue (the V1 trainer) or from a
``DataProto`` (the legacy trainer, the dry run), into :class:`seal_verl.core.step_record.Rollout` values.

Each rollout's reward extras are decoded here (``seal_verl.core.extras``) and nowhere else; what only the run
folder shows (the trace, token counts, whether cue text occurs in the decoded tokens, the agent loop's timers, the
log-probability agreement of rollout engine, actor and reference) is read in the same pass when a run folder is
kept. After verl's advantage step, :func:`tq_advantages` / :func:`data_proto_advantages` add the one field the
update produced. No verl import (TransferQueue is imported where it is read).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping, Optional

import numpy as np

from seal_verl.core import extras as X
from seal_verl.core.step_record import Rollout
from seal_verl.verl_glue.advantage import SealWiringError, check_extras_present, grade_of, row_identities

#: the agent loop's per-rollout timers (verl's ``AgentLoopMetrics``), kept per rollout in the run folder
AGENT_LOOP_TIMERS = ("generate_sequences", "tool_calls", "compute_score")
#: the log-probabilities compared for ``seal/sync/...``: name -> (field, field)
SYNC_PAIRS = {"rollout_vs_actor": ("rollout_log_probs", "old_log_probs"),
              "rollout_vs_ref": ("rollout_log_probs", "ref_log_prob"),
              "actor_vs_ref": ("old_log_probs", "ref_log_prob")}
_LOG_PROBS = ("rollout_log_probs", "old_log_probs", "ref_log_prob")


@dataclass
class BatchRollouts:
    """One read of a batch.

    Attributes:
        uids: every row's GRPO group (padding rows included), in batch order.
        rollouts: per row, its :class:`Rollout` (None for a padding row: no evidence, weight 1, not in C_t).
        row_ids: the rows' identities for the weight plan (``advantage.row_identities``).
        masks: per row, its response mask as read (for the advantages read after the update).
    """

    uids: np.ndarray
    rollouts: list
    row_ids: Optional[list]
    masks: list


def as_list(value: Any) -> list:
    """A non-tensor batch field as a plain list (a LinkedList, NonTensorStack or numpy array)."""
    if hasattr(value, "tolist"):
        return list(value.tolist())
    return list(value)


def unpadded_rows(value: Any) -> list:
    """Per-row tensors of a TransferQueue tensor field (nested/jagged: unbound; padded: rows as they are)."""
    if getattr(value, "is_nested", False):
        return list(value.unbind())
    return list(value)


def reward_extras(extra_fields: Any) -> Optional[dict]:
    """The reward function's extras verl's agent-loop worker put into a rollout's ``extra_fields``."""
    if isinstance(extra_fields, dict):
        info = extra_fields.get("reward_extra_info")
        if isinstance(info, dict):
            return info
    return None


def _json_value(value: Any) -> Any:
    value = X.plain(value)
    if isinstance(value, str):
        try:
            return json.loads(value)
        except (json.JSONDecodeError, RecursionError):
            return value
    return value


def rollout(index: int, key: str, uid: Any, extras: Mapping, fields: Mapping, *, keep_trace: bool,
            hint_in_text: Optional[bool] = None, tokens: Optional[dict] = None, timing: Optional[dict] = None,
            sync: Optional[dict] = None) -> Rollout:
    """The record of one rollout from its reward ``extras`` and its agent-loop ``fields`` (decoded here, once)."""
    grade = grade_of(extras, index)
    trace = _json_value(fields.get(X.TRACE)) if keep_trace else None
    step = X.plain(fields.get(X.STATE_STEP))
    task_id = (X.plain(fields.get(X.ROW_TASK_ID)) or grade.task_id
               or (trace.get("task_id") if isinstance(trace, dict) else "") or "")

    def count(name: str) -> int:
        try:
            return int(float(X.plain(fields.get(name)) or 0))
        except (TypeError, ValueError):
            return 0

    return Rollout(index=index, key=str(key), uid=str(uid), grade=grade, task_id=str(task_id),
                   agent_loop=X.plain(fields.get(X.AGENT_LOOP)), cue_tokens=count(X.CUE_TOKENS),
                   cue_count=count(X.CUE_COUNT),
                   state_step=None if step is None or int(step) < 0 else int(step), trace=trace,
                   hint_in_text=hint_in_text, tokens=tokens, timing=timing, sync=sync)


def _mean_and_range(adv: Any, mask: Any) -> tuple[float, Optional[tuple[float, float]]]:
    """Mean advantage over the tokens with mask 1 and its (min, max); (0.0, None) without any."""
    m = mask.bool()
    n = min(int(m.shape[0]), int(adv.shape[0]))
    sel = adv[:n][m[:n]]
    if not sel.numel():
        return 0.0, None
    return float(sel.float().mean()), (float(sel.min()), float(sel.max()))


def _sync(rows: dict, i: int, mask: Any) -> Optional[dict]:
    """Summed |p - q| of row ``i``'s response-token probabilities for each pair of :data:`SYNC_PAIRS`."""
    if not all(f in rows for f in _LOG_PROBS):
        return None
    m = mask.bool()
    length = min(int(m.shape[0]), *(int(rows[f][i].shape[0]) for f in _LOG_PROBS))
    m = m[:length]
    out = {name: 0.0 for name in SYNC_PAIRS}
    out["n"] = int(m.sum())
    if out["n"]:
        probs = {f: rows[f][i][:length][m].float().exp() for f in _LOG_PROBS}
        for name, (a, b) in SYNC_PAIRS.items():
            out[name] = float((probs[a] - probs[b]).abs().sum())
    return out


class TQReader:
    """Reads the V1 trainer's batches from TransferQueue. It remembers which optional fields (the agent loop's
    timers, the log-probabilities) a run's batches do not have, so a run asks for a missing one once.

    Args:
        run_folder: whether the run keeps a run folder (the trace, tokens and timers are read only then).
    """

    OPTIONAL = ("metrics",) + _LOG_PROBS

    def __init__(self, run_folder: bool):
        self.run_folder = run_folder
        self.absent: set[str] = set()

    def _get(self, batch: Any, fields: list[str], optional: list[str]) -> Any:
        import transfer_queue as tq

        wanted = [f for f in optional if f not in self.absent]
        try:
            return tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields + wanted)
        except (ValueError, KeyError, RuntimeError) as exc:
            if not wanted:
                raise
            # TransferQueue names a field it does not hold; one not ready in every row it does not name
            missing = {f for f in wanted if f in str(exc)} or {f for f in wanted if not self._ready(batch, f)}
            if not missing:
                raise
            self.absent |= missing
            return self._get(batch, fields, optional)

    @staticmethod
    def _ready(batch: Any, field: str) -> bool:
        import transfer_queue as tq

        try:
            tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=[field])
        except (ValueError, KeyError, RuntimeError):
            return False
        return True

    def read(self, batch: Any, tokenizer: Any = None) -> BatchRollouts:
        """The step's rollouts of ``batch`` (a ``KVBatchMeta``), in ``batch.keys`` order; ``tokenizer`` decodes a
        rollout's tokens to look for the cue marker (run folder only)."""
        from seal_verl.core.observation import CUE_MARKER

        fields = ["uid", "extra_fields", "response_mask"] + (["prompts", "responses"] if self.run_folder else [])
        data = self._get(batch, fields, list(self.OPTIONAL) if self.run_folder else [])
        got = set(data.keys())
        uids = np.array(as_list(data["uid"]), dtype=object)
        masks = unpadded_rows(data["response_mask"])
        extra_fields = as_list(data["extra_fields"])
        rows = {f: unpadded_rows(data[f]) for f in ("prompts", "responses") + _LOG_PROBS if f in got}
        timers = [m if isinstance(m, dict) else {} for m in as_list(data["metrics"])] if "metrics" in got else None
        padding = [bool(tag.get("is_padding", False)) for tag in batch.tags]
        infos = [None if pad else reward_extras(ef) for ef, pad in zip(extra_fields, padding, strict=True)]
        missing = [i for i, (info, pad) in enumerate(zip(infos, padding)) if not pad and
                   (info is None or X.missing(info.keys()))]
        if missing:  # a colocated reward model writes the extras as top-level fields (_compute_reward_colocate)
            for i, info in zip(missing, self._toplevel_extras(batch, missing, len(infos))):
                infos[i] = info
        rollouts: list = []
        for i, key in enumerate(batch.keys):
            if padding[i]:
                rollouts.append(None)
                continue
            ef = extra_fields[i] if isinstance(extra_fields[i], dict) else {}
            hint = tokens = None
            if "prompts" in rows:
                prompt, response = rows["prompts"][i], rows["responses"][i]
                tokens = {"prompt": int(prompt.shape[0]), "response": int(response.shape[0]),
                          "llm": int(masks[i].bool().sum())}
                if tokenizer is not None:
                    text = tokenizer.decode(prompt.tolist(), skip_special_tokens=False)
                    text += tokenizer.decode(response.tolist(), skip_special_tokens=False)
                    hint = CUE_MARKER in text
            timing = None if timers is None else {name: timers[i].get(name) for name in AGENT_LOOP_TIMERS}
            rollouts.append(rollout(i, key, uids[i], infos[i], ef, keep_trace=self.run_folder, hint_in_text=hint,
                                    tokens=tokens, timing=timing, sync=_sync(rows, i, masks[i])))
        return BatchRollouts(uids=uids, rollouts=rollouts, row_ids=row_identities(uids, data["response_mask"]),
                             masks=masks)

    @staticmethod
    def _toplevel_extras(batch: Any, missing: list[int], n: int) -> list[dict]:
        """The extras of rows without ``reward_extra_info``, read as top-level TransferQueue fields."""
        import transfer_queue as tq

        try:
            data = tq.kv_batch_get(keys=[batch.keys[i] for i in missing], partition_id=batch.partition_id,
                                   select_fields=list(X.KEYS))
        except (ValueError, KeyError, RuntimeError) as e:  # TransferQueue: "Some fields are not ready ..."
            raise SealWiringError(
                f"{len(missing)} of {n} trajectories have no SEAL reward extras, neither in "
                f"extra_fields['reward_extra_info'] nor as TransferQueue fields ({type(e).__name__}: {e}). "
                "The reward function must return every seal_* key for every sample "
                "(reward.custom_reward_function -> reward_fns/bfcl_reward.py:compute_score)."
            ) from e
        check_extras_present(data.keys(), "the TransferQueue fields of the batch")
        columns = {k: as_list(data[k]) for k in X.KEYS if k in data.keys()}
        return [{k: v[j] for k, v in columns.items()} for j in range(len(missing))]


def tq_advantages(batch: Any, masks: list) -> list[tuple[float, Optional[tuple[float, float]]]]:
    """Per row of ``batch``: the mean advantage over its response tokens and its (min, max), read once after
    verl's advantage step (``masks``: the rows' response masks as read before it)."""
    import transfer_queue as tq

    data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["advantages"])
    return [_mean_and_range(adv, mask) for adv, mask in zip(unpadded_rows(data["advantages"]), masks, strict=True)]


def read_data_proto(data: Any, tokenizer: Any = None, keep_trace: bool = True) -> BatchRollouts:
    """The rollouts of a ``DataProto`` (legacy trainer and dry run: extras and agent-loop fields in
    ``non_tensor_batch``, padded tensors in ``batch``); every row is a real rollout.

    Args:
        tokenizer: decodes each row to look for the cue marker (None: not looked for).
        keep_trace: read each rollout's trace (for the run folder).
    """
    from seal_verl.core.observation import CUE_MARKER

    ntb, batch = data.non_tensor_batch, data.batch
    check_extras_present(ntb.keys(), "the batch (DataProto.non_tensor_batch)")
    n = len(data)
    keys = batch.keys()
    mask = batch["response_mask"] if "response_mask" in keys else None
    att = batch["attention_mask"] if "attention_mask" in keys else None
    resp_len = int(batch["responses"].shape[1]) if "responses" in keys else 0
    uids = np.asarray(ntb["uid"], dtype=object) if "uid" in ntb else np.array([None] * n, dtype=object)
    rollouts = []
    for i in range(n):
        extras = {k: ntb[k][i] for k in X.KEYS if k in ntb}
        fields = {k: ntb[k][i] for k in X.LOOP_FIELDS if k in ntb}
        hint = tokens = None
        if tokenizer is not None and "input_ids" in keys and att is not None:
            ids = batch["input_ids"][i][att[i].bool()].tolist()
            hint = CUE_MARKER in tokenizer.decode(ids, skip_special_tokens=False)
        if att is not None and resp_len:
            tokens = {"prompt": int(att[i][:-resp_len].sum()), "response": int(att[i][-resp_len:].sum()),
                      "llm": int(mask[i].sum()) if mask is not None else None}
        rollouts.append(rollout(i, str(i), uids[i], extras, fields, keep_trace=keep_trace, hint_in_text=hint,
                                tokens=tokens))
    masks = list(mask) if mask is not None else [None] * n
    return BatchRollouts(uids=uids, rollouts=rollouts, row_ids=None, masks=masks)


def data_proto_advantages(data: Any) -> list[tuple[float, Optional[tuple[float, float]]]]:
    """Per row of a ``DataProto`` after the advantage step: mean advantage over its response tokens, (min, max)."""
    keys = data.batch.keys()
    if "advantages" not in keys or "response_mask" not in keys:
        return [(0.0, None)] * len(data)
    return [_mean_and_range(a, m) for a, m in zip(data.batch["advantages"], data.batch["response_mask"])]


def data_proto_val_rows(data: Any, tokenizer: Any, global_step: int) -> list:
    """The run folder's rows of validation rollouts in a ``DataProto`` (the legacy trainer's validation batch after
    its reward: ``rm_scores``, the reward's extras and the agent loop's fields in ``non_tensor_batch``), read
    leniently: validation may run a reward without SEAL's keys."""
    from seal_verl.core.observation import CUE_MARKER
    from seal_verl.runs.rows import val_row

    ntb, batch = data.non_tensor_batch, data.batch
    keys = batch.keys()
    att = batch["attention_mask"] if "attention_mask" in keys else None
    resp_len = int(batch["responses"].shape[1]) if "responses" in keys else 0
    scores = batch["rm_scores"].sum(-1).tolist() if "rm_scores" in keys else [None] * len(data)
    uids = ntb["uid"] if "uid" in ntb else [None] * len(data)
    rows = []
    for i in range(len(data)):
        extras = {k: X.plain(ntb[k][i]) for k in X.KEYS if k in ntb}
        fields = {k: X.plain(ntb[k][i]) for k in X.LOOP_FIELDS if k in ntb}
        hint = tokens = None
        if att is not None and "input_ids" in keys:
            if tokenizer is not None:
                ids = batch["input_ids"][i][att[i].bool()].tolist()
                hint = CUE_MARKER in tokenizer.decode(ids, skip_special_tokens=False)
            if resp_len:
                tokens = {"prompt": int(att[i][:-resp_len].sum()), "response": int(att[i][-resp_len:].sum())}
        rows.append(val_row(global_step=int(global_step), key=f"{uids[i]}_{i}", reward_extras=extras,
                            extra_fields=fields, score=None if scores[i] is None else float(scores[i]),
                            hint_in_text=hint, tokens=tokens))
    return rows
