"""Benchmark: the token cost of the two cue placements, ``start_of_task`` and ``every_observation``.

Plays every training task's ground-truth trajectory (the environment's ``reference_turns``: per turn the
ground truth's calls, then a closing text) through the SEAL observation wrapper with every configured cue kind
fixed on, under each placement, and counts the tokens of the cue blocks it inserts (each block encoded on its
own, separator and marker included): those in the first prompt (the first user message) and those on the
response side (observations after it, which ``data.max_response_length`` must hold). A ground-truth trajectory
has no failed call, so no error feedback: what is counted is what the placement changes, the schema, call-format,
reminder and affordance blocks. For BFCL the recipe's budgets are checked too: how many tasks' ground-truth
trajectories (``recipes/bfcl_v3/lengths/qwen2.5.json``) no longer fit the prompt or response budget once the cues
are added.

    python -m bench.bench_cue_placement                    # both environments, the default and the paper's triggers
    python -m bench.bench_cue_placement --env ledger --tasks 16

Tokenizers: Qwen2.5's (built offline from ``dashscope``'s vocabulary, ``make backbone-sources``) for both
environments, and the ledger run's own tiny model's for the ledger.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from typing import Optional

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LENGTHS = os.path.join(REPO, "recipes", "bfcl_v3", "lengths", "qwen2.5.json")
TINY_TOKENIZER = os.path.join(REPO, "recipes", "ledger_cpu", "model")
#: the BFCL recipe's budgets (recipes/bfcl_v3/config/bfcl_v3.yaml)
BUDGETS = {"prompt": 8192, "response": 8192}


def play(environment, task, cfg) -> tuple[list[str], list[str]]:
    """The cue blocks of one ground-truth rollout under ``cfg`` (every configured kind on): (in the first
    prompt, on the response side)."""
    from seal_verl.core.observation import SealObservationWrapper
    from seal_verl.core.interface import InterfaceState

    episode = environment.start(task, call_format="json")
    wrapper = SealObservationWrapper(episode, InterfaceState(), cfg, {})
    wrapper.reset()
    first = list(wrapper.inserted_cues)
    for turn in environment.reference_turns(task, "json"):
        result = None
        for message in turn:
            result = wrapper.step(message)
            if result.turn_done:
                break
        if result is not None and not result.turn_done:
            result = wrapper.end_turn()
        if result is None or result.episode_done:
            break
    return first, list(wrapper.inserted_cues[len(first):])


def configs() -> dict[str, object]:
    from seal_verl.core.interface import DEFAULT_TRIGGERS, PAPER_TRIGGERS, PLACEMENTS, InterfaceConfig

    out = {}
    for name, triggers in (("default triggers", DEFAULT_TRIGGERS), ("paper triggers", PAPER_TRIGGERS)):
        for placement in PLACEMENTS:
            out[f"{name}, {placement}"] = InterfaceConfig(triggers=dict(triggers), placement=placement,
                                                         fixed_all_on=True).validate()
    return out


def tokenizers(env: str) -> dict[str, object]:
    from transformers import AutoTokenizer

    out = {}
    try:
        from seal_verl.models.backbones import save_tokenizer

        out["qwen2.5"] = AutoTokenizer.from_pretrained(save_tokenizer("qwen2.5", tempfile.mkdtemp(prefix="tok-")))
    except Exception as exc:  # the vocabulary's package is missing: say so, measure with what there is
        print(f"[bench] Qwen2.5's tokenizer is not available ({exc}); run `make backbone-sources`", file=sys.stderr)
    if env == "ledger":
        out["tiny (ledger model)"] = AutoTokenizer.from_pretrained(TINY_TOKENIZER)
    return out


def measure(env: str, n_tasks: Optional[int] = None) -> list[dict]:
    from seal_verl import dry_run as dr
    environment = dr.environment(env)
    ids = environment.task_ids("train")[: n_tasks or None]
    tasks = [environment.load_task(t) for t in ids]
    toks = tokenizers(env)
    lengths = None
    if env == "bfcl" and os.path.isfile(LENGTHS):
        with open(LENGTHS, encoding="utf-8") as f:
            lengths = json.load(f)["tasks"]
    rows = []
    for cname, cfg in configs().items():
        played = [play(environment, task, cfg) for task in tasks]
        for tname, tok in toks.items():
            def n(blocks):
                return sum(len(tok.encode(b, add_special_tokens=False)) for b in blocks)

            prompt = [n(first) for first, _ in played]
            response = [n(rest) for _, rest in played]
            row = {"env": env, "tokenizer": tname, "config": cname, "tasks": len(tasks),
                   "prompt_mean": statistics.fmean(prompt), "prompt_max": max(prompt),
                   "response_mean": statistics.fmean(response), "response_max": max(response),
                   "total_mean": statistics.fmean(p + r for p, r in zip(prompt, response)),
                   "blocks_mean": statistics.fmean(len(a) + len(b) for a, b in played)}
            if lengths is not None and tname == "qwen2.5":
                over = {"prompt": 0, "response": 0}
                base = {"prompt": 0, "response": 0}
                for task, p, r in zip(tasks, prompt, response):
                    got = lengths.get(task.id)
                    if got is None:
                        continue
                    base["prompt"] += got[0] > BUDGETS["prompt"]
                    base["response"] += got[1] > BUDGETS["response"]
                    over["prompt"] += got[0] + p > BUDGETS["prompt"]
                    over["response"] += got[1] + r > BUDGETS["response"]
                row["over_budget"] = over
                row["over_budget_without_cues"] = base
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| environment | tokenizer | triggers, placement | cue tokens in the first prompt (mean / max) | "
             "on the response side (mean / max) | per rollout (mean) | over the budgets (prompt, response) |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        over = r.get("over_budget")
        budget = "-" if over is None else (f"{over['prompt']}, {over['response']} of {r['tasks']} (without cues: "
                                           f"{r['over_budget_without_cues']['prompt']}, "
                                           f"{r['over_budget_without_cues']['response']})")
        lines.append(f"| {r['env']} | {r['tokenizer']} | {r['config']} | {r['prompt_mean']:.0f} / {r['prompt_max']} | "
                     f"{r['response_mean']:.0f} / {r['response_max']} | {r['total_mean']:.0f} | {budget} |")
    # the ratio of the placements per environment, tokenizer and triggers
    by = {(r["env"], r["tokenizer"], r["config"].split(",")[0]): {} for r in rows}
    for r in rows:
        by[(r["env"], r["tokenizer"], r["config"].split(",")[0])][r["config"].split(", ")[1]] = r["total_mean"]
    lines.append("")
    for (env, tname, trig), v in by.items():
        if v.get("start_of_task"):
            lines.append(f"{env}, {tname}, {trig}: every_observation / start_of_task = "
                         f"{v['every_observation'] / v['start_of_task']:.1f}x cue tokens per rollout")
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bench_cue_placement", description=__doc__.splitlines()[0])
    p.add_argument("--env", choices=["ledger", "bfcl", "both"], default="both")
    p.add_argument("--tasks", type=int, default=None, help="the first N training tasks only")
    p.add_argument("--json", default=None, help="also write the rows to this JSON file")
    args = p.parse_args(argv)
    rows = []
    for env in (("ledger", "bfcl") if args.env == "both" else (args.env,)):
        rows += measure(env, args.tasks)
    print(table(rows))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
