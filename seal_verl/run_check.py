"""``seal-verl check``: checks of a real training run from its run folder alone (what
``recipes/bfcl_v3/cpu/run_cpu.sh`` or any ``seal.run_dir`` run leaves); one line per check, exit 0 only if every
check passes.

    seal-verl check RUN_DIR [--steps N] [--resumed-from PARENT_RUN_DIR] [--require-moving-weights]
                            [--min-nonzero X] [--json OUT.json]

The folder is read through ``seal_verl.run_folder``; a damaged row or file is skipped there and fails the
``files`` check here. What is checked (the variant's switches come from the run's config.json):

- ``exit``: the run script recorded exit code 0 (timing.json);
- ``steps``: metrics.jsonl has one row per training step, consecutive global steps (``--steps``: the last one),
  each with SEAL's metrics (``seal/step``, ``seal/weight/mean``, ``seal/prevalence/*``, ``seal/rho/*``, ...), and
  the console log (main_ppo.log) printed ``seal/`` metrics on each step's line;
- ``state``: ``state_step_{k}.json`` exists for every global step k, its ``step`` is k, its history (the most recent
  rows, ``history_start`` counting those left out) ends with row k - 1, and that row is the step's logged C_t;
- ``weights``: recomputed from the run folder alone (rewards, group ids, labels, the rho the step used): each
  rollout's w equals clip(sum_z p(z) rho(z)) of its own labels (w != 1 wherever that differs from 1; every w is 1
  without reweighting); the GRPO advantage before weighting equals verl's group normalisation of the rewards
  (``(r - mean) / (std + 1e-6)`` over the group, rollouts whose verification raised left out); and the
  advantage the update used equals w x that value on every response token (min and max over the tokens).
  This fails if the weighting was skipped, if weights were applied to the wrong rollouts, or if they were
  applied before the group normalisation. With ``--min-nonzero`` (default 0.25) at least that share of each
  step's rollouts must have a non-zero GRPO advantage (a run with learning signal; 0 for a random model);
- ``cues``: training rollouts (``seal_bfcl`` loop) carry cue text (the ``[hint]`` marker decoded from their tokens)
  and cue tokens exactly when the interface was active and inserted cues, some do at the steps the interface was
  on, and none does without the environment side; validation rollouts (``bfcl`` loop, at least one validation)
  never carry a cue;
- ``sync``: verl's rollout-vs-actor log-prob metrics after each weight sync (``calculate_log_probs=true``):
  ``training/rollout_probs_diff_valid`` 1, ``training/rollout_probs_diff_mean`` <= 1e-2 (vLLM's bf16 kernels vs the
  actor's bf16 autocast over fp32 weights), ``training/rollout_actor_probs_pearson_corr`` >= 0.9; with
  ``--require-moving-weights`` (a run whose weights move) also a finite ``actor/grad_norm`` at every step, > 0 at
  every step that has something to move (learning signal, i.e. a non-zero GRPO advantage, or a KL term to the
  reference; a step whose groups all scored alike while the actor is still the reference computes a zero gradient,
  and that is reported, not failed); from global step 2 on, once an earlier update computed a real gradient,
  ``actor/kl_loss`` > 0 and ``seal/sync/actor_vs_ref`` > 0 (at step 1 verl's KL follows at most one optimizer step
  on bf16 scores and can be exactly 0 after a real update); and, from the second step on, wherever the
  actor has moved away from its initial weights beyond the numeric noise (``seal/sync/actor_vs_ref`` > 2 x
  ``seal/sync/rollout_vs_actor``), the rollout's token probabilities closer to the actor's than to the initial
  weights' (what a rollout engine that never received the new weights would show): the sync is real;
- ``resume`` (with ``--resumed-from``): the run restarted at the parent's last checkpoint, its first step ran
  under the parent's final interface (Omega) and rho, and the closed-loop history continues the parent's.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
from collections import defaultdict
from typing import Optional

from seal_verl import run_folder as RF
from seal_verl.cue_effect import short_line

SEAL_KEYS = ("seal/step", "seal/weight/mean", "seal/success_rate", "seal/n_trajectories")
SEAL_PREFIXES = ("seal/prevalence/", "seal/rho/", "seal/cue_active/")
SYNC_DIFF_MAX = 1e-2      # vLLM's bf16 kernels vs FSDP's bf16 autocast: a trained (peaked) model differs ~2e-3
SYNC_PEARSON_MIN = 0.9     # Pearson of near-uniform probabilities (a random model) is noisy; the KL test below is not
W_TOL = 1e-4
ADV_TOL = 2e-3
MIN_NONZERO = 0.25
#: the agent loops a training rollout and a validation rollout may run: the BFCL names and the generic ones (the
#: ledger and other environments), wrapper on and wrapper off
TRAIN_LOOPS = ("seal_bfcl", "seal_env")
EVAL_LOOPS = ("bfcl", "env")


class Run:
    """The files of one run folder, under the names the checks use."""

    def __init__(self, path: str):
        data = RF.load(path)
        self.path = data.path
        self.config = data.config
        self.timing = data.timing
        self.metrics = data.steps
        self.val = data.validation
        self.traces = data.traces
        self.states = data.states
        self.probes = data.probes
        self.damage = data.damage
        self.log = RF.read_log(self.path)

    @property
    def switches(self) -> dict:
        return (self.config.get("seal") or {}).get("switches") or {}

    @property
    def weighting(self) -> dict:
        return (self.config.get("seal") or {}).get("weighting") or {}

    @property
    def steps(self) -> list[int]:
        return [int(r["step"]) for r in self.metrics]


class Report:
    def __init__(self):
        self.items: list[tuple[str, bool, str]] = []

    def add(self, name: str, ok: bool, detail: str) -> bool:
        self.items.append((name, bool(ok), detail))
        return bool(ok)

    @property
    def ok(self) -> bool:
        return all(ok for _, ok, _ in self.items)

    def text(self) -> str:
        return "\n".join(f"[{'PASS' if ok else 'FAIL'}] {name:<8} {detail}" for name, ok, detail in self.items)


# ------------------------------------------------------------------------------------------------ checks


def check_exit(run: Run, rep: Report) -> None:
    if run.timing is None:
        rep.add("exit", False, f"no {RF.TIMING} (the run script writes it with the exit code)")
        return
    rc = run.timing.get("exit_code")
    rep.add("exit", rc == 0, f"main_ppo exit code {rc}; main_ppo {run.timing.get('main_ppo_s')} s")


def check_steps(run: Run, rep: Report, last_step: Optional[int]) -> None:
    if not run.metrics:
        rep.add("steps", False, f"{RF.METRICS} is missing or empty")
        return
    gs = [int(r["global_step"]) for r in run.metrics]
    problems = []
    if gs != list(range(gs[0], gs[0] + len(gs))):
        problems.append(f"global steps not consecutive: {gs}")
    if last_step is not None and gs[-1] != last_step:
        problems.append(f"last global step {gs[-1]}, expected {last_step}")
    for r in run.metrics:
        m = r.get("metrics") or {}
        missing = [k for k in SEAL_KEYS if k not in m] + [p + "*" for p in SEAL_PREFIXES if not any(k.startswith(p) for k in m)]
        if missing:
            problems.append(f"step {r['global_step']}: no {', '.join(missing)}")
        if int(r["step"]) != int(r["global_step"]):
            problems.append(f"row step {r['step']} != global_step {r['global_step']}")
    if run.log is not None:
        for g in gs:
            line = next((ln for ln in run.log.splitlines() if re.search(rf"\bstep:{g} - ", ln)), None)
            if line is None or "seal/weight/mean" not in line or "seal/prevalence/" not in line:
                problems.append(f"console log has no seal/ metrics on the line of step {g}")
    else:
        problems.append(f"no {RF.LOG}")
    rep.add("steps", not problems, "; ".join(problems) or
            f"{len(gs)} steps (global {gs[0]}..{gs[-1]}), every one with seal/ metrics in {RF.METRICS} and the console log")


def check_state(run: Run, rep: Report) -> None:
    problems = [] if run.metrics else [f"no training step in {RF.METRICS}"]
    for r in run.metrics:
        k = int(r["global_step"])
        st = run.states.get(k)
        if st is None:
            problems.append(f"no {RF.state_name(k)}")
            continue
        if int(st["step"]) != k:
            problems.append(f"{RF.state_name(k)} has step {st['step']}, expected {k}")
        rows = _history(st)
        if len(rows) + int(st.get("history_start") or 0) != k or not rows:
            problems.append(f"{RF.state_name(k)} history has {len(rows)} rows from step "
                            f"{st.get('history_start') or 0}, expected rows up to step {k - 1}")
        elif st["history"][-1].get("prevalence") != r.get("prevalence"):
            problems.append(f"{RF.state_name(k)} last history row is not step {k}'s logged C_t")
        prev = run.states.get(k - 1)
        if prev is not None and prev == st:
            problems.append(f"{RF.state_name(k)} equals {RF.state_name(k - 1)}")
    ks = sorted(run.states) or [None]
    rep.add("state", not problems, "; ".join(problems) or
            (f"{RF.state_name(ks[0])}..{RF.state_name(ks[-1])}" if ks[0] is not None else "no state file")
            + ": step = global step, history up to the step")


def _history(state: dict) -> list:
    rows = state.get("history")
    return rows if isinstance(rows, list) else []


def _continues(state: dict, parent: dict) -> bool:
    """Whether ``state``'s history rows agree with ``parent``'s on every step both keep (a state keeps its most
    recent rows only), and ``state`` keeps at least one of them unless the parent kept none."""
    def by_step(st: dict) -> dict:
        start = int(st.get("history_start") or 0)
        return {start + i: row for i, row in enumerate(_history(st))}

    mine, theirs = by_step(state), by_step(parent)
    shared = set(mine) & set(theirs)
    return (bool(shared) or not theirs) and all(mine[k] == theirs[k] for k in shared)


def _rho_before(run: Run, k: int, parent: Optional[Run]) -> Optional[dict]:
    """rho the weights of global step ``k`` used: the metrics row's ``rho_used``, else the state before."""
    row = next((r for r in run.metrics if int(r["global_step"]) == k), None)
    if row is not None and row.get("rho_used"):
        return row["rho_used"]
    before = run.states.get(k - 1) or (parent.states.get(k - 1) if parent is not None else None)
    if before is not None:
        return before.get("rho")
    st = run.states.get(k)
    return st.get("base_rho") if st is not None and k == 1 else None


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
    kept = [r for r in rows if not r.get("excluded")]
    mean = sum(float(r["reward"]) for r in kept) / max(1, len(kept))
    kinds = sorted({str(k) for r in kept for k in (r.get("interface_active") or [])})
    return f"mean reward {mean:.2f}, cue kinds on: {', '.join(kinds) or 'none'}"


