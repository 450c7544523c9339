"""The ``seal-verl`` command line.

    seal-verl diagnose RESULT_FILE_OR_DIR... [--out labels.jsonl] [--plot labels.png] [--force]
    seal-verl demo-results OUT.jsonl [--force] # writes a demo result file with every failure kind
    seal-verl prepare-data --out DIR [--call-format json|python] [--split-file SPLIT.json] [--force]
    seal-verl dry-run [--env bfcl] [--out runs/dry] [--steps 6] [--tasks-per-step 4] [--rollouts 4] [--preset paper]
    seal-verl eval --base-url URL --model NAME --out DIR [--split eval] [--mode fc|prompt] ...
    seal-verl report RUN_DIR... [--out report] [--names NAME...]
    seal-verl check RUN_DIR [--steps N] [--resumed-from PARENT] [--require-moving-weights] [--min-nonzero X]
    seal-verl bfcl-ids [--split eval | --ids ID...] [--out FILE]  # restricts `bfcl generate --run-ids`
    seal-verl preflight --backbone qwen2.5-7b --model PATH [--data-dir DIR] [--max-prompt-length N]

Subcommands import their environment lazily so ``seal-verl --help`` stays instant. A mistake in the
arguments or the files they name ends in one line on stderr and exit status 2; an existing output file is
never replaced without ``--force``.
"""

from __future__ import annotations

import argparse
import sys


from .usage import UsageError

#: The environment whose own subcommands (``diagnose``, ``demo-results``, ``prepare-data``) the CLI runs.
DEFAULT_ENV = "bfcl"


def _env_command(name: str, args: argparse.Namespace) -> int:
    """Run an environment's own subcommand (:meth:`env_wrappers.protocol.Environment.commands`)."""
    from env_wrappers.registry import get_environment

    env_name = getattr(args, "env", None) or DEFAULT_ENV
    command = get_environment(env_name).commands().get(name)
    if command is None:
        print(f"error: environment {env_name!r} has no {name!r} command", file=sys.stderr)
        return 2
    return command(args)


def _cmd_diagnose(args: argparse.Namespace) -> int:
    return _env_command("diagnose", args)


def _cmd_demo_results(args: argparse.Namespace) -> int:
    return _env_command("demo-results", args)


def _cmd_prepare_data(args: argparse.Namespace) -> int:
    return _env_command("prepare-data", args)


def _dry_run_environment(name: str, call_format: str | None) -> str:
    """Check ``--env`` and ``--call-format`` before anything heavy starts; the call format to use."""
    from env_wrappers.registry import EnvironmentLoadError, get_environment

    try:
        env = get_environment(name)
    except KeyError as exc:  # the message names the environment, shortened and quoted
        raise UsageError(f"--env: {exc.args[0] if exc.args else exc}") from None
    except EnvironmentLoadError as exc:
        raise UsageError(f"--env: {exc}") from None
    formats = tuple(env.call_formats)
    if call_format is None:
        return formats[0]
    if call_format not in formats:
        raise UsageError(f"--call-format {call_format}: environment {name!r} decodes {', '.join(formats)}")
    return call_format


def _cmd_dry_run(args: argparse.Namespace) -> int:
    from .dry_run import DryRunConfig, run_dry

    call_format = _dry_run_environment(args.env, args.call_format)
    cfg = DryRunConfig(
        out=args.out, env=args.env, steps=args.steps, tasks_per_step=args.tasks_per_step, rollouts=args.rollouts,
        val_tasks=args.val_tasks, call_format=call_format, seed=args.seed, model=args.model,
        max_tokens_per_turn=args.max_tokens_per_turn, max_cue_tokens=args.max_cue_tokens,
        progress=not args.no_progress, preset=args.preset, force=args.force,
    )
    if args.preset:
        from .dry_run.presets import load_preset

        try:
            load_preset(args.preset)
        except ValueError as exc:
            raise UsageError(f"--preset {args.preset}: {exc}") from exc
    if args.ablation:
        switches = {"env_side": True, "reweighting": True, "closed_loop": True}
        switches[ABLATIONS[args.ablation]] = False
        cfg.seal["switches"] = switches
    run_dry(cfg)
    return 0


