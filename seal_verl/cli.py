"""The ``seal-verl`` command line.

    seal-verl diagnose RESULT_FILE_OR_DIR... [--out labels.jsonl] [--plot labels.png]
    seal-verl demo-results OUT.jsonl          # writes a demo result file with every failure kind
    seal-verl prepare-data --out DIR [--call-format json|python] [--split-file SPLIT.json]
    seal-verl dry-run [--out runs/dry] [--steps 6] [--tasks-per-step 4] [--rollouts 4]

Subcommands import their environment lazily so ``seal-verl --help`` stays instant.
"""

from __future__ import annotations

import argparse
import sys


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
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
