"""BFCL's subcommands of the ``seal-verl`` command line that work on result files: ``diagnose`` (verdicts and
Psi's labels for ``bfcl generate`` result files), ``demo-results``, ``eval`` (BFCL's protocol against an
OpenAI-compatible server) and ``bfcl-ids``.

Each is a :class:`~env_wrappers.protocol.Command` of :data:`COMMANDS`: its arguments and what runs it. The
registered ``bfcl`` environment (:mod:`env_wrappers.bfcl.registered`) serves them to the command line; they share
only the argument checks of :mod:`seal_verl.usage` with it, never the command line's own modules.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from env_wrappers.protocol import Command
from seal_verl.usage import UsageError, check_input_paths, check_output_file, distinct_files


def add_diagnose_arguments(d: argparse.ArgumentParser) -> None:
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


def diagnose(args: argparse.Namespace) -> int:
    """``seal-verl diagnose``: official verdict and Psi's labels for ``bfcl generate`` result files."""
    from tqdm import tqdm

    from ..environment.judge import judge_result
    from ..environment.tasks import load_tasks
    from .result_files import ReadProblem, count_lines, expand_paths, read_entries

    from seal_verl.runs.labels import format_table, plot, summarise

    if args.out:
        check_output_file(args.out, args.force, "--out")
    if args.plot:
        check_output_file(args.plot, args.force, "--plot")
        if args.out and os.path.abspath(args.out) == os.path.abspath(args.plot):
            raise UsageError("--out and --plot name the same file")
    check_input_paths(args.inputs)
    tasks = load_tasks()
    files, repeats = distinct_files(expand_paths(args.inputs))
    if not files:
        print("error: no result files found in the given paths", file=sys.stderr)
        return 2
    for path, kept in repeats:  # judged twice it would be two rows of one result, counted twice in the table
        print(f"warning: {path}: the same file as {kept}; judged once", file=sys.stderr)
    for option, target in (("--out", args.out), ("--plot", args.plot)):
        if target and any(_same_file(target, p) for p in files):
            raise UsageError(f"{option} {target}: is one of the result files read; give another name")
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


def _same_file(a: str, b: str) -> bool:
    """Whether two paths name one existing file (writing the one would truncate the other before it is read)."""
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        return False


def add_demo_results_arguments(r: argparse.ArgumentParser) -> None:
    r.add_argument("out", help="the JSONL file to write")
    r.add_argument("--force", action="store_true", help="replace the file if it exists")


def demo_results(args: argparse.Namespace) -> int:
    """``seal-verl demo-results``: a result file with every failure kind."""
    from .demo import write_demo_results

    check_output_file(args.out, args.force, "OUT")
    n = write_demo_results(args.out)
    print(f"wrote {n} demo result entries to {args.out}")
    return 0


