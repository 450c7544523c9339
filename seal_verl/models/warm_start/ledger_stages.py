"""The ledger warm start's five stages, and the behaviour its last stage is expected to leave.

    python -m seal_verl.models.warm_start.ledger_stages MODELS_DIR     # build (or reuse) every stage; prints the model

``tiny-random`` (``seal_verl.models.tiny_model``, shared with the BFCL CPU run) warm-started on the ledger training tasks
in five stages, each cached and rebuilt only when an input changes. Four supervised stages
(:mod:`seal_verl.models.warm_start.ledger`): ``ledger-warm-1`` (30 epochs at lr 1e-2, cosine), then 10 epochs at 5e-3, 15
and 40 at 3e-3, each a cosine schedule from the previous one, to ``ledger-warm``, which calls the right tool on
most turns and errs mostly in the arguments. The early stages at a high learning rate are chaotic (the same code
and seed built different models on two machines after two stages); the long stages at 3e-3 brought both to that
behaviour. Then the mixed stage (:mod:`seal_verl.models.warm_start.ledger_mix`) to ``ledger-mix``, the benchmark's model:
10 epochs on the right trajectories plus one labelled failing trajectory per task and cue state (no call, the
opposite state change, a malformed call), so the model is right on some samples and wrong in labelled ways on
others, which RL can sharpen. The sampled label mix of that model is checked against :data:`BAND`, the behaviour
the benchmark's settings were chosen for. ``recipes/ledger_cpu/prepare_ledger.py`` (run by ``run_ledger.sh``)
calls :func:`build_stages`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from typing import Optional

#: the supervised stages: (model folder under the models folder, ``ledger.warm_start`` arguments)
STAGES = (("ledger-warm-1", {"epochs": 30, "lr": 1e-2, "samples": 1, "target": 0.3}),
          ("ledger-warm-2", {"epochs": 10, "lr": 5e-3, "samples": 1, "target": 0.3}),
          ("ledger-warm-3", {"epochs": 15, "lr": 3e-3, "samples": 1, "target": 0.3}),
          ("ledger-warm", {"epochs": 40, "lr": 3e-3, "samples": 1, "target": 0.3}))
#: the fifth stage (``ledger_mix``, its own settings): right and labelled-wrong trajectories mixed; the benchmark's
#: model
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


def build_stages(models_dir: str) -> dict:
    """Every stage in ``models_dir`` (each reused when its inputs are unchanged), from ``tiny-random`` there (made
    if absent); prints the last stage's sampled label mix and warns on stderr when it is outside :data:`BAND`.
    Returns the mixed stage's ``warm_start.json`` contents (``out``: the benchmark's model)."""
    from seal_verl import rollouts
    from seal_verl.models.warm_start.ledger import warm_start
    from seal_verl.models.warm_start.ledger_mix import mixed_stage

    base = rollouts.tiny_model(os.path.join(models_dir, "tiny-random"))
    for name, params in STAGES:
        info = warm_start(os.path.join(models_dir, name), base, **params)
        base = info["out"]
        # the warm start leaves its rendered task files in the model folder; the next stage fingerprints every
        # file of its base folder, so they must not be there
        for f in os.listdir(base):
            if f.endswith(".parquet"):
                os.remove(os.path.join(base, f))
    info = mixed_stage(os.path.join(models_dir, MIXED), base)
    b = behaviour(info)
    print("[warm-start] sampled training turns: " + ", ".join(f"{z} {p:.2f}" for z, p in b["mix"].items()),
          flush=True)
    if b["problems"]:
        print(f"[warm-start] warning: {info['out']} is outside the behaviour the benchmark was tuned for "
              f"({'; '.join(b['problems'])}); its curves will not be comparable with docs/benchmarks.md",
              file=sys.stderr, flush=True)
    return info


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m seal_verl.models.warm_start.ledger_stages",
                                description="Build (or reuse) the ledger warm start's five stages.")
    p.add_argument("models_dir", help="the model cache (tiny-random and one folder per stage)")
    args = p.parse_args(argv)
    from seal_verl import env_vars
    from seal_verl.rollouts import quiet_libraries

    env_vars.check_or_exit("warm-start")
    from seal_verl.models.warm_start.target import WarmStartError

    quiet_libraries()
    try:
        info = build_stages(args.models_dir)
    except (WarmStartError, ValueError, FileNotFoundError) as e:
        print(f"warm-start: error: {e}", file=sys.stderr)
        return 2
    print(f"model: {info['out']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
