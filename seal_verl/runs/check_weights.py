"""``seal-verl check``'s ``weights`` check: each rollout's SEAL weight and the advantage the update used, recomputed
from the run folder alone (see ``seal_verl.runs.check``).

The weighting settings are the run's own (``config.json``'s ``seal.weighting``, parsed through
``seal_verl.core.settings``, where every default lives); nothing here restates them.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from typing import Any, Optional

from seal_verl.runs import folder as RF

W_TOL = 1e-4
ADV_TOL = 2e-3
MIN_NONZERO = 0.25


def rho_before(run: Any, k: int, parent: Optional[Any]) -> Optional[dict]:
    """rho the weights of global step ``k`` used: the metrics row's ``rho_used``, else the state before."""
    row = next((r for r in run.metrics if int(r["global_step"]) == k), None)
    if row is not None and row.get("rho_used"):
        return row["rho_used"]
    before = run.states.get(k - 1) or (parent.states.get(k - 1) if parent is not None else None)
    if before is not None:
        return before.get("rho")
    st = run.states.get(k)
    return st.get("base_rho") if st is not None and k == 1 else None


def rho_after(run: Any, s: int, parent: Optional[Any]) -> Optional[dict]:
    """rho of the state published after global step ``s`` (0: the initial state, the first step's ``rho_used``)."""
    if s <= 0:
        first = run.metrics[0] if run.metrics and int(run.metrics[0]["global_step"]) == 1 else None
        return first.get("rho_used") if first is not None else rho_before(run, 1, parent)
    st = run.states.get(s) or (parent.states.get(s) if parent is not None else None)
    return st.get("rho") if st is not None else None


def _reward(row: dict) -> Optional[float]:
    """A rollout's reward as a finite number, or None (NaN, infinite, missing, not a number)."""
    value = row.get("reward")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _grpo_advantages(rewards: list[float], eps: float = 1e-6) -> list[float]:
    """verl's GRPO outcome advantage of one group (torch.std is the unbiased std; one member -> 0)."""
    if len(rewards) < 2:
        return [0.0 for _ in rewards]
    mean = statistics.fmean(rewards)
    std = statistics.stdev(rewards)
    return [(r - mean) / (std + eps) for r in rewards]


def _flat_groups_reason(rows: list[dict]) -> str:
    """What a step without learning signal looked like: its mean reward and the cue kinds its rollouts ran under
    (a policy that fails every rollout once a cue is on reads differently from one that passes them all)."""
    kept = [r for r in rows if not r.get("excluded") and _reward(r) is not None]
    mean = sum(_reward(r) for r in kept) / max(1, len(kept))
    kinds = sorted({str(k) for r in kept for k in (r.get("interface_active") or [])})
    return f"mean reward {mean:.2f}, cue kinds on: {', '.join(kinds) or 'none'}"


