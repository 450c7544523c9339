"""The ``seal-verl`` command line.

    seal-verl diagnose RESULT_FILE_OR_DIR... [--out labels.jsonl] [--plot labels.png] [--force]
    seal-verl demo-results OUT.jsonl [--force] # writes a demo result file with every failure kind
    seal-verl prepare-data --out DIR [--call-format json|python] [--split-file SPLIT.json] [--force]
    seal-verl dry-run [--env bfcl] [--out runs/dry] [--steps 6] [--tasks-per-step 4] [--rollouts 4] [--preset paper]
    seal-verl eval --base-url URL --model NAME --out DIR [--split eval] [--mode fc|prompt] [--samples N] [--seeds S...]
    seal-verl report RUN_DIR... [--out report] [--names NAME...]
    seal-verl check RUN_DIR [--steps N] [--resumed-from PARENT] [--require-moving-weights] [--min-nonzero X]
    seal-verl bfcl-ids [--split eval | --ids ID...] [--out FILE]  # restricts `bfcl generate --run-ids`
    seal-verl preflight --backbone qwen2.5-7b --model PATH [--data-dir DIR] [--max-prompt-length N]

``dry-run``, ``report`` and ``check`` are this module's; the others are the default environment's own (BFCL's:
``diagnose``, ``demo-results``, ``eval``, ``bfcl-ids``, ``prepare-data``, ``preflight``), arguments included
(:meth:`env_wrappers.protocol.Environment.commands`). Subcommands import what they run lazily so ``seal-verl
--help`` stays instant. A mistake in the arguments or the files they name ends in one line on stderr and exit
status 2; an existing output file is never replaced without ``--force``.
"""

from __future__ import annotations

import argparse
import sys

from .usage import UsageError

#: The environment whose own subcommands (``diagnose``, ``prepare-data``, ``eval``, ...) the command line offers.
DEFAULT_ENV = "bfcl"


def _add_environment_commands(sub, env_name: str = DEFAULT_ENV) -> None:
    """The subcommands ``env_name`` owns (:meth:`env_wrappers.protocol.Environment.commands`): their arguments
    come from the environment, so this module holds none of them. An environment that cannot be loaded leaves
    its subcommands out with a warning; the others still work."""
    from env_wrappers.registry import EnvironmentLoadError, get_environment

    try:
        commands = get_environment(env_name).commands()
    except (KeyError, EnvironmentLoadError) as exc:
        print(f"warning: environment {env_name!r}: {exc}; its subcommands are left out", file=sys.stderr)
        return
    for name, command in commands.items():
        parser = sub.add_parser(name, help=command.help)
        command.add_arguments(parser)
        parser.set_defaults(func=command.run)


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

    _add_environment_commands(sub)

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

    _add_report_parser(sub)
    _add_check_parser(sub)

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
