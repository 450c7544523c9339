"""Warm start of the BFCL V3 CPU run: the tiny local Qwen2 fine-tuned on the ground-truth trajectories of the CPU
split's training tasks until it is partly right, so that GRPO groups have reward variance and SEAL's weights
multiply non-zero advantages.

    python -m seal_verl.models.warm_start.bfcl_cpu OUT_DIR --base MODEL_DIR [--split-file F] [--epochs N] [--lr X]
                                            [--target P] [--samples K] [--force]

The pipeline (:mod:`seal_verl.models.warm_start.pipeline`) with: the ``seal_bfcl`` loop of the CPU run
(``recipes/bfcl_v3/cpu/agent_loops/json.yaml``, the lengths of ``+cpu=tiny``), the ground truth of every training
task of the split rendered under the initial interface only (no cue is on before the first RL step; every
scripted rollout must score 1, so a ground truth that the budgets would cut fails here, before anything trains),
up to ``--epochs`` epochs (70 by default) with a task leaving the mix once its ground truth is likely enough, and
``--samples`` rollouts per task sampled at the recipe's temperature and top-p for the pass rate before RL.

Only the initial interface: rows under every subset of the cue kinds (tried, so that cue text would not knock the
model off its calls) did not reach a partly right model within the warm start's few minutes. ``recipes/bfcl_v3/cpu/
run_cpu.sh`` (through ``prepare_run.py``) calls it; the run uses the shipped copy (``recipes/bfcl_v3/cpu/model``)
unless ``REBUILD=1``.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Optional, Sequence

from seal_verl.models.warm_start import pipeline as P
from seal_verl.models.warm_start.run_config import CPU_DIR
from seal_verl.models.warm_start import render as R
from seal_verl.models.warm_start import sampling as S
from seal_verl.models.warm_start import target as T

TARGET = T.Target(env="bfcl", run="bfcl_cpu")
DEFAULT_SPLIT = os.path.join(CPU_DIR, "split_cpu.json")
DEFAULTS = {"epochs": 70, "lr": 5e-3, "samples": 4, "seed": 0, "target": 0.5}


def read_split(split_file: str) -> dict[str, list[str]]:
    """``{"train": [...], "eval": [...]}`` of a split file, checked by BFCL's own reader."""
    from env_wrappers.bfcl.environment.prepare_data import read_split_file

    return read_split_file(split_file)


def render_rows(model: str, task_ids: list[str], out: str, subsets: Sequence[tuple[str, ...]] = ((),)) -> list[dict]:
    """Per task and cue subset (the initial interface, no cue, unless asked): ``input_ids`` (prompt + response
    tokens) and ``labels`` (-100 except generated tokens), rendered by the real ``seal_bfcl`` agent loop replaying
    the ground truth; raises :class:`~seal_verl.models.warm_start.pipeline.WarmStartError` if a ground-truth rollout does
    not pass."""
    return R.ground_truth_rows(TARGET, model, task_ids, out, subsets, hint=" Choose other tasks in the split file.")


def pass_rates(model_dir: str, task_ids: list[str], samples: int, seed: int, out: str) -> dict[str, dict]:
    """Per task: ``samples`` rollouts of the ``seal_bfcl`` loop sampled from ``model_dir`` at the recipe's
    temperature, graded by the real reward function -> ``{"pass_rate", "scores", "labels"}``."""
    return S.pass_rates(TARGET, model_dir, task_ids, samples, seed, out)


def warm_start(out: str, base: str, split_file: str = DEFAULT_SPLIT, epochs: int = DEFAULTS["epochs"],
               lr: float = DEFAULTS["lr"], samples: int = DEFAULTS["samples"], seed: int = DEFAULTS["seed"],
               target: float = DEFAULTS["target"], force: bool = False) -> dict:
    """Build (or reuse) the warm-started model in ``out``; returns the contents of ``warm_start.json``."""
    P.check_arguments(epochs, lr, samples, target)
    P.check_base(base, out, force)
    started = time.time()
    task_ids = list(read_split(split_file)["train"])
    os.makedirs(out, exist_ok=True)
    rows = render_rows(base, task_ids, out)
    s = TARGET.settings
    params = {"epochs": int(epochs), "lr": float(lr), "samples": int(samples), "seed": int(seed),
              "target": float(target), "temperature": s.temperature, "top_p": s.top_p}

    def measure(model_dir: str) -> dict:
        rates = pass_rates(model_dir, task_ids, samples, seed, model_dir) if samples else {}
        if rates and not any(r["pass_rate"] > 0 for r in rates.values()):
            raise T.WarmStartError(
                f"the warm-started model passed none of the {len(rates) * samples} sampled rollouts, so RL would "
                f"have no signal: raise --epochs (now {epochs}) or --lr (now {lr}); {S.format_pass_table(rates)}")
        return {"pass_rates": rates}

    def report(info: dict) -> str:
        rates = info.get("pass_rates")
        if not rates:
            return ""
        return (f"[warm-start] pass rate before RL ({info['params']['samples']} rollouts per task, temperature "
                f"{info['params']['temperature']}):\n{S.format_pass_table(rates)}")

    return P.build(out, base, rows, params, tasks=task_ids, started=started, force=force, code=[__file__],
                   what=f"{len(rows)} ground-truth trajectories rendered by the seal_bfcl agent loop "
                        "(initial interface, no cue)",
                   measure=measure, report=report, record={"split_file": os.path.abspath(split_file)})


def main(argv: Optional[list[str]] = None) -> int:
    def split_argument(p):
        p.add_argument("--split-file", default=DEFAULT_SPLIT,
                       help="its train ids are the tasks learned (default: %(default)s)")

    return P.cli(argv, "python -m seal_verl.models.warm_start.bfcl_cpu", __doc__,
                 lambda a: warm_start(a.out, a.base, a.split_file, a.epochs, a.lr, a.samples, a.seed, a.target,
                                      a.force),
                 DEFAULTS, "the tiny random model to start from (prepare_run.py makes tiny-random-ctx8192)",
                 more_arguments=split_argument)


if __name__ == "__main__":
    sys.exit(main())
