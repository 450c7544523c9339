"""One SEAL training step, shared by the V1 trainer, the legacy trainer and the dry run.

The step is the same on every path: the batch's rollouts (read once, ``batch_read``) -> profiles -> weights ->
``WeightPlan`` around verl's own advantage computation -> checker-error exclusion -> the advantages read back ->
the rollouts with their updates handed to the driver (C_t) -> (optionally) the closed-loop update. The paths
differ only in where the batch lives (TransferQueue or ``DataProto``) and how a row is excluded from the update,
so they hand those in as arguments and keep nothing else of the step. Writing the step to the run folder is
likewise one writer (:class:`StepWriter`) fed with the step's record.

The checker-error rule is one for every estimator: a rollout whose verification raised leaves its group's GRPO
statistics (``advantage``), the update and C_t's label counts, under ``seal_grpo`` and plain ``grpo`` alike.

No verl import here: the caller passes verl's advantage computation in as a callable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from seal_verl.core.step_record import StepRecord, Trained, Update
from seal_verl.verl_glue.advantage import SealWiringError, WeightPlan, cue_metrics, weight_metrics, weight_plan
from seal_verl.verl_glue.batch_read import BatchRollouts
from seal_verl.verl_glue.config import SEAL_GRPO, estimator_name
from seal_verl.verl_glue.driver import RunFolder, SealDriver


@dataclass
class StepResult:
    """What :func:`seal_step` returns: verl's advantage batch, the step's ``seal/...`` metrics, the per-row
    weights and exclusion flags (batch order, padding included), the rollouts with their updates, and the closed
    step's record when the step was closed here (``close_at``)."""

    batch: Any
    metrics: dict
    weights: Any
    excluded: list
    trained: list[Trained]
    record: Optional[StepRecord] = None


def seal_step(driver: SealDriver, read: BatchRollouts, compute_advantage: Callable[[], Any], *, step0: int,
              adv_estimator: Any, exclude: Callable[[Any, list], Any],
              advantages: Callable[[Any], list], before_plan: Optional[Callable[[], None]] = None,
              close_at: Optional[int] = None) -> StepResult:
    """Compute one SEAL step.

    Args:
        driver: the run's ``SealDriver`` (rho, switches, records, closed loop).
        read: the batch's rollouts, read once (``None`` rows: padding, weight 1, no evidence).
        compute_advantage: runs verl's own advantage computation on the caller's batch and returns the result.
        step0: 0-based index of the training step (for ``warmup_steps``).
        adv_estimator: ``algorithm.adv_estimator`` (with ``seal_grpo`` the weights enter the advantages).
        exclude: ``exclude(batch, flags)`` keeps the flagged rows out of the update in the caller's layout and
            returns the batch (called only when a row is flagged).
        advantages: ``advantages(batch)`` -> per row, (mean advantage over its response tokens, (min, max) or None),
            read from the batch after the update's advantage step.
        before_plan: a check run before the weight plan is made.
        close_at: close the step (closed-loop update, its metrics, its record) as training step ``close_at``;
            ``None`` leaves it to the caller (the V1 trainer closes the step after verl's update).
    """
    import numpy as np
    import torch

    from seal_verl.core.profile import zero_profile

    rollouts = read.rollouts
    grades = [None if r is None else r.grade for r in rollouts]
    profiles = [zero_profile() if g is None else dict(g.profile) for g in grades]
    excluded = [g is not None and g.checker_error for g in grades]
    weights = driver.weights(profiles, step0, [None if r is None else r.state_step for r in rollouts])
    real = torch.tensor([g is not None for g in grades], dtype=torch.bool)
    metrics = weight_metrics(weights[real] if bool(real.any()) else weights)
    metrics.update(cue_metrics([None if g is None else g.cue_tokens for g in grades]))
    metrics["seal/weight/warmup"] = 1.0 if driver.in_warmup(step0) else 0.0
    metrics["seal/excluded/checker_error"] = float(sum(excluded))

    weighted = estimator_name(adv_estimator) == SEAL_GRPO
    if before_plan is not None:
        before_plan()
    # The plan is active for every estimator: its exclusions reach verl's grpo as they reach seal_grpo.
    plan = WeightPlan(uids=np.asarray(read.uids, dtype=object), weights=weights, apply_to=driver.cfg.weighting.apply_to,
                      exclude=excluded, rows=read.row_ids)
    with weight_plan(plan):
        batch = compute_advantage()
    if weighted and plan.used == 0:
        raise SealWiringError("verl computed the advantages without calling the seal_grpo estimator")
    if any(excluded):  # a rollout whose verification raised adds nothing to the update
        batch = exclude(batch, excluded)
    per_row = advantages(batch)
    trained = []
    for i, r in enumerate(rollouts):
        if r is None:
            continue
        mean, span = (0.0, None) if excluded[i] else per_row[i]
        # without seal_grpo the advantage is verl's own GRPO advantage, unweighted
        grpo = plan.grpo[i] if weighted and plan.grpo is not None else mean
        trained.append(Trained(r, Update(w=float(weights[i]), grpo_advantage=grpo, advantage=mean,
                                         advantage_range=span, excluded=bool(excluded[i]))))
    driver.add_trained(trained)
    record = None
    if close_at is not None:
        closed, record = driver.close_step(close_at)
        metrics.update(closed)
    return StepResult(batch=batch, metrics=metrics, weights=weights, excluded=excluded, trained=trained,
                      record=record)


class StepWriter:
    """The run folder's per-step files from a closed step's record: ``traces_step_{k}.jsonl`` (one row per
    rollout) and one ``metrics.jsonl`` row. The two are separate calls because the legacy trainer knows verl's
    data metrics only after the advantage step; both are the same rows on every path."""

    def __init__(self, folder: RunFolder):
        self.folder = folder

    def write_traces(self, record: StepRecord, more: Optional[Callable[[Any], dict]] = None) -> None:
        """Write ``traces_step_{k}.jsonl``.

        Args:
            more: per rollout, keys added to its row (the dry run's scripted ``plan``).
        """
        from seal_verl.runs.rows import trace_row

        self.folder.write_traces(record.step, [trace_row(record.step, t, None if more is None else more(t.rollout))
                                               for t in record.trained])

    def write_metrics(self, record: StepRecord, *, seconds: Optional[float], metrics: dict,
                      more: Optional[dict] = None) -> dict:
        """Append the step's ``metrics.jsonl`` row (``more``: extra or overriding keys, e.g. the dry run's mix, the
        step's cue-effect summary)."""
        from seal_verl.runs.rows import step_row

        row = step_row(record, seconds=seconds, metrics=metrics)
        row.update(more or {})
        self.folder.append_metrics(row)
        return row


def zero_excluded_rows(data: Any, flags: list) -> Any:
    """Exclusion on a ``DataProto``: the flagged rows' response mask, advantages and returns become 0."""
    import torch

    rows = torch.as_tensor(flags, dtype=torch.bool)
    for key in ("response_mask", "advantages", "returns"):
        if key in data.batch.keys():
            data.batch[key][rows] = 0
    return data
