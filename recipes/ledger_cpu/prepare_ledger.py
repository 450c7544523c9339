"""Model and data of a ledger learning run (used by run_ledger.sh).

    python recipes/ledger_cpu/prepare_ledger.py RUN_DIR [--models-dir D] [--model DIR]

The model: the ledger warm start, five stages each cached and rebuilt only when an input changes
(``seal_verl.models.warm_start.ledger_stages``: four supervised stages and the mixed stage, the benchmark's model; it
prints the model's behaviour, the sampled label mix, and warns when that is outside the band the benchmark's
settings were chosen for), or ``--model`` as it is (verified first, never written). The data go to ``RUN_DIR/data``: ``train.parquet`` (the 64
training tasks, ``seal_env`` loop: SEAL's interface on) and ``eval.parquet`` (the 32 held-out tasks, ``env`` loop:
no cue), written by the environment's own row builder.
"""

from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DEFAULT_MODELS = os.path.join(REPO, "runs", "cpu", "models")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run_dir")
    p.add_argument("--models-dir", default=DEFAULT_MODELS)
    p.add_argument("--model", default=None, help="use this model folder as it is (no warm start; verified first)")
    args = p.parse_args(argv)
    from seal_verl import env_vars
    from seal_verl.models.shipped import check_run_inputs
    from seal_verl.runs import folder as RF

    env_vars.check_or_exit("prepare-ledger")
    checked, error = check_run_inputs(args.model, args.models_dir)
    if error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    from seal_verl import rollouts
    from seal_verl.models.warm_start import ledger_stages
    from seal_verl.models.warm_start.ledger import ENV

    run_dir = os.path.abspath(args.run_dir)
    data = os.path.join(run_dir, "data")
    os.makedirs(data, exist_ok=True)
    if args.model:
        model = os.path.abspath(args.model)
    else:
        from seal_verl.models.warm_start.target import WarmStartError

        try:
            model = ledger_stages.build_stages(args.models_dir)["out"]
        except WarmStartError as e:
            print(f"error: warm start: {e}", file=sys.stderr)
            return 2
    env = rollouts.environment(ENV)
    rollouts.write_parquet(rollouts.dataset_rows(env.task_ids("train"), "seal_env", "train", "json", env=ENV),
                           os.path.join(data, "train.parquet"))
    rollouts.write_parquet(rollouts.dataset_rows(env.task_ids("eval"), "env", "eval", "json", env=ENV),
                           os.path.join(data, "eval.parquet"))
    RF.write_prepare(run_dir, {"model": model, "model_check": checked, "env": ENV})
    print(f"model: {model} ({checked}); data: {data} (train 64 tasks, eval 32 held-out tasks)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
