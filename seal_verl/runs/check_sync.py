"""``seal-verl check``'s ``sync`` and ``resume`` checks: the rollout engine follows the actor's weights, the update
moves them where it has something to move, and a resumed run continues its parent (see ``seal_verl.runs.check``).
"""

from __future__ import annotations

import math
import os
from typing import Any, Optional

from seal_verl.runs import folder as RF
from seal_verl.runs.check_weights import W_TOL, rho_before

SYNC_DIFF_MAX = 1e-2      # vLLM's bf16 kernels vs FSDP's bf16 autocast: a trained (peaked) model differs ~2e-3
SYNC_PEARSON_MIN = 0.9     # Pearson of near-uniform probabilities (a random model) is noisy; the KL test below is not


def history(state: dict) -> list:
    """The closed-loop history rows a state file keeps (none when the field is damaged)."""
    rows = state.get("history")
    return rows if isinstance(rows, list) else []


def _continues(state: dict, parent: dict) -> bool:
    """Whether ``state``'s history rows agree with ``parent``'s on every step both keep (a state keeps its most
    recent rows only), and ``state`` keeps at least one of them unless the parent kept none."""
    def by_step(st: dict) -> dict:
        start = int(st.get("history_start") or 0)
        return {start + i: row for i, row in enumerate(history(st))}

    mine, theirs = by_step(state), by_step(parent)
    shared = set(mine) & set(theirs)
    return (bool(shared) or not theirs) and all(mine[k] == theirs[k] for k in shared)


def _real_gradient(grad_norm) -> bool:
    """A gradient the optimizer applied: verl skips the step on a non-finite norm, and 0 moves nothing."""
    return grad_norm is not None and math.isfinite(grad_norm) and grad_norm > 0


def _step_signal(run, step: int) -> Optional[bool]:
    """Whether a step had learning signal: some rollout kept in the update with a non-zero GRPO advantage. None
    when the run folder has no traces of that step (then the step is treated as having signal)."""
    rows = (getattr(run, "traces", None) or {}).get(step)
    if not rows:
        return None
    return any(abs(float(r.get("grpo_advantage") or 0.0)) > 1e-6 for r in rows if not r.get("excluded"))


def check_sync(run: Any, rep: Any, require_moving: bool, parent: Optional[Any] = None) -> None:
    """See the module docstring (``sync``). With ``require_moving``, what must move is decided per step from the run
    itself, never from what the model happened to sample: a step's update must compute a real gradient when the
    step has learning signal (a non-zero GRPO advantage) or a KL term to the reference (``actor/kl_loss`` > 0);
    and from global step 2 on, once an earlier update (of this run or of the run it resumed) computed a real
    gradient, the actor must start the step away from the reference. A step whose groups all scored alike
    and whose actor is still the reference has nothing to move: its gradient may be 0."""
    problems = [] if run.metrics else [f"no training step in {RF.METRICS}"]
    worst_diff, worst_pearson, rows = 0.0, 1.0, []
    moved = 0
    flat_steps: list[int] = []
    # an earlier update moved the weights (the parent's steps count for a resumed run)
    moved_before = any(_real_gradient((r.get("metrics") or {}).get("actor/grad_norm"))
                       for r in (parent.metrics if parent is not None else []))
    for i, r in enumerate(run.metrics):
        m = r.get("metrics") or {}
        g = r["global_step"]
        valid = m.get("training/rollout_probs_diff_valid")
        diff = m.get("training/rollout_probs_diff_mean")
        pearson = m.get("training/rollout_actor_probs_pearson_corr")
        gn, kl, rkl = m.get("actor/grad_norm"), m.get("actor/kl_loss"), m.get("rollout_corr/k3_kl")
        if valid != 1 or diff is None or pearson is None:
            problems.append(f"step {g}: no rollout log-prob comparison (set actor_rollout_ref.rollout.calculate_log_probs=true)")
            moved_before = moved_before or _real_gradient(gn)
            continue
        worst_diff, worst_pearson = max(worst_diff, diff), min(worst_pearson, pearson)
        if diff > SYNC_DIFF_MAX:
            problems.append(f"step {g}: rollout_probs_diff_mean {diff:.2e} > {SYNC_DIFF_MAX}")
        if pearson < SYNC_PEARSON_MIN:
            problems.append(f"step {g}: rollout_actor_probs_pearson_corr {pearson:.4f} < {SYNC_PEARSON_MIN}")
        rows.append((g, gn, kl, rkl))
        ra, rr, ar = (m.get(f"seal/sync/{x}") for x in ("rollout_vs_actor", "rollout_vs_ref", "actor_vs_ref"))
        if require_moving:
            signal = _step_signal(run, int(g))
            # a resumed run without its parent: whether earlier updates moved the weights is unknown; assume so
            earlier = moved_before or (parent is None and i == 0 and int(g) > 1)
            has_kl = kl is not None and math.isfinite(kl) and kl > 0
            if gn is not None and not math.isfinite(gn):
                problems.append(f"step {g}: actor/grad_norm {gn}: verl skipped the optimizer step")
            elif (signal is not False or has_kl) and not _real_gradient(gn):
                problems.append(f"step {g}: actor/grad_norm {gn}: the update did not move the weights"
                                + (" although the step had learning signal" if signal else ""))
            if signal is False and not has_kl:
                flat_steps.append(int(g))
            # At global step 1 the actor equals the reference until the first mini-batch's update, so verl's
            # kl_loss there is the KL after at most one optimizer step, on tokens scored in bf16: a real update
            # can leave it exactly 0. From step 2 on the actor starts the step away from the reference, if an
            # earlier update moved it.
            if g > 1 and earlier and (not kl or kl <= 0):
                problems.append(f"step {g}: actor/kl_loss {kl}: the actor did not move away from the reference")
            if g > 1 and earlier and ar is not None and ar <= 0:
                problems.append(f"step {g}: seal/sync/actor_vs_ref {ar}: the actor starts the step at the "
                                "reference's weights, so earlier updates were lost")
            if i > 0 and None not in (ra, rr, ar) and ar > 2 * ra:
                # the actor has moved beyond the bf16 kernel noise: the rollout must follow it, not the initial weights
                moved += 1
                if not ra < rr:
                    problems.append(f"step {g}: rollout probabilities are closer to the initial weights ({rr:.2e}) than "
                                    f"to the actor's ({ra:.2e}): the rollout may not have the new weights")
        moved_before = moved_before or _real_gradient(gn)
    fmt = ", ".join(f"g{g}: grad {gn:.2g}, KL(actor||ref) {kl:.2g}, KL(rollout,actor) {rkl:.2g}"
                    for g, gn, kl, rkl in rows if None not in (gn, kl, rkl))
    vacuous = not any(_real_gradient(gn) for _, gn, _, _ in rows)
    sync_note = (f"; at {moved} step(s) the actor had moved beyond the numeric noise and the rollout followed it, not "
                 "the initial weights" if moved else "")
    flat_note = (f"; step(s) {', '.join(map(str, flat_steps))} had no learning signal (every group scored alike, the "
                 "actor at the reference): nothing to move" if flat_steps else "")
    rep.add("sync", not problems, "; ".join(problems) or
            f"after every weight sync: max mean |p_rollout - p_actor| {worst_diff:.2e}, min Pearson {worst_pearson:.4f} "
            f"({fmt})" + sync_note + flat_note + (" [the weights never moved (all advantages 0): agreement expected, "
                                                  "not a proof of the sync]" if vacuous else ""))


