"""``seal-verl check``'s ``cues`` and ``effect`` checks: which rollouts carried cue text, and the cue-effect probe's
numbers recomputed from its own rollouts (see ``seal_verl.runs.check``).

The probe's numbers are recomputed through ``seal_verl.core.cue_effect.effects`` (never a second copy of the
statistic) at the confidence the run was configured with (``config.json``), not the one the checked file states.
"""

from __future__ import annotations

import math
from typing import Any

from seal_verl.core.cue_effect import short_line
from seal_verl.runs import folder as RF

#: the agent loops a training rollout and a validation rollout may run: the BFCL names and the generic ones (the
#: ledger and other environments), wrapper on and wrapper off
TRAIN_LOOPS = ("seal_bfcl", "seal_env")
EVAL_LOOPS = ("bfcl", "env")


def check_cues(run: Any, rep: Any) -> None:
    env_side = bool(run.switches.get("env_side"))
    problems: list[str] = [] if run.traces else [f"no {RF.traces_name(1)} (or any step's traces)"]
    n_train = n_cued = 0
    for k, rows in sorted(run.traces.items()):
        for row in rows:
            n_train += 1
            if row.get("agent_loop") not in TRAIN_LOOPS:
                problems.append(f"step {k} {row['task_id']}: training rollout ran the {row.get('agent_loop')!r} loop")
            cued = int(row.get("cue_tokens") or 0) > 0
            n_cued += cued
            if not env_side and (cued or row.get("hint_in_text")):
                problems.append(f"step {k} {row['task_id']}: cue text without the environment side")
            if cued and not row.get("hint_in_text"):
                problems.append(f"step {k} {row['task_id']}: {row['cue_tokens']} cue tokens but no cue marker in the tokens")
            if row.get("hint_in_text") and not cued:
                problems.append(f"step {k} {row['task_id']}: cue marker in the tokens but 0 cue tokens counted")
            if (cued or row.get("hint_in_text")) and not row.get("interface_active"):
                problems.append(f"step {k} {row['task_id']}: cue text while the interface was off")
    # the steps whose training rollouts ran with a cue kind on, each under the state it was generated under (an
    # asynchronous trainer trains rollouts of an earlier state, whose interface may still have been off); folders
    # whose rows do not name their interface fall back to the step's own
    if any("interface_active" in row for rows in run.traces.values() for row in rows):
        active_steps = sorted({int(k) for k, rows in run.traces.items() for row in rows if row.get("interface_active")})
    else:
        active_steps = [int(r["global_step"]) for r in run.metrics if r.get("active_during")]
    if env_side and active_steps and n_cued == 0:
        problems.append(f"training rollouts ran with the interface on at steps {active_steps}, but none carried a cue")
    n_val = len(run.val)
    if n_val == 0:
        problems.append(f"no validation rollouts ({RF.VALIDATION})")
    for row in run.val:
        if row.get("agent_loop") not in EVAL_LOOPS:
            problems.append(f"validation rollout {row['task_id']} ran the {row.get('agent_loop')!r} loop")
        if int(row.get("cue_tokens") or 0) or row.get("hint_in_text"):
            problems.append(f"validation rollout {row['task_id']} (global step {row['global_step']}) carries cue text")
    vsteps = sorted({int(r["global_step"]) for r in run.val})
    rep.add("cues", not problems, "; ".join(problems[:6]) or
            f"training: {n_cued}/{n_train} rollouts carried cues ({'env side on' if env_side else 'env side off'}"
            + (f"; interface on at steps {active_steps}" if env_side else "") + "); "
            f"validation: {n_val} rollouts at global steps {vsteps}, none with cue text")