# ------------------------------------------------------------------------------------------- eval
def _add_eval_parser(sub) -> None:
    ev = sub.add_parser("eval", help="held-out BFCL multi-turn accuracy of a model behind an OpenAI-compatible server")
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
    ev.add_argument("--api-key", default=None, help="bearer token (default: $OPENAI_API_KEY, if set)")
    ev.add_argument("--timeout", type=float, default=600.0,
                    help="seconds one request may take in all (connect, headers and body), > 0")
    ev.add_argument("--retries", type=int, default=4,
                    help="retries on transport errors (connection, timeout, cut or malformed answer), 429 and 5xx")
    ev.add_argument("--no-progress", action="store_true", help="no progress bar")
    ev.set_defaults(func=lambda a: _env_command("eval", a))

    ids = sub.add_parser("bfcl-ids", help="write test_case_ids_to_generate.json for `bfcl generate --run-ids`")
    ids.add_argument("--split", default="eval", choices=["eval", "train", "all"])
    ids.add_argument("--category", nargs="+", metavar="CAT", help="only these categories")
    ids.add_argument("--ids", nargs="+", metavar="ID", help="only these task ids (instead of --split)")
    ids.add_argument("--out", default=None,
                     help="default: $BFCL_PROJECT_ROOT/test_case_ids_to_generate.json (where bfcl generate reads it)")
    ids.set_defaults(func=lambda a: _env_command("bfcl-ids", a))


# ------------------------------------------------------------------------------------------- report
def _cmd_report(args: argparse.Namespace) -> int:
    from .runs.report import ReportError, build_report

    try:
        rep = build_report(args.runs, args.out, names=args.names)
    except ReportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for line in rep.notes:
        print(f"note: {line}", file=sys.stderr)
    for line in rep.warnings:
        print(f"warning: {line}", file=sys.stderr)
    print(rep.text)
    print(f"wrote {rep.html} and {len(rep.pngs)} PNG(s) to {args.out}")
    return 0


def _add_report_parser(sub) -> None:
    rp = sub.add_parser("report", help="plots, one HTML page and paper-style tables from run and eval folders")
    rp.add_argument("runs", nargs="+", metavar="RUN_DIR", help="training/dry-run folders or seal-verl eval folders")
    rp.add_argument("--out", default="report", help="folder for report.html and the PNGs")
    rp.add_argument("--names", nargs="+", default=None, help="a display name per RUN_DIR (default: folder names)")
    rp.set_defaults(func=_cmd_report)


