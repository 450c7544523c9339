"""Benchmark: vanilla GRPO vs SEAL through the REAL training launcher (recipes/bfcl_v3/cpu/run_cpu.sh), step by step.

Both variants run ``python -m verl.trainer.main_ppo`` with the BFCL V3 recipe + the CPU overlay, on the same tasks
in the same order (same data file, seed and batch size), the same tiny model and the same budgets; the grpo
variant is the same SEAL trainer with every switch off. Per training step the run folders' step rows give verl's
timers and the agent loop's per-rollout timers, and the rollout rows the cue token counts (both read through
``seal_verl.runs.folder``):

==================  ==========================================================================================
component           source (per step)
==================  ==========================================================================================
gen                 ``timing_s/gen``: rollout of the step's batch (LLM, environment, observation wrapper,
                    reward function: verl 0.9.1 computes rewards inside the agent-loop workers)
  llm               ``agent_loop/generate_sequences/sum``: seconds in LLM calls, summed over rollouts
  env+cues          ``agent_loop/tool_calls/sum``: BFCL environment steps incl. SEAL's observation wrapper
  reward            ``agent_loop/compute_score/sum``: reward function (BFCL verifier + Psi labels)
old_log_prob, ref   ``timing_s/old_log_prob``, ``timing_s/ref``
adv                 ``timing_s/adv``: advantage (SEAL: reading the reward extras, weights, seal_grpo)
update              ``timing_s/update_actor``
sync                ``timing_s/update_weights``: actor -> vLLM weight sync
step                ``timing_s/step``: the whole step
==================  ==========================================================================================

Cue tokens: SEAL's rollouts carry cue text in their first user message (part of the prompt) and in later
observations (response side, loss mask 0). Reported per step: mean cue tokens per rollout, the measured prompt
length difference seal - grpo (same tasks, so it is the cue text in the prompt), and their share of all tokens.

    python -m bench.bench_real_path --steps 3 --out runs/bench_real      # runs both (about 7 min on 2 cores)
    python -m bench.bench_real_path --grpo-run DIR --seal-run DIR         # only compare two finished runs

The machine is shared and the model is a random tiny Qwen2, so absolute times are small and noisy; the ratios
show where SEAL's overhead sits, not a GPU-scale cost.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from seal_verl.runs import folder as RF
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN_CPU = os.path.join(ROOT, "recipes", "bfcl_v3", "cpu", "run_cpu.sh")

COMPONENTS = (
    ("gen", "timing_s/gen"),
    ("  llm", "agent_loop/generate_sequences/sum"),
    ("  env+cues", "agent_loop/tool_calls/sum"),
    ("  reward", "agent_loop/compute_score/sum"),
    ("old_log_prob", "timing_s/old_log_prob"),
    ("ref", "timing_s/ref"),
    ("adv", "timing_s/adv"),
    ("update", "timing_s/update_actor"),
    ("sync", "timing_s/update_weights"),
    ("step", "timing_s/step"),
)


def run_variant(variant: str, out: str, steps: int, model: str | None, extra: list[str]) -> float:
    env = dict(os.environ, VARIANT=variant, STEPS=str(steps), OUT=out)
    if model:
        env["SEAL_CPU_MODEL"] = model
    t0 = time.time()
    os.makedirs(out, exist_ok=True)
    with open(out + ".out", "w") as log:
        rc = subprocess.call(["bash", RUN_CPU, *extra], env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    if rc != 0:
        raise SystemExit(f"{variant} run failed (exit {rc}); see {out}.out and {os.path.join(out, RF.LOG)}")
    return time.time() - t0


def load(run_dir: str) -> tuple[list[dict], dict[int, list[dict]]]:
    """The step rows of a run folder and each step's rollout rows; a damaged row is named and left out."""
    data = RF.load(run_dir)
    for line in data.warnings():
        print(f"warning: {line}", file=sys.stderr)
    if not data.steps:
        raise SystemExit(f"{run_dir}: no training step recorded ({RF.METRICS} missing or empty)")
    return data.steps, {int(r["step"]): data.traces.get(int(r["step"]), []) for r in data.steps}


def _ratio(a, b) -> str:
    if a is None or b is None:
        return "    -"
    if a == 0:
        return "  inf" if b else "    -"
    return f"{b / a:5.2f}"


def _fmt(x) -> str:
    return "      -" if x is None else f"{x:7.3f}"


