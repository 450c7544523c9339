"""``seal-verl check``: checks of a real training run from its run folder alone (what
``recipes/bfcl_v3/cpu/run_cpu.sh`` or any ``seal.run_dir`` run leaves); one line per check, exit 0 only if every
check passes.

    seal-verl check RUN_DIR [--steps N] [--resumed-from PARENT_RUN_DIR] [--require-moving-weights]
                            [--min-nonzero X] [--json OUT.json]

The folder is read through ``seal_verl.runs.folder``; a damaged row or file is skipped there and fails the
``files`` check here, and so does a step file of a step the run never logged. The run's settings are its
``config.json``'s ``seal`` section, parsed through ``seal_verl.core.settings`` (a section it leaves out takes the
defaults that module holds); a ``config.json`` that cannot be read or parsed fails the ``config`` check, and the
checks that need the settings are not run on guesses. What is checked:

- ``config``: the run's settings can be read; a setting beyond the paper under ``preset=paper`` is named (a note,
  not a failure);
- ``faults``: no fault-injection variable was set during the run (``seal_verl.env_vars``): a run made under an
  injected fault never passes;
- ``exit``: the run script recorded exit code 0 (timing.json, a whole number);
- ``steps``: metrics.jsonl has one row per training step, consecutive global steps (``--steps``: the last one; steps
  that go back say that two runs wrote into the folder),
  each with SEAL's metrics (``seal/step``, ``seal/weight/mean``, ``seal/prevalence/*``, ``seal/rho/*``, ...), and
  the console log (main_ppo.log) printed ``seal/`` metrics on each step's line;
- ``state``: ``state_step_{k}.json`` exists for every global step k, its ``step`` is k, its history (the most recent
  rows, ``history_start`` counting those left out) ends with row k - 1, and that row is the step's logged C_t;
- ``weights`` (``check_weights``): recomputed from the run folder alone (rewards, group ids, labels, the rho the step used): each
  rollout's w equals clip(sum_z p(z) rho(z)) of its own labels (w != 1 wherever that differs from 1; every w is 1
  without reweighting); the GRPO advantage before weighting equals verl's group normalisation of the rewards
  (``(r - mean) / (std + 1e-6)`` over the group, rollouts whose verification raised left out); and the
  advantage the update used equals w x that value on every response token (min and max over the tokens).
  This fails if the weighting was skipped, if weights were applied to the wrong rollouts, or if they were
  applied before the group normalisation. With ``--min-nonzero`` (default 0.25) at least that share of each
  step's rollouts must have a non-zero GRPO advantage (a run with learning signal; 0 for a random model);
- ``cues`` and ``effect`` (``check_cues``): training rollouts (``seal_bfcl`` loop) carry cue text (the ``[hint]`` marker decoded from their tokens)
  and cue tokens exactly when the interface was active and inserted cues, some do at the steps the interface was
  on, and none does without the environment side; validation rollouts (``bfcl`` loop, at least one validation)
  never carry a cue; every probe's numbers (differences, counts, intervals) recomputed from its rollouts at the
  run's configured confidence, none NaN; a kind the probe retired (``seal.cue_effect.retire``) is expected off
  from that step on;
- ``sync`` and ``resume`` (``check_sync``): verl's rollout-vs-actor log-prob metrics after each weight sync (``calculate_log_probs=true``):
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
- ``adapter`` (a run that trains a LoRA adapter): the adapter reached the rollout after every sync
  (``seal_verl.runs.adapter_sync``);
- ``resume`` (with ``--resumed-from``): the run restarted at the parent's last checkpoint, its first step ran
  under the parent's final interface (Omega) and rho, and the closed-loop history continues the parent's.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from typing import Optional

from seal_verl.core.settings import SealSettings, paper_departures
from seal_verl.runs import folder as RF
from seal_verl.runs.adapter_sync import check_adapter_sync
from seal_verl.runs.provenance import check_provenance
from seal_verl.runs.check_cues import EVAL_LOOPS, TRAIN_LOOPS, check_cue_effect, check_cues  # noqa: F401
from seal_verl.runs.check_sync import (SYNC_DIFF_MAX, SYNC_PEARSON_MIN, _continues, _real_gradient,  # noqa: F401
                                       check_resume, check_sync, history)
from seal_verl.runs.check_weights import ADV_TOL, MIN_NONZERO, W_TOL, check_weights  # noqa: F401

SEAL_KEYS = ("seal/step", "seal/weight/mean", "seal/success_rate", "seal/n_trajectories")
SEAL_PREFIXES = ("seal/prevalence/", "seal/rho/", "seal/cue_active/")


class Run:
    """The files of one run folder, under the names the checks use, and the run's settings (``settings``: None
    when ``config.json`` is missing or cannot be parsed; ``config_problem`` says why)."""

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
        self.files = RF.step_files(self.path)
        self.log = RF.read_log(self.path)
        self.settings: Optional[SealSettings] = None
        self.config_problem: Optional[str] = None
        if not data.config:
            bad = next((d for d in data.damage if os.path.basename(d.file) == RF.CONFIG), None)
            self.config_problem = str(bad) if bad else f"no {RF.CONFIG}"
        else:
            try:
                self.settings = SealSettings.from_dict(data.config.get("seal"))
            except ValueError as exc:
                self.config_problem = f"{RF.CONFIG}: {exc}"

    @property
    def switches(self) -> dict:
        return self.settings.switches_dict() if self.settings else {}

    @property
    def steps(self) -> list[int]:
        return [int(r["step"]) for r in self.metrics]

    @property
    def faults(self) -> dict:
        """Fault-injection variables the run recorded (its config, its step rows, its timing record)."""
        found: dict = {}
        for record in [self.config, *self.metrics, self.timing or {}]:
            settings = record.get(RF.FAULT_SETTINGS)
            found.update(settings if isinstance(settings, dict) else {})
        planted = self.config.get("faults")  # the V1 trainer's list of the faults it planted (SEAL_FAULT)
        if isinstance(planted, list) and planted:
            found.setdefault("SEAL_FAULT", ",".join(map(str, planted)))
        return found


class Report:
    def __init__(self):
        self.items: list[tuple[str, bool, str]] = []
        #: lines said beside the checks that change no verdict (a setting beyond the paper)
        self.notes: list[str] = []

    def add(self, name: str, ok: bool, detail: str) -> bool:
        self.items.append((name, bool(ok), detail))
        return bool(ok)

    @property
    def ok(self) -> bool:
        return all(ok for _, ok, _ in self.items)

    def text(self) -> str:
        return "\n".join([f"[{'PASS' if ok else 'FAIL'}] {name:<8} {detail}" for name, ok, detail in self.items]
                         + [f"[NOTE] {note}" for note in self.notes])


# ------------------------------------------------------------------------------------------------ checks


def check_config(run: Run, rep: Report) -> bool:
    """Whether the run's settings could be read (the checks that need them run only then)."""
    if run.settings is None:
        rep.add("config", False, f"{run.config_problem}: the checks that need the run's settings (weights, cues, "
                                 "effect) were not run")
        return False
    rep.notes += paper_departures(run.settings, run.config.get("preset"))
    return True