def add_eval_arguments(ev: argparse.ArgumentParser) -> None:
    ev.add_argument("--base-url", required=True, help="server URL, e.g. http://127.0.0.1:8000/v1")
    ev.add_argument("--model", required=True, help="the served model name (as in GET /v1/models)")
    ev.add_argument("--out", required=True, help="output folder (result files, labels.jsonl, scores.json)")
    ev.add_argument("--split", default="eval", choices=["eval", "train", "all"],
                    help="the SEAL split's held-out 400 (eval), its 400 training tasks, or all 800")
    ev.add_argument("--category", nargs="+", metavar="CAT",
                    help="only these categories (base, miss_func, miss_param, long_context)")
    ev.add_argument("--ids", nargs="+", metavar="ID", help="only these task ids (instead of --split)")
    ev.add_argument("--mode", default="fc", choices=["fc", "prompt"],
                    help="fc: tools in the request, tool_calls back; prompt: the backbone's own call text")
    ev.add_argument("--call-format", default=None, choices=["json", "python"],
                    help="prompt mode: <tool_call> JSON blocks or BFCL's Python call list (default from --backbone)")
    ev.add_argument("--backbone", default=None, help="prompt mode: qwen2.5 (json) or llama3.1/toolace (python)")
    ev.add_argument("--concurrency", type=int, default=4, help="tasks in flight at once")
    ev.add_argument("--temperature", type=float, default=0.0)
    ev.add_argument("--max-tokens", type=int, default=None, help="max_tokens per request (default: the server's)")
    ev.add_argument("--samples", type=int, default=1,
                    help="samples per task (default 1, BFCL's protocol); above 1, with --temperature > 0, each is a "
                         "repetition in OUT/rep_*/ and OUT/spread.json has the mean and spread")
    ev.add_argument("--seeds", type=int, nargs="+", default=None, metavar="SEED",
                    help="one seeded repetition per seed (every request carries it), --samples per seed; the "
                         "spread as with --samples")
    ev.add_argument("--api-key", default=None, help="bearer token (default: $OPENAI_API_KEY, if set)")
    ev.add_argument("--timeout", type=float, default=600.0,
                    help="seconds one request may take in all (connect, headers and body), > 0")
    ev.add_argument("--retries", type=int, default=4,
                    help="retries on transport errors (connection, timeout, cut or malformed answer), 429 and 5xx")
    ev.add_argument("--no-progress", action="store_true", help="no progress bar")


def eval_command(args: argparse.Namespace) -> int:
    """``seal-verl eval``: BFCL's multi-turn protocol against an OpenAI-compatible server.

    Exit status: 0 every requested task is in the result files (inference errors included), 2 a bad option,
    server or out folder (one ``error:`` line), 3 some requested task has no result line (named), 130 Ctrl-C.
    """
    previous, hit = _interrupt_once()
    try:
        return _eval_command(args)
    finally:
        if not hit:  # after an interrupt Ctrl-C stays ignored while the process winds down
            _restore_ctrl_c(previous)


def _eval_command(args: argparse.Namespace) -> int:
    try:
        from .config import EvalConfig, EvalError
        from .repeats import is_repeated, protocol_line
        from .runner import run_eval
        from .scoring import format_scores

        cfg = EvalConfig(
            base_url=args.base_url, model=args.model, out=args.out, split=args.split,
            categories=args.category or [], ids=args.ids or [], mode=args.mode, call_format=args.call_format,
            backbone=args.backbone, concurrency=args.concurrency, temperature=args.temperature,
            max_tokens=args.max_tokens, api_key=args.api_key or os.environ.get("OPENAI_API_KEY"),
            timeout_s=args.timeout, retries=args.retries, progress=not args.no_progress,
        )
        samples, seeds = getattr(args, "samples", 1), getattr(args, "seeds", None)
        if is_repeated(samples, seeds):
            return _eval_repeats(cfg, samples, seeds)
        try:
            summary = run_eval(cfg)
        except EvalError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        if summary.interrupted:
            _ignore_further_ctrl_c()
        print(format_scores(summary))
        print(protocol_line(cfg))
        print(f"results for {summary.n_written} of {summary.n_requested} task(s), labels.jsonl and scores.json "
              f"written to {args.out}"
              + (f" ({summary.n_errors} task(s) failed at the server: inference errors)" if summary.n_errors else ""))
        if summary.interrupted:
            return 130
        if summary.missing:
            shown = ", ".join(summary.missing[:5]) + (", ..." if len(summary.missing) > 5 else "")
            print(f"error: {summary.n_missing} requested task(s) missing from the results ({shown}); "
                  "re-run the same command to complete them", file=sys.stderr)
            return 3
        return 0
    except KeyboardInterrupt:
        _ignore_further_ctrl_c()
        print("interrupted: finished tasks are saved; re-run the same command to continue", file=sys.stderr)
        return 130


