"""A trained checkpoint of a SEAL run as a Hugging Face model folder, merged by verl's own model merger.

verl saves the actor as FSDP shards (``<checkpoints>/global_step_N/actor/model_world_size_W_rank_R.pt`` with
``fsdp_config.json`` and the model's config and tokenizer in ``huggingface/``); a vLLM server, ``transformers`` and
``seal-verl eval`` need one Hugging Face folder. This module finds the checkpoint of a run folder, runs

    python -m verl.model_merger merge --backend fsdp --local_dir <checkpoints>/global_step_N/actor --target_dir <out>

and records what it merged. It never writes into the run's checkpoints (a merged copy beside the shards would be
read back by a resume, or deleted by the next run's clean-up) and never over an existing folder without
``--force``; with ``--force`` the old folder is replaced only once the new merge succeeded.

    python -m seal_verl.models.export RUN_DIR [--step N] [--checkpoints DIR] [--out DIR] [--force]

The checkpoint folder is the run's ``trainer.default_local_dir``, read from the run folder's ``config.json``
(``checkpoints/`` of the run folder for the CPU scripts; ``--checkpoints`` for a folder the run did not record).
The default output is ``<RUN_DIR>/export/global_step_N/model``. The merger writes bfloat16 weights whatever the
training dtype (verl 0.9.1's ``FSDPModelMerger``). In the model folder, ``seal_export.json`` names the checkpoint,
the step, the merger command, the SHA-256 of every file the merger wrote, and the run's held-out tasks and call
format (what ``python -m seal_verl.models.export_eval`` evaluates).

No verl import: the merger runs as its own process, as a user would run it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Optional

#: the run folder's subfolder for exports (one ``global_step_N`` per exported step)
EXPORT_DIR = "export"
#: the record written into the merged model's folder (loaders ignore it)
RECORD = "seal_export.json"
#: verl's file in ``trainer.default_local_dir`` naming the last complete checkpoint
LATEST = "latest_checkpointed_iteration.txt"
_STEP_DIR = re.compile(r"global_step_(\d+)")
_SHARD = re.compile(r"model_world_size_(\d+)_rank_(\d+)\.pt")


class ExportError(ValueError):
    """Why a checkpoint cannot be exported as asked; one line."""


@dataclass
class Checkpoint:
    """One actor checkpoint of a run, as verl's FSDP checkpoint manager writes it."""

    run_dir: str
    root: str        # trainer.default_local_dir
    step: int
    actor: str       # <root>/global_step_N/actor
    world_size: int
    hf_dir: str      # <actor>/huggingface: config, generation config, tokenizer and chat template


@dataclass
class RunFacts:
    """What the run folder says about how to evaluate its model (``config.json``'s resolved verl config)."""

    checkpoints: Optional[str] = None
    data_dir: Optional[str] = None
    backbone: Optional[str] = None
    max_model_len: Optional[int] = None
    max_tokens_per_step: Optional[int] = None
    heldout_ids: list = field(default_factory=list)
    call_format: Optional[str] = None
    env: Optional[str] = None        # the held-out rows' environment (extra_info.env; None: BFCL's own rows)


def run_facts(run_dir: str) -> RunFacts:
    """The checkpoint folder, data folder, backbone, model length and held-out tasks the run recorded (each None
    or empty when the run folder does not say)."""
    facts = RunFacts()
    path = os.path.join(run_dir, "config.json")
    try:
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError):
        return facts
    verl = config.get("verl") if isinstance(config, dict) else None
    if not isinstance(verl, dict):
        return facts
    trainer, recipe = verl.get("trainer") or {}, verl.get("recipe") or {}
    rollout = ((verl.get("actor_rollout_ref") or {}).get("rollout") or {})
    facts.checkpoints = trainer.get("default_local_dir") if isinstance(trainer, dict) else None
    facts.data_dir = recipe.get("data_dir") if isinstance(recipe, dict) else None
    facts.backbone = recipe.get("backbone") if isinstance(recipe, dict) else None
    if isinstance(rollout, dict) and isinstance(rollout.get("max_model_len"), int):
        facts.max_model_len = rollout["max_model_len"]
    agent = rollout.get("agent") if isinstance(rollout, dict) else None
    loops = agent.get("agent_loop_config_path") if isinstance(agent, dict) else None
    if isinstance(loops, str):
        facts.max_tokens_per_step = _eval_loop_step_budget(loops)
    if facts.data_dir:
        facts.heldout_ids, facts.call_format, facts.env = heldout_tasks(os.path.join(facts.data_dir, "eval.parquet"))
    return facts


def _eval_loop_step_budget(path: str) -> Optional[int]:
    """``max_tokens_per_step`` of the run's evaluation loop (``bfcl``, no cues) in its agent-loop file, if any."""
    import yaml

    try:
        with open(path, encoding="utf-8") as f:
            loops = yaml.safe_load(f) or []
    except (OSError, yaml.YAMLError):
        return None
    for loop in loops if isinstance(loops, list) else []:
        if isinstance(loop, dict) and loop.get("name") == "bfcl" and isinstance(loop.get("max_tokens_per_step"), int):
            return loop["max_tokens_per_step"]
    return None


