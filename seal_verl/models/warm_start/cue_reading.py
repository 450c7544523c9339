"""Cue reading: the cue effect of a model measured before any RL step, and the ledger stage that teaches cue text.

    python -m seal_verl.models.warm_start.cue_reading measure MODEL [--samples 8] [--kinds K ...] [--out FILE]  # effects
    python -m seal_verl.models.warm_start.cue_reading table FILE                                # a measurement's table
    python -m seal_verl.models.warm_start.cue_reading stage OUT --base MODEL                    # the cue-reading stage

The training run's probe (:mod:`seal_verl.verl_glue.probe`) measures the cue effect of the weights of the moment
under the interface of the moment. Before the first step no interface is on yet, so :func:`measure` takes the
probe's own conditions with every kind of the interface on (the ledger run's kinds, or ``--kinds``): the
whole interface against no cue (``all``) and, per kind, every kind on against every kind but that one. The values
compared are the run's training reward (the ledger's per-turn credit), sampled at the run's temperature through
verl's real agent loop, and the intervals are the probe's (:func:`seal_verl.core.cue_effect.effects`: task-paired, with
the unpaired interval beside it). ``table`` prints a measurement file's table, its intervals recomputed from the
rewards it holds (so a file written before the paired interval existed shows it too).

The stage (:func:`cue_stage`) fine-tunes the mixed ledger model on the same kinds of rows as the mixed stage (the
ground truth and one labelled failure per task) rendered under every subset of the cue kinds, the states the closed
loop produces, instead of only "none" and "all": a 0.4M-parameter model that saw cue text only with every kind on
treats each subset as an unseen prompt. Failing rows come under the same subsets as right ones, so cue text still
carries no hint of which to choose. Measured (docs/benchmarks.md, "The cue effect at the warm start"), that was not
the reason: after 40 epochs on every subset the whole interface still cost as much reward as before, while no
single kind did, before or after. The stage is kept as the command that reproduces that test; the shipped warm
start does not go through it.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from typing import Optional, Sequence

from seal_verl.core import extras as X
from seal_verl.models.warm_start import pipeline as P
from seal_verl.models.warm_start import render as R
from seal_verl.models.warm_start import sampling as S
from seal_verl.models.warm_start import target as T

DEFAULT_SAMPLES = 8
#: the most rollouts per task and condition a measurement takes (every rollout's tokens are held until the end:
#: a million per condition once reached 3.7 GB before a MemoryError)
MAX_SAMPLES = 256


def all_subsets(kinds: Sequence[str]) -> list[tuple[str, ...]]:
    """Every subset of ``kinds`` (the empty one first), each in the kinds' order."""
    return [c for n in range(len(kinds) + 1) for c in itertools.combinations(kinds, n)]


def default_kinds() -> tuple[str, ...]:
    """The kinds the default trigger map switches on (what ``measure`` compares unless told otherwise)."""
    from seal_verl.core.interface import InterfaceConfig

    return InterfaceConfig().kinds()


def _load_progress(path: Optional[str], key: dict) -> dict:
    """The conditions a stopped measurement of the same ``key`` (model, tasks, samples, seed, kinds) finished."""
    if not path or not os.path.isfile(path):
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            saved = json.load(f)
    except (OSError, ValueError):
        return {}
    return dict(saved.get("done") or {}) if saved.get("key") == key else {}


def _save_progress(path: Optional[str], key: dict, done: dict) -> None:
    if path:
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            json.dump({"key": key, "done": done}, f)
        os.replace(path + ".tmp", path)


def measure(target: T.Target, model: str, task_ids: list[str], samples: int = DEFAULT_SAMPLES, seed: int = 0,
            confidence: float = 0.95, kinds: Optional[Sequence[str]] = None, progress: Optional[str] = None) -> dict:
    """The cue effect of ``model`` with every kind of ``kinds`` on (the default trigger map's when None):
    ``{"effects": {name: Effect.to_dict()}, "values": ..., "task_ids": ...}``.

    ``samples`` rollouts per task and condition (``len(task_ids) * samples`` per condition). With ``progress`` (a
    file), each finished condition's rewards are saved there, and a measurement of the same model, tasks, samples,
    seed and kinds that stopped part-way resumes from it: each condition samples with its own seed, so the result
    is the one an uninterrupted run gives."""
    import tempfile

    from seal_verl.core.interface import ordered

    kinds_on = ordered(default_kinds() if kinds is None else kinds)
    with tempfile.TemporaryDirectory(prefix="cue-effect-") as folder:  # the task rows: gone when measured
        return _measure(target, model, task_ids, samples, seed, confidence, folder, kinds_on, progress)