def _eval_repeats(cfg, samples: int, seeds) -> int:
    """``--samples`` / ``--seeds``: the repetitions, then their spread (exit status as one evaluation's)."""
    from .config import EvalError
    from .repeats import SPREAD_FILE, format_spread, run_repeats

    try:
        result = run_repeats(cfg, samples, seeds, log=lambda line: print(line, file=sys.stderr))
    except EvalError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if result.interrupted:
        _ignore_further_ctrl_c()
    print(format_spread(result))
    print(f"{len(result.runs)} repetition(s) in {cfg.out}; the spread in {os.path.join(cfg.out, SPREAD_FILE)}")
    if result.interrupted:
        return 130
    if result.missing:
        shown = ", ".join(f"{rep}:{tid}" for rep, tid in result.missing[:5])
        print(f"error: {len(result.missing)} requested task(s) missing from the results ({shown}); re-run the same "
              "command to complete them", file=sys.stderr)
        return 3
    return 0


def _interrupt_once():
    """Ctrl-C interrupts the run once; a further Ctrl-C while the first is handled (the finished tasks being saved,
    the scores written) is ignored, so it can neither cut the saving short nor turn exit status 130 into a death
    by signal or a traceback. Returns the handler it replaced (None off the main thread, where none is set) and
    the list that records the interrupt once it happened.

    A handler, not ``SIG_IGN`` installed once the first ``KeyboardInterrupt`` is caught: a second signal could
    arrive before that line runs (a loaded machine makes that window wide)."""
    import signal
    import threading

    hit: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        return None, hit

    def on_sigint(signum, frame):
        if hit:
            return
        hit.append(signum)
        raise KeyboardInterrupt

    return signal.signal(signal.SIGINT, on_sigint), hit


def _restore_ctrl_c(previous) -> None:
    import signal

    if previous is not None:
        signal.signal(signal.SIGINT, previous)


def _ignore_further_ctrl_c() -> None:
    """Once an interrupted run has saved its work, a further Ctrl-C has nothing left to stop (the handler of
    :func:`_interrupt_once` already ignores it; this keeps it ignored while the process winds down)."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def add_bfcl_ids_arguments(ids: argparse.ArgumentParser) -> None:
    ids.add_argument("--split", default="eval", choices=["eval", "train", "all"])
    ids.add_argument("--category", nargs="+", metavar="CAT", help="only these categories")
    ids.add_argument("--ids", nargs="+", metavar="ID", help="only these task ids (instead of --split)")
    ids.add_argument("--out", default=None,
                     help="default: $BFCL_PROJECT_ROOT/test_case_ids_to_generate.json (where bfcl generate reads it)")


def bfcl_ids_command(args: argparse.Namespace) -> int:
    """``seal-verl bfcl-ids``: the id file that restricts ``bfcl generate --run-ids`` to a split."""
    from .config import EvalError, bfcl_id_file

    from seal_verl.atomic import atomic_write_text

    out = args.out
    if out is None:
        root = os.environ.get("BFCL_PROJECT_ROOT")
        if not root:
            print("error: give --out or set BFCL_PROJECT_ROOT (bfcl generate reads the file from there)", file=sys.stderr)
            return 2
        out = os.path.join(root, "test_case_ids_to_generate.json")
    try:
        ids = bfcl_id_file(args.split, args.category, getattr(args, "ids", None))
    except EvalError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    atomic_write_text(out, json.dumps(ids, indent=2) + "\n")
    source = "given ids" if getattr(args, "ids", None) else f"{args.split} split"
    print(f"wrote {sum(map(len, ids.values()))} task ids ({source}) to {out}")
    return 0


#: The subcommands of this room, in the order ``seal-verl --help`` lists them.
COMMANDS = {
    "diagnose": Command(add_diagnose_arguments, diagnose, "label every turn of bfcl generate result files with Psi"),
    "demo-results": Command(add_demo_results_arguments, demo_results,
                            "write a demo result file with every failure kind"),
    "eval": Command(add_eval_arguments, eval_command,
                    "held-out BFCL multi-turn accuracy of a model behind an OpenAI-compatible server"),
    "bfcl-ids": Command(add_bfcl_ids_arguments, bfcl_ids_command,
                        "write test_case_ids_to_generate.json for `bfcl generate --run-ids`"),
}
