"""One SEAL training step, shared by the V1 trainer, the legacy trainer and the dry run.

The step is the same on every path: reward extras -> profiles -> weights -> ``WeightPlan`` around verl's own
advantage computation -> checker-error exclusion -> trajectory records -> (optionally) the closed-loop update.
The paths differ only in where the extras live (TransferQueue or ``DataProto.non_tensor_batch``) and how a row is
excluded from the update, so they hand those in as arguments and keep nothing else of the step. Writing the step
to the run folder is likewise one writer (:class:`StepWriter`) fed with the per-rollout rows the step returns.

No verl import here: the caller passes verl's advantage computation in as a callable.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from seal_verl.verl_glue.advantage import (
    SealWiringError,
    WeightPlan,
    cue_metrics,
    excluded_rows,
    profile_from_extras,
    record_from_extras,
    weight_metrics,
    weight_plan,
)
from seal_verl.verl_glue.config import SEAL_GRPO, estimator_name
from seal_verl.verl_glue.driver import RunFolder, SealDriver, step_row, trace_row


@dataclass
class Rollout:
    """One real (non-padding) rollout of a step: what the step decided for it, then what the run folder shows.

    The step fills the first block; the caller, which has the batch in its own layout, fills the second before
    handing the rollouts to :class:`StepWriter`.
    """

    index: int
    uid: Any
    extras: dict
    w: float
    grpo: Optional[float]
    excluded: bool
    # filled by the caller from its batch layout
    key: str = ""
    extra_fields: dict = field(default_factory=dict)
    advantage: Optional[float] = None
    advantage_range: Optional[tuple] = None
    hint_in_text: Optional[bool] = None
    tokens: Optional[dict] = None
    #: more keys for the trace row (the dry run's scripted ``plan``, the agent loop's ``timing``)
    more: dict = field(default_factory=dict)


@dataclass
class StepResult:
    """What :func:`seal_step` returns: verl's advantage batch, the step's ``seal/...`` metrics, the per-row
    weights and exclusion flags (batch order, padding included) and the real rollouts."""

    batch: Any
    metrics: dict
    weights: Any
    excluded: list
    rollouts: list[Rollout]


def seal_step(driver: SealDriver, extras: list, uids: Any, compute_advantage: Callable[[], Any], *,
              step0: int, adv_estimator: Any, exclude: Callable[[Any, list], Any],
              row_ids: Optional[list] = None, before_plan: Optional[Callable[[], None]] = None,
              close_at: Optional[int] = None) -> StepResult:
    """Compute one SEAL step.

    Args:
        driver: the run's ``SealDriver`` (rho, switches, records, closed loop).
        extras: per row, the reward extras (a dict) or ``None`` for a padding row (weight 1, no evidence).
        uids: the GRPO group id of each row.
        compute_advantage: runs verl's own advantage computation on the caller's batch and returns the result.
        step0: 0-based index of the training step (for ``warmup_steps``).
        adv_estimator: ``algorithm.adv_estimator`` (with ``seal_grpo`` the weights enter the advantages).
        exclude: ``exclude(batch, flags)`` keeps the flagged rows out of the update in the caller's layout and
            returns the batch (called only when a row is flagged).
        row_ids: the rows' identities, so the estimator can check it weights exactly these rows.
        before_plan: a check run before the weight plan is made (seal_grpo only).
        close_at: run the closed-loop update as training step ``close_at`` and add its metrics; ``None`` leaves it
            to the caller (the V1 trainer closes the step after verl's update).
    """
    import numpy as np
    import torch

    from seal_verl.core.profile import zero_profile

    profiles, records = [], []
    for i, info in enumerate(extras):
        if info is None:
            profiles.append(zero_profile())
            continue
        profiles.append(profile_from_extras(info, i))
        records.append(record_from_extras(info, i))
    excluded = excluded_rows(extras)
    weights = driver.weights(profiles, step0)
    real = torch.tensor([r is not None for r in extras], dtype=torch.bool)
    metrics = weight_metrics(weights[real] if bool(real.any()) else weights)
    metrics.update(cue_metrics(extras))
    metrics["seal/weight/warmup"] = 1.0 if driver.in_warmup(step0) else 0.0
    metrics["seal/excluded/checker_error"] = float(sum(excluded))

    grpo = None
    if estimator_name(adv_estimator) == SEAL_GRPO:
        if before_plan is not None:
            before_plan()
        plan = WeightPlan(uids=np.asarray(uids, dtype=object), weights=weights, apply_to=driver.cfg.weighting.apply_to,
                          exclude=excluded, rows=row_ids)
        with weight_plan(plan):
            batch = compute_advantage()
        if plan.used == 0:
            raise SealWiringError("verl computed the advantages without calling the seal_grpo estimator")
        grpo = plan.grpo
    else:
        batch = compute_advantage()
    if any(excluded):  # a rollout whose verification raised adds nothing to the update
        batch = exclude(batch, excluded)
    driver.add_records(records)
    if close_at is not None:
        metrics.update(driver.end_step(close_at))
    rollouts = [Rollout(index=i, uid=uids[i], extras=info, w=float(weights[i]),
                        grpo=None if grpo is None else grpo[i], excluded=bool(excluded[i]))
                for i, info in enumerate(extras) if info is not None]
    return StepResult(batch=batch, metrics=metrics, weights=weights, excluded=excluded, rollouts=rollouts)


class StepWriter:
    """The run folder's per-step files from a step's rollouts: ``traces_step_{k}.jsonl`` (one row per rollout)
    and one ``metrics.jsonl`` row. The two are separate calls because the legacy trainer knows verl's data metrics
    only after the advantage step; both are the same rows on every path."""

    def __init__(self, folder: RunFolder):
        self.folder = folder

    def write_traces(self, k: int, rollouts: list[Rollout]) -> list[dict]:
        """Write ``traces_step_{k}.jsonl``; returns its rows (for :meth:`write_metrics`)."""
        rows = []
        for r in rollouts:
            row = trace_row(
                step=k, global_step=k, key=r.key, uid=r.uid, reward_extras=r.extras, extra_fields=r.extra_fields,
                w=r.w, advantage=r.advantage,
                # without seal_grpo the advantage is verl's own GRPO advantage, unweighted
                grpo_advantage=r.advantage if r.grpo is None else r.grpo,
                advantage_range=r.advantage_range, excluded=r.excluded, hint_in_text=r.hint_in_text,
                tokens=r.tokens)
            row.update(r.more)
            rows.append(row)
        self.folder.write_traces(k, rows)
        return rows

    def write_metrics(self, k: int, driver: SealDriver, rows: list[dict], *, seconds: Optional[float],
                      metrics: dict, more: Optional[dict] = None) -> dict:
        """Append the step's ``metrics.jsonl`` row (``more``: extra or overriding keys, e.g. the dry run's mix)."""
        row = step_row(step=k, global_step=k, state_before=driver.state_before, state_after=driver.state, rows=rows,
                       seconds=seconds, metrics=metrics)
        row.update(more or {})
        self.folder.append_metrics(row)
        return row


def data_proto_rollouts(data: Any, result: StepResult, tokenizer: Any,
                        trace_fields: tuple[str, ...] = ("seal_trace", "task_id", "seal_agent_loop",
                                                         "seal_cue_tokens", "seal_cue_count")) -> list[Rollout]:
    """Fill the rollouts of a step on a ``DataProto`` batch (legacy trainer and dry run: extras and agent-loop
    fields in ``non_tensor_batch``, padded tensors in ``batch``) with what the run folder shows."""
    from seal_verl.core.observation import CUE_MARKER

    batch, ntb = data.batch, data.non_tensor_batch
    keys = batch.keys()
    mask = batch["response_mask"] if "response_mask" in keys else None
    adv = batch["advantages"] if "advantages" in keys else None
    resp_len = int(batch["responses"].shape[1]) if "responses" in keys else 0
    att = batch["attention_mask"] if "attention_mask" in keys else None
    for r in result.rollouts:
        i = r.index
        r.key = str(i)
        r.extra_fields = {k: ntb[k][i] for k in trace_fields if k in ntb}
        if "acc" in ntb:
            r.extras = dict(r.extras, acc=ntb["acc"][i])
        m = mask[i].bool() if mask is not None else None
        sel = adv[i][m] if (adv is not None and m is not None) else None
        r.advantage = float(sel.float().mean()) if sel is not None and sel.numel() else 0.0
        r.advantage_range = (float(sel.min()), float(sel.max())) if sel is not None and sel.numel() else None
        if tokenizer is not None and "input_ids" in keys and att is not None:
            ids = batch["input_ids"][i][att[i].bool()].tolist()
            r.hint_in_text = CUE_MARKER in tokenizer.decode(ids, skip_special_tokens=False)
        if att is not None and resp_len:
            r.tokens = {"prompt": int(att[i][:-resp_len].sum()), "response": int(att[i][-resp_len:].sum()),
                        "llm": int(m.sum()) if m is not None else None}
    return result.rollouts


def zero_excluded_rows(data: Any, flags: list) -> Any:
    """Exclusion on a ``DataProto``: the flagged rows' response mask, advantages and returns become 0."""
    import torch

    rows = torch.as_tensor(flags, dtype=torch.bool)
    for key in ("response_mask", "advantages", "returns"):
        if key in data.batch.keys():
            data.batch[key][rows] = 0
    return data
