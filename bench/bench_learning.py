"""SEAL vs vanilla GRPO learning curves on CPU, through verl's own launcher.

    make bench-learning      # the runs in .venv-cpu-train, the figure with .venv (matplotlib)
    .venv-cpu-train/bin/python bench/bench_learning.py [--steps 8] [--out runs/bench_learning] [--no-plot]
    .venv/bin/python bench/bench_learning.py --plot-only --out runs/bench_learning

Runs ``recipes/bfcl_v3/cpu/run_cpu.sh`` once per variant from the same warm-started tiny model (cached under
``runs/cpu/models``), with the same seed, tasks, data order, budgets and step count, validating after every step
(greedy, ``bfcl`` loop: no cue). Then it reads the run folders and writes, into ``--out``:

- ``learning.json``: per variant and step: mean training reward and its spread, pass rate, validation accuracy
  per category and their mean, label prevalence, cue kinds on, mean |advantage|, mean SEAL weight;
- ``learning.md``: the same as a table;
- ``learning.png``: training reward, validation accuracy, mean |advantage|, the two most frequent failure labels,
  the policy's entropy and its KL to the initial model per step, both variants in each panel.

It prints, per variant, whether the training reward rose: the mean of the last three steps minus the mean of the
first three, next to the spread of the per-step means (their standard deviation over the run): a rise well
above that spread is learning, one inside it is noise. A run that already exists in ``--out`` is reused (pass
``--force`` to run it again).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from typing import Optional

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN_CPU = os.path.join(REPO, "recipes", "bfcl_v3", "cpu", "run_cpu.sh")
LABELS = ("pass", "invalid_tool_call", "argument_mismatch", "state_mismatch", "recovery_failure",
          "missing_tool_call", "response_mismatch", "spurious_tool_call", "correct_abstention")


def _jsonl(path: str) -> list[dict]:
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def run_variant(variant: str, out: str, steps: int, force: bool, extra: list[str]) -> dict:
    """One run_cpu.sh run (its console lines pass through); returns {"dir", "rc", "seconds"}."""
    run_dir = os.path.join(out, variant)
    done = os.path.join(run_dir, "timing.json")
    if os.path.exists(done) and not force:
        with open(done) as f:
            timing = json.load(f)
        if timing.get("exit_code") == 0 and timing.get("steps") == steps:
            print(f"[bench-learning] {variant}: reusing {run_dir} (--force runs it again)", flush=True)
            return {"dir": run_dir, "rc": 0, "seconds": timing.get("main_ppo_s")}
    env = dict(os.environ, VARIANT=variant, STEPS=str(steps), OUT=run_dir, FORCE="1")
    print(f"[bench-learning] {variant}: {steps} steps -> {run_dir}", flush=True)
    t0 = time.time()
    proc = subprocess.run(["bash", RUN_CPU, "trainer.test_freq=1", *extra], env=env, cwd=REPO)
    return {"dir": run_dir, "rc": proc.returncode, "seconds": round(time.time() - t0, 1)}


def curves(run_dir: str) -> list[dict]:
    """Per training step of one run folder: the numbers the figure and the table show."""
    val_by_step: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in _jsonl(os.path.join(run_dir, "val_traces.jsonl")):
        cat = str(r.get("task_id", "")).rsplit("_", 1)[0].replace("multi_turn_", "")
        val_by_step[int(r["global_step"])][cat].append(float(r.get("score") or 0.0))
    out = []
    for row in _jsonl(os.path.join(run_dir, "metrics.jsonl")):
        k = int(row["global_step"])
        traces = _jsonl(os.path.join(run_dir, f"traces_step_{k}.jsonl"))
        rewards = [float(t["reward"]) for t in traces]
        adv = [abs(float(t["advantage"])) for t in traces if t.get("advantage") is not None]
        val = {c: sum(v) / len(v) for c, v in sorted(val_by_step.get(k, {}).items())}
        out.append({
            "step": k,
            "reward": statistics.fmean(rewards) if rewards else None,
            "reward_sem": (statistics.stdev(rewards) / len(rewards) ** 0.5) if len(rewards) > 1 else 0.0,
            "pass_rate": row.get("success_rate"),
            "val": val,
            "val_mean": statistics.fmean(val.values()) if val else None,
            "prevalence": {z: (row.get("prevalence") or {}).get(z, 0.0) for z in LABELS},
            "cues": row.get("active_during") or [],
            "abs_advantage": statistics.fmean(adv) if adv else None,
            "w_mean": row.get("w_mean"),
            "entropy": (row.get("metrics") or {}).get("actor/entropy"),
            "kl_to_start": (row.get("metrics") or {}).get("actor/kl_loss"),
            "seconds": row.get("seconds"),
        })
    first_val = val_by_step.get(0)
    if first_val and out:
        out[0]["val_before"] = {c: sum(v) / len(v) for c, v in sorted(first_val.items())}
    return out


def rise(rows: list[dict], k: int = 3) -> Optional[dict]:
    """Mean training reward of the last k steps minus the first k, with the spread of the per-step means."""
    r = [x["reward"] for x in rows if x["reward"] is not None]
    if len(r) < 2 * k:
        return None
    return {"first": statistics.fmean(r[:k]), "last": statistics.fmean(r[-k:]),
            "rise": statistics.fmean(r[-k:]) - statistics.fmean(r[:k]), "spread": statistics.stdev(r)}


def table(results: dict[str, list[dict]]) -> str:
    lines = ["| variant | step | train reward (+- s.e.) | pass rate | val mean | val per category | mean abs adv | "
             "w mean | cues on | top labels |", "|" + "---|" * 10]
    for name, rows in results.items():
        for x in rows:
            top = sorted(((v, z) for z, v in x["prevalence"].items() if z != "pass" and v > 0), reverse=True)[:3]
            lines.append(
                f"| {name} | {x['step']} | {x['reward']:.3f} +- {x['reward_sem']:.3f} | {x['pass_rate']:.3f} | "
                + (f"{x['val_mean']:.3f}" if x["val_mean"] is not None else "-") + " | "
                + (", ".join(f"{c} {a:.2f}" for c, a in x["val"].items()) or "-") + " | "
                + (f"{x['abs_advantage']:.3f}" if x["abs_advantage"] is not None else "-") + " | "
                + (f"{x['w_mean']:.3f}" if x["w_mean"] is not None else "-") + " | "
                + (",".join(x["cues"]) or "-") + " | " + ", ".join(f"{z} {v:.2f}" for v, z in top) + " |")
    return "\n".join(lines)


def plot(results: dict[str, list[dict]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(16, 8))
    colors = {"seal": "tab:blue", "grpo": "tab:orange"}
    # the two failure labels most frequent over all runs (the toy's mix moves between a few labels)
    totals = defaultdict(float)
    for rows in results.values():
        for x in rows:
            for z, v in x["prevalence"].items():
                if z not in ("pass", "correct_abstention"):
                    totals[z] += v
    shown = [z for z, _ in sorted(totals.items(), key=lambda kv: -kv[1])[:2]] or ["invalid_tool_call"]
    for name, rows in results.items():
        c = colors.get(name)
        steps = [x["step"] for x in rows]
        rew = [x["reward"] for x in rows]
        sem = [x["reward_sem"] for x in rows]
        ax = axes[0][0]
        ax.plot(steps, rew, marker="o", color=c, label=name)
        ax.fill_between(steps, [a - b for a, b in zip(rew, sem)], [a + b for a, b in zip(rew, sem)], color=c, alpha=0.2)
        ax = axes[0][1]
        vs = [(x["step"], x["val_mean"]) for x in rows if x["val_mean"] is not None]
        before = rows[0].get("val_before") if rows else None
        if before:
            vs = [(0, statistics.fmean(before.values()))] + vs
        if vs:
            ax.plot([s for s, _ in vs], [v for _, v in vs], marker="o", color=c, label=name)
        ax = axes[0][2]
        ax.plot(steps, [x["abs_advantage"] for x in rows], marker="o", color=c, label=name)
        ax = axes[1][0]
        for z, style in zip(shown, ("-", "--")):
            ax.plot(steps, [x["prevalence"][z] for x in rows], style, marker="o", color=c, label=f"{name}: {z}")
        for ax, key in ((axes[1][1], "entropy"), (axes[1][2], "kl_to_start")):
            pts = [(x["step"], x.get(key)) for x in rows if x.get(key) is not None]
            if pts:
                ax.plot([a for a, _ in pts], [b for _, b in pts], marker="o", color=c, label=name)
    for ax in (axes[0][0], axes[0][1]):
        ax.set_ylim(-0.02, 1.05)
    axes[1][0].set_ylim(bottom=0)
    titles = ("training reward (mean over rollouts, +- s.e.)", "validation accuracy (greedy, no cues; step 0 = before)",
              "mean |advantage| on response tokens", "failure labels (share of labelled turns)",
              "policy entropy per response token", "KL(actor || initial model), verl's kl_loss")
    for ax, title in zip([a for row in axes for a in row], titles):
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("training step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("SEAL vs vanilla GRPO on CPU: warm-started tiny Qwen2, the 4 tasks of split_cpu.json, verl main_ppo")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=8, help="training steps per variant (default: %(default)s)")
    p.add_argument("--out", default=os.path.join(REPO, "runs", "bench_learning"), help="output folder")
    p.add_argument("--variants", nargs="+", default=["grpo", "seal"], help="recipe variants (default: grpo seal)")
    p.add_argument("--force", action="store_true", help="run again even if a finished run is in --out")
    p.add_argument("--plot-only", action="store_true", help="only read the run folders in --out and draw")
    p.add_argument("--no-plot", action="store_true",
                   help="skip the PNG (the training venv has no matplotlib: `make bench-learning` draws with .venv)")
    p.add_argument("extra", nargs="*", help="Hydra overrides passed to every run")
    args = p.parse_args(argv)
    if args.steps < 6:
        p.error("--steps must be at least 6 (the rise compares the first three steps with the last three)")
    os.makedirs(args.out, exist_ok=True)
    runs = {}
    for v in args.variants:
        if args.plot_only:
            runs[v] = {"dir": os.path.join(args.out, v), "rc": 0}
            continue
        runs[v] = run_variant(v, args.out, args.steps, args.force, args.extra)
        if runs[v]["rc"] != 0:
            print(f"[bench-learning] {v} failed (exit {runs[v]['rc']}); see {runs[v]['dir']}/main_ppo.log", file=sys.stderr)
            return 1
    results = {v: curves(r["dir"]) for v, r in runs.items()}
    summary = {v: rise(rows) for v, rows in results.items()}
    with open(os.path.join(args.out, "learning.json"), "w") as f:
        json.dump({"steps": args.steps, "runs": {v: r["dir"] for v, r in runs.items()}, "curves": results,
                   "rise": summary}, f, indent=1)
    md = table(results)
    with open(os.path.join(args.out, "learning.md"), "w") as f:
        f.write(md + "\n")
    if not args.no_plot:
        plot(results, os.path.join(args.out, "learning.png"))
    print(md)
    for v, s in summary.items():
        if s is None:
            print(f"{v}: fewer than 6 steps logged")
            continue
        verdict = "rose" if s["rise"] > s["spread"] else ("rose, within the per-step spread" if s["rise"] > 0 else "did not rise")
        print(f"{v}: training reward {s['first']:.3f} (first 3 steps) -> {s['last']:.3f} (last 3): "
              f"{s['rise']:+.3f}, per-step spread {s['spread']:.3f}: {verdict}")
    print(f"wrote {os.path.join(args.out, 'learning.png')}, learning.md, learning.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
