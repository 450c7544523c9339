"""The learning benchmark: GRPO, SEAL and two ablations on the ledger environment, several seeds, CPU.

    make bench-learning      # the runs in .venv-cpu-train, the figure with .venv (matplotlib)
    .venv-cpu-train/bin/python -m bench.bench_learning [--steps 20] [--seeds 1 2 3 4 5] [--variants grpo seal ...]
    .venv/bin/python -m bench.bench_learning --plot-only
    .venv-cpu-train/bin/python -m bench.bench_learning --jobs 2 ...   # two runs side by side (make bench-learning)

Each run is ``recipes/ledger_cpu/run_ledger.sh`` (verl's ``main_ppo`` with the recipe's variant groups, the CPU
overlay and the ledger overlay) from the same warm-started tiny model, with the seed setting the data order and
the rollout sampling. Runs go in order of priority (every variant on the first seed, then the next seed), and a
finished run in ``--out`` (its timing record says exit 0 and the same step count, and its ``bench_settings.json``
the same config files and overrides) is reused, so an interrupted benchmark resumes where it stopped: the folder of
an interrupted run is moved aside (into a dated sibling folder) and the run made again. A finished run made under
other settings is never replaced without ``--force`` (that run fails, with a line saying so); with it, every run is
made again and the earlier one moved aside, never deleted. From the run folders it writes into ``--out``:

- ``learning.json``: per run and step the mean training reward, pass rate, label mix, cue kinds on, mean SEAL
  weight; per run the held-out greedy accuracy (no cue) before and after; the warm start's own training reward
  (:func:`start_reward`); per variant the rise of the training reward (mean of the last ``--window`` steps minus
  the warm start's reward, and minus the first ``--window`` steps for comparison) per seed, its mean and spread,
  and the difference of each variant to GRPO (last-window reward and held-out score after, paired by seed) with
  its 95% interval over the seeds; per variant and cue kind the cue effect its probes measured over the steps;
- ``learning.md``: those summaries as tables;
- ``learning.png``: training reward per seed and the mean, held-out score, label mix and cue kinds per step, the
  cue effect per kind over the steps, and each variant's difference to GRPO per seed with its interval.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from typing import Optional

from seal_verl.runs import folder as RF
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN = os.path.join(REPO, "recipes", "ledger_cpu", "run_ledger.sh")
VARIANTS = ("grpo", "seal", "no_env_side", "no_reweighting")
FAILURES = ("invalid_tool_call", "argument_mismatch", "state_mismatch", "recovery_failure", "missing_tool_call",
            "response_mismatch", "spurious_tool_call")
#: a variant "learns" on a seed when its last-window mean training reward exceeds the warm start's by at least this
RISE_GOAL = 0.15
#: the shipped warm start's cue effect (``make cue-effect``); its ``none`` condition is the warm start's training
#: reward without cues, every training task sampled at the run's temperature
SHIPPED_EFFECT = os.path.join(REPO, "recipes", "ledger_cpu", "cue_effect.json")
#: where the benchmark measures it for a warm start that is not the shipped one
MEASURED_EFFECT = "cue_effect.json"


def _rows(rows_and_damage: tuple[list, list]) -> list[dict]:
    """Rows read through ``run_folder``; a damaged line is named on stderr and left out of the summary."""
    rows, damage = rows_and_damage
    for d in damage:
        print(f"[bench-learning] warning: skipped {d}", file=sys.stderr)
    return rows


def run_dir(out: str, variant: str, seed: int) -> str:
    return os.path.join(out, f"{variant}_s{seed}")


#: the config files a run composes (recipe, CPU overlay, ledger overlay, agent loops): a finished run is reused only
#: while they and the Hydra overrides are what they were when it ran
SETTINGS_DIRS = ("recipes/bfcl_v3/config", "recipes/bfcl_v3/agent_loops", "recipes/bfcl_v3/cpu/config",
                 "recipes/bfcl_v3/cpu/agent_loops", "recipes/ledger_cpu/config", "recipes/ledger_cpu/agent_loops")
SETTINGS_FILE = "bench_settings.json"


def settings(extra: list[str], root: str = REPO, model: Optional[str] = None) -> str:
    """A fingerprint of what a run was made with: the bytes of every config file in SETTINGS_DIRS, the
    overrides and ``model`` (the warm start's identity, :func:`model_identity`). Any edit counts, comments
    included: a reused run is never one made under other settings or from another model."""
    h = hashlib.sha256()
    h.update(json.dumps(model).encode() + b"\0")
    for d in SETTINGS_DIRS:
        for base, _, files in sorted(os.walk(os.path.join(root, d))):
            for name in sorted(files):
                if name.endswith((".yaml", ".yml")):
                    path = os.path.join(base, name)
                    h.update(os.path.relpath(path, root).encode() + b"\0")
                    with open(path, "rb") as f:
                        h.update(f.read() + b"\0")
    h.update(json.dumps(list(extra)).encode())
    return h.hexdigest()[:16]


def _prepared_model(prepared: str) -> Optional[str]:
    """The model folder a prepared run folder's record names; None when the folder was not prepared."""
    try:
        with open(os.path.join(prepared, RF.PREPARE)) as f:
            return str(json.load(f)["model"])
    except (OSError, ValueError, KeyError):
        return None


def model_identity(prepared: str) -> Optional[str]:
    """The model a prepared run folder (its prepare record) starts from: the fingerprint in its ``warm_start.json``
    (every warm start records one over its inputs), else a digest of the folder's files (a model passed as it
    is). None when the folder was not prepared."""
    model = _prepared_model(prepared)
    if model is None:
        return None
    try:
        with open(os.path.join(model, "warm_start.json")) as f:
            return "warm-start:" + str(json.load(f)["fingerprint"])
    except (OSError, ValueError, KeyError):
        pass
    h = hashlib.sha256()
    for name in sorted(os.listdir(model)) if os.path.isdir(model) else []:
        path = os.path.join(model, name)
        if os.path.isfile(path) and not name.startswith("."):
            with open(path, "rb") as f:
                h.update(name.encode() + b"\0" + hashlib.sha256(f.read()).digest())
    return "files:" + h.hexdigest()[:16]


def start_reward(prepared: str, shipped: str = SHIPPED_EFFECT) -> Optional[dict]:
    """The training reward of the model a prepared folder starts from, before any update: the ``none`` condition
    of a cue-effect measurement of the same weights (``model.safetensors``' SHA-256), the shipped one or one the
    benchmark made in ``prepared`` -> ``{"reward", "n", "source"}``; None when there is none.

    Why not the first steps of the runs: GRPO here reaches most of its final reward by step 3, so a first-window
    mean averages in policies already updated, and step 1 alone is one batch of 8 tasks (0.17-0.25 across seeds).
    The measurement covers every training task, 8 samples each, at the run's temperature and reward."""
    from seal_verl.core.cue_effect import NONE
    from seal_verl.models.shipped import file_sha256

    model = _prepared_model(prepared)
    weights = os.path.join(model, "model.safetensors") if model else None
    if not weights or not os.path.isfile(weights):
        return None
    sha = file_sha256(weights)
    for path in (os.path.join(prepared, MEASURED_EFFECT), shipped):
        try:
            with open(path) as f:
                measured = json.load(f)
            values = [float(v) for v in measured["values"][NONE]]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if measured.get("model_sha256") == sha and values:
            return {"reward": statistics.fmean(values), "n": len(values), "source": os.path.relpath(path, REPO)}
    return None


def measure_start(prepared: str) -> int:
    """Measure the cue effect of the prepared model into ``prepared`` when no measurement of its weights exists
    (a warm start other than the shipped one: about 4 minutes); :func:`start_reward` then reads it."""
    if start_reward(prepared) is not None:
        return 0
    model = _prepared_model(prepared)
    if model is None:  # nothing prepared to measure (the summary then says it has no measurement)
        return 0
    print(f"[bench-learning] measuring the training reward of {model} before any step (cue_reading measure)",
          flush=True)
    # a measurement there is of other weights (start_reward found none of these): replaced
    return subprocess.run([sys.executable, "-m", "seal_verl.models.warm_start.cue_reading", "measure", model,
                           "--out", os.path.join(prepared, MEASURED_EFFECT), "--force"], cwd=REPO).returncode


def finished(path: str, steps: int, fingerprint: Optional[str] = None) -> bool:
    """True for a run that exited 0 after ``steps`` steps and, with ``fingerprint``, was made under those
    settings (a run without the record, from before it existed, is not reused)."""
    t, _ = RF.read_object(os.path.join(path, RF.TIMING))
    if t is None:
        return False
    if t.get("exit_code") != 0 or t.get("steps") != steps:
        return False
    if fingerprint is None:
        return True
    try:
        with open(os.path.join(path, SETTINGS_FILE)) as f:
            return json.load(f).get("settings") == fingerprint
    except (OSError, ValueError):
        return False


def run_one(out: str, variant: str, seed: int, steps: int, force: bool, extra: list[str],
            prefix: bool = False, model: Optional[str] = None) -> int:
    """One run through run_ledger.sh. ``prefix``: the run shares the console with others, so its lines are
    read through a pipe and printed with the run's name in front (no progress bar). ``model``: the identity of
    the warm start the run will start from (:func:`model_identity`), part of the settings a run is reused under."""
    path = run_dir(out, variant, seed)
    fingerprint = settings(extra, model=model)
    if finished(path, steps, fingerprint) and not force:
        print(f"[bench-learning] {variant} seed {seed}: reusing {path}", flush=True)
        return 0
    if finished(path, steps) and not force:
        print(f"[bench-learning] {variant} seed {seed}: the finished run in {path} was made under other settings "
              f"(config files, overrides or the warm start changed since); --force makes it again (the earlier run "
              f"is moved aside), or use another --out", file=sys.stderr, flush=True)
        return 2
    # an interrupted run of this benchmark is made again, its folder moved aside (never deleted) by the run script
    env = dict(os.environ, VARIANT=variant, STEPS=str(steps), SEED=str(seed), OUT=path, FORCE="1")
    print(f"[bench-learning] {variant} seed {seed}: {steps} steps -> {path}", flush=True)
    if not prefix:
        rc = subprocess.run(["bash", RUN, *extra], env=env, cwd=REPO).returncode
    else:
        with subprocess.Popen(["bash", RUN, *extra], env=env, cwd=REPO, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, errors="replace") as proc:
            for line in proc.stdout:
                print(f"[{variant} s{seed}] {line.rstrip()}", flush=True)
        rc = proc.returncode
    if rc == 0:
        with open(os.path.join(path, SETTINGS_FILE), "w") as f:
            json.dump({"settings": fingerprint, "overrides": list(extra), "model": model}, f)
    return rc


def prepare(out: str) -> int:
    """Build the cached warm start and the data (nothing else) in ``out/prepare`` before any run starts."""
    env = dict(os.environ, PREPARE_ONLY="1", OUT=os.path.join(out, "prepare"))
    return subprocess.run(["bash", RUN], env=env, cwd=REPO).returncode


def run_all(out: str, variants: list[str], seeds: list[int], steps: int, force: bool, extra: list[str],
            jobs: int, skip=None) -> list[str]:
    """Every (variant, seed) run in priority order (every variant on the first seed, then the next seed),
    ``jobs`` at a time; returns the failed ones. ``skip(variant, seed, model)``: True for a run whose result is
    already kept elsewhere (bench-premise's committed records), given the warm start's identity."""
    order = [(v, s) for s in seeds for v in variants]
    # once, before any run: the cached warm start (so that no two runs build it at once) and its identity
    if prepare(out) != 0:
        return ["preparing the warm start"]
    # the warm start's own training reward, the baseline of the rise; a failure here is named, the runs go on
    measured = measure_start(os.path.join(out, "prepare")) == 0
    failed = [] if measured else ["measuring the warm start's training reward (the rise falls back to the first "
                                  "window)"]
    model = model_identity(os.path.join(out, "prepare"))
    if skip is not None:
        order = [(v, s) for v, s in order if not skip(v, s, model)]
    if jobs <= 1:
        return failed + [f"{v} seed {s}" for v, s in order if run_one(out, v, s, steps, force, extra, model=model) != 0]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        codes = list(pool.map(lambda vs: run_one(out, vs[0], vs[1], steps, force, extra, prefix=True,
                                                 model=model), order))
    return failed + [f"{v} seed {s}" for (v, s), rc in zip(order, codes) if rc != 0]


def curve(path: str) -> dict:
    """One run folder -> per-step rows and the held-out accuracy at each validation."""
    steps, probes = [], []
    for row in _rows(RF.read_steps(path)):
        k = int(row["global_step"])
        found = (row.get("cue_effect") or {}).get("effects") or {}
        if found:  # the step's cue-effect probe: per kind (and "all") the difference with its interval
            probes.append({"step": k, "effects": {kind: {"diff": e["diff"], "lo": e["lo"], "hi": e["hi"]}
                                                  for kind, e in found.items()
                                                  if all(e.get(f) is not None for f in ("diff", "lo", "hi"))}})
        traces = _rows(RF.read_traces(path, k))
        rewards = [float(t["reward"]) for t in traces if t.get("reward") is not None]
        labels = [z for t in traces for z in (t.get("labels") or [])]
        mix = {z: labels.count(z) / len(labels) for z in ("pass",) + FAILURES} if labels else {}
        nonzero = [t for t in traces if t.get("grpo_advantage") not in (None, 0, 0.0)]
        steps.append({"step": k, "reward": statistics.fmean(rewards) if rewards else None,
                      "labels": mix, "cues": row.get("active_during") or [],
                      "cue_rollouts": sum(1 for t in traces if t.get("cue_count")) / max(len(traces), 1),
                      "adv_nonzero": len(nonzero) / max(len(traces), 1), "w_mean": row.get("w_mean"),
                      "seconds": row.get("seconds")})
    val: dict[int, list[float]] = defaultdict(list)
    acc: dict[int, list[float]] = defaultdict(list)
    turns: dict[int, list[float]] = defaultdict(list)
    for r in _rows(RF.read_validation(path)):
        k = int(r["global_step"])
        val[k].append(float(r.get("score") or 0.0))
        acc[k].append(float(r.get("acc") or 0.0))
        turns[k] += [float(z == "pass") for z in r.get("labels") or []]
    # heldout: the reward's score (the training reward's semantics, near-miss credit included when it is on);
    # heldout_pass: the share of held-out turns Psi labels pass, which no reward option changes;
    # heldout_acc: whole tasks passing
    return {"steps": steps, "cue_effect": probes,
            "heldout": {k: statistics.fmean(v) for k, v in sorted(val.items())},
            "heldout_pass": {k: statistics.fmean(v) for k, v in sorted(turns.items()) if v},
            "heldout_acc": {k: statistics.fmean(v) for k, v in sorted(acc.items())}}


def rise(c: dict, window: int, start: Optional[float] = None) -> Optional[dict]:
    """A run's rise: the mean training reward of its last ``window`` steps minus ``start`` (the warm start's
    training reward, :func:`start_reward`), or minus its first ``window`` steps when ``start`` is None
    (``baseline`` says which); ``window_rise`` is always last minus first window."""
    r = [x["reward"] for x in c["steps"] if x["reward"] is not None]
    if len(r) < 2 * window:
        return None
    first, last = statistics.fmean(r[:window]), statistics.fmean(r[-window:])
    ho, hp = c["heldout"], c.get("heldout_pass") or {}
    passing = [x["labels"].get("pass", 0.0) for x in c["steps"] if x["reward"] is not None and x["labels"]]
    out = {"first": first, "last": last, "start": start, "window_rise": last - first,
           "rise": last - (first if start is None else start),
           "baseline": "first window" if start is None else "warm start",
           "heldout_before": ho.get(0), "heldout_after": ho[max(ho)] if ho and max(ho) > 0 else None,
           "heldout_pass_before": hp.get(0), "heldout_pass_after": hp[max(hp)] if hp and max(hp) > 0 else None,
           "pass_first": None, "pass_last": None}
    if len(passing) >= 2 * window:  # the share of training turns labelled pass, over the same windows
        out["pass_first"], out["pass_last"] = statistics.fmean(passing[:window]), statistics.fmean(passing[-window:])
    return out


def _ms(xs: list[float]) -> str:
    if not xs:
        return "-"
    return f"{statistics.fmean(xs):+.3f} +- {statistics.stdev(xs):.3f}" if len(xs) > 1 else f"{xs[0]:+.3f}"


#: two-sided 95% quantiles of Student's t by degrees of freedom (beyond 30 the normal's 1.96 is close enough)
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
        11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093,
        20: 2.086, 25: 2.060, 30: 2.042}