def check_faults(run: Run, rep: Report) -> None:
    """A run made with a fault-injection variable set never passes (silent when none was)."""
    if run.faults:
        rep.add("faults", False, "the run ran with fault injection on (" + ", ".join(
            f"{k}={v}" for k, v in sorted(run.faults.items())) + "): its numbers are not a model's")


def check_exit(run: Run, rep: Report) -> None:
    if run.timing is None:
        rep.add("exit", False, f"no {RF.TIMING} (the run script writes it with the exit code)")
        return
    rc = run.timing.get("exit_code")
    if isinstance(rc, bool) or not isinstance(rc, int):
        rep.add("exit", False, f"{RF.TIMING}: exit_code is {rc!r:.40}, not an exit status (a whole number)")
        return
    rep.add("exit", rc == 0, f"main_ppo exit code {rc}; main_ppo {run.timing.get('main_ppo_s')} s")


def check_steps(run: Run, rep: Report, last_step: Optional[int]) -> None:
    if not run.metrics:
        rep.add("steps", False, f"{RF.METRICS} is missing or empty")
        return
    gs = [int(r["global_step"]) for r in run.metrics]
    problems = []
    back = RF.steps_going_back(gs)
    if back:
        problems.append(back)
    elif gs != list(range(gs[0], gs[0] + len(gs))):
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
        rows = history(st)
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


