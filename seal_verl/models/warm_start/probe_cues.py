"""How a model fares under each cue state: the ground truth of the CPU split's training tasks, rendered by the
real ``seal_bfcl`` agent loop under every subset of the start-of-task cue kinds, scored token by token.

    python -m seal_verl.models.warm_start.probe_cues MODEL_DIR [--split-file F] [--kinds K ...] [--top N] [--json OUT]

For each interface state it prints the mean of ``exp(-NLL)`` over the tasks (the probability that sampling at
temperature 1 reproduces the ground truth, a lower bound on the pass rate) and each task's summed NLL; then, for
the state that costs the most, the trained tokens whose NLL rose the most against the state without cues. A
policy that passes without cues and fails under them (the closed loop switches cues on from the second step)
shows here before any RL step runs. ``error_recovery`` is left out: its feedback follows an error, and a ground
truth has none, so it renders no differently. Nothing is trained and nothing is written except ``--json``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import sys
from typing import Optional

from seal_verl.models.warm_start.bfcl_cpu import DEFAULT_SPLIT, read_split, render_rows
from seal_verl.models.warm_start.target import WarmStartError

#: error feedback only follows an error; a ground-truth trajectory has none
NOT_AT_START = ("error_recovery",)


def start_kinds() -> list[str]:
    """The default trigger map's kinds that add text before the agent acts."""
    from seal_verl.core.interface import InterfaceConfig

    return [k for k in InterfaceConfig().kinds() if k not in NOT_AT_START]


def token_nll(model, row: dict) -> list[tuple[int, float]]:
    """(token id, NLL) of each trained token of ``row`` under teacher forcing."""
    import torch

    ids = torch.tensor([row["input_ids"]], dtype=torch.long)
    labels = torch.tensor(row["labels"][1:], dtype=torch.long)
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, :-1].float()
    nll = torch.nn.functional.cross_entropy(logits, labels, reduction="none", ignore_index=-100)
    return [(int(labels[i]), float(nll[i])) for i in (labels != -100).nonzero().flatten().tolist()]


def probe(model_dir: str, task_ids: list[str], kinds: list[str], out: str) -> dict:
    """Per interface state (``"none"`` or the kinds joined by commas): per task the summed NLL and the per-token
    NLLs of the trained tokens, and the mean ``exp(-NLL)`` over the tasks."""
    import torch
    from transformers import AutoModelForCausalLM

    subsets = [tuple(c) for n in range(len(kinds) + 1) for c in itertools.combinations(kinds, n)]
    rows = render_rows(model_dir, task_ids, out, subsets)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="sdpa")
    model.eval()
    states: dict[str, dict] = {}
    for r in rows:
        tokens = token_nll(model, r)
        st = states.setdefault(r["interface"], {"tasks": {}})
        st["tasks"][r["task_id"]] = {"nll": sum(x for _, x in tokens), "tokens": tokens,
                                     "prompt_tokens": r["prompt_tokens"]}
    for st in states.values():
        st["mean_predicted_pass"] = sum(math.exp(-t["nll"]) for t in st["tasks"].values()) / len(st["tasks"])
    return states


def costliest_tokens(states: dict, top: int) -> tuple[str, str, list[tuple[int, float, float]]]:
    """The state with the lowest mean predicted pass (ties: the largest summed NLL), its task with the largest NLL, and that task's ``top``
    trained tokens by NLL increase over the state without cues: (token id, NLL without cues, NLL with)."""
    worst = min(states, key=lambda s: (states[s]["mean_predicted_pass"],
                                       -sum(t["nll"] for t in states[s]["tasks"].values()), s))
    task = max(states[worst]["tasks"], key=lambda t: states[worst]["tasks"][t]["nll"])
    base = states["none"]["tasks"][task]["tokens"]
    cued = states[worst]["tasks"][task]["tokens"]
    pairs = [(tok, a, b) for (tok, a), (tok2, b) in zip(base, cued) if tok == tok2]  # the same ground truth
    return worst, task, sorted(pairs, key=lambda p: p[1] - p[2])[:top]


def format_table(states: dict, task_ids: list[str]) -> str:
    width = max(len(s) for s in states) + 2
    lines = [f"{'interface':<{width}}{'mean exp(-NLL)':>15}   summed NLL per task ({', '.join(task_ids)})"]
    for s in sorted(states, key=lambda s: (s != "none", s.count(","), s)):
        st = states[s]
        lines.append(f"{s:<{width}}{st['mean_predicted_pass']:>15.3f}   "
                     + "  ".join(f"{st['tasks'][t]['nll']:7.2f}" for t in task_ids))
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m seal_verl.models.warm_start.probe_cues", description=__doc__.splitlines()[0])
    p.add_argument("model", help="model folder (e.g. runs/cpu/models/tiny-warm)")
    p.add_argument("--split-file", default=DEFAULT_SPLIT, help="its train ids are the tasks probed (default: %(default)s)")
    p.add_argument("--kinds", nargs="+", default=None,
                   help="cue kinds whose subsets are probed (default: every kind shown at the start of a task)")
    p.add_argument("--top", type=int, default=5, help="costliest tokens listed (default: %(default)s)")
    p.add_argument("--json", default=None, help="also write the per-state numbers (no per-token lists) here")
    args = p.parse_args(argv)
    from seal_verl.rollouts import quiet_libraries

    if not os.path.isfile(os.path.join(args.model, "config.json")):
        p.error(f"{args.model}: not a model folder (no config.json)")
    kinds = args.kinds or start_kinds()
    unknown = sorted(set(kinds) - set(start_kinds()))
    if unknown:
        p.error(f"--kinds: {', '.join(unknown)} not shown at the start of a task; choose from {', '.join(start_kinds())}")
    if args.top < 0:
        p.error(f"--top must be >= 0, got {args.top}")
    quiet_libraries()
    import tempfile

    from transformers import AutoTokenizer

    try:
        task_ids = list(read_split(args.split_file)["train"])
        with tempfile.TemporaryDirectory() as tmp:
            states = probe(args.model, task_ids, kinds, tmp)
    except (WarmStartError, ValueError, FileNotFoundError) as e:
        print(f"probe-cues: error: {e}", file=sys.stderr)
        return 2
    print(format_table(states, task_ids))
    if args.top:
        worst, task, pairs = costliest_tokens(states, args.top)
        tok = AutoTokenizer.from_pretrained(args.model)
        print(f"costliest tokens under {worst} ({task}), NLL without cues -> with:")
        for t, a, b in pairs:
            print(f"  {tok.decode([t])!r:>16}  {a:6.2f} -> {b:6.2f}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({s: {"mean_predicted_pass": st["mean_predicted_pass"],
                           "nll": {t: v["nll"] for t, v in st["tasks"].items()}} for s, st in states.items()},
                      f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