def heldout_tasks(parquet: str) -> tuple[list, Optional[str], Optional[str]]:
    """Task ids, call format and environment of a prepared held-out file (``eval.parquet`` of ``seal-verl
    prepare-data`` or the run scripts); ``([], None, None)`` when it is absent."""
    if not os.path.isfile(parquet):
        return [], None, None
    import pandas as pd

    infos = pd.read_parquet(parquet, columns=["extra_info"])["extra_info"]
    ids = [str(info["task_id"]) for info in infos]
    formats = {info.get("call_format") for info in infos} - {None}
    envs = {info.get("env") for info in infos} - {None}
    return ids, (formats.pop() if len(formats) == 1 else None), (",".join(sorted(envs)) or None)


def find_checkpoint(run_dir: str, step: Optional[int] = None, checkpoints: Optional[str] = None) -> Checkpoint:
    """The actor checkpoint of ``step`` (default: the last complete one, verl's ``latest_checkpointed_iteration``)."""
    if not os.path.isdir(run_dir):
        raise ExportError(f"{run_dir}: no such run folder")
    from seal_verl.runs.folder import CHECKPOINTS

    root = checkpoints or run_facts(run_dir).checkpoints or os.path.join(run_dir, CHECKPOINTS)
    if not os.path.isabs(root):
        root = os.path.join(run_dir, root) if os.path.isdir(os.path.join(run_dir, root)) else os.path.abspath(root)
    steps = sorted(int(m.group(1)) for name in (os.listdir(root) if os.path.isdir(root) else [])
                   if (m := _STEP_DIR.fullmatch(name)) and os.path.isdir(os.path.join(root, name, "actor")))
    if not steps:
        raise ExportError(f"{root}: no checkpoint (global_step_N/actor); the run saves one at trainer.save_freq and "
                          "at its last step when save_freq > 0 (the ledger overlay sets -1: pass trainer.save_freq=N)")
    if step is None:
        step = _latest(root) or steps[-1]
    if step not in steps:
        raise ExportError(f"{root}: no checkpoint of step {step} (steps with one: {', '.join(map(str, steps))})")
    actor = os.path.join(root, f"global_step_{step}", "actor")
    world = _world_size(actor)
    hf_dir = os.path.join(actor, "huggingface")
    if not os.path.isfile(os.path.join(hf_dir, "config.json")):
        raise ExportError(f"{actor}: no huggingface/config.json (verl writes the model config there with every "
                          "checkpoint); the checkpoint is incomplete")
    return Checkpoint(run_dir=os.path.abspath(run_dir), root=os.path.abspath(root), step=step,
                      actor=os.path.abspath(actor), world_size=world, hf_dir=os.path.abspath(hf_dir))


def _latest(root: str) -> Optional[int]:
    try:
        with open(os.path.join(root, LATEST), encoding="utf-8") as f:
            text = f.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _world_size(actor: str) -> int:
    """The world size of ``fsdp_config.json``, with every rank's shard present (what the merger loads)."""
    try:
        with open(os.path.join(actor, "fsdp_config.json"), encoding="utf-8") as f:
            world = json.load(f).get("world_size")
    except (OSError, ValueError, AttributeError):
        raise ExportError(f"{actor}: no readable fsdp_config.json; not an FSDP checkpoint of verl "
                          "(a Megatron checkpoint needs `python -m verl.model_merger merge --backend megatron`)") from None
    if not isinstance(world, int) or world < 1:
        raise ExportError(f"{actor}/fsdp_config.json: world_size {world!r} is not a positive integer")
    ranks = {int(m.group(2)) for name in os.listdir(actor) if (m := _SHARD.fullmatch(name)) and int(m.group(1)) == world}
    missing = sorted(set(range(world)) - ranks)
    if missing:
        raise ExportError(f"{actor}: shards of rank(s) {', '.join(map(str, missing[:8]))} of {world} are missing")
    return world


def default_out(ckpt: Checkpoint) -> str:
    return os.path.join(ckpt.run_dir, EXPORT_DIR, f"global_step_{ckpt.step}", "model")


def _inside(path: str, folder: str) -> bool:
    path, folder = os.path.realpath(path), os.path.realpath(folder)
    return path == folder or os.path.commonpath([path, folder]) == folder


def check_target(out: str, ckpt: Checkpoint, force: bool) -> None:
    """Refuse a target inside the checkpoints, one that holds them or the run folder, and (without ``force``) any
    existing path."""
    if _inside(out, ckpt.root):
        raise ExportError(f"--out {out}: inside the run's checkpoint folder {ckpt.root}; export elsewhere "
                          f"(default: {default_out(ckpt)})")
    for held, what in ((ckpt.root, "the run's checkpoints"), (ckpt.run_dir, "the run folder")):
        if _inside(held, out):
            raise ExportError(f"--out {out}: holds {what} ({held}); give a folder of its own")
    if os.path.lexists(out):
        if not force:
            raise ExportError(f"--out {out}: already exists; pass --force to replace it")
        if not os.path.isdir(out) or os.path.islink(out):
            raise ExportError(f"--out {out}: not a folder; remove it yourself or choose another --out")
        if os.listdir(out) and not os.path.isfile(os.path.join(out, RECORD)):
            raise ExportError(f"--out {out}: a folder that is not an earlier export (no {RECORD}); --force replaces "
                              "only those: remove it yourself or choose another --out")


