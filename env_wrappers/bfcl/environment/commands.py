"""The environment's own subcommands of the ``seal-verl`` command line that prepare a run: ``prepare-data``
(the SEAL split as verl parquet files) and ``preflight`` (the checks before a long GPU job).

Each is a :class:`~env_wrappers.protocol.Command` of :data:`COMMANDS`: its arguments and what runs it. The command
line reaches them through :meth:`env_wrappers.protocol.Environment.commands`; they share only the argument checks
of :mod:`seal_verl.usage` with it, never the command line's own modules.
"""

from __future__ import annotations

import argparse
import os
import sys

from env_wrappers.protocol import Command
from seal_verl.usage import UsageError, check_input_file, check_not_an_input, check_output_file


def add_prepare_data_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, help="output folder for train.parquet and eval.parquet")
    p.add_argument("--call-format", default="json", choices=["json", "python"],
                   help="how the model writes tool calls: <tool_call> JSON blocks or a Python call list")
    p.add_argument("--split-file", default=None,
                   help='JSON {"train": [ids], "eval": [ids]}; default: the shipped SEAL 400/400 split')
    p.add_argument("--force", action="store_true", help="replace train.parquet / eval.parquet if they exist")
    p.add_argument("--model", default=None,
                   help="with --max-prompt-length: the model whose tokenizer and chat template measure each first prompt")
    p.add_argument("--max-prompt-length", type=int, default=None,
                   help="leave out (with a warning) tasks whose first prompt is longer (data.max_prompt_length)")


def prepare_data_command(args: argparse.Namespace) -> int:
    """``seal-verl prepare-data``: the SEAL split as verl parquet files."""
    from .prepare_data import SPLIT_FILES, format_summary, prepare_data

    if os.path.exists(args.out) and not os.path.isdir(args.out):
        raise UsageError(f"--out {args.out}: is a file; give a folder")
    if args.split_file is not None:
        check_input_file(args.split_file, "--split-file")
    for fname, _ in SPLIT_FILES.values():
        check_output_file(os.path.join(args.out, fname), args.force, "--out")
        if args.split_file is not None:  # with --force it would be replaced by the data made from it
            check_not_an_input(os.path.join(args.out, fname), [args.split_file], "--out")
    try:
        summary = prepare_data(args.out, call_format=args.call_format, split_file=args.split_file,
                               **_prompt_budget_filter(args))
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(format_summary(summary))
    return 0


def _prompt_budget_filter(args: argparse.Namespace) -> dict:
    """prepare-data's optional prompt-budget filter (``--model`` + ``--max-prompt-length``)."""
    model, limit = getattr(args, "model", None), getattr(args, "max_prompt_length", None)
    if model is None and limit is None:
        return {}
    if model is None or limit is None or limit < 1:
        raise ValueError("--model and --max-prompt-length (a positive integer) go together")
    from transformers import AutoTokenizer

    from .preflight import prompt_lengths

    tokenizer = AutoTokenizer.from_pretrained(model)
    backbone = "qwen2.5" if args.call_format == "json" else "toolace2"
    return {"prompt_tokens": lambda ids: prompt_lengths(tokenizer, backbone, ids), "max_prompt_length": limit}


def preflight_command(args: argparse.Namespace) -> int:
    """``seal-verl preflight``: the checks to run before a long GPU job."""
    from .preflight import format_check, recipe_max_prompt_length, run

    try:
        from seal_verl.models.backbones import spec

        spec(args.backbone)
        limit = args.max_prompt_length or recipe_max_prompt_length(args.backbone)
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return run(args.backbone, args.model, args.data_dir, limit, args.attn, args.remove_padding, args.gpus,
               progress=not args.no_progress, emit=lambda c: print(format_check(c), flush=True))


def add_preflight_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--backbone", required=True,
                   help="qwen2.5-3b | qwen2.5-7b | qwen3-4b | qwen3-8b | toolace2-8b (or qwen2.5 | qwen3 | toolace2)")
    p.add_argument("--model", required=True, help="the model path the run uses (its tokenizer and chat template)")
    p.add_argument("--data-dir", default=None, help="folder with train.parquet / eval.parquet from prepare-data")
    p.add_argument("--max-prompt-length", type=int, default=None,
                   help="data.max_prompt_length of the run (default: the recipe's for the backbone)")
    p.add_argument("--attn", default="sdpa", help="attn_implementation of the run (recipe default: sdpa)")
    p.add_argument("--remove-padding", action="store_true", help="the run sets use_remove_padding=true")
    p.add_argument("--gpus", type=int, default=None, help="GPUs the run asks for (nnodes x n_gpus_per_node; "
                   "default: the recipe's 4, and a warning when this node has more)")
    p.add_argument("--no-progress", action="store_true")


#: The subcommands of this room, in the order ``seal-verl --help`` lists them.
COMMANDS = {
    "prepare-data": Command(add_prepare_data_arguments, prepare_data_command,
                            "write the BFCL train/eval split as verl parquet datasets"),
    "preflight": Command(add_preflight_arguments, preflight_command,
                         "check versions, GPUs, attention backend, tokenizer + chat template, prompt budget and "
                         "data before a long GPU run"),
}