def check_files(run: Run, rep: Report) -> None:
    """Only where something was skipped (a damaged row or file leaves the other checks blind to it), or where a
    step file belongs to no step the run logged (a file of another run, or a name no run writes)."""
    logged = {int(r["global_step"]) for r in run.metrics if isinstance(r.get("global_step"), int)}
    stray = sorted(os.path.basename(p) for kind in (run.files.traces, run.files.states, run.files.probes)
                   for k, p in kind.items() if k not in logged)
    problems = [f"skipped {d}" for d in run.damage]
    if stray:
        problems.append(f"step files of steps the run never logged in {RF.METRICS}: {', '.join(stray[:4])}"
                        + (f" (+{len(stray) - 4} more)" if len(stray) > 4 else ""))
    if problems:
        rep.add("files", False, "; ".join(problems[:6]) + (f" (+{len(problems) - 6} more)" if len(problems) > 6 else ""))


def check_run(path: str, steps: Optional[int] = None, resumed_from: Optional[str] = None,
              require_moving_weights: bool = False, min_nonzero: float = 0.0) -> Report:
    run = Run(path)
    parent = Run(resumed_from) if resumed_from else None
    rep = Report()
    check_files(run, rep)
    known = check_config(run, rep)
    check_faults(run, rep)
    checks = [("exit", check_exit, ()), ("steps", check_steps, (steps,)), ("state", check_state, ())]
    if known:
        checks += [("weights", check_weights, (parent, min_nonzero)), ("cues", check_cues, ()),
                   ("effect", check_cue_effect, ())]
    checks += [("sync", check_sync, (require_moving_weights, parent)), ("adapter", check_adapter_sync, ()),
               ("provenance", check_provenance, ())]
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
    p.add_argument("--json", default=None, help="also write the results here (a new file outside the run folders)")
    p.add_argument("--force", action="store_true", help="replace the --json file if it exists")


def _check_json_output(args: argparse.Namespace) -> None:
    """``--json`` may not be a file the check reads: nothing inside the checked run folders (round 4: ``--json
    RUN/metrics.jsonl`` overwrote the run's metrics), and an existing file only with ``--force``.

    Raises:
        seal_verl.usage.UsageError: one line.
    """
    from seal_verl.outputs import check_not_input
    from seal_verl.usage import check_output_file

    check_not_input(args.json, [args.run_dir, args.resumed_from], "--json")
    check_output_file(args.json, args.force, "--json")


def run(args: argparse.Namespace) -> int:
    """``seal-verl check``: prints the checks; 0 if all pass, 1 if one fails.

    Raises:
        ValueError: ``--min-nonzero`` outside [0, 1] (the CLI turns it into a usage error).
        seal_verl.usage.UsageError: a ``--json`` that is one of the run's files, or exists without ``--force``.
    """
    if not (0.0 <= args.min_nonzero <= 1.0):
        raise ValueError(f"--min-nonzero must be in [0, 1], got {args.min_nonzero}")
    if args.json:
        _check_json_output(args)
    rep = check_run(args.run_dir, args.steps, args.resumed_from, args.require_moving_weights, args.min_nonzero)
    folder = Run(args.run_dir)
    print(f"run {folder.path} (variant {folder.config.get('variant')}, switches {folder.switches or 'unknown'})")
    print(rep.text())
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"run_dir": folder.path, "ok": rep.ok, "notes": rep.notes,
                       "checks": [{"name": n, "ok": ok, "detail": d} for n, ok, d in rep.items]}, f, indent=1)
    return 0 if rep.ok else 1