def merge_command(ckpt: Checkpoint, target: str, python: str = sys.executable) -> list[str]:
    """verl's own merge command for ``ckpt`` (FSDP backend), as a user would type it."""
    return [python, "-m", "verl.model_merger", "merge", "--backend", "fsdp", "--local_dir", ckpt.actor,
            "--target_dir", target]


def export(run_dir: str, out: Optional[str] = None, step: Optional[int] = None, checkpoints: Optional[str] = None,
           force: bool = False, python: str = sys.executable, log=None) -> dict:
    """Merge the run's checkpoint into ``out`` (default :func:`default_out`); returns the record written beside it.

    The merger writes into a fresh folder next to ``out``, which replaces ``out`` only after the merged model was
    checked (config, weights, tokenizer with a chat template), so a failed merge leaves an earlier export as it was.
    """
    ckpt = find_checkpoint(run_dir, step, checkpoints)
    out = os.path.abspath(out or default_out(ckpt))
    check_target(out, ckpt, force)
    parent = os.path.dirname(out)
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".seal-export-", dir=parent)
    cmd = merge_command(ckpt, staging, python)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=_merger_env())
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
            raise ExportError(f"verl's model merger failed (exit {proc.returncode}) on {ckpt.actor}:\n{tail}")
        check_merged(staging)
        facts = run_facts(ckpt.run_dir)
        record = {
            "run_dir": ckpt.run_dir, "checkpoint": ckpt.actor, "step": ckpt.step, "world_size": ckpt.world_size,
            "model": out, "merger": " ".join(merge_command(ckpt, out, "python")), "verl": _dist_version("verl"),
            "dtype": "bfloat16 (verl's FSDP merger casts every weight)", "files": _hashes(staging),
            "backbone": facts.backbone, "call_format": facts.call_format, "max_model_len": facts.max_model_len,
            "max_tokens_per_step": facts.max_tokens_per_step, "env": facts.env, "heldout_ids": facts.heldout_ids, "data_dir": facts.data_dir,
        }
        with open(os.path.join(staging, RECORD), "w", encoding="utf-8") as f:
            json.dump(record, f, indent=2)
            f.write("\n")
        if os.path.lexists(out):
            shutil.rmtree(out)
        os.replace(staging, out)
    finally:
        if os.path.isdir(staging):
            shutil.rmtree(staging, ignore_errors=True)
    if log:
        log(f"merged {ckpt.actor} (step {ckpt.step}, {ckpt.world_size} shard(s)) into {out}")
    return record


def _merger_env() -> dict:
    """The merger reads only local files: no hub look-up for the config or tokenizer it was given by path."""
    return dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")


def check_merged(folder: str) -> None:
    """The merged folder loads as a model folder: config, weights, and a tokenizer with a chat template."""
    names = set(os.listdir(folder))
    if "config.json" not in names or not any(n.endswith(".safetensors") or n.endswith(".bin") for n in names):
        raise ExportError(f"{folder}: the merger wrote no config.json or no weights ({sorted(names)})")
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    if not getattr(tok, "chat_template", None):
        raise ExportError(f"{folder}: the merged tokenizer has no chat template; the checkpoint's huggingface/ "
                          "folder lacks it, so a server could not render the agent loop's prompts")


def _hashes(folder: str) -> dict:
    from seal_verl.models.shipped import file_sha256

    return {name: file_sha256(os.path.join(folder, name)) for name in sorted(os.listdir(folder))
            if os.path.isfile(os.path.join(folder, name))}


def _dist_version(name: str) -> Optional[str]:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def add_arguments(p: argparse.ArgumentParser, out_help: Optional[str] = None, force_help: Optional[str] = None) -> None:
    """The arguments that find the checkpoint and name the output (shared with ``export_eval``)."""
    p.add_argument("run_dir", metavar="RUN_DIR", help="the run folder (seal.run_dir; the CPU scripts' OUT)")
    p.add_argument("--step", type=int, default=None,
                   help="the checkpoint's global step (default: the last complete one)")
    p.add_argument("--checkpoints", default=None,
                   help="the run's trainer.default_local_dir (default: what the run folder's config.json records, "
                        "else RUN_DIR/checkpoints)")
    p.add_argument("--out", default=None, help=out_help or "the Hugging Face folder to write (default: "
                   "RUN_DIR/export/global_step_N/model); never inside the checkpoints")
    p.add_argument("--force", action="store_true",
                   help=force_help or "replace --out if it is an earlier export (after a successful merge)")


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m seal_verl.models.export",
                                description="merge a SEAL run's FSDP checkpoint into a Hugging Face folder")
    add_arguments(p)
    args = p.parse_args(argv)
    try:
        record = export(args.run_dir, args.out, args.step, args.checkpoints, args.force, log=print)
    except ExportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {record['model']} (its record: {RECORD})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
