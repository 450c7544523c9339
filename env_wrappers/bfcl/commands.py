"""BFCL's subcommands of the ``seal-verl`` command line (``diagnose``, ``demo-results``, ``prepare-data``).

They work on BFCL's own files (``bfcl generate`` result files, the SEAL split), so they belong to the BFCL
environment; ``seal_verl/cli.py`` defines their arguments and reaches them through
:meth:`env_wrappers.protocol.Environment.commands`.
"""

from __future__ import annotations

import argparse
import json
import sys


def diagnose(args: argparse.Namespace) -> int:
    """``seal-verl diagnose``: official verdict and Psi's labels for ``bfcl generate`` result files."""
    from tqdm import tqdm

    from seal_verl.report import format_table, plot, summarise

    from .judge import judge_result
    from .result_files import ReadProblem, count_lines, expand_paths, read_entries
    from .tasks import load_tasks

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


def demo_results(args: argparse.Namespace) -> int:
    """``seal-verl demo-results``: a result file with every failure kind."""
    from .demo import write_demo_results

    n = write_demo_results(args.out)
    print(f"wrote {n} demo result entries to {args.out}")
    return 0


def prepare_data_command(args: argparse.Namespace) -> int:
    """``seal-verl prepare-data``: the SEAL split as verl parquet files."""
    from .prepare_data import format_summary, prepare_data

    try:
        summary = prepare_data(args.out, call_format=args.call_format, split_file=args.split_file)
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(format_summary(summary))
    return 0
