"""The ``seal-verl`` command line.

    seal-verl diagnose RESULT_FILE_OR_DIR... [--out labels.jsonl] [--plot labels.png] [--force]
    seal-verl demo-results OUT.jsonl [--force] # writes a demo result file with every failure kind
    seal-verl prepare-data --out DIR [--call-format json|python] [--split-file SPLIT.json] [--force]
    seal-verl dry-run [--out runs/dry] [--steps 6] [--tasks-per-step 4] [--rollouts 4]

Subcommands import their environment lazily so ``seal-verl --help`` stays instant. A mistake in the
arguments or the files they name ends in one line on stderr and exit status 2; an existing output file is
never replaced without ``--force``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys


class UsageError(Exception):
    """A mistake in the command line or the files it names: printed as one line, exit status 2."""


def _check_output_file(path: str, force: bool, option: str) -> None:
    """Fail early, before any work, if ``path`` cannot be written as a new file (or, without ``--force``,
    already exists)."""
    if os.path.isdir(path):
        raise UsageError(f"{option} {path}: is a folder; give a file name")
    if os.path.lexists(path):
        if not force:
            raise UsageError(f"{option} {path}: already exists; pass --force to replace it")
        if not os.path.isfile(path):
            raise UsageError(f"{option} {path}: not a regular file")
        if not os.access(path, os.W_OK):
            raise UsageError(f"{option} {path}: not writable")
    _check_parent(path, option)


def _check_parent(path: str, option: str) -> None:
    parent = os.path.dirname(os.path.abspath(path))
    probe = parent
    while not os.path.exists(probe):  # the nearest existing ancestor decides whether it can be created
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        raise UsageError(f"{option} {path}: {probe} is a file, not a folder")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise UsageError(f"{option} {path}: no permission to write in {probe}")


def _cmd_diagnose(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from env_wrappers.bfcl.judge import judge_result
    from env_wrappers.bfcl.result_files import ReadProblem, count_lines, expand_paths, read_entries
    from env_wrappers.bfcl.tasks import load_tasks

    from .report import format_table, plot, summarise

    if args.out:
        _check_output_file(args.out, args.force, "--out")
    if args.plot:
        _check_output_file(args.plot, args.force, "--plot")
        if args.out and os.path.abspath(args.out) == os.path.abspath(args.plot):
            raise UsageError("--out and --plot name the same file")
    tasks = load_tasks()
    files = expand_paths(args.inputs)
    if not files:
        print("error: no result files found in the given paths", file=sys.stderr)
        return 2
    total = sum(count_lines(p) for p in files)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
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
        os.makedirs(os.path.dirname(os.path.abspath(args.plot)), exist_ok=True)
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

    _check_output_file(args.out, args.force, "OUT")
    n = write_demo_results(args.out)
    print(f"wrote {n} demo result entries to {args.out}")
    return 0


def _cmd_prepare_data(args: argparse.Namespace) -> int:
    from env_wrappers.bfcl.prepare_data import SPLIT_FILES, format_summary, prepare_data

    if os.path.exists(args.out) and not os.path.isdir(args.out):
        raise UsageError(f"--out {args.out}: is a file; give a folder")
    for fname, _ in SPLIT_FILES.values():
        _check_output_file(os.path.join(args.out, fname), args.force, "--out")
    try:
        summary = prepare_data(args.out, call_format=args.call_format, split_file=args.split_file)
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
        switches[ABLATIONS[args.ablation]] = False
        cfg.seal["switches"] = switches
    run_dry(cfg)
    return 0


#: ``--ablation`` values: the recipes' names (``no_env_side``, ...) and their older hyphenated spellings.
ABLATIONS = {f"no_{k}": k for k in ("env_side", "reweighting", "closed_loop")}
_ABLATION_ALIASES = {k.replace("_", "-"): k for k in ABLATIONS}


def _ablation(value: str) -> str:
    value = _ABLATION_ALIASES.get(value, value)
    if value not in ABLATIONS:
        raise argparse.ArgumentTypeError(f"unknown ablation {value!r}; choose from {', '.join(ABLATIONS)}")
    return value


def _int_at_least(low: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        return value

    parse.__name__ = f"integer >= {low}"
    return parse


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
    d.add_argument("--force", action="store_true", help="replace --out / --plot files that already exist")
    d.add_argument("--no-progress", action="store_true", help="never show a progress bar")
    d.add_argument("--progress-min", type=int, default=50, help=argparse.SUPPRESS)
    d.set_defaults(func=_cmd_diagnose)

    r = sub.add_parser("demo-results", help="write a demo result file with every failure kind")
    r.add_argument("out", help="the JSONL file to write")
    r.add_argument("--force", action="store_true", help="replace the file if it exists")
    r.set_defaults(func=_cmd_demo_results)

    pd_ = sub.add_parser("prepare-data", help="write the BFCL train/eval split as verl parquet datasets")
    pd_.add_argument("--out", required=True, help="output folder for train.parquet and eval.parquet")
    pd_.add_argument("--call-format", default="json", choices=["json", "python"],
                     help="how the model writes tool calls: <tool_call> JSON blocks or a Python call list")
    pd_.add_argument("--split-file", default=None,
                     help='JSON {"train": [ids], "eval": [ids]}; default: the shipped SEAL 400/400 split')
    pd_.add_argument("--force", action="store_true", help="replace train.parquet / eval.parquet if they exist")
    pd_.set_defaults(func=_cmd_prepare_data)

    dr = sub.add_parser("dry-run", help="the closed loop on CPU for a few steps: real verl agent-loop worker, env, "
                        "wrapper, reward, advantage and state update; a scripted LLM instead of generation")
    dr.add_argument("--out", default="runs/dry", help="run folder (state_step_k.json, traces_step_k.jsonl, metrics.jsonl)")
    dr.add_argument("--steps", type=_int_at_least(1), default=6, help="training steps to run (default 6)")
    dr.add_argument("--tasks-per-step", type=_int_at_least(1), default=4,
                    help="BFCL training tasks per step (default 4)")
    dr.add_argument("--rollouts", type=_int_at_least(1), default=4, help="GRPO group size, rollout.n (default 4)")
    dr.add_argument("--val-tasks", type=_int_at_least(0), default=2,
                    help="held-out tasks for the final validation pass (default 2; 0 skips it)")
    dr.add_argument("--call-format", default="json", choices=["json", "python"],
                    help="how the scripted model writes calls: <tool_call> JSON blocks or a Python call list")
    dr.add_argument("--seed", type=int, default=0, help="seed of the task sampling and the scripted model")
    dr.add_argument("--model", default=None, help="tiny model folder (made there if missing; default OUT/model)")
    dr.add_argument("--max-tokens-per-turn", type=_int_at_least(1), default=None,
                    help="token budget of one turn's responses (default: the agent loop's)")
    dr.add_argument("--max-cue-tokens", type=_int_at_least(0), default=None,
                    help="token budget of the cues added to one observation (default: the interface's)")
    dr.add_argument("--ablation", default=None, type=_ablation, metavar="{" + ",".join(ABLATIONS) + "}",
                    help="switch one side of SEAL off, as the recipes' ablations do "
                         "(the hyphenated spellings no-env-side etc. are accepted too)")
    dr.add_argument("--no-progress", action="store_true", help="no progress bar")
    dr.set_defaults(func=_cmd_dry_run)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a file or folder the command was pointed at cannot be used
        where = f" {exc.filename}" if getattr(exc, "filename", None) else ""
        print(f"error:{where}: {exc.strerror or exc}" if where else f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