def compare(grpo_dir: str, seal_dir: str) -> dict:
    g_rows, g_tr = load(grpo_dir)
    s_rows, s_tr = load(seal_dir)
    steps = [r["global_step"] for r in g_rows]
    if steps != [r["global_step"] for r in s_rows]:
        raise SystemExit(f"the runs cover different steps: grpo {steps}, seal {[r['global_step'] for r in s_rows]}")
    same_tasks = [sorted(a["tasks"]) == sorted(b["tasks"]) for a, b in zip(g_rows, s_rows)]

    print(f"grpo: {grpo_dir}\nseal: {seal_dir}")
    print(f"steps {steps}; same tasks at every step: {all(same_tasks)}")
    head = f"{'component':<14}" + "".join(f" | g{g}: grpo s  seal s  x   " for g in steps) + " | total*: grpo   seal   x"
    print("\nstep times (seconds) and seal/grpo ratios; *total without the first step (vLLM warm-up)")
    print(head)
    print("-" * len(head))
    summary = {"steps": steps, "same_tasks": same_tasks, "components": {}, "tokens": []}
    for name, key in COMPONENTS:
        line = f"{name:<14}"
        gs, ss = [], []
        for a, b in zip(g_rows, s_rows):
            x, y = a["metrics"].get(key), b["metrics"].get(key)
            gs.append(x)
            ss.append(y)
            line += f" | {_fmt(x)} {_fmt(y)} {_ratio(x, y)}"
        gt = sum(v for v in gs[1:] if v is not None) if len(gs) > 1 else None
        st = sum(v for v in ss[1:] if v is not None) if len(ss) > 1 else None
        line += f" | {_fmt(gt)} {_fmt(st)} {_ratio(gt, st)}"
        print(line)
        summary["components"][name.strip()] = {"key": key, "grpo": gs, "seal": ss,
                                                "ratio_total_wo_first": (st / gt) if gt else None}

    print("\ntokens per rollout (mean over the step's rollouts)")
    thead = (f"{'step':>4} | {'prompt grpo':>11} {'prompt seal':>11} {'diff':>6} | {'resp grpo':>9} {'resp seal':>9} | "
             f"{'cue tok':>7} {'cue/total %':>11} | {'w mean':>6}")
    print(thead)
    print("-" * len(thead))
    for a, b in zip(g_rows, s_rows):
        k = int(a["step"])
        gp, sp = a["metrics"].get("prompt_length/mean"), b["metrics"].get("prompt_length/mean")
        gr, sr = a["metrics"].get("response_length/mean"), b["metrics"].get("response_length/mean")
        cues = [int(t.get("cue_tokens") or 0) for t in s_tr[k]]
        cue = statistics.fmean(cues) if cues else 0.0
        share = 100.0 * cue / ((sp or 0) + (sr or 0)) if (sp or sr) else 0.0
        print(f"{a['global_step']:>4} | {gp:11.1f} {sp:11.1f} {sp - gp:6.1f} | {gr:9.1f} {sr:9.1f} | {cue:7.1f} "
              f"{share:10.2f}% | {b['w_mean']:6.3f}")
        summary["tokens"].append({"global_step": a["global_step"], "prompt_grpo": gp, "prompt_seal": sp,
                                  "prompt_diff": sp - gp, "response_grpo": gr, "response_seal": sr,
                                  "cue_tokens_mean": cue, "cue_share_pct": share, "w_mean_seal": b["w_mean"]})
    return summary


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--out", default=os.path.join(ROOT, "runs", "bench_real"))
    p.add_argument("--grpo-run", default=None, help="compare this finished grpo run folder (no new runs)")
    p.add_argument("--seal-run", default=None, help="compare this finished seal run folder (no new runs)")
    p.add_argument("--model", default=None, help="tiny model folder shared by both runs (default: made by the first)")
    p.add_argument("extra", nargs="*", help="Hydra overrides for both runs")
    args = p.parse_args(argv)

    if args.grpo_run and args.seal_run:
        grpo_dir, seal_dir = args.grpo_run, args.seal_run
        walls = None
    else:
        out = os.path.abspath(args.out)
        grpo_dir, seal_dir = os.path.join(out, "grpo"), os.path.join(out, "seal")
        walls = {"grpo": run_variant("grpo", grpo_dir, args.steps, args.model, args.extra)}
        model = args.model or os.path.join(grpo_dir, "model")
        walls["seal"] = run_variant("seal", seal_dir, args.steps, model, args.extra)
        print(f"wall time of run_cpu.sh: grpo {walls['grpo']:.0f} s, seal {walls['seal']:.0f} s "
              f"(ratio {walls['seal'] / walls['grpo']:.2f})")
    summary = compare(grpo_dir, seal_dir)
    summary["wall_s"] = walls
    if not (args.grpo_run and args.seal_run):
        with open(os.path.join(os.path.abspath(args.out), "bench_real_path.json"), "w") as f:
            json.dump(summary, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