def _measure(target: T.Target, model: str, task_ids: list[str], samples: int, seed: int, confidence: float,
             folder: str, kinds_on: list, progress: Optional[str]) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from seal_verl import rollouts as dr
    from seal_verl.core import cue_effect as ce
    from seal_verl.core.interface import ordered
    from seal_verl.models.shipped import file_sha256

    key = {"model_sha256": file_sha256(os.path.join(model, "model.safetensors")), "tasks": list(task_ids),
           "samples": samples, "seed": seed, "kinds": kinds_on}
    done = _load_progress(progress, key)
    s = target.settings
    torch.manual_seed(seed)
    lm = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
    lm.eval()
    tokenizer = AutoTokenizer.from_pretrained(model)
    config = dr.verl_config(model, agent_loop_yaml=s.agent_loops, rollouts=samples, prompt_length=s.prompt_length,
                            response_length=s.response_length, reward_path=dr.reward_fn_path(target.env), seal={},
                            reward_kwargs=dict(s.reward_kwargs),
                            overrides=[f"actor_rollout_ref.rollout.temperature={s.temperature}",
                                       f"actor_rollout_ref.rollout.top_p={s.top_p}",
                                       f"actor_rollout_ref.rollout.agent.default_agent_loop={target.loops[0]}"])
    parquet = dr.write_parquet(dr.dataset_rows(task_ids, target.loops[0], "train", "json", env=target.env),
                               os.path.join(folder, "cue_effect_tasks.parquet"))
    conds = ce.distinct(ce.conditions(kinds_on))
    records: list = []
    started = time.time()
    for i, (name, kinds) in enumerate(conds.items()):
        if name in done:
            records += [ce.ProbeRecord(name, t, False, v) for v, t in zip(done[name]["values"], done[name]["task_ids"])]
            print(f"[cue-effect] {name}: resumed from {progress}", flush=True)
            continue

        async def go(kinds=kinds, i=i):
            worker = dr.make_worker(config, S.HFSampler(lm, tokenizer, seed + i),
                                    state_source=R.cue_state(tuple(kinds)))
            batch = dr.load_batch(parquet, config, tokenizer, samples, uid_prefix=f"cue-{i}-")
            return await worker.generate_sequences(batch)

        gen = R.run_loop(go)
        for j in range(len(gen)):
            reward = float(gen.non_tensor_batch[X.SCORE][j])
            labels = json.loads(str(gen.non_tensor_batch[X.LABELS][j]))
            records.append(ce.ProbeRecord(name, str(gen.non_tensor_batch["task_id"][j]),
                                          all(z == "pass" for z in labels), reward))
        mine = [r for r in records if r.condition == name]
        done[name] = {"values": [r.value for r in mine], "task_ids": [r.task_id for r in mine]}
        _save_progress(progress, key, done)
        print(f"[cue-effect] {name}: {len(gen)} rollouts, mean reward "
              f"{sum(r.value for r in mine) / max(len(gen), 1):.3f}", flush=True)
    found = ce.effects(records, kinds_on, confidence)

    return {"model": os.path.abspath(model), "model_sha256": key["model_sha256"], "tasks": len(task_ids),
            "samples": samples, "seed": seed,
            "confidence": confidence, "seconds": round(time.time() - started, 1),
            "effects": {k: e.to_dict() for k, e in found.items()},
            # the rewards compared, per condition with rollouts of its own (kinds on: ``conditions``)
            "conditions": {name: ordered(kinds) for name, kinds in conds.items()},
            "values": {name: [r.value for r in records if r.condition == name] for name in conds},
            # the task of each value, in the same order
            "task_ids": {name: [r.task_id for r in records if r.condition == name] for name in conds}}