def check_resume(run: Any, rep: Any, parent: Any) -> None:
    problems = []
    if not parent.metrics:
        rep.add("resume", False, f"parent run {parent.path} has no {RF.METRICS}")
        return
    n = int(parent.metrics[-1]["global_step"])
    if run.config.get("resumed_from_step") != n:
        problems.append(f"{RF.CONFIG} resumed_from_step {run.config.get('resumed_from_step')}, parent ended at {n}")
    if not run.metrics or int(run.metrics[0]["global_step"]) != n + 1:
        problems.append(f"first step {run.metrics[0]['global_step'] if run.metrics else None}, expected {n + 1}")
    final = parent.states.get(n)
    ckpt = RF.checkpoint_state(parent.path, n)
    if final is None:
        problems.append(f"parent has no {RF.state_name(n)}")
    else:
        saved, damage = RF.read_object(ckpt)
        if damage is not None:
            problems.append(str(damage))
        elif saved is None:
            problems.append(f"no {ckpt}")
        elif saved.get("state") != final:
            problems.append(f"{ckpt} differs from the parent's {RF.state_name(n)}")
    if final is not None and run.metrics:
        active = sorted(k for k, on in final["interface"]["active"].items() if on)
        first = run.metrics[0]
        if first.get("active_during") != active:
            problems.append(f"first resumed step ran under {first.get('active_during')}, parent's final interface {active}")
        if run.switches.get("env_side"):
            for row in run.traces.get(int(first["global_step"]), []):
                own = row.get("state_step")  # an async trainer's rollout restored from the checkpoint: its own state
                st = final if own is None or int(own) == n else parent.states.get(int(own))
                want = None if st is None else sorted(k for k, on in st["interface"]["active"].items() if on)
                if want is not None and sorted(row.get("interface_active") or []) != want:
                    problems.append(f"rollout {row['task_id']} saw interface {row.get('interface_active')}, expected {want}")
                    break
        st = run.states.get(int(first["global_step"]))
        if st is not None and not _continues(st, final):
            problems.append("the resumed run's closed-loop history does not continue the parent's")
        rho_first = rho_before(run, int(first["global_step"]), parent)
        if rho_first is None or any(abs(float(rho_first.get(z, math.inf)) - float(v)) > W_TOL
                                    for z, v in final["rho"].items()):
            problems.append(f"rho of the first resumed step {rho_first} is not the parent's final rho {final['rho']}")
        active_txt = ",".join(active) or "none"
    else:
        active_txt = "?"
    rep.add("resume", not problems, "; ".join(problems) or
            f"resumed at global step {n + 1} from {os.path.relpath(os.path.dirname(ckpt), os.path.dirname(parent.path))}: first step "
            f"ran under the saved interface ({active_txt}) and rho, history continues (+{len(run.metrics)} steps)")
