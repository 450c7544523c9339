"""The environment's own subcommands of the ``seal-verl`` command line that prepare a run: ``prepare-data``
(the SEAL split as verl parquet files) and ``preflight`` (the checks before a long GPU job).

``seal_verl/cli.py`` defines their arguments and reaches them through
:meth:`env_wrappers.protocol.Environment.commands`; they share only the argument checks of
:mod:`seal_verl.usage` with it, never the command line's own modules.
"""

from __future__ import annotations

import argparse
import os
import sys

from seal_verl.usage import UsageError, check_input_file, check_not_an_input, check_output_file


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