def check_cue_effect(run: Any, rep: Any) -> None:
    """The cue-effect probe: a probe at every step it was due (a cue kind on and ``every`` steps since the last),
    its numbers recomputed from its own rollouts (``probe_step_{k}.jsonl``) at the run's configured confidence, its
    ``none`` rollouts free of cue text, and a kind it retired off from then on. Silent for a run without the probe
    (the environment side off, or ``every: 0``)."""
    cfg = run.settings.cue_effect
    probed = [r for r in run.metrics if isinstance(r.get("cue_effect"), dict)]
    if not (cfg.enabled and run.switches.get("env_side", True) and run.settings.interface.enabled):
        if probed:
            rep.add("effect", False, f"cue-effect rows at steps {[r['global_step'] for r in probed]} in a run "
                                     "without the probe")
        return
    if not probed and "dry_run" not in run.config and "trainer_mode=seal" not in str(run.config.get("trainer")):
        rep.add("effect", True, "no probe: it runs in the V1 trainer and the dry run, not on the legacy path")
        return
    problems: list[str] = []
    last = None
    retired: dict[str, int] = {}  # kind -> the step whose probe retired it
    for r in run.metrics:
        k = int(r["global_step"])
        probe = r.get("cue_effect")
        back_on = sorted(set(r.get("active_during") or []) & set(retired))
        if back_on:
            problems.append(f"step {k}: {', '.join(back_on)} on again after the probe retired "
                            f"{'them' if len(back_on) > 1 else 'it'} (step {retired[back_on[0]]})")
        due = bool(r.get("active_during")) and (last is None or k - last >= cfg.every)
        if due and not isinstance(probe, dict):
            problems.append(f"step {k}: a probe was due (cues {r.get('active_during')} on) but none ran")
        if not isinstance(probe, dict):
            continue
        last = k
        problems += [f"step {k}: {p}" for p in _probe_problems(run, k, r, probe, cfg.confidence)]
        for kind in probe.get("retired") or []:
            retired.setdefault(str(kind), k)
    if not probed and not problems:
        rep.add("effect", True, "no cue kind was on at any step: nothing to measure")
        return
    if problems:
        rep.add("effect", False, "; ".join(problems[:6]) + (f" (+{len(problems) - 6} more)" if len(problems) > 6 else ""))
        return
    detail = (f"{len(probed)} probe(s) at steps {[r['global_step'] for r in probed]}, numbers recomputed from their "
              f"rollouts at the run's confidence {cfg.confidence:g}; last: {short_line(probed[-1]['cue_effect']['effects'])}")
    if retired:
        detail += "; retired as expected: " + ", ".join(f"{kind} at step {k}" for kind, k in retired.items())
    rep.add("effect", True, detail)


def _same(recorded: Any, value: float) -> bool:
    """A recorded number equal to a recomputed one: both finite numbers (a NaN never matches, a null neither)."""
    if isinstance(recorded, bool) or not isinstance(recorded, (int, float)):
        return False
    return math.isfinite(recorded) and math.isfinite(value) and abs(recorded - value) <= 1e-9


def _probe_problems(run: Any, k: int, row: dict, probe: dict, confidence: float) -> list[str]:
    """What does not hold in the probe of step ``k``: its kinds, conditions and cue text, and each recorded number
    against :func:`seal_verl.core.cue_effect.effects` of its rollouts at ``confidence`` (the run's)."""
    from seal_verl.core import cue_effect as ce
    out = []
    rows = run.probes.get(k)
    if not rows:
        return [f"no {RF.probe_name(k)}"]
    active = probe.get("active") or []
    retired = probe.get("retired") or []
    ran = sorted(set(active) - set(retired))  # a kind the probe retired is off for the step's own rollouts
    if ran != sorted(row.get("active_during") or []):
        out.append(f"probed kinds {active}" + (f" (retired {retired})" if retired else "")
                   + f" but the step ran with {row.get('active_during')}")
    if len(rows) != probe.get("n_rollouts"):
        out.append(f"{len(rows)} probe rollouts on file, the summary counts {probe.get('n_rollouts')}")
    if probe.get("confidence") is not None and not _same(probe.get("confidence"), confidence):
        out.append(f"the summary states confidence {probe.get('confidence')}, the run was configured with {confidence}")
    conds = ce.conditions(active)
    for p in rows:
        if p.get("condition") not in conds:
            out.append(f"a probe rollout of an unknown condition {p.get('condition')!r}")
            return out
        if sorted(p.get("kinds") or []) != sorted(conds[p["condition"]]):
            out.append(f"a {p['condition']} rollout ran with kinds {p.get('kinds')}")
        if not conds[p["condition"]] and int(p.get("cue_tokens") or 0):
            out.append(f"a rollout without cues ({p['condition']}, {p.get('task_id')}) carried "
                       f"{p.get('cue_tokens')} cue tokens")
    records = [ce.ProbeRecord(p["condition"], str(p.get("task_id")), bool(p.get("passed")), p.get("reward"))
               for p in rows]
    again = ce.effects(records, active, confidence)
    metrics = row.get("metrics") or {}
    for key, e in (probe.get("effects") or {}).items():
        mine = again.get(key)
        if mine is None:
            out.append(f"effect of {key!r} in the summary, not in the probe's conditions")
            continue
        if not isinstance(e, dict):
            out.append(f"effect of {key!r} is not a record of numbers")
            continue
        fields = mine.to_dict()
        if "n_pairs" not in e:  # a folder written before the paired interval holds the unpaired one of that time
            fields = {f: v for f, v in fields.items() if f in ("with", "without", "diff", "n_with", "n_without")}
        for field, value in fields.items():
            if not _same(e.get(field), value):
                out.append(f"{key} {field} {e.get(field)} on file, {value:.4f} from the probe's rollouts")
        for suffix, value in (("", mine.diff),) + ((("/lo", mine.lo), ("/hi", mine.hi)) if "n_pairs" in e else ()):
            name = f"seal/cue_effect/{key}{suffix}"
            if (suffix == "" or name in metrics) and not _same(metrics.get(name), value):
                out.append(f"metric {name} is {metrics.get(name)}, the rollouts give {value:.4f}")
    missing = set(again) - set(probe.get("effects") or {})
    if missing:
        out.append(f"no effect recorded for {sorted(missing)}")
    return out