def check_weights(run: Run, rep: Report, parent: Optional[Run], min_nonzero: float = 0.0) -> None:
    from seal_verl.profile import trajectory_profile
    from seal_verl.weighting import trajectory_weight

    wcfg = run.weighting
    reweighting = bool(run.switches.get("reweighting"))
    apply_to = wcfg.get("apply_to", "all") if reweighting else "all"
    problems: list[str] = [] if run.metrics else [f"no training step in {RF.METRICS}"]
    n_rows = n_not1 = n_tok = n_nonzero = n_excluded = 0
    shares = []
    for r in run.metrics:
        k = int(r["global_step"])
        rows = run.traces.get(k)
        if not rows:
            problems.append(f"no {RF.traces_name(k)}")
            continue
        rho = _rho_before(run, k, parent) if reweighting else None
        if reweighting and rho is None:
            problems.append(f"step {k}: the rho the step used is unknown")
            continue
        groups: dict[str, list[dict]] = defaultdict(list)
        step_nonzero = 0
        for row in rows:
            n_rows += 1
            if not row.get("excluded"):
                groups[row["uid"]].append(row)
            w = float(row["w"])
            if not reweighting:
                expected = 1.0
            else:
                p = trajectory_profile(row["labels"], row["abstention"])
                warm = k - 1 < int(wcfg.get("warmup_steps", 0) or 0)
                expected = 1.0 if warm else trajectory_weight(p, rho, float(wcfg.get("w_min", 0.5)),
                                                               float(wcfg.get("w_max", 2.0)))
            if abs(w - expected) > W_TOL:
                problems.append(f"step {k} {row['task_id']}: w={w:.5f}, recomputed {expected:.5f} from labels {row['labels']}")
            n_not1 += abs(w - 1.0) > W_TOL
            row["_w_expected"] = expected
        for uid, members in groups.items():
            for m, a in zip(members, _grpo_advantages([float(m["reward"]) for m in members])):
                m["_grpo_expected"] = a
        for row in rows:
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