def paired(diffs: list[float]) -> dict:
    """Mean, sd and the 95% t-interval of per-seed differences (a seed's runs share data order and sampling
    seed, so the difference is taken within the seed). With one seed there is no interval."""
    out = {"mean": statistics.fmean(diffs) if diffs else None, "sd": None, "lo": None, "hi": None,
           "n": len(diffs), "above": sum(d > 0 for d in diffs), "below": sum(d < 0 for d in diffs),
           "per_seed": list(diffs)}
    if len(diffs) > 1:
        sd = statistics.stdev(diffs)
        df = len(diffs) - 1
        t = T975.get(df) or (T975[max(k for k in T975 if k <= df)] if df <= 30 else 1.96)
        half = t * sd / len(diffs) ** 0.5
        out.update(sd=sd, lo=out["mean"] - half, hi=out["mean"] + half)
    return out


def cue_effect_summary(by_seed: dict) -> dict:
    """Per cue kind (and "all"): every probe of every seed, their mean difference, and how many probes found the
    kind below zero (interval wholly below) or above zero beyond their interval."""
    per_kind: dict[str, list[dict]] = defaultdict(list)
    for c in by_seed.values():
        for p in c.get("cue_effect") or []:
            for kind, e in p["effects"].items():
                per_kind[kind].append(e)
    return {kind: {"probes": len(es), "mean": statistics.fmean(e["diff"] for e in es),
                   "below": sum(e["hi"] < 0 for e in es), "above": sum(e["lo"] > 0 for e in es)}
            for kind, es in sorted(per_kind.items(), key=lambda kv: (kv[0] != "all", kv[0]))}


