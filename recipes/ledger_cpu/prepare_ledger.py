"""Model and data of a ledger learning run (used by run_ledger.sh).

    python recipes/ledger_cpu/prepare_ledger.py RUN_DIR [--models-dir D]

The model: ``tiny-random`` (seal_verl.tiny_model, shared with the BFCL CPU run) warm-started on the ledger
training tasks in five stages, each cached and rebuilt only when an input changes. Four supervised stages
(ledger_warm_start.py): ``ledger-warm-1`` (30 epochs at lr 1e-2, cosine), then 10 epochs at 5e-3, 15 and 40 at
3e-3, each a cosine schedule from the previous one, to ``ledger-warm``, which calls the right tool on most turns
and errs mostly in the arguments. The early stages at a high learning rate are chaotic (the same code and seed
built different models on two machines after two stages); the long stages at 3e-3 brought both to that
behaviour. Then the mixed stage (ledger_mix.py) to ``ledger-mix``, the benchmark's model: 10 epochs on the right
trajectories plus one labelled failing trajectory per task and cue state (no call, the opposite state change, a
malformed call), so the model is right on some samples and wrong in labelled ways on others, which RL can
sharpen. This script prints the model's behaviour (the sampled label mix) and warns when it is outside the band
the benchmark's settings were chosen for (``BAND``). The data go to ``RUN_DIR/data``: ``train.parquet`` (the
64 training tasks, ``seal_env`` loop: SEAL's interface on) and ``eval.parquet`` (the 32 held-out tasks,
``env`` loop: no cue), written by the environment's own row builder.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DEFAULT_MODELS = os.path.join(REPO, "runs", "cpu", "models")
#: the warm start's stages: (model folder under --models-dir, ledger_warm_start.warm_start arguments)
STAGES = (("ledger-warm-1", {"epochs": 30, "lr": 1e-2, "samples": 1, "target": 0.3}),
          ("ledger-warm-2", {"epochs": 10, "lr": 5e-3, "samples": 1, "target": 0.3}),
          ("ledger-warm-3", {"epochs": 15, "lr": 3e-3, "samples": 1, "target": 0.3}),
          ("ledger-warm", {"epochs": 40, "lr": 3e-3, "samples": 1, "target": 0.3}))
#: the fifth stage (ledger_mix.py, its own settings): right and labelled-wrong trajectories mixed; the benchmark's model
MIXED = "ledger-mix"


#: the behaviour the benchmark's settings were chosen for: the share of sampled training turns that call the right
#: tool (labels pass or argument_mismatch) and the share that pass. The mixed stage leaves about a quarter of the
#: turns on the right tool and a tenth passing; a model right on most turns has little left for RL to sharpen,
#: one right on almost none gives GRPO groups of a single outcome.
BAND = {"right_tool": (0.15, 0.6), "pass": (0.03, 0.3)}


def behaviour(info: dict) -> dict:
    """The label mix of the warm start's sampled training rollouts (``warm_start.json``'s ``pass_rates``), the
    share calling the right tool, and the problems against ``BAND`` (empty when inside it)."""
    labels = [z for r in (info.get("pass_rates") or {}).values() for ls in r.get("labels") or [] for z in ls]
    if not labels:
        return {"mix": {}, "right_tool": None, "pass": None, "problems": ["no sampled rollouts recorded"]}
    mix = {z: n / len(labels) for z, n in Counter(labels).most_common()}
    out = {"mix": mix, "right_tool": mix.get("pass", 0.0) + mix.get("argument_mismatch", 0.0),
           "pass": mix.get("pass", 0.0)}
    out["problems"] = [f"{k} {out[k]:.2f} outside {lo}-{hi}" for k, (lo, hi) in BAND.items()
                       if not lo <= out[k] <= hi]
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run_dir")
    p.add_argument("--models-dir", default=DEFAULT_MODELS)
    p.add_argument("--model", default=None, help="use this model folder as it is (no warm start)")
    args = p.parse_args(argv)
    from seal_verl import dry_run as dr

    sys.path.insert(0, HERE)
    from ledger_mix import mixed_stage
    from ledger_warm_start import ENV, warm_start

    run_dir = os.path.abspath(args.run_dir)
    data = os.path.join(run_dir, "data")
    os.makedirs(data, exist_ok=True)
    if args.model:
        model = os.path.abspath(args.model)
    else:
        base = dr.tiny_model(os.path.join(args.models_dir, "tiny-random"))
        for name, params in STAGES:
            info = warm_start(os.path.join(args.models_dir, name), base, **params)
            base = info["out"]
            # the warm start leaves its rendered task files in the model folder; the next stage fingerprints
            # every file of its base folder, so they must not be there
            for f in os.listdir(base):
                if f.endswith(".parquet"):
                    os.remove(os.path.join(base, f))
        info = mixed_stage(os.path.join(args.models_dir, MIXED), base)
        model = info["out"]
        b = behaviour(info)
        print("[warm-start] sampled training turns: " + ", ".join(f"{z} {p:.2f}" for z, p in b["mix"].items()),
              flush=True)
        if b["problems"]:
            print(f"[warm-start] warning: {model} is outside the behaviour the benchmark was tuned for "
                  f"({'; '.join(b['problems'])}); its curves will not be comparable with docs/benchmarks.md",
                  file=sys.stderr, flush=True)
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