def check_cues(run: Run, rep: Report) -> None:
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
    active_steps = [int(r["global_step"]) for r in run.metrics if r.get("active_during")]
    if env_side and active_steps and n_cued == 0:
        problems.append(f"the interface was on at steps {active_steps}, but no training rollout carried a cue")
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


def check_cue_effect(run: Run, rep: Report) -> None:
    """The cue-effect probe: a probe at every step it was due (a cue kind on and ``every`` steps since the last),
    its numbers recomputed from its own rollouts (``probe_step_{k}.jsonl``), its ``none`` rollouts free of cue text.
    Silent for a run without the probe (the environment side off, or ``every: 0``)."""
    seal = run.config.get("seal") or {}
    every = int((seal.get("cue_effect") or {}).get("every") or 0)
    probed = [r for r in run.metrics if isinstance(r.get("cue_effect"), dict)]
    if not (every > 0 and run.switches.get("env_side", True) and (seal.get("interface") or {}).get("enabled", True)):
        if probed:
            rep.add("effect", False, f"cue-effect rows at steps {[r['global_step'] for r in probed]} in a run "
                                     "without the probe")
        return
    if not probed and "dry_run" not in run.config and "trainer_mode=seal" not in str(run.config.get("trainer")):
        rep.add("effect", True, "no probe: it runs in the V1 trainer and the dry run, not on the legacy path")
        return
    problems: list[str] = []
    last = None
    for r in run.metrics:
        k = int(r["global_step"])
        probe = r.get("cue_effect")
        due = bool(r.get("active_during")) and (last is None or k - last >= every)
        if due and not isinstance(probe, dict):
            problems.append(f"step {k}: a probe was due (cues {r.get('active_during')} on) but none ran")
        if not isinstance(probe, dict):
            continue
        last = k
        problems += [f"step {k}: {p}" for p in _probe_problems(run, k, r, probe)]
    if not probed and not problems:
        rep.add("effect", True, "no cue kind was on at any step: nothing to measure")
        return
    last_row = probed[-1]["cue_effect"] if probed else None
    detail = (f"{len(probed)} probe(s) at steps {[r['global_step'] for r in probed]}, numbers recomputed from their "
              f"rollouts; last: {short_line(last_row['effects'])}" if last_row else "")
    rep.add("effect", not problems, "; ".join(problems[:6]) or detail)


