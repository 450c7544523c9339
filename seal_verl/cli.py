"""The ``seal-verl`` command line.

    seal-verl diagnose RESULT_FILE_OR_DIR... [--out labels.jsonl] [--plot labels.png]
    seal-verl demo-results OUT.jsonl          # writes a demo result file with every failure kind
    seal-verl prepare-data --out DIR [--call-format json|python] [--split-file SPLIT.json]
    seal-verl dry-run [--out runs/dry] [--steps 6] [--tasks-per-step 4] [--rollouts 4]
    seal-verl preflight --backbone qwen2.5-7b --model PATH [--data-dir DIR] [--max-prompt-length N]

Subcommands import their environment lazily so ``seal-verl --help`` stays instant.
"""

from __future__ import annotations

import argparse
import json
import sys


def _cmd_diagnose(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from env_wrappers.bfcl.judge import judge_result
    from env_wrappers.bfcl.result_files import ReadProblem, count_lines, expand_paths, read_entries
    from env_wrappers.bfcl.tasks import load_tasks

    from .report import format_table, plot, summarise

    tasks = load_tasks()
    files = expand_paths(args.inputs)
    if not files:
        print("error: no result files found in the given paths", file=sys.stderr)
        return 2
    total = sum(count_lines(p) for p in files)
    out = open(args.out, "w") if args.out else None
    rows, problems = [], []
    show_bar = not args.no_progress and total >= args.progress_min
    try:
        with tqdm(total=total, desc="diagnosing", unit="task", disable=not show_bar, file=sys.stderr) as bar:
            for path in files:
                for item in read_entries(path, tasks):
                    bar.update(1)
                    if isinstance(item, ReadProblem):
                        problems.append(item)
                        print(f"warning: {item}", file=sys.stderr)
                        continue
                    task = tasks[item.id]
                    j = judge_result(task, item.result, call_format=args.format,
                                     strict_abstention=args.strict_abstention)
                    valid = j.reward_valid if args.strict_abstention else j.valid
                    rows.append((task.category, valid, j.labels))
                    if out:
                        rec = {"id": item.id, "valid": valid, "labels": j.labels}
                        if j.error_type:
                            rec["error_type"] = j.error_type
                        out.write(json.dumps(rec) + "\n")
                        out.flush()
    finally:
        if out:
            out.close()
    stats = summarise(rows)
    if stats:
        print(format_table(stats))
    if args.plot and stats:
        plot(stats, args.plot, title=f"{len(rows)} tasks")
        print(f"plot written to {args.plot}")
    if problems:
        print(f"{len(problems)} line(s) skipped; see the warnings above", file=sys.stderr)
    if not rows:
        print("error: no valid result entries", file=sys.stderr)
        return 1
    return 0


def _cmd_demo_results(args: argparse.Namespace) -> int:
    from env_wrappers.bfcl.demo import write_demo_results

    n = write_demo_results(args.out)
    print(f"wrote {n} demo result entries to {args.out}")
    return 0


def _cmd_prepare_data(args: argparse.Namespace) -> int:
    from env_wrappers.bfcl.prepare_data import format_summary, prepare_data

    try:
        summary = prepare_data(args.out, call_format=args.call_format, split_file=args.split_file,
                               **_prompt_budget_filter(args))
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(format_summary(summary))
    return 0


def _cmd_dry_run(args: argparse.Namespace) -> int:
    from .dry_run import DryRunConfig, run_dry

    cfg = DryRunConfig(
        out=args.out, steps=args.steps, tasks_per_step=args.tasks_per_step, rollouts=args.rollouts,
        val_tasks=args.val_tasks, call_format=args.call_format, seed=args.seed, model=args.model,
        max_tokens_per_turn=args.max_tokens_per_turn, max_cue_tokens=args.max_cue_tokens,
        progress=not args.no_progress,
    )
    if args.ablation:
        switches = {"env_side": True, "reweighting": True, "closed_loop": True}
        switches[{"no-env-side": "env_side", "no-reweighting": "reweighting", "no-closed-loop": "closed_loop"}[args.ablation]] = False
        cfg.seal["switches"] = switches
    run_dry(cfg)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="seal-verl", description="SEAL for verl: diagnosis, data, training glue.")
    sub = p.add_subparsers(dest="command", required=True)

    d = sub.add_parser("diagnose", help="label every turn of bfcl generate result files with Psi")
    d.add_argument("inputs", nargs="+", help="result files (JSONL) or folders containing them")
    d.add_argument("--out", help="write one JSON line per task: {id, valid, labels[, error_type]}")
    d.add_argument("--plot", help="draw accuracy and label prevalence per category to this PNG")
    d.add_argument("--format", default="auto", choices=["auto", "json", "python", "fc"],
                   help="how model steps encode calls (auto: decide per step by its form)")
    d.add_argument("--strict-abstention", action="store_true",
                   help="also fail tasks with a tool call on an abstention turn (not the official score)")
    d.add_argument("--no-progress", action="store_true", help="never show a progress bar")
    d.add_argument("--progress-min", type=int, default=50, help=argparse.SUPPRESS)
    d.set_defaults(func=_cmd_diagnose)

    r = sub.add_parser("demo-results", help="write a demo result file with every failure kind")
    r.add_argument("out")
    r.set_defaults(func=_cmd_demo_results)

    pd_ = sub.add_parser("prepare-data", help="write the BFCL train/eval split as verl parquet datasets")
    pd_.add_argument("--out", required=True, help="output folder for train.parquet and eval.parquet")
    pd_.add_argument("--call-format", default="json", choices=["json", "python"],
                     help="how the model writes tool calls: <tool_call> JSON blocks or a Python call list")
    pd_.add_argument("--split-file", default=None,
                     help='JSON {"train": [ids], "eval": [ids]}; default: the shipped SEAL 400/400 split')
    pd_.add_argument("--model", default=None,
                     help="with --max-prompt-length: the model whose tokenizer and chat template measure each first prompt")
    pd_.add_argument("--max-prompt-length", type=int, default=None,
                     help="leave out (with a warning) tasks whose first prompt is longer (data.max_prompt_length)")
    pd_.set_defaults(func=_cmd_prepare_data)

    dr = sub.add_parser("dry-run", help="the closed loop on CPU for a few steps: real verl agent-loop worker, env, "
                        "wrapper, reward, advantage and state update; a scripted LLM instead of generation")
    dr.add_argument("--out", default="runs/dry", help="run folder (state_step_k.json, traces_step_k.jsonl, metrics.jsonl)")
    dr.add_argument("--steps", type=int, default=6)
    dr.add_argument("--tasks-per-step", type=int, default=4)
    dr.add_argument("--rollouts", type=int, default=4, help="GRPO group size (rollout.n)")
    dr.add_argument("--val-tasks", type=int, default=2, help="held-out tasks for the final validation pass (bfcl loop)")
    dr.add_argument("--call-format", default="json", choices=["json", "python"])
    dr.add_argument("--seed", type=int, default=0)
    dr.add_argument("--model", default=None, help="tiny model folder (made there if missing; default OUT/model)")
    dr.add_argument("--max-tokens-per-turn", type=int, default=None)
    dr.add_argument("--max-cue-tokens", type=int, default=None)
    dr.add_argument("--ablation", default=None, choices=["no-env-side", "no-reweighting", "no-closed-loop"])
    dr.add_argument("--no-progress", action="store_true", help="no progress bar")
    dr.set_defaults(func=_cmd_dry_run)

    # ---- preflight (before a long GPU job) -------------------------------------------------------------
    pf = sub.add_parser("preflight", help="check versions, GPUs, attention backend, tokenizer + chat template, "
                        "prompt budget and data before a long GPU run")
    pf.add_argument("--backbone", required=True, help="qwen2.5-3b | qwen2.5-7b | toolace2-8b (or qwen2.5 | toolace2)")
    pf.add_argument("--model", required=True, help="the model path the run uses (its tokenizer and chat template)")
    pf.add_argument("--data-dir", default=None, help="folder with train.parquet / eval.parquet from prepare-data")
    pf.add_argument("--max-prompt-length", type=int, default=None,
                    help="data.max_prompt_length of the run (default: the recipe's, recipes/bfcl_v3/config/bfcl_v3.yaml)")
    pf.add_argument("--attn", default="sdpa", help="attn_implementation of the run (recipe default: sdpa)")
    pf.add_argument("--remove-padding", action="store_true", help="the run sets use_remove_padding=true")
    pf.add_argument("--gpus", type=int, default=4, help="GPUs the run asks for (nnodes x n_gpus_per_node)")
    pf.add_argument("--no-progress", action="store_true")
    pf.set_defaults(func=_cmd_preflight)
    return p


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


def _cmd_preflight(args: argparse.Namespace) -> int:
    from .preflight import format_check, recipe_max_prompt_length, run

    try:
        from .backbones import spec

        spec(args.backbone)
        limit = args.max_prompt_length or recipe_max_prompt_length()
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return run(args.backbone, args.model, args.data_dir, limit, args.attn, args.remove_padding, args.gpus,
               progress=not args.no_progress, emit=lambda c: print(format_check(c), flush=True))


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
