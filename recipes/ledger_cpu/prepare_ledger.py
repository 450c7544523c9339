"""Model and data of a ledger learning run (used by run_ledger.sh).

    python recipes/ledger_cpu/prepare_ledger.py RUN_DIR [--models-dir D]

The model: ``tiny-random`` (seal_verl.tiny_model, shared with the BFCL CPU run) warm-started on the ledger
training tasks in two stages (ledger_warm_start.py; each cached, rebuilt only when an input changes):
``ledger-warm-1`` (30 epochs at lr 1e-2, cosine) and ``ledger-warm`` (10 more epochs at 5e-3 from it). The
second stage exists because the first one's cosine schedule ends with the model still guessing most
arguments; every run of the benchmark starts from ``ledger-warm``. The data go to ``RUN_DIR/data``: ``train.parquet`` (the
64 training tasks, ``seal_env`` loop: SEAL's interface on) and ``eval.parquet`` (the 32 held-out tasks,
``env`` loop: no cue), written by the environment's own row builder.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DEFAULT_MODELS = os.path.join(REPO, "runs", "cpu", "models")
#: the warm start's stages: (model folder under --models-dir, ledger_warm_start.warm_start arguments)
STAGES = (("ledger-warm-1", {"epochs": 30, "lr": 1e-2, "samples": 1, "target": 0.3}),
          ("ledger-warm", {"epochs": 10, "lr": 5e-3, "samples": 1, "target": 0.3}))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run_dir")
    p.add_argument("--models-dir", default=DEFAULT_MODELS)
    p.add_argument("--model", default=None, help="use this model folder as it is (no warm start)")
    args = p.parse_args(argv)
    from seal_verl import dry_run as dr

    sys.path.insert(0, HERE)
    from ledger_warm_start import ENV, warm_start

    run_dir = os.path.abspath(args.run_dir)
    data = os.path.join(run_dir, "data")
    os.makedirs(data, exist_ok=True)
    if args.model:
        model = os.path.abspath(args.model)
    else:
        base = dr.tiny_model(os.path.join(args.models_dir, "tiny-random"))
        for name, params in STAGES:
            base = warm_start(os.path.join(args.models_dir, name), base, **params)["out"]
            # the warm start leaves its rendered task files in the model folder; the next stage fingerprints
            # every file of its base folder, so they must not be there
            for f in os.listdir(base):
                if f.endswith(".parquet"):
                    os.remove(os.path.join(base, f))
        model = base
    env = dr.environment(ENV)
    dr.write_parquet(dr.dataset_rows(env.task_ids("train"), "seal_env", "train", "json", env=ENV),
                     os.path.join(data, "train.parquet"))
    dr.write_parquet(dr.dataset_rows(env.task_ids("eval"), "env", "eval", "json", env=ENV),
                     os.path.join(data, "eval.parquet"))
    with open(os.path.join(run_dir, "prepare.json"), "w") as f:
        json.dump({"model": model, "env": ENV}, f, indent=1)
    print(f"model: {model}; data: {data} (train 64 tasks, eval 32 held-out tasks)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