def _probe_problems(run: Run, k: int, row: dict, probe: dict) -> list[str]:
    from seal_verl import cue_effect as ce

    out = []
    rows = run.probes.get(k)
    if not rows:
        return [f"no {RF.probe_name(k)}"]
    active = probe.get("active") or []
    if sorted(active) != sorted(row.get("active_during") or []):
        out.append(f"probed kinds {active} but the step ran with {row.get('active_during')}")
    if len(rows) != probe.get("n_rollouts"):
        out.append(f"{len(rows)} probe rollouts on file, the summary counts {probe.get('n_rollouts')}")
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
    again = ce.effects(records, active, float(probe.get("confidence") or 0.95))
    for key, e in (probe.get("effects") or {}).items():
        mine = again.get(key)
        if mine is None:
            out.append(f"effect of {key!r} in the summary, not in the probe's conditions")
            continue
        fields = [("with", mine.with_), ("without", mine.without)]
        if "n_pairs" in e:  # a folder written before the paired interval holds the interval of that time
            fields += [("lo", mine.lo), ("hi", mine.hi), ("unpaired_lo", mine.unpaired_lo),
                       ("unpaired_hi", mine.unpaired_hi), ("n_pairs", mine.n_pairs)]
        for field, value in fields:
            if abs(float(e.get(field, float("nan"))) - value) > 1e-9:
                out.append(f"{key} {field} {e.get(field)} on file, {value:.4f} from the probe's rollouts")
        logged = (row.get("metrics") or {}).get(f"seal/cue_effect/{key}")
        if logged is None or abs(float(logged) - mine.diff) > 1e-9:
            out.append(f"metric seal/cue_effect/{key} is {logged}, the rollouts give {mine.diff:.4f}")
    missing = set(again) - set(probe.get("effects") or {})
    if missing:
        out.append(f"no effect recorded for {sorted(missing)}")
    return out


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


