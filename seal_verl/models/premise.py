"""SEAL's premise measured on a model before any RL step: does it succeed more often under a cue?

The same conditions as the training run's probe with every cue kind on (``seal_verl.core.cue_effect``): the whole
interface against no cue (``all``) and, per kind, every kind on against every kind but that one; on the ledger's
training tasks and, beside them, its held-out tasks (the cue text is the same; the tasks were never trained on).
Every rollout runs through verl's real agent loop (the ledger's training loop, whose wrapper adds exactly the
condition's cue kinds, none under ``none``), sampled at the run's temperature by vLLM in this process
(:class:`seal_verl.models.vllm_sampler.VLLMSampler`; the transformers sampler would take hours on SmolLM2), and graded
by the run's reward (the ledger's per-turn credit).

    python -m seal_verl.models.premise measure MODEL [--samples 4] [--out FILE]

The result keeps every rollout's record (split, condition, task, sample index, reward, passed); the effects are
computed from those records by :func:`summarise`, and nothing else.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Optional, Sequence
from seal_verl.core import extras as EXTRAS

DEFAULT_SAMPLES = 4
SPLITS = ("train", "eval")


def summarise(records: list[dict], kinds: Sequence[str], confidence: float = 0.95) -> dict:
    """``{split: {"all" | kind: Effect dict}}`` (and ``"both"``: the splits pooled) from the rollout records of a
    measurement with ``kinds`` on (its ``current`` condition)."""
    from seal_verl.core import cue_effect as ce

    out = {}
    for split in sorted({r["split"] for r in records}) + ["both"]:
        chosen = [ce.ProbeRecord(r["condition"], r["task_id"], r["passed"], r["reward"]) for r in records
                  if split == "both" or r["split"] == split]
        out[split] = {k: e.to_dict() for k, e in ce.effects(chosen, list(kinds), confidence).items()}
    return out


def records_of(gen, split: str, condition: str) -> list[dict]:
    """One record per rollout of an agent-loop output: its task, its index among the task's samples, the reward
    the run trains on and whether every turn passed."""
    seen: dict = {}
    out = []
    for i in range(len(gen)):
        task = str(gen.non_tensor_batch["task_id"][i])
        seen[task] = seen.get(task, -1) + 1
        labels = json.loads(str(gen.non_tensor_batch[EXTRAS.LABELS][i]))
        out.append({"split": split, "condition": condition, "task_id": task, "sample": seen[task],
                    "reward": float(gen.non_tensor_batch["score"][i]), "passed": all(z == "pass" for z in labels)})
    return out


def _setup(model: str, task_ids: list[str], sampler, samples: int, out: str, state_source):
    """verl's agent-loop worker over ``task_ids`` with the ledger run's lengths, sampling, agent loops and training
    reward (its reward options: the per-turn credit), answered by ``sampler``, its loops reading their cues from
    ``state_source``; and the batch of the task rows."""
    from transformers import AutoTokenizer

    from seal_verl import rollouts as dr
    from seal_verl.models.warm_start import ledger as L

    s = L.TARGET.settings
    loop = L.TARGET.loops[0]
    config = dr.verl_config(model, agent_loop_yaml=s.agent_loops, rollouts=samples, prompt_length=s.prompt_length,
                            response_length=s.response_length, reward_path=dr.reward_fn_path(L.ENV), seal={},
                            reward_kwargs=dict(s.reward_kwargs),
                            overrides=[f"actor_rollout_ref.rollout.temperature={s.temperature}",
                                       f"actor_rollout_ref.rollout.top_p={s.top_p}",
                                       f"actor_rollout_ref.rollout.agent.default_agent_loop={loop}"])
    parquet = dr.write_parquet(dr.dataset_rows(task_ids, loop, "train", "json", env=L.ENV),
                               os.path.join(out, "premise_tasks.parquet"))
    batch = dr.load_batch(parquet, config, AutoTokenizer.from_pretrained(model), samples, uid_prefix="premise-")
    return dr.make_worker(config, sampler, state_source=state_source), batch


def measure(model: str, samples: int = DEFAULT_SAMPLES, seed: int = 0,
            confidence: float = 0.95, splits: tuple = SPLITS, progress=print) -> dict:
    """The cue effect of ``model`` with every cue kind on, on each split's tasks (``samples`` rollouts per task and
    condition); returns the records, the summary and how long it took."""
    import tempfile

    from transformers import AutoTokenizer

    from seal_verl.core import cue_effect as ce
    from seal_verl.rollouts import environment
    from seal_verl.core.interface import CUE_KINDS
    from seal_verl.models.vllm_sampler import VLLMSampler
    from seal_verl.models.shipped import file_sha256
    from seal_verl.models.warm_start import ledger as L
    from seal_verl.models.warm_start import render as R
    from seal_verl.models.warm_start.ledger import WARM_KINDS

    env = environment(L.ENV)
    folder = tempfile.mkdtemp(prefix="premise-")
    sampler = VLLMSampler(model, AutoTokenizer.from_pretrained(model), seed)
    conds = ce.distinct(ce.conditions(WARM_KINDS))  # the kinds the ledger run switches on
    records: list[dict] = []
    current: dict = {"state": None}  # the cue state of the condition being sampled
    started = time.time()

    async def go():
        await sampler.start()
        try:
            for split in splits:
                out = os.path.join(folder, split)
                os.makedirs(out, exist_ok=True)
                worker, batch = _setup(model, env.task_ids(split), sampler, samples, out,
                                       state_source=lambda _step: current["state"])
                for name, kinds in conds.items():
                    t = time.time()
                    current["state"] = R.cue_state(tuple(kinds))  # what this condition's rollouts read
                    gen = await worker.generate_sequences(batch)
                    found = records_of(gen, split, name)
                    records.extend(found)
                    progress(f"[premise] {split} {name}: {len(found)} rollouts, mean reward "
                             f"{sum(r['reward'] for r in found) / max(1, len(found)):.3f} ({time.time() - t:.0f} s, "
                             f"{sampler.generated_tokens} tokens generated so far)")
        finally:
            sampler.close()

    R.run_loop(go)
    seconds = time.time() - started
    return {"model": os.path.abspath(model), "model_sha256": file_sha256(os.path.join(model, "model.safetensors")),
            "samples": samples, "seed": seed, "confidence": confidence, "seconds": round(seconds, 1),
            "tokens_per_second": round(sampler.generated_tokens / max(seconds, 1e-9), 1),
            "tasks": {s: len(env.task_ids(s)) for s in splits},
            "conditions": {n: sorted(k, key=list(CUE_KINDS).index) for n, k in conds.items()},
            "summary": summarise(records, WARM_KINDS, confidence), "records": records}


def format_table(result: dict) -> str:
    from seal_verl.core.interface import SHORT_NAMES

    lines = [f"cue effect at {result['model']} ({result['samples']} samples per task and condition, "
             f"{int(result['confidence'] * 100)}% interval)",
             f"{'split':<6} {'cue':<8} {'with':>6} {'without':>8} {'effect':>7} {'interval':>17}"]
    for split, effects in result["summary"].items():
        for k, e in effects.items():
            lines.append(f"{split:<6} {SHORT_NAMES.get(k, k):<8} {e['with']:6.3f} {e['without']:8.3f} "
                         f"{e['diff']:+7.3f} [{e['lo']:+.3f}, {e['hi']:+.3f}]")
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m seal_verl.models.premise", description=__doc__.splitlines()[0])
    p.add_argument("cmd", choices=["measure"])
    p.add_argument("model", help="a model folder (a merged checkpoint)")
    p.add_argument("--samples", type=int, default=DEFAULT_SAMPLES, help="rollouts per task and condition")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="write the result (every rollout's record) to this JSON file")
    args = p.parse_args(argv)
    if not os.path.isfile(os.path.join(args.model, "config.json")):
        p.error(f"{args.model}: not a model folder (no config.json)")
    if args.samples < 1:
        p.error("--samples must be at least 1")
    result = measure(args.model, args.samples, args.seed, progress=lambda s: print(s, flush=True))
    print(format_table(result))
    if args.out:
        result["model"] = os.path.basename(result["model"].rstrip("/"))
        with open(args.out + ".tmp", "w", encoding="utf-8") as fh:
            json.dump(result, fh, indent=1)
        os.replace(args.out + ".tmp", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
