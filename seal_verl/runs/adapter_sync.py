"""``seal-verl check``'s ``adapter`` check: a run that trains a LoRA adapter proves the adapter reached the rollout.

With LoRA the reference model is the actor with its adapter switched off (verl's ``ref_in_actor``), which is also
what the rollout engine holds before the first sync of a trained adapter. The trainer logs, per step, the mean
|p - q| of the response tokens' probabilities between the rollout engine, the actor before the update and that
reference (``seal/sync/{rollout_vs_actor,rollout_vs_ref,actor_vs_ref}``). From them, per step:

- **noise**: at the first step the adapter is untrained (B = 0), so actor and reference are the same weights and
  ``rollout_vs_actor`` is the kernels' and dtypes' own disagreement (merged weights cast to bf16, vLLM's kernels);
  the tolerance is ``NOISE_FACTOR`` times it, and at least ``MIN_TOLERANCE``;
- **match**: after every sync, ``rollout_vs_actor`` within the tolerance: the rollout samples from the adapter the
  actor has now, not from one of an earlier step (a rollout one sync behind differs by that step's update);
- **moved**: once an update with a real gradient has run, at some step the actor is further from the reference
  than the tolerance, and there the rollout is too (``rollout_vs_ref`` beyond the tolerance): the rollout differs
  from the weights before the adapter. A run whose adapter never moves beyond the noise proves nothing: that fails
  as well (run longer or at a larger learning rate).

A rollout engine that never receives the adapter (verl issue 7495, or the planted fault ``SEAL_FAULT=
skip_weight_sync``) keeps sampling from the weights it started with: ``rollout_vs_actor`` then grows with the
adapter and ``rollout_vs_ref`` stays at the noise. Silent for runs without LoRA.
"""

from __future__ import annotations

import math
from typing import Any, Optional

NOISE_FACTOR = 3.0
#: the smallest tolerance (mean |p - q|): below it the first step's noise is not a reliable scale
MIN_TOLERANCE = 2e-4
KEYS = ("rollout_vs_actor", "rollout_vs_ref", "actor_vs_ref")


def lora_of(config: dict) -> Optional[dict]:
    """``{"rank", "alpha", "merge"}`` of the run's verl config (the run folder's config.json), or None without LoRA."""
    model = (((config or {}).get("verl") or {}).get("actor_rollout_ref") or {}).get("model") or {}
    rank = int(model.get("lora_rank") or 0) or int((model.get("lora") or {}).get("rank") or 0)
    if rank <= 0 and not model.get("lora_adapter_path"):
        return None
    return {"rank": rank, "alpha": model.get("lora_alpha"), "merge": bool((model.get("lora") or {}).get("merge"))}


def _real_gradient(grad_norm: Any) -> bool:
    return isinstance(grad_norm, (int, float)) and math.isfinite(grad_norm) and grad_norm > 0


def adapter_sync_problems(rows: list[dict]) -> tuple[list[str], str]:
    """(problems, summary) from the run's metrics rows (``{"global_step", "metrics"}``, in step order)."""
    if not rows:
        return ["no training step"], ""
    sync = []
    for r in rows:
        m = r.get("metrics") or {}
        values = [m.get(f"seal/sync/{k}") for k in KEYS]
        if any(not isinstance(v, (int, float)) for v in values):
            return [f"step {r['global_step']}: no seal/sync/ metrics (the run computes no rollout or reference "
                    "log-probs: set actor_rollout_ref.rollout.calculate_log_probs=true and use_kl_loss)"], ""
        sync.append((int(r["global_step"]), *values, m.get("actor/grad_norm")))
    noise = sync[0][1]
    tol = max(NOISE_FACTOR * noise, MIN_TOLERANCE)
    problems, moved_steps = [], []
    updated = False
    for step, ra, rr, ar, grad in sync:
        if ra > tol:
            problems.append(f"step {step}: rollout vs actor {ra:.2e} > tolerance {tol:.2e} (rollout vs the weights "
                            f"before the adapter {rr:.2e}): the rollout does not sample from the actor's adapter")
        if updated and ar > tol:
            moved_steps.append(step)
            if rr <= tol:
                problems.append(f"step {step}: the actor moved {ar:.2e} from the weights before the adapter, the "
                                f"rollout only {rr:.2e}: the adapter did not reach the rollout")
        updated = updated or _real_gradient(grad)
    if not moved_steps:
        problems.append(f"the adapter never moved beyond the tolerance {tol:.2e} (max actor vs reference "
                        f"{max(s[3] for s in sync):.2e}): nothing proven, run longer or at a larger learning rate")
    summary = (f"after every sync rollout vs actor <= {tol:.2e} ({NOISE_FACTOR:g} x the first step's "
               f"{noise:.2e}); the adapter moved beyond it at steps {moved_steps} and the rollout followed "
               f"(rollout vs the weights before the adapter up to {max(s[2] for s in sync):.2e})")
    return problems, summary


def check_adapter_sync(run: Any, rep: Any) -> None:
    """The ``adapter`` check on a :class:`seal_verl.runs.check.Run` (adds one line to ``rep``; none without LoRA)."""
    lora = lora_of(run.config)
    if lora is None:
        return
    problems, summary = adapter_sync_problems(run.metrics)
    faults = run.config.get("faults") or []
    mode = f"LoRA rank {lora['rank']}, {'merged before each sync' if lora['merge'] else 'adapter synced'}"
    note = f" [planted faults: {', '.join(faults)}]" if faults else ""
    rep.add("adapter", not problems, f"{mode}: " + ("; ".join(problems[:4]) or summary) + note)
