"""Run folders as a finished ledger benchmark run leaves them (metrics, traces, validation, timing), for the
benchmarks' reading tests: no training."""

from __future__ import annotations

import json
import os


def probe(step, **effects):
    """A step row's cue_effect record as the probe writes it: kind -> (diff, lo, hi)."""
    return {"step": step, "active": sorted(k for k in effects if k != "all"), "samples": 2, "n_rollouts": 32,
            "effects": {k: {"with": 0.5 + d / 2, "without": 0.5 - d / 2, "diff": d, "lo": lo, "hi": hi,
                            "n_with": 16, "n_without": 16} for k, (d, lo, hi) in effects.items()}}


def fake_run(path, rewards, heldout=(0.1, 0.4), steps_done=None, exit_code=0, probes=None):
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "metrics.jsonl"), "w") as m:
        for k, r in enumerate(rewards, 1):
            m.write(json.dumps({"global_step": k, "active_during": ["schema_constraints"] if k > 2 else [],
                                "w_mean": 1.0, "cue_effect": (probes or {}).get(k)}) + "\n")
            with open(os.path.join(path, f"traces_step_{k}.jsonl"), "w") as t:
                for i in range(4):  # 4 rollouts: rewards r +- 0.1, so the mean is r
                    t.write(json.dumps({"reward": r + (0.1 if i % 2 else -0.1), "labels": ["pass", "argument_mismatch"],
                                        "grpo_advantage": 0.5, "cue_count": 1 if k > 2 else 0}) + "\n")
    with open(os.path.join(path, "val_traces.jsonl"), "w") as v:
        for step, score in zip((0, len(rewards)), heldout):
            for _ in range(2):
                v.write(json.dumps({"global_step": step, "score": score, "acc": 0.0,
                                    "labels": ["pass", "pass" if step else "argument_mismatch"]}) + "\n")
    with open(os.path.join(path, "timing.json"), "w") as f:
        json.dump({"exit_code": exit_code, "steps": steps_done or len(rewards)}, f)