def check_sync(run: Run, rep: Report, require_moving: bool, parent: Optional[Run] = None) -> None:
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


def check_resume(run: Run, rep: Report, parent: Run) -> None:
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
                if sorted(row.get("interface_active") or []) != active:
                    problems.append(f"rollout {row['task_id']} saw interface {row.get('interface_active')}, expected {active}")
                    break
        st = run.states.get(int(first["global_step"]))
        if st is not None and not _continues(st, final):
            problems.append("the resumed run's closed-loop history does not continue the parent's")
        rho_first = _rho_before(run, int(first["global_step"]), parent)
        if rho_first is None or any(abs(float(rho_first.get(z, math.inf)) - float(v)) > W_TOL
                                    for z, v in final["rho"].items()):
            problems.append(f"rho of the first resumed step {rho_first} is not the parent's final rho {final['rho']}")
        active_txt = ",".join(active) or "none"
    else:
        active_txt = "?"
    rep.add("resume", not problems, "; ".join(problems) or
            f"resumed at global step {n + 1} from {os.path.relpath(os.path.dirname(ckpt), os.path.dirname(parent.path))}: first step "
            f"ran under the saved interface ({active_txt}) and rho, history continues (+{len(run.metrics)} steps)")


def check_files(run: Run, rep: Report) -> None:
    """Only where something was skipped: a damaged row or file leaves the other checks blind to it."""
    if run.damage:
        rep.add("files", False, "; ".join(f"skipped {d}" for d in run.damage[:6])
                + (f" (+{len(run.damage) - 6} more)" if len(run.damage) > 6 else ""))


def check_run(path: str, steps: Optional[int] = None, resumed_from: Optional[str] = None,
              require_moving_weights: bool = False, min_nonzero: float = 0.0) -> Report:
    run = Run(path)
    parent = Run(resumed_from) if resumed_from else None
    rep = Report()
    check_files(run, rep)
    checks = [("exit", check_exit, ()), ("steps", check_steps, (steps,)), ("state", check_state, ()),
              ("weights", check_weights, (parent, min_nonzero)), ("cues", check_cues, ()),
              ("effect", check_cue_effect, ()),
              ("sync", check_sync, (require_moving_weights, parent))]
    if parent is not None:
        checks.append(("resume", check_resume, (parent,)))
    for name, check, args in checks:
        try:
            check(run, rep, *args)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            # a row that is JSON but not the shape the writer gives it (hand-edited, another tool's file)
            rep.add(name, False, f"a row is not what the run folder's writer writes: {type(exc).__name__}: {exc}")
    return rep


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``seal-verl check``."""
    p.add_argument("run_dir", help="the run folder (seal.run_dir)")
    p.add_argument("--steps", type=int, default=None, help="the last global step the run must have reached")
    p.add_argument("--resumed-from", default=None, help="run dir of the run this one resumed from")
    p.add_argument("--require-moving-weights", action="store_true",
                   help="also require non-zero gradients and a growing KL to the reference (a run with learning signal)")
    p.add_argument("--min-nonzero", type=float, default=MIN_NONZERO,
                   help="least share of each step's rollouts with a non-zero GRPO advantage (default: %(default)s; "
                        "0 for a run of the random model, which never passes a task)")
    p.add_argument("--json", default=None, help="also write the results here")


def run(args: argparse.Namespace) -> int:
    """``seal-verl check``: prints the checks; 0 if all pass, 1 if one fails.

    Raises:
        ValueError: ``--min-nonzero`` outside [0, 1] (the CLI turns it into a usage error).
    """
    if not (0.0 <= args.min_nonzero <= 1.0):
        raise ValueError(f"--min-nonzero must be in [0, 1], got {args.min_nonzero}")
    rep = check_run(args.run_dir, args.steps, args.resumed_from, args.require_moving_weights, args.min_nonzero)
    folder = Run(args.run_dir)
    print(f"run {folder.path} (variant {folder.config.get('variant')}, switches {folder.switches})")
    print(rep.text())
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"run_dir": folder.path, "ok": rep.ok,
                       "checks": [{"name": n, "ok": ok, "detail": d} for n, ok, d in rep.items]}, f, indent=1)
    return 0 if rep.ok else 1