def summarise(curves: dict, window: int, start: Optional[float] = None) -> dict:
    """Per variant: per-seed rises (from ``start``, the warm start's training reward, when known), their mean and
    sd, seeds meeting the goal, the difference to GRPO (last-window training reward and held-out score after the
    last step, paired by seed, with a 95% interval) and what its cue-effect probes measured."""
    out: dict = {}
    for variant, by_seed in curves.items():
        rs = {s: rise(c, window, start) for s, c in by_seed.items()}
        ok = {s: r for s, r in rs.items() if r is not None}
        vals = [r["rise"] for r in ok.values()]
        out[variant] = {"per_seed": rs, "mean_rise": statistics.fmean(vals) if vals else None,
                        "sd_rise": statistics.stdev(vals) if len(vals) > 1 else None,
                        "seeds_meeting_goal": sorted(s for s, r in ok.items() if r["rise"] >= RISE_GOAL),
                        "cue_effect": cue_effect_summary(by_seed)}
    g = out.get("grpo", {}).get("per_seed", {})
    for variant, s in out.items():
        if variant == "grpo":
            continue
        both = {k: (r, g[k]) for k, r in s["per_seed"].items() if r and g.get(k)}
        s["last_minus_grpo"] = paired([r["last"] - q["last"] for r, q in both.values()])
        s["heldout_minus_grpo"] = paired([r["heldout_after"] - q["heldout_after"] for r, q in both.values()
                                          if r["heldout_after"] is not None and q["heldout_after"] is not None])
    return out


