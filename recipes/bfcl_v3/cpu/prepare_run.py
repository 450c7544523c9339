"""Model and data of a CPU training run (used by run_cpu.sh): the tiny local Qwen2 and the BFCL parquet files.

    python recipes/bfcl_v3/cpu/prepare_run.py RUN_DIR [--models-dir D] [--no-warm-start] [--model DIR]
                                             [--split-file F] [--max-model-len N] [--max-prompt-length N]

The model (cached in ``--models-dir``, default ``runs/cpu/models``, shared by every run so that SEAL and GRPO
start from the same weights): ``tiny-random`` (``seal_verl.models.tiny_model.make_tiny_qwen``), its copy with room for
``--max-model-len`` tokens and, unless
``--no-warm-start``, ``tiny-warm``: that model fine-tuned on the ground-truth trajectories of the split's training
tasks until it is partly right (``seal_verl.models.warm_start.bfcl_cpu``; rebuilt only when its inputs change). ``--model`` uses a
given folder instead: verified first (``seal_verl.models.shipped.check_model``), and never written. The data go to ``RUN_DIR/data`` (``seal-verl prepare-data --split-file``: ``train.parquet``
rows use the ``seal_bfcl`` loop, ``eval.parquet`` rows the ``bfcl`` loop) plus ``val_train_tasks.parquet``: the
training tasks as evaluation rows (``bfcl`` loop, no cue), which the learning run validates on, since a model
this small learns its training tasks, not BFCL. ``--max-prompt-length`` and ``--max-model-len`` default to the CPU
run's own config (``data.max_prompt_length``, ``actor_rollout_ref.rollout.max_model_len`` of ``+cpu=tiny``, read by
``seal_verl.models.warm_start.run_config``). Nothing is downloaded.

Two size adjustments, both outside the recipe's semantics:

- the tiny model is made with ``max_position_embeddings=2048``, but a BFCL first prompt with its tool docs is
  about 4-7k tokens with the tiny tokenizer. vLLM refuses a ``max_model_len`` above the model's position limit,
  so the limit in ``config.json`` (and the tokenizer's ``model_max_length``) is raised to ``--max-model-len``:
  in a copy, ``tiny-random-ctx<N>``, which the warm start starts from (the ledger warm start starts from
  ``tiny-random`` itself, and its cache must not see it change), and for a ``--model`` folder whose limit is
  lower, in a copy in the model cache (:func:`given_model`): a folder the user gives is never written.
  Qwen2 uses RoPE, which has no learned position table: the weights do not change;
- every task of the split is rendered the way the agent loop renders it (chat template, the task's tools in the
  system turn, generation prompt) and its length is checked against ``--max-prompt-length`` here, so a task that
  cannot fit fails before Ray and vLLM start. The agent loop would refuse it too (it never truncates tool docs).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from seal_verl.models.warm_start.bfcl_cpu import DEFAULT_SPLIT

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
DEFAULT_MODELS = os.path.join(REPO, "runs", "cpu", "models")
VAL_TRAIN_FILE = "val_train_tasks.parquet"


def given_model(path: str, models_dir: str, max_model_len: int) -> str:
    """The model folder a run gets for ``--model path``: ``path`` itself when its position limits reach
    ``max_model_len``, else a copy with them raised, ``<models_dir>/given-<name>-<digest>-ctx<N>`` (the digest of
    the folder's path keeps two given folders of one name apart). ``path`` is never written."""
    import hashlib

    raised = _raised_limits(path, max_model_len)
    if not raised:
        return os.path.abspath(path)
    tag = hashlib.sha256(os.path.realpath(path).encode()).hexdigest()[:8]
    out = os.path.join(models_dir, f"given-{os.path.basename(os.path.abspath(path))}-{tag}-ctx{max_model_len}")
    _copy_with(path, out, raised)
    return os.path.abspath(out)


def _copy_with(src: str, out: str, replaced: dict[str, bytes]) -> None:
    """Every file of ``src`` into ``out``, ``replaced`` ones with their new bytes (files already equal are left
    alone, so a copy made before keeps its bytes and times)."""
    for name in sorted(os.listdir(src)):
        path = os.path.join(src, name)
        if os.path.isfile(path) and not name.startswith("."):
            if name in replaced:
                data = replaced[name]
            else:
                with open(path, "rb") as f:
                    data = f.read()
            _write_if_changed(os.path.join(out, name), data)


def long_context_base(models_dir: str, max_model_len: int) -> str:
    """``tiny-random`` with room for ``max_model_len`` tokens, as a copy: ``<models_dir>/tiny-random-ctx<N>``.

    The ledger warm start starts from the same ``tiny-random`` and keys its cache on the bytes of that folder;
    raising the limits in place made every BFCL preparation invalidate the ledger's cache (a 15-minute rebuild on 2
    cores, and a rebuilt warm start need not be the same model). Files are rewritten only when their bytes change,
    so the copy (and the BFCL warm start's cache key) stays the same from run to run."""
    base = _ensure_tiny(os.path.join(models_dir, "tiny-random"))
    out = os.path.join(models_dir, f"tiny-random-ctx{max_model_len}")
    _copy_with(base, out, _raised_limits(base, max_model_len))
    return os.path.abspath(out)


def _ensure_tiny(path: str) -> str:
    """``path``, with the tiny random model made there first if it holds none."""
    from seal_verl.models.tiny_model import make_tiny_qwen

    if not (os.path.exists(os.path.join(path, "config.json")) and os.path.exists(os.path.join(path, "tokenizer.json"))):
        make_tiny_qwen(path)
    return path


def _raised_limits(path: str, max_model_len: int) -> dict[str, bytes]:
    """New bytes of ``config.json`` / ``tokenizer_config.json`` under ``path`` whose position limit is below
    ``max_model_len`` (the files already large enough are left out)."""
    out = {}
    for name, key in (("config.json", "max_position_embeddings"), ("tokenizer_config.json", "model_max_length")):
        file = os.path.join(path, name)
        if not os.path.exists(file):
            continue
        with open(file) as f:
            cfg = json.load(f)
        if int(cfg.get(key, 0) or 0) < max_model_len:
            cfg[key] = int(max_model_len)
            out[name] = json.dumps(cfg, indent=2).encode()
    return out


def _write_if_changed(path: str, data: bytes) -> None:
    """Leave ``path`` alone when it holds ``data`` already; otherwise replace it atomically (a run reading the
    folder meanwhile sees the old file or the new one, never half of one)."""
    from seal_verl.atomic import atomic_write_bytes

    try:
        with open(path, "rb") as f:
            if f.read() == data:
                return
    except OSError:
        pass
    atomic_write_bytes(path, data)


def prompt_lengths(model: str, task_ids: list[str]) -> dict[str, int]:
    """Tokens of each task's first prompt as the agent loop renders it for ``call_format=json``
    (``env_wrappers.bfcl.environment.prompts.initial_messages``: BFCL's docs in the chat template's tools block)."""
    from transformers import AutoTokenizer

    from env_wrappers.bfcl.environment.prompts import initial_messages
    from env_wrappers.bfcl.environment.tasks import load_tasks

    tok = AutoTokenizer.from_pretrained(model)
    tasks = load_tasks(task_ids)
    out = {}
    for tid in task_ids:
        task = tasks[tid]
        first = [{"role": str(m["role"]), "content": str(m["content"])} for m in task.questions[0]]
        msgs, tools = initial_messages(task, first, "json")
        ids = tok.apply_chat_template(msgs, tools=tools, add_generation_prompt=True, tokenize=True)
        if hasattr(ids, "keys"):
            ids = ids["input_ids"]
        out[tid] = len(ids)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run_dir")
    p.add_argument("--split-file", default=DEFAULT_SPLIT)
    p.add_argument("--call-format", default="json", choices=["json"],
                   help="the tiny model's chat template is Qwen-style: JSON tool calls only")
    p.add_argument("--max-model-len", type=int, default=None,
                   help="the position limit the model folder gets (default: the CPU run's rollout.max_model_len)")
    p.add_argument("--max-prompt-length", type=int, default=None,
                   help="the longest first prompt allowed (default: the CPU run's data.max_prompt_length)")
    p.add_argument("--model", default=None, help="use this model folder (verified; never written: a copy gets "
                   "a raised position limit when it needs one)")
    p.add_argument("--models-dir", default=DEFAULT_MODELS,
                   help="cache of the tiny random and warm-started models (default: %(default)s)")
    p.add_argument("--no-warm-start", action="store_true", help="train the random tiny model (it never passes a task)")
    args = p.parse_args(argv)
    from seal_verl import env_vars
    from seal_verl.models.shipped import check_run_inputs
    from seal_verl.runs import folder as RF

    env_vars.check_or_exit("prepare-run")
    checked, error = check_run_inputs(args.model, args.models_dir)
    if error:
        print(f"error: {error}", file=sys.stderr)
        return 2

    from env_wrappers.bfcl.environment.prepare_data import build_rows, format_summary, prepare_data, read_split_file

    if args.max_model_len is None or args.max_prompt_length is None:
        from seal_verl.models.warm_start.run_config import run_settings

        run = run_settings("bfcl_cpu")
        if args.max_model_len is None:
            args.max_model_len = run.max_model_len
        if args.max_prompt_length is None:
            args.max_prompt_length = run.prompt_length

    run_dir = os.path.abspath(args.run_dir)
    os.makedirs(run_dir, exist_ok=True)
    split = read_split_file(args.split_file)
    if args.model:
        model = given_model(args.model, args.models_dir, args.max_model_len)
    else:
        model = long_context_base(args.models_dir, args.max_model_len)
        if not args.no_warm_start:
            from seal_verl.models.warm_start.bfcl_cpu import warm_start
            from seal_verl.models.warm_start.target import WarmStartError

            try:
                model = os.path.abspath(warm_start(os.path.join(args.models_dir, "tiny-warm"), model,
                                                   args.split_file)["out"])
            except WarmStartError as e:
                print(f"error: warm start: {e}", file=sys.stderr)
                return 2
    lengths = prompt_lengths(model, split["train"] + split["eval"])
    too_long = {t: n for t, n in lengths.items() if n > args.max_prompt_length}
    if too_long:
        print(f"error: first prompts longer than max_prompt_length={args.max_prompt_length}: {too_long}", file=sys.stderr)
        return 2
    summary = prepare_data(os.path.join(run_dir, "data"), call_format=args.call_format, split_file=args.split_file)
    import pandas as pd

    pd.DataFrame(build_rows(split["train"], "eval", args.call_format)).to_parquet(
        os.path.join(run_dir, "data", VAL_TRAIN_FILE), index=False)
    print(format_summary(summary))
    print(f"wrote {os.path.join(run_dir, 'data', VAL_TRAIN_FILE)} (the {len(split['train'])} training tasks as "
          "evaluation rows: bfcl loop, no cue)")
    print(f"model: {model} ({checked}); first-prompt tokens: min {min(lengths.values())}, max "
          f"{max(lengths.values())} (limit {args.max_prompt_length})")
    RF.write_prepare(run_dir, {"model": model, "model_check": checked, "split_file": os.path.abspath(args.split_file),
                               "prompt_tokens": lengths, "max_prompt_length": args.max_prompt_length,
                               "max_model_len": args.max_model_len})
    return 0


if __name__ == "__main__":
    sys.exit(main())
