"""Benchmark: the prompt tokens SEAL's start-of-task cue blocks add to an environment's first prompt.

Every task of a split is started twice, bare and under the observation wrapper with every cue kind on (the
recipe's interface settings, ``seal_verl.core.interface.InterfaceConfig``'s defaults), and its first prompt is
rendered as the training agent loop renders it: the environment's ``initial_messages`` through the model's chat
template with the tools, and the generation prompt. Prints the first prompt's length bare and with the cues, and
what the cues add (min, mean, max over the tasks), in the tokens of the model given.

    .venv/bin/python -m bench.bench_cue_tokens                                   # ledger, its shipped model
    .venv/bin/python -m bench.bench_cue_tokens --env bfcl --model recipes/bfcl_v3/cpu/model --split-file \\
        recipes/bfcl_v3/cpu/split_cpu.json                                       # the BFCL CPU split
"""

from __future__ import annotations

import argparse
import json
import os
import statistics


def run_kinds(env_name: str) -> tuple[str, ...]:
    """The cue kinds a run of ``env_name`` can switch on: the ledger recipe's trigger map for the ledger (its
    behavioural sentence for a missing call), the default trigger map's for every other environment."""
    from seal_verl.core.interface import DEFAULT_TRIGGERS, ordered

    if env_name == "ledger":
        from seal_verl.models.warm_start.ledger import WARM_KINDS

        return tuple(WARM_KINDS)
    return tuple(ordered(DEFAULT_TRIGGERS.values()))


def first_prompt_tokens(env, task, tokenizer, call_format: str, cues: bool, kinds=None) -> int:
    """Tokens of ``task``'s first prompt, bare or with every start-of-task cue kind of ``kinds`` on (the run's
    kinds, :func:`run_kinds`, when None)."""
    from seal_verl.core.interface import InterfaceConfig, InterfaceState
    from seal_verl.core.observation import SealObservationWrapper

    episode = env.start(task, call_format=call_format, call_timeout_s=None)
    if cues:
        on = run_kinds(env.name) if kinds is None else tuple(kinds)
        episode = SealObservationWrapper(episode, InterfaceState(active={k: True for k in on}), InterfaceConfig())
    messages, tools = env.initial_messages(task, episode.reset(), call_format)
    ids = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=True)
    ids = ids["input_ids"] if hasattr(ids, "keys") else ids
    return len(ids)


def _summary(values: list[int]) -> str:
    return f"{min(values)} / {statistics.mean(values):.1f} / {max(values)}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--env", default="ledger", help="a registered environment (default ledger)")
    ap.add_argument("--model", default="recipes/ledger_cpu/model", help="model folder whose tokenizer and chat "
                    "template render the prompt (default: the shipped ledger warm start)")
    ap.add_argument("--split", default="train", help="the environment's split (default train)")
    ap.add_argument("--split-file", default=None, help="BFCL: a JSON file {train: [ids], eval: [ids]} to read "
                    "the split from instead")
    args = ap.parse_args(argv)
    if not os.path.isfile(os.path.join(args.model, "config.json")):
        ap.error(f"--model {args.model}: not a model folder (no config.json)")
    from transformers import AutoTokenizer

    from env_wrappers.registry import get_environment

    env = get_environment(args.env)
    if args.split_file:
        with open(args.split_file, encoding="utf-8") as fh:
            task_ids = list(json.load(fh)[args.split])
    else:
        task_ids = env.task_ids(args.split)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    call_format = env.call_formats[0]
    bare, cued = [], []
    for task_id in task_ids:
        task = env.load_task(task_id)
        bare.append(first_prompt_tokens(env, task, tokenizer, call_format, cues=False))
        cued.append(first_prompt_tokens(env, task, tokenizer, call_format, cues=True))
    added = [c - b for b, c in zip(bare, cued)]
    print(f"{args.env} {args.split}, {len(task_ids)} tasks, tokens of {args.model} (min / mean / max):")
    print(f"  first prompt, bare:                 {_summary(bare)}")
    print(f"  first prompt, every cue kind on:    {_summary(cued)}")
    print(f"  added by the start-of-task cues:    {_summary(added)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