def _interval(d: Optional[dict]) -> str:
    """``+0.012 [-0.050, +0.074] (3 of 5 above)`` for a paired difference; ``-`` without one."""
    if not d or d.get("mean") is None:
        return "-"
    txt = f"{d['mean']:+.3f}"
    if d.get("lo") is not None:
        txt += f" [{d['lo']:+.3f}, {d['hi']:+.3f}]"
    return txt + f" ({d['above']} of {d['n']} above)"


def tables(curves: dict, summary: dict, window: int, start: Optional[dict] = None) -> str:
    """The run, variant, cue-effect and per-step tables of ``learning.md``. ``start``: :func:`start_reward`'s
    record, named above the tables as the baseline of the rise."""
    def arrow(a, b):
        return ("-" if a is None else f"{a:.3f}") + " -> " + ("-" if b is None else f"{b:.3f}")

    if start:
        lines = [f"Rise: the mean training reward of the last {window} steps minus the warm start's training reward "
                 f"without cues, {start['reward']:.3f} ({start['n']} rollouts over every training task, "
                 f"{start['source']}); the rise between the first and the last {window} steps beside it.", ""]
    else:
        lines = [f"Rise: the last {window} steps minus the first {window} (no measurement of the warm start's "
                 "training reward was found).", ""]
    lines += [f"| variant | seed | reward first {window} | last {window} | rise | rise first -> last {window} "
              "| held-out score before -> after | training turns passing, first -> last window "
              "| held-out turns passing before -> after |",
              "|---|---|---|---|---|---|---|---|---|"]
    for v, s in summary.items():
        for seed, r in sorted(s["per_seed"].items()):
            if r is None:
                n = len(curves[v][seed]["steps"])
                lines.append(f"| {v} | {seed} | ({n} steps logged) | | | | | | |")
                continue
            lines.append(f"| {v} | {seed} | {r['first']:.3f} | {r['last']:.3f} | {r['rise']:+.3f} | "
                         f"{r['window_rise']:+.3f} | {arrow(r['heldout_before'], r['heldout_after'])} | "
                         f"{arrow(r.get('pass_first'), r.get('pass_last'))} | "
                         f"{arrow(r.get('heldout_pass_before'), r.get('heldout_pass_after'))} |")
    lines += ["", f"| variant | mean rise +- sd over seeds | seeds with rise >= {RISE_GOAL} | mean rise first -> last "
              f"{window} | last-window reward minus GRPO's, 95% interval over seeds | held-out score after minus "
              "GRPO's, 95% interval | held-out score after (mean) |",
              "|---|---|---|---|---|---|---|"]
    for v, s in summary.items():
        vals = [r["rise"] for r in s["per_seed"].values() if r]
        between = [r["window_rise"] for r in s["per_seed"].values() if r]
        after = [r["heldout_after"] for r in s["per_seed"].values() if r and r["heldout_after"] is not None]
        lines.append(f"| {v} | {_ms(vals)} | {len(s['seeds_meeting_goal'])}/{len(vals)} | {_ms(between)} | "
                     f"{_interval(s.get('last_minus_grpo'))} | {_interval(s.get('heldout_minus_grpo'))} | "
                     + (f"{statistics.fmean(after):.3f}" if after else "-") + " |")
    effects = [(v, kind, e) for v, s in summary.items() for kind, e in (s.get("cue_effect") or {}).items()]
    if effects:
        lines += ["", "| variant | cue kind | probes (all seeds) | mean effect | below zero beyond the interval "
                  "| above zero beyond the interval |", "|---|---|---|---|---|---|"]
        lines += [f"| {v} | {kind} | {e['probes']} | {e['mean']:+.3f} | {e['below']} | {e['above']} |"
                  for v, kind, e in effects]
    lines += ["", "| variant | seed | step | reward | adv!=0 | cue kinds on | cue rollouts | top failure labels |",
              "|---|---|---|---|---|---|---|---|"]
    for v, by_seed in curves.items():
        for seed, c in sorted(by_seed.items()):
            for x in c["steps"]:
                top = sorted(((p, z) for z, p in x["labels"].items() if z != "pass" and p > 0), reverse=True)[:3]
                lines.append(f"| {v} | {seed} | {x['step']} | "
                             + ("-" if x["reward"] is None else f"{x['reward']:.3f}")
                             + f" | {x['adv_nonzero']:.2f} | {','.join(x['cues']) or '-'} | {x['cue_rollouts']:.2f} | "
                             + ", ".join(f"{z} {p:.2f}" for p, z in top) + " |")
    return "\n".join(lines)