def check_weights(run: Any, rep: Any, parent: Optional[Any], min_nonzero: float = 0.0) -> None:
    from seal_verl.core.profile import trajectory_profile
    from seal_verl.core.weighting import trajectory_weight

    wcfg = run.settings.weighting  # the run's own, every default from seal_verl.core.settings
    reweighting = bool(run.switches.get("reweighting"))
    apply_to = wcfg.apply_to if reweighting else "all"
    problems: list[str] = [] if run.metrics else [f"no training step in {RF.METRICS}"]
    n_rows = n_not1 = n_tok = n_nonzero = n_excluded = 0
    shares = []
    for r in run.metrics:
        k = int(r["global_step"])
        rows = run.traces.get(k)
        if not rows:
            problems.append(f"no {RF.traces_name(k)}")
            continue
        rho = rho_before(run, k, parent) if reweighting else None
        if reweighting and rho is None:
            problems.append(f"step {k}: the rho the step used is unknown")
            continue
        groups: dict[str, list[dict]] = defaultdict(list)
        step_nonzero = 0
        for row in rows:
            n_rows += 1
            if not row.get("excluded"):
                if _reward(row) is None:
                    problems.append(f"step {k} {row.get('task_id')}: reward {row.get('reward')!r:.40} is not a number")
                    continue
                groups[row["uid"]].append(row)
            w = float(row["w"])
            # a rollout generated under an earlier step's state (an asynchronous trainer's) has that step's rho
            own = row.get("state_step")
            row_rho = rho if own is None or int(own) == k - 1 or not reweighting else rho_after(run, int(own), parent)
            if reweighting and row_rho is None:
                problems.append(f"step {k} {row['task_id']}: ran under the state of step {own}, whose rho is unknown")
                continue
            if not reweighting:
                expected = 1.0
            else:
                p = trajectory_profile(row["labels"], row["abstention"])
                warm = k - 1 < wcfg.warmup_steps
                expected = 1.0 if warm else trajectory_weight(p, row_rho, wcfg.w_min, wcfg.w_max)
            if abs(w - expected) > W_TOL:
                problems.append(f"step {k} {row['task_id']}: w={w:.5f}, recomputed {expected:.5f} from labels {row['labels']}")
            n_not1 += abs(w - 1.0) > W_TOL
            row["_w_expected"] = expected
        for uid, members in groups.items():
            for m, a in zip(members, _grpo_advantages([_reward(m) for m in members])):
                m["_grpo_expected"] = a
        for row in rows:
            if not row.get("excluded") and _reward(row) is None:
                continue  # named above
            if row.get("excluded"):
                n_excluded += 1
                if row.get("advantage_range") is not None:
                    problems.append(f"step {k} {row['task_id']}: excluded (checker error) but in the update")
                continue
            a = row.get("_grpo_expected", 0.0)
            step_nonzero += abs(a) > 1e-6
            if "grpo_advantage" not in row or row["grpo_advantage"] is None:
                problems.append(f"step {k} {row['task_id']}: no grpo_advantage in the traces row")
                continue
            if abs(float(row["grpo_advantage"]) - a) > ADV_TOL * max(1.0, abs(a)):
                problems.append(f"step {k} {row['task_id']}: GRPO advantage {row['grpo_advantage']:.4f}, recomputed "
                                f"{a:.4f} from the group's rewards")
            scale = row["_w_expected"] if (apply_to == "all" or (apply_to == "positive" and a > 0)
                                           or (apply_to == "negative" and a < 0)) else 1.0
            want = scale * a
            rng = row.get("advantage_range")
            if rng is None:
                problems.append(f"step {k} {row['task_id']}: no response token with mask 1 (advantage_range missing)")
                continue
            n_tok += 1
            if any(abs(float(x) - want) > ADV_TOL * max(1.0, abs(want)) for x in rng):
                problems.append(f"step {k} {row['task_id']}: advantage on the response tokens {rng[0]:.4f}..{rng[1]:.4f}, "
                                f"expected w x A = {row['_w_expected']:.4f} x {a:.4f} = {want:.4f}")
        share = step_nonzero / max(1, len(rows))
        shares.append(share)
        n_nonzero += step_nonzero
        if share < min_nonzero:
            problems.append(f"step {k}: {step_nonzero}/{len(rows)} rollouts with a non-zero GRPO advantage "
                            f"(< {min_nonzero:.0%}: no learning signal; {_flat_groups_reason(rows)})")
    if reweighting and n_rows and n_not1 == 0:
        problems.append("reweighting is on but every w is 1")
    detail = (f"{n_rows} rollouts; " + (f"{n_not1} with w != 1, every w = clip(sum p*rho_t) of its own labels" if reweighting
                                        else "reweighting off: every w = 1")
              + f"; advantage = w x GRPO advantage on every response token of {n_tok} rollouts, {n_nonzero} with a "
                f"non-zero GRPO advantage (per step {', '.join(f'{x:.0%}' for x in shares)})"
              + (f"; {n_excluded} excluded (checker error)" if n_excluded else ""))
    rep.add("weights", not problems, "; ".join(problems[:6]) + (f" (+{len(problems) - 6} more)" if len(problems) > 6 else "") or detail)