def recomputed(result: dict, task_ids: Optional[Sequence[str]] = None) -> dict:
    """The effects of a measurement file recomputed from the rewards it holds, with the task-paired interval
    beside the unpaired one: ``{name: Effect.to_dict()}``.

    A file written before ``task_ids`` were recorded holds the rewards in the order they were sampled: each of
    the first ``result["tasks"]`` of ``task_ids`` (the environment's training tasks, in order) ``samples``
    times in a row, under every condition alike.

    Args:
        result: a ``measure`` result (or its JSON file's contents).
        task_ids: the training tasks of the environment the file measured; needed for a file without
            ``task_ids``.
    """
    from seal_verl.core import cue_effect as ce

    values, conds = result["values"], result["conditions"]
    tasks = result.get("task_ids")
    if tasks is None:
        if task_ids is None:
            raise ValueError("this measurement holds no task ids: pass the environment's training tasks")
        order = [t for t in list(task_ids)[: int(result["tasks"])] for _ in range(int(result["samples"]))]
        tasks = {name: order for name in values}
    records = [ce.ProbeRecord(name, str(t), False, float(v)) for name in values
               for v, t in zip(values[name], tasks[name], strict=True)]
    active = conds[ce.CURRENT]
    return {k: e.to_dict() for k, e in ce.effects(records, active, float(result["confidence"])).items()}


def format_table(result: dict, effects: Optional[dict] = None) -> str:
    """The effect table: one line per kind and one for the whole interface, the task-paired interval beside the
    unpaired one. ``effects``: the effects to show (e.g. :func:`recomputed`'s), else the result's own."""
    from seal_verl.core.interface import SHORT_NAMES

    effects = result["effects"] if effects is None else effects
    lines = [f"cue effect at {result['model']} ({result['tasks']} tasks x {result['samples']} samples per "
             f"condition, {int(result['confidence'] * 100)}% intervals)",
             f"{'cue':<8} {'with':>6} {'without':>8} {'effect':>7} {'paired interval':>18} {'unpaired interval':>18}"]
    for k, e in effects.items():
        paired = f"[{e['lo']:+.3f}, {e['hi']:+.3f}]" if e.get("n_pairs", 0) else "-"
        lines.append(f"{SHORT_NAMES.get(k, k):<8} {e['with']:6.3f} {e['without']:8.3f} {e['diff']:+7.3f} "
                     f"{paired:>18} [{e.get('unpaired_lo', e['lo']):+.3f}, {e.get('unpaired_hi', e['hi']):+.3f}]")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------ the ledger stage

DEFAULTS = {"epochs": 40, "lr": 3e-3, "samples": 1, "seed": 0}


def cue_stage(out: str, base: str, epochs: int = DEFAULTS["epochs"], lr: float = DEFAULTS["lr"],
              samples: int = DEFAULTS["samples"], seed: int = DEFAULTS["seed"], force: bool = False,
              effect_samples: int = DEFAULT_SAMPLES, tasks: Optional[list[str]] = None) -> dict:
    """Build (or reuse) the cue-reading ledger model in ``out`` from the mixed model ``base``; returns its
    ``warm_start.json`` contents, with the cue effect measured at the new model (``cue_effect``; ``effect_samples``
    rollouts per task and condition, 0 skips it; ``tasks``: the training tasks, all of them unless named)."""
    from seal_verl import rollouts as dr
    from seal_verl.models.warm_start import ledger as L
    from seal_verl.models.warm_start import ledger_mix as M

    P.check_arguments(epochs, lr, samples)
    P.check_base(base, out, force)
    env = dr.environment(L.ENV)
    train_ids, eval_ids = list(tasks or env.task_ids("train")), env.task_ids("eval")
    started = time.time()
    os.makedirs(out, exist_ok=True)
    subsets = all_subsets(L.WARM_KINDS)
    rows = R.ground_truth_rows(L.TARGET, base, train_ids, out, subsets)
    plans = M.failure_plans(train_ids)
    failing, dropped = L.render_scripted(base, list(plans), out, lambda task: plans[task.id],
                                         expected={t: p.labels for t, p in plans.items()}, subsets=subsets)
    if len({r["task_id"] for r in failing}) < len(train_ids) // 2:
        raise T.WarmStartError(f"failing rows for only {len({r['task_id'] for r in failing})} of {len(train_ids)} "
                               f"tasks: {'; '.join(dropped[:4])}")
    rows += [dict(r, failure=plans[r["task_id"]].target) for r in failing]
    params = {"epochs": int(epochs), "lr": float(lr), "samples": int(samples), "seed": int(seed), "target": 1.0,
              "temperature": L.TARGET.settings.temperature, "subsets": len(subsets),
              "kinds": list(M.MIX_KINDS), "code": P.file_digest(__file__)}

    def measured(model_dir: str) -> dict:
        rates = L.pass_rates(model_dir, train_ids, samples, seed, model_dir) if samples else {}
        held = L.pass_rates(model_dir, eval_ids, 1, seed, model_dir, greedy=True) if samples else {}
        effect = measure(L.TARGET, model_dir, train_ids, effect_samples, seed, kinds=L.WARM_KINDS) \
            if effect_samples else None
        if effect:
            print(format_table(effect), flush=True)
        return {"pass_rates": rates, "heldout": held, "heldout_greedy": S.mean_pass_rate(held),
                "cue_effect": effect}

    def report(info: dict) -> str:
        return (f"[warm-start] sampled pass rate on the training tasks {info.get('mean_pass_rate')}, greedy "
                f"held-out accuracy {info.get('heldout_greedy')}")

    return P.build(out, base, rows, params, tasks=train_ids, started=started, force=force,
                   what=f"{len(rows)} rows ({len(train_ids)} tasks x {len(subsets)} cue subsets, right and failing)",
                   measure=measured, report=report, record={"env": L.ENV}, row_keys=L.ROW_KEYS)