def _mean_per_step(by_seed: dict, value) -> tuple[list, list]:
    """Steps and the mean over seeds of ``value(step_row)`` (rows where it is None are left out)."""
    per_step = defaultdict(list)
    for cur in by_seed.values():
        for x in cur["steps"]:
            y = value(x)
            if y is not None:
                per_step[x["step"]].append(y)
    ks = sorted(per_step)
    return ks, [statistics.fmean(per_step[k]) for k in ks]


KIND_COLORS = {"all": "black", "call_format": "tab:purple", "schema_constraints": "tab:brown",
               "tool_affordance": "tab:olive", "error_recovery": "tab:cyan", "ask_or_abstain": "tab:pink"}


def _cue_effect_per_step(by_seed: dict) -> dict[str, tuple[list, list]]:
    """Per cue kind: the probe steps and the mean over the seeds that probed it there of the measured effect."""
    per = defaultdict(lambda: defaultdict(list))
    for c in by_seed.values():
        for p in c.get("cue_effect") or []:
            for kind, e in p["effects"].items():
                per[kind][p["step"]].append(e["diff"])
    return {kind: (sorted(ks), [statistics.fmean(ks[k]) for k in sorted(ks)]) for kind, ks in per.items()}


#: the figure's title for the tiny model's benchmark
TITLE = "ledger benchmark on CPU: warm-started tiny Qwen2, verl main_ppo, GRPO vs SEAL and ablations"


