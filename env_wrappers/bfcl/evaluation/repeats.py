"""Repeated evaluations and their spread: ``seal-verl eval --samples N [--seeds S ...]``.

BFCL's official protocol is one greedy sample per task, and it stays the default. Multi-turn scores move with the
sampling seed, so a user who asks for it gets repetitions: ``--samples N`` draws N samples per task at a temperature
above 0, ``--seeds S1 S2 ...`` one seeded sample per seed (every request of repetition ``(s, k)`` carries the seed
``s * N + k``, so repetitions never share a seed), both together N per seed. Each repetition is a complete
evaluation in its own folder (``OUT/rep_s<seed>_k<k>/``, or ``OUT/rep_k<k>/`` unseeded: result files, labels and
scores, resumable like any run), and ``OUT/spread.json`` holds, per category and for the average, the mean, the
sample standard deviation, the minimum, the maximum and every repetition's value. Greedy decoding ignores seeds and
gives every repetition the same answers, so repetitions need ``--temperature`` above 0.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field, replace
from typing import Callable, Optional

from seal_verl.atomic import atomic_write_text

from .config import EvalConfig, EvalError

SPREAD_FILE = "spread.json"


@dataclass
class Repetition:
    name: str              # the sub-folder
    seed: Optional[int]    # the request seed, None: the server's
    sample: int


def repetitions(samples: int, seeds: Optional[list]) -> list[Repetition]:
    """The repetitions ``--samples`` x ``--seeds`` ask for, in a stable order."""
    if not isinstance(samples, int) or isinstance(samples, bool) or samples < 1:
        raise EvalError(f"--samples must be an integer >= 1, got {samples!r}")
    seeds = list(seeds or [])
    bad = [s for s in seeds if not isinstance(s, int) or isinstance(s, bool) or s < 0]
    if bad:
        raise EvalError(f"--seeds must be integers >= 0, got {bad[0]!r}")
    if len(set(seeds)) != len(seeds):
        raise EvalError("--seeds lists a seed twice; each seed is one repetition")
    if not seeds:
        return [Repetition(f"rep_k{k}", None, k) for k in range(samples)]
    return [Repetition(f"rep_s{s}_k{k}", s * samples + k, k) for s in seeds for k in range(samples)]


def is_repeated(samples: int, seeds: Optional[list]) -> bool:
    return samples != 1 or bool(seeds)


@dataclass
class RepeatSummary:
    spread: dict
    runs: list = field(default_factory=list)  # (Repetition, EvalSummary)
    interrupted: bool = False

    @property
    def missing(self) -> list:
        return [(rep.name, tid) for rep, s in self.runs for tid in s.missing]


def run_repeats(cfg: EvalConfig, samples: int, seeds: Optional[list], run_one: Optional[Callable] = None,
                log: Optional[Callable[[str], None]] = None) -> RepeatSummary:
    """Every repetition in turn (``run_one(cfg) -> EvalSummary``, default the ordinary evaluation), then the spread.
    An interrupted repetition stops the series; what finished is in ``spread.json``."""
    reps = repetitions(samples, seeds)
    if cfg.temperature == 0:
        raise EvalError(f"{len(reps)} repetitions at --temperature 0 would repeat the same greedy answers (greedy "
                        "decoding ignores the seed): give --temperature > 0, or drop --samples/--seeds for BFCL's "
                        "official protocol (one greedy sample per task)")
    if run_one is None:
        from .runner import run_eval as run_one
    done = RepeatSummary(spread={})
    for i, rep in enumerate(reps, 1):
        if log:
            log(f"repetition {i}/{len(reps)}: {rep.name} (seed {rep.seed if rep.seed is not None else 'unset'})")
        summary = run_one(replace(cfg, out=os.path.join(cfg.out, rep.name), seed=rep.seed))
        done.runs.append((rep, summary))
        if summary.interrupted:
            done.interrupted = True
            break
    done.spread = spread(cfg, samples, seeds, done.runs)
    atomic_write_text(os.path.join(cfg.out, SPREAD_FILE), json.dumps(done.spread, indent=2) + "\n")
    return done


def _stats(values: list) -> dict:
    n = len(values)
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    return {"mean": mean, "std": std, "min": min(values), "max": max(values), "n": n, "values": values}


def spread(cfg: EvalConfig, samples: int, seeds: Optional[list], runs: list) -> dict:
    """Mean, sample std, min and max of each category's accuracy and of the average over the repetitions that
    completed (a repetition with a task missing is named, not counted)."""
    complete = [(rep, s) for rep, s in runs if not s.missing and s.scores]
    categories: dict = {}
    for _, s in complete:
        for cat, v in s.scores["categories"].items():
            categories.setdefault(cat, []).append(v["accuracy"])
    return {
        "repetitions": [{"name": rep.name, "seed": rep.seed, "sample": rep.sample,
                         "average": s.scores.get("average") if s.scores else None, "complete": not s.missing}
                        for rep, s in runs],
        "categories": {cat: _stats(vals) for cat, vals in categories.items()},
        "average": _stats([s.scores["average"] for _, s in complete]) if complete else None,
        "protocol": {"samples_per_task": samples, "seeds": list(seeds or []), "temperature": cfg.temperature,
                     "request_seed": "seed * samples + sample" if seeds else "unset (the server's)",
                     "std": "sample standard deviation over the complete repetitions",
                     "official": "no: BFCL's protocol is one greedy sample per task"},
    }


def format_spread(result: RepeatSummary) -> str:
    sp = result.spread
    n = len([r for r in sp["repetitions"] if r["complete"]])
    lines = [f"accuracy over {n} repetition(s) ({sp['protocol']['samples_per_task']} sample(s) per task"
             + (f", seeds {' '.join(map(str, sp['protocol']['seeds']))}" if sp['protocol']['seeds'] else "")
             + f", temperature {sp['protocol']['temperature']}): mean +- std [min, max]"]
    for cat, st in sp["categories"].items():
        lines.append(f"  {cat:<28} {100 * st['mean']:6.2f} +- {100 * st['std']:5.2f}  "
                     f"[{100 * st['min']:.2f}, {100 * st['max']:.2f}]")
    if sp["average"]:
        st = sp["average"]
        lines.append(f"  {'average':<28} {100 * st['mean']:6.2f} +- {100 * st['std']:5.2f}  "
                     f"[{100 * st['min']:.2f}, {100 * st['max']:.2f}]")
    lines.append("not BFCL's official protocol (one greedy sample per task): run without --samples/--seeds for that")
    return "\n".join(lines)


def protocol_line(cfg: EvalConfig) -> str:
    """The protocol line a single evaluation prints under its table."""
    if cfg.temperature == 0:
        return "protocol: one greedy sample per task (BFCL's official protocol)"
    seed = f", seed {cfg.seed}" if cfg.seed is not None else ""
    return (f"protocol: one sample per task at temperature {cfg.temperature}{seed} (BFCL's official protocol is "
            "greedy: --temperature 0)")