def main(argv: Optional[list[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["stage"]:
        return P.cli(argv[1:], "python -m seal_verl.models.warm_start.cue_reading stage", __doc__,
                     lambda a: cue_stage(a.out, a.base, a.epochs, a.lr, a.samples, a.seed, a.force),
                     DEFAULTS, "the mixed ledger model to start from", target=False)
    if argv[:1] == ["table"]:
        return _table(argv[1:])
    from seal_verl.core.interface import CUE_KINDS

    p = argparse.ArgumentParser(prog="python -m seal_verl.models.warm_start.cue_reading measure",
                                description="The cue effect of a ledger model with every kind of the interface on.")
    p.add_argument("cmd", choices=["measure"])
    p.add_argument("model", help="a model folder")
    p.add_argument("--samples", type=int, default=DEFAULT_SAMPLES, help="rollouts per task and condition")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--kinds", nargs="+", choices=list(CUE_KINDS), default=None,
                   help="the cue kinds to switch on (default: those the ledger run switches on)")
    p.add_argument("--out", default=None, help="also write the numbers (and every reward compared) to this JSON file; "
                   "progress goes to FILE.partial, from which a stopped measurement resumes")
    p.add_argument("--force", action="store_true", help="replace --out if it exists")
    args = p.parse_args(argv)
    from seal_verl import env_vars, outputs
    from seal_verl.models.shipped import ShippedModelError, check_model
    from seal_verl.usage import UsageError, check_output_file

    env_vars.check_or_exit("cue-effect")
    if not 1 <= args.samples <= MAX_SAMPLES:
        p.error(f"--samples must be in 1..{MAX_SAMPLES}, got {args.samples}")
    try:
        verified = check_model(args.model, "MODEL")
        if args.out:
            outputs.check_not_input(args.out, [args.model], "--out")
            check_output_file(args.out, args.force, "--out")
    except (ShippedModelError, UsageError) as exc:
        p.error(str(exc))
    from seal_verl import rollouts as dr
    from seal_verl.rollouts import quiet_libraries
    from seal_verl.models.warm_start import ledger as L

    print(f"[cue-effect] model {args.model}: {verified}", flush=True)
    quiet_libraries()
    progress = args.out + ".partial" if args.out else None  # a stopped measurement resumes from it
    result = measure(L.TARGET, args.model, dr.environment(L.ENV).task_ids("train"), args.samples, args.seed,
                     kinds=args.kinds or L.WARM_KINDS, progress=progress)
    print(format_table(result))
    if args.out:
        result["model"] = os.path.relpath(result["model"], os.path.dirname(os.path.abspath(args.out)))
        with open(args.out + ".tmp", "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
        os.replace(args.out + ".tmp", args.out)
        os.remove(progress)
    return 0


def _table(argv: list[str]) -> int:
    """``table FILE``: a ledger measurement's table, its intervals recomputed from the rewards it holds."""
    p = argparse.ArgumentParser(prog="python -m seal_verl.models.warm_start.cue_reading table",
                                description="The effect table of a ledger measurement file (make cue-effect --out), "
                                            "task-paired and unpaired intervals recomputed from its rewards.")
    p.add_argument("file", help="a measurement file, e.g. recipes/ledger_cpu/cue_effect.json")
    args = p.parse_args(argv)
    try:
        with open(args.file, encoding="utf-8") as f:
            result = json.load(f)
    except (OSError, ValueError) as exc:
        p.error(f"{args.file}: {exc}")
    from seal_verl import rollouts as dr
    from seal_verl.models.warm_start import ledger as L

    print(format_table(result, recomputed(result, dr.environment(L.ENV).task_ids("train"))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
