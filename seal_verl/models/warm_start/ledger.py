"""Warm start of the ledger learning benchmark (stages 1-4): the tiny local Qwen2 fine-tuned on ground-truth ledger
trajectories until it is partly right, with and without SEAL's cue text in its observations.

    python -m seal_verl.models.warm_start.ledger OUT_DIR --base MODEL_DIR [--epochs N] [--lr X] [--target P]
                                          [--samples K] [--seed S] [--force]

The pipeline (:mod:`seal_verl.models.warm_start.pipeline`) with the ``seal_env`` loop of the ledger run (its agent-loop
file and the lengths of ``+cpu=tiny +learn=ledger``). Unlike the BFCL warm start, each task is rendered twice:
under the initial interface (no cue) and with every cue kind on and ``proactive_cues`` true, so the start-of-task
cue blocks sit in the first user message. The model thus learns its calls both with and without cue text and can
still act when SEAL switches cues on during RL; without such rows a 0.4M-parameter model is knocked off its calls
by text it has never seen. Then the same agent loop samples ``--samples`` rollouts per training task at the run's
temperature and greedy rollouts of the held-out tasks (the ``env`` loop, no cue); both pass rates go to
``warm_start.json``. The stages and their settings: :mod:`seal_verl.models.warm_start.ledger_stages`.
"""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from typing import Optional, Sequence

from seal_verl.core import taxonomy as tx
from seal_verl.core.interface import ACT_WITH_TOOLS, DEFAULT_TRIGGERS, ordered
from seal_verl.models.warm_start import pipeline as P
from seal_verl.models.warm_start import render as R
from seal_verl.models.warm_start import sampling as S
from seal_verl.models.warm_start import target as T

ENV = "ledger"
TARGET = T.Target(env=ENV, run="ledger")
#: the ledger run's trigger map (recipes/ledger_cpu/config/learn/ledger.yaml): the default one with the behavioural
#: sentence for missing_tool_call, the affordance cue the shipped warm start was trained to read
LEDGER_TRIGGERS: dict[str, str] = {**DEFAULT_TRIGGERS, tx.MISSING_TOOL_CALL: ACT_WITH_TOOLS}
#: the cue kinds the warm start reads: those the ledger run switches on
WARM_KINDS: tuple[str, ...] = tuple(ordered(LEDGER_TRIGGERS.values()))
#: the cue states every ledger row is rendered under: none, and every one of those kinds on
CUE_STATES: tuple[tuple[str, ...], ...] = ((), WARM_KINDS)
DEFAULTS = {"epochs": 40, "lr": 5e-3, "samples": 4, "seed": 0, "target": 0.35}
#: what the record keeps of each row (``failure``: the mixed stage's failure kind, None for the ground truth)
ROW_KEYS = P.ROW_KEYS[:2] + ("failure",) + P.ROW_KEYS[2:]


def render_scripted(model: str, task_ids: list[str], out: str, plan, expected: Optional[dict] = None,
                    subsets: Sequence[tuple[str, ...]] = CUE_STATES) -> tuple[list[dict], list[str]]:
    """Rows of the scripted rollouts ``plan(task)`` -> ``Plan`` of every task, played through the training loop
    under each cue subset (by default no cue and every cue kind on, proactive cues); kept when the rollout passes
    or, with ``expected`` (``{task_id: labels}``), when it carries exactly those labels. Returns
    ``(rows, rejected)``."""
    return R.render_scripted(TARGET, model, task_ids, out, plan, subsets, expected)


def render_rows(model: str, task_ids: list[str], out: str) -> list[dict]:
    """Ground-truth rows of every task under no cue and under every cue kind on (proactive cues)."""
    return R.ground_truth_rows(TARGET, model, task_ids, out, CUE_STATES)


def pass_rates(model_dir: str, task_ids: list[str], samples: int, seed: int, out: str, greedy: bool = False) -> dict:
    """Per task: rollouts sampled from ``model_dir`` (training loop at the run's temperature, or the evaluation
    loop greedily), graded by the real reward function -> ``{"pass_rate", "scores", "labels"}``."""
    return S.pass_rates(TARGET, model_dir, task_ids, samples, seed, out, greedy=greedy)


def warm_start(out: str, base: str, epochs: int = DEFAULTS["epochs"], lr: float = DEFAULTS["lr"],
               samples: int = DEFAULTS["samples"], seed: int = DEFAULTS["seed"], target: float = DEFAULTS["target"],
               force: bool = False, more_rows=None, more_params: Optional[dict] = None) -> dict:
    """Build (or reuse) the warm-started ledger model in ``out``; returns ``warm_start.json``'s contents.

    ``more_rows(base, out)`` -> rows trained beside the ground truth (the mixed stage's labelled failures, each
    with a ``failure`` key); ``more_params``: the settings that made them. Both are part of the cache key."""
    from seal_verl import rollouts
    P.check_arguments(epochs, lr, samples, target if more_rows is None else None)
    P.check_base(base, out, force)
    env = rollouts.environment(ENV)
    train_ids, eval_ids = env.task_ids("train"), env.task_ids("eval")
    started = time.time()
    os.makedirs(out, exist_ok=True)
    rows = render_rows(base, train_ids, out)
    # ground truth first: fine_tune's stopping rule probes each task's first row (its ground truth, no cue)
    rows += more_rows(base, out) if more_rows else []
    params = {"epochs": int(epochs), "lr": float(lr), "samples": int(samples), "seed": int(seed),
              "target": float(target), "temperature": TARGET.settings.temperature,
              "code": P.file_digest(__file__), **(more_params or {})}

    def measure(model_dir: str) -> dict:
        rates = pass_rates(model_dir, train_ids, samples, seed, model_dir) if samples else {}
        held = pass_rates(model_dir, eval_ids, 1, seed, model_dir, greedy=True) if samples else {}
        return {"pass_rates": rates, "heldout": held, "heldout_greedy": S.mean_pass_rate(held)}

    def report(info: dict) -> str:
        return (f"[warm-start] sampled pass rate on the training tasks {info.get('mean_pass_rate')}, greedy "
                f"held-out accuracy {info.get('heldout_greedy')}")

    failing = Counter(r["failure"] for r in rows if r.get("failure"))
    kinds = f"; failing: {', '.join(f'{k} {n}' for k, n in failing.items())}" if failing else ""
    return P.build(out, base, rows, params, tasks=train_ids, started=started, force=force,
                   what=f"{len(rows)} rows ({len(train_ids)} tasks x no cue / every cue on{kinds})",
                   measure=measure, report=report, record={"env": ENV}, row_keys=ROW_KEYS)


def main(argv: Optional[list[str]] = None) -> int:
    return P.cli(argv, "python -m seal_verl.models.warm_start.ledger", __doc__,
                 lambda a: warm_start(a.out, a.base, a.epochs, a.lr, a.samples, a.seed, a.target, a.force),
                 DEFAULTS, "the tiny random model (or the previous stage) to start from")


if __name__ == "__main__":
    sys.exit(main())