# ------------------------------------------------------------------------------------------- check
def _cmd_check(args: argparse.Namespace) -> int:
    from .runs.check import run

    try:
        return run(args)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _add_check_parser(sub) -> None:
    from .runs.check import add_arguments

    ck = sub.add_parser("check", help="check a training run from its run folder: steps, state, weights x advantages, "
                        "cues, weight sync, resume; exit 0 only if every check passes")
    add_arguments(ck)
    ck.set_defaults(func=_cmd_check)


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
    pd_.add_argument("--model", default=None,
                     help="with --max-prompt-length: the model whose tokenizer and chat template measure each first prompt")
    pd_.add_argument("--max-prompt-length", type=int, default=None,
                     help="leave out (with a warning) tasks whose first prompt is longer (data.max_prompt_length)")
    pd_.set_defaults(func=_cmd_prepare_data)

    dr = sub.add_parser("dry-run", help="the closed loop on CPU for a few steps: real verl agent-loop worker, env, "
                        "wrapper, reward, advantage and state update; a scripted LLM instead of generation")
    dr.add_argument("--env", default=DEFAULT_ENV, metavar="NAME",
                    help="the environment to train: a registered name, an installed entry point of the group "
                         "seal_verl.environments, or an import path package.module:Class (default bfcl); an import "
                         "path imports that module (its code runs), which must be importable, e.g. via PYTHONPATH")
    dr.add_argument("--out", default="runs/dry", help="run folder (the layout of a training run's seal.run_dir)")
    dr.add_argument("--steps", type=_int_at_least(1), default=6, help="training steps to run (default 6)")
    dr.add_argument("--tasks-per-step", type=_int_at_least(1), default=4,
                    help="training tasks per step, from the environment's train split (default 4)")
    dr.add_argument("--rollouts", type=_int_at_least(1), default=4, help="GRPO group size, rollout.n (default 4)")
    dr.add_argument("--val-tasks", type=_int_at_least(0), default=2,
                    help="tasks of the environment's eval split for the final validation pass (default 2; 0 skips it)")
    dr.add_argument("--call-format", default=None, metavar="FORMAT",
                    help="how the scripted model writes calls, one of the environment's call formats (default: its "
                         "first; bfcl: json = <tool_call> JSON blocks, python = a Python call list)")
    dr.add_argument("--seed", type=int, default=0, help="seed of the task sampling and the scripted model")
    dr.add_argument("--model", default=None, help="tiny model folder (made there if missing; default OUT/model)")
    dr.add_argument("--max-tokens-per-turn", type=_int_at_least(1), default=None,
                    help="token budget of one turn's responses (default: the agent loop's)")
    dr.add_argument("--max-cue-tokens", type=_int_at_least(0), default=None,
                    help="token budget of the cues added to one observation (default: the interface's)")
    dr.add_argument("--ablation", default=None, type=_ablation, metavar="{" + ",".join(ABLATIONS) + "}",
                    help="switch one side of SEAL off, as the recipes' ablations do "
                         "(the hyphenated spellings no-env-side etc. are accepted too)")
    dr.add_argument("--preset", default=None, metavar="NAME",
                    help="a recipe preset (recipes/bfcl_v3/config/preset): paper = the SEAL paper's settings "
                         "(reward = the verifier unchanged, static rho from its table; docs/paper_settings.md)")
    dr.add_argument("--no-progress", action="store_true", help="no progress bar")
    dr.add_argument("--force", action="store_true",
                    help="move an earlier run's files in --out aside (into a dated sibling folder) instead of stopping")
    dr.set_defaults(func=_cmd_dry_run)

    _add_eval_parser(sub)
    _add_report_parser(sub)
    _add_check_parser(sub)

    # ---- preflight (before a long GPU job) -------------------------------------------------------------
    pf = sub.add_parser("preflight", help="check versions, GPUs, attention backend, tokenizer + chat template, "
                        "prompt budget and data before a long GPU run")
    pf.add_argument("--backbone", required=True, help="qwen2.5-3b | qwen2.5-7b | toolace2-8b (or qwen2.5 | toolace2)")
    pf.add_argument("--model", required=True, help="the model path the run uses (its tokenizer and chat template)")
    pf.add_argument("--data-dir", default=None, help="folder with train.parquet / eval.parquet from prepare-data")
    pf.add_argument("--max-prompt-length", type=int, default=None,
                    help="data.max_prompt_length of the run (default: the recipe's for the backbone)")
    pf.add_argument("--attn", default="sdpa", help="attn_implementation of the run (recipe default: sdpa)")
    pf.add_argument("--remove-padding", action="store_true", help="the run sets use_remove_padding=true")
    pf.add_argument("--gpus", type=int, default=None, help="GPUs the run asks for (nnodes x n_gpus_per_node; "
                    "default: the recipe's 4, and a warning when this node has more)")
    pf.add_argument("--no-progress", action="store_true")
    pf.set_defaults(func=lambda a: _env_command("preflight", a))
    return p


def main(argv: list[str] | None = None) -> int:
    from . import env_vars

    args = build_parser().parse_args(argv)
    env_vars.check_or_exit("seal-verl")  # a bad SEAL_ setting is one line and exit 2, before any work
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