def plot(curves: dict, path: str, window: int = 5, start: Optional[float] = None, title: str = TITLE) -> None:
    """Six panels: training reward (seeds and mean), held-out greedy score without cues (seeds and mean), the
    turns that miss or break a call against those with the right tool and a wrong argument, how many cue kinds
    were on (means over the seeds), the cue effect per kind the probes measured over the steps (mean over the
    seeds, SEAL solid, other variants with cues dotted), and each variant's difference to GRPO per seed with
    the mean and its 95% interval. ``start``: the warm start's training reward, a dashed line in the first
    panel."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"grpo": "tab:orange", "seal": "tab:blue", "no_env_side": "tab:green", "no_reweighting": "tab:red"}
    fig, axes = plt.subplots(2, 3, figsize=(20, 9))
    reward_ax, held_ax, label_ax, cue_ax, effect_ax, diff_ax = axes.flat
    for v, by_seed in curves.items():
        c = colors.get(v)
        for cur in by_seed.values():
            pts = [(x["step"], x["reward"]) for x in cur["steps"] if x["reward"] is not None]
            reward_ax.plot([a for a, _ in pts], [b for _, b in pts], color=c, alpha=0.25, lw=1)
            ho = sorted(cur["heldout"].items())
            held_ax.plot([a for a, _ in ho], [b for _, b in ho], color=c, alpha=0.25, lw=1, marker=".")
        ks, ys = _mean_per_step(by_seed, lambda x: x["reward"])
        reward_ax.plot(ks, ys, color=c, lw=2.5, label=f"{v} ({len(by_seed)} seeds)")
        held = defaultdict(list)
        for cur in by_seed.values():
            for k, y in cur["heldout"].items():
                held[k].append(y)
        held_ax.plot(sorted(held), [statistics.fmean(held[k]) for k in sorted(held)], color=c, lw=2.5, marker="o",
                     label=v)
        ks, ys = _mean_per_step(by_seed, lambda x: (x["labels"].get("missing_tool_call", 0.0)
                                                    + x["labels"].get("invalid_tool_call", 0.0)) if x["labels"] else None)
        label_ax.plot(ks, ys, color=c, lw=2, label=f"{v}: missing or malformed call")
        ks, ys = _mean_per_step(by_seed, lambda x: x["labels"].get("argument_mismatch", 0.0) if x["labels"] else None)
        label_ax.plot(ks, ys, color=c, lw=2, ls="--", label=f"{v}: right tool, wrong argument")
        ks, ys = _mean_per_step(by_seed, lambda x: float(len(x["cues"])))
        cue_ax.plot(ks, ys, color=c, lw=2, label=v)
        for kind, (ks, ys) in sorted(_cue_effect_per_step(by_seed).items()):
            effect_ax.plot(ks, ys, color=KIND_COLORS.get(kind, "gray"), lw=2.5 if kind == "all" else 1.5,
                           ls="-" if v == "seal" else ":", marker="o" if kind == "all" else ".",
                           label=f"{v}: {kind}")
    effect_ax.axhline(0.0, color="gray", lw=1)
    if start is not None:
        reward_ax.axhline(start, color="gray", lw=1.5, ls="--", label=f"warm start, no cue ({start:.3f})")
    summary = summarise(curves, window, start)
    rows = [(v, what, s.get(key) or {}) for v, s in summary.items() if v != "grpo"
            for what, key in (("last-window reward", "last_minus_grpo"), ("held-out after", "heldout_minus_grpo"))
            if "grpo" in summary]
    for i, (v, what, d) in enumerate(rows):
        dots = d.get("per_seed") or []
        diff_ax.scatter(dots, [i] * len(dots), color=colors.get(v), alpha=0.5, s=18)
        if d.get("mean") is not None:
            err = None if d.get("lo") is None else [[d["mean"] - d["lo"]], [d["hi"] - d["mean"]]]
            diff_ax.errorbar([d["mean"]], [i], xerr=err, color=colors.get(v), marker="D", capsize=4, lw=2)
    diff_ax.axvline(0.0, color="gray", lw=1)
    diff_ax.set_yticks(range(len(rows)), [f"{v}: {what}" for v, what, _ in rows], fontsize=8)
    diff_ax.set_title("difference to GRPO, paired by seed\n(dots: seeds, diamond: mean, bar: 95% interval)", fontsize=10)
    diff_ax.set_xlabel("difference to GRPO")
    diff_ax.grid(alpha=0.3)
    for ax, title, ylabel in (
            (reward_ax, "training reward per step (thin: seeds, thick: mean)", "mean reward"),
            (held_ax, "held-out greedy score, no cue (thin: seeds, thick: mean)", "score"),
            (label_ax, "training turns by label (mean over seeds)", "share of turns"),
            (cue_ax, "cue kinds on during the step (mean over seeds)", "cue kinds"),
            (effect_ax, "cue effect per kind at each probe (mean over seeds; seal solid, others dotted)",
             "reward with the cue minus without")):
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("training step")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    for ax in (reward_ax, held_ax, label_ax):
        ax.set_ylim(-0.02, 1.02)
    cue_ax.set_ylim(-0.1, 5.1)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    p.add_argument("--variants", nargs="+", default=list(VARIANTS))
    p.add_argument("--window", type=int, default=5, help="steps averaged at the start and the end (default 5)")
    p.add_argument("--out", default=os.path.join(REPO, "runs", "bench_learning"))
    p.add_argument("--jobs", type=int, default=1,
                   help="runs side by side (default 1). Each run keeps one core busy most of the time "
                        "(one thread per process), so 2 on 2 cores finish the set sooner; each needs a few GB")
    p.add_argument("--force", action="store_true",
                   help="make every run again, even a finished one in --out (the earlier run is moved aside)")
    p.add_argument("--plot-only", action="store_true", help="only read the run folders in --out")
    p.add_argument("--no-plot", action="store_true", help="skip the PNG (the training venv has no matplotlib)")
    p.add_argument("--title", default=TITLE, help="the figure's title (say which model trained)")
    p.add_argument("extra", nargs="*", help="Hydra overrides passed to every run")
    args = p.parse_args(argv)
    from seal_verl import env_vars

    env_vars.check_or_exit("bench-learning")
    if args.steps < 2 * args.window:
        p.error(f"--steps must be at least 2 x --window ({2 * args.window})")
    if args.jobs < 1:
        p.error("--jobs must be at least 1")
    unknown = [v for v in args.variants if not os.path.isfile(os.path.join(REPO, "recipes", "bfcl_v3", "config",
                                                                           "variant", f"{v}.yaml"))]
    if unknown:
        p.error(f"unknown variant(s) {', '.join(unknown)}: see recipes/bfcl_v3/config/variant/")
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    failed = []
    if not args.plot_only:
        failed = run_all(args.out, args.variants, args.seeds, args.steps, args.force, args.extra, args.jobs)
    curves = {v: {s: curve(run_dir(args.out, v, s)) for s in args.seeds if os.path.isdir(run_dir(args.out, v, s))}
              for v in args.variants}
    return report(args.out, curves, args.steps, args.window, args.seeds, start_reward(os.path.join(args.out, "prepare")),
                  failed, t0, None if args.no_plot else args.title)


def report(out: str, curves: dict, steps: int, window: int, seeds: list[int], start: Optional[dict],
           failed: list[str], t0: float, title: Optional[str]) -> int:
    """``learning.json``, ``learning.md`` and (with a ``title``) ``learning.png`` in ``out`` from the runs'
    curves (variant -> seed -> :func:`curve`); ``start``: :func:`start_reward`'s record or None. Returns the exit
    code (1 when a run failed)."""
    curves = {v: c for v, c in curves.items() if c}
    base = start["reward"] if start else None
    summary = summarise(curves, window, base)
    with open(os.path.join(out, "learning.json"), "w") as f:
        json.dump({"steps": steps, "window": window, "rise_goal": RISE_GOAL, "seeds": seeds,
                   "warm_start_reward": start, "summary": summary, "curves": curves, "failed": failed,
                   "seconds": round(time.time() - t0, 1)}, f, indent=1)
    md = tables(curves, summary, window, start)
    with open(os.path.join(out, "learning.md"), "w") as f:
        f.write(md + "\n")
    if title is not None and curves:
        plot(curves, os.path.join(out, "learning.png"), window, base, title)
    print(md.split("\n\n| variant | seed | step")[0])
    if failed:
        print(f"[bench-learning] failed runs: {', '.join(failed)}", file=sys.stderr)
    print(f"[bench-learning] wrote {out}/learning.json, learning.md" + ("" if title is None else ", learning.png"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
