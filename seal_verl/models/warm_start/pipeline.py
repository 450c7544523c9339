"""The one warm-start pipeline: render training rows through verl's agent loop, fine-tune on them, measure the result,
cache it. Every warm start (``bfcl_cpu``, the ledger's stages, its mixed stage) is these steps with its own tasks,
plans and record.

1. **Rows, rendered by the real agent loop** (:func:`.render.render_scripted`, :func:`.render.render_under_cue_states`). verl's own
   ``AgentLoopWorker`` runs the environment's training loop with the run's agent-loop file and lengths
   (:mod:`seal_verl.models.warm_start.run_config`); a scripted client (``seal_verl.rollouts.ScriptedLLM``) answers with a
   plan per task (the ground truth, or a failing plan whose turn labels are known), the environment executes the
   calls and the real observations come back. A row is the token sequence the RL run sees: prompt + response
   tokens, loss on the tokens with ``response_mask`` 1 (what the model generated), none on the prompt,
   observations or user turns. A rollout of the ground truth that does not pass (or of a failing plan whose labels
   differ from the plan's) gives no row and is reported.
2. **Fine-tuning with transformers' ``Trainer``** (:func:`.finetune.fine_tune`). The rows are tokenized with their label
   masks already, so the plain ``Trainer`` fits: TRL's ``SFTTrainer`` would re-render conversations with the chat
   template and lose the agent loop's token boundaries, and verl's SFT trainer needs torchrun and an FSDP device
   mesh, more CPU plumbing than a 0.4M-parameter model is worth. A task leaves the training mix once its ground
   truth is likely enough (:func:`.finetune.tasks_to_train`), so that every task ends partly right.
3. **Pass rates** (:func:`.sampling.pass_rates`): the same agent loop samples rollouts from the fine-tuned model
   (:class:`.sampling.HFSampler`, transformers ``generate`` at the run's temperature and top-p), the real reward function
   grades them.
4. **Cache and record** (:func:`build`): ``OUT/warm_start.json`` holds a fingerprint of every input (the rows, the
   base model's files, the settings, the code) and the SHA-256 of every file of the model it built; a later call
   with the same inputs returns at once if those files are intact, any change rebuilds (a damaged cache is said
   to be, in one line). ``OUT`` is claimed first (:func:`check_base`, ``seal_verl.outputs``): it is never the base
   nor inside it, it is locked while the stage builds, and a folder that holds anything but this pipeline's own
   cache (another model, other files) is refused unless ``--force``, which moves its contents aside.

Each step has a module of its own: :mod:`.render` (1), :mod:`.finetune` (2), :mod:`.sampling` (3); this module
holds the cache and record (4), the orchestration (:func:`build`) and the command line every stage shares.
verl is reached through ``seal_verl.verl_glue`` (as the dry run reaches it). Nothing is downloaded.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import time
from typing import Any, Callable, Optional, Sequence

from seal_verl.models.warm_start import finetune, render
from seal_verl.models.warm_start.finetune import fine_tune
from seal_verl.models.warm_start.sampling import mean_pass_rate
from seal_verl.models.warm_start.target import WarmStartError

INFO_FILE = "warm_start.json"
#: files of a model folder that a rebuild replaces (a stale model of other inputs must not survive a half-finished one)
REBUILT_FILES = (INFO_FILE, "config.json", "generation_config.json", "model.safetensors")
#: what the pipeline writes into its output folder besides a model: the rendered rows, the trainer's scratch folder
WORKING_FILES = (".parquet", ".trainer")
#: what the record keeps of each training row
ROW_KEYS = ("task_id", "interface", "prompt_tokens", "response_tokens", "trained_tokens")
#: the pipeline's own code, whose digest goes into every fingerprint (what renders the rows and trains on them)
PIPELINE_CODE = (__file__, render.__file__, finetune.__file__)


def file_digest(path: str) -> str:
    """SHA-256 of a file (a source file's digest goes into the fingerprint of what it builds)."""
    from seal_verl.models.shipped import file_sha256

    return file_sha256(path)


def fingerprint(base: str, rows: list[dict], params: dict, code: Sequence[str] = ()) -> str:
    """Digest of every input of a warm start: the rendered token rows, the base model's files, the settings, the
    pipeline's code and the files in ``code`` (the warm start's own module)."""
    h = hashlib.sha256()
    h.update(json.dumps({"params": params, "rows": [[r["input_ids"], r["labels"]] for r in rows]}).encode())
    for name in sorted(os.listdir(base)):
        p = os.path.join(base, name)
        if os.path.isfile(p) and not name.startswith("."):
            h.update(name.encode() + file_digest(p).encode())
    for path in (*(os.path.abspath(p) for p in PIPELINE_CODE), *code):
        h.update(file_digest(path).encode())
    return h.hexdigest()


def read_info(out: str) -> Optional[dict]:
    """The record ``out/warm_start.json``, or None when there is none (or it cannot be read)."""
    path = os.path.join(out, INFO_FILE)
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            info = json.load(f)
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) else None


def write_info(out: str, info: dict) -> None:
    tmp = os.path.join(out, INFO_FILE) + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(info, f, indent=1)
    os.replace(tmp, os.path.join(out, INFO_FILE))


def check_arguments(epochs: Any, lr: Any, samples: Any, target: Any = None) -> None:
    """Raise :class:`WarmStartError` with one line for a setting a warm start cannot use (``target`` None: the
    stage has no stopping target of its own)."""
    for name, value, low in (("epochs", epochs, 1), ("samples", samples, 0)):
        if isinstance(value, bool) or int(value) != value or value < low:
            raise WarmStartError(f"--{name} must be an integer >= {low}, got {value!r}")
    if not (lr > 0):
        raise WarmStartError(f"--lr must be positive, got {lr!r}")
    if target is not None and not (0 < target < 1):
        raise WarmStartError(f"--target must be in (0, 1), got {target!r}")


def _ours(out: str) -> Callable[[str], bool]:
    """The entries of ``out`` this pipeline may reuse or replace: all of them when ``out`` holds a record of
    this pipeline (its own cache), else only its working files."""
    if (read_info(out) or {}).get("fingerprint"):
        return lambda name: True
    return lambda name: name.endswith(WORKING_FILES)


def check_base(base: str, out: Optional[str] = None, force: bool = False) -> None:
    """Refuse a base that is not a model folder; claim ``out`` (see the module docstring; held until this process
    ends).

    Raises:
        WarmStartError: one line (a base that is no model, an output that is the base or holds it, a folder
            held by another command, or contents not this pipeline's without ``force``).
    """
    if not os.path.isfile(os.path.join(base, "config.json")):
        raise WarmStartError(f"--base {base}: not a model folder (no config.json)")
    if out is None:
        return
    import atexit

    from seal_verl import outputs

    try:
        claim = outputs.claim(out, "a warm start", reusable=_ours(out), force=force, inputs=[base],
                              option="the warm start's folder")
    except outputs.OutputRefused as exc:
        raise WarmStartError(str(exc)) from None
    outputs.say(claim, "[warm-start]")
    atexit.register(claim.release)


def model_files(out: str) -> dict[str, str]:
    """The SHA-256 of every file of the model in ``out`` (not the record, not the working files)."""
    return {name: file_digest(os.path.join(out, name)) for name in sorted(os.listdir(out))
            if name != INFO_FILE and not name.endswith(WORKING_FILES) and os.path.isfile(os.path.join(out, name))}


def _damage(out: str, info: dict) -> Optional[str]:
    """What differs between the cached model in ``out`` and its record (None: nothing; a record from before the
    digests were kept is not checked)."""
    from seal_verl.models.shipped import ShippedModelError, verify_files

    if "files" not in info:
        return None
    try:
        verify_files(out, info["files"], INFO_FILE, "rebuilding it", lambda name: name.endswith(WORKING_FILES))
    except ShippedModelError as exc:
        return str(exc)
    return None


def build(out: str, base: str, rows: list[dict], params: dict, *, tasks: list[str], what: str,
          measure: Callable[[str], dict], report: Callable[[dict], str], started: float, force: bool = False,
          code: Sequence[str] = (), record: Optional[dict] = None, row_keys: Sequence[str] = ROW_KEYS) -> dict:
    """Fine-tune ``base`` on ``rows`` into ``out`` unless ``out`` holds the model of these exact inputs already;
    returns the record written to ``out/warm_start.json``.

    ``params``: the settings (``epochs``, ``lr``, ``seed``, ``target`` drive :func:`fine_tune`; all of them go into
    the fingerprint with ``code``, the warm start's own source files); ``what``: the rows in words for the console;
    ``measure(out)`` -> the measured part of the record (``pass_rates`` and anything else; it may raise
    :class:`WarmStartError`); ``report(record)`` -> the console lines that give the measurement; ``started``: when
    the warm start began (before rendering); ``record``: further keys of the record."""
    fp = fingerprint(base, rows, params, code)
    info = read_info(out)
    same = not force and info and info.get("fingerprint") == fp and os.path.isfile(os.path.join(out, "config.json"))
    damage = _damage(out, info) if same else None
    if damage:
        print(f"[warm-start] the cached model does not match its record: {damage}", flush=True)
    elif same:
        print(f"[warm-start] cached: {out} (same inputs, fingerprint {fp[:12]}, files as built)", flush=True)
        text = report(info)
        if text:
            print(text, flush=True)
        return dict(info, out=os.path.abspath(out))
    print(f"[warm-start] {what}: {sum(r['trained_tokens'] for r in rows)} trained tokens, "
          f"{min(len(r['input_ids']) for r in rows)}-{max(len(r['input_ids']) for r in rows)} tokens per row",
          flush=True)
    t1 = time.time()
    for name in os.listdir(out):
        if name in REBUILT_FILES:
            os.remove(os.path.join(out, name))
    log = fine_tune(base, rows, out, params["epochs"], params["lr"], params["seed"], params["target"])
    first = {}
    for r in rows:
        first.setdefault(r["task_id"], r)
    t2 = time.time()
    measured = measure(out)
    t3 = time.time()
    rates = measured.get("pass_rates") or {}
    info = {
        "fingerprint": fp, "out": os.path.abspath(out), "base": os.path.abspath(base), **(record or {}),
        "tasks": list(tasks), "params": params, "trainer": "transformers.Trainer",
        "rows": [{k: r.get(k) for k in row_keys} for r in rows],
        "epochs_run": log[-1]["epoch"], "log": log,
        # the task order of the log's NLLs is the order of the tasks' first rows
        "predicted_pass_rates": {t: round(math.exp(-x), 4) for t, x in zip(first, log[-1]["nll"])},
        **measured, "pass_rates": rates, "mean_pass_rate": mean_pass_rate(rates),
        "seconds": {"render": round(t1 - started, 1), "fine_tune": round(t2 - t1, 1), "pass_rate": round(t3 - t2, 1)},
        "files": model_files(out),
    }
    write_info(out, info)
    text = report(info)
    if text:
        print(text, flush=True)
    print(f"[warm-start] done in {t3 - started:.0f} s (render {t1 - started:.0f} s, fine-tune {t2 - t1:.0f} s, "
          f"pass rates {t3 - t2:.0f} s): {out}", flush=True)
    return info


# ------------------------------------------------------------------------------------------------ command line


def cli(argv: Optional[list[str]], prog: str, doc: str, build_stage: Callable[[argparse.Namespace], Any],
        defaults: dict, base_help: str, target: bool = True,
        more_arguments: Optional[Callable[[argparse.ArgumentParser], None]] = None) -> int:
    """The command line of a warm start: ``OUT --base MODEL`` and its fine-tuning options (``--target`` only where
    the stage has a stopping target of its own; ``more_arguments(parser)`` adds the stage's own);
    ``build_stage(args)`` builds it. A base that is not a model folder is a usage error (exit 2); an error while
    building is one line and exit 2."""
    p = argparse.ArgumentParser(prog=prog, description=" ".join(doc.strip().split("\n\n")[0].split()))
    p.add_argument("out", help="folder of the warm-started model (reused when its inputs are unchanged)")
    p.add_argument("--base", required=True, help=base_help)
    if more_arguments:
        more_arguments(p)
    p.add_argument("--epochs", type=int, default=defaults["epochs"],
                   help="at most this many passes over the tasks (default: %(default)s)")
    if target:
        p.add_argument("--target", type=float, default=defaults["target"],
                       help="a task leaves the training mix once its predicted pass rate, exp(-NLL) of its "
                            "ground-truth trajectory, reaches this; training stops when every task has "
                            "(default: %(default)s)")
    p.add_argument("--lr", type=float, default=defaults["lr"], help="AdamW learning rate (default: %(default)s)")
    p.add_argument("--samples", type=int, default=defaults["samples"],
                   help="rollouts per task for the pass rate after fine-tuning; 0 skips it (default: %(default)s)")
    p.add_argument("--seed", type=int, default=defaults["seed"])
    p.add_argument("--force", action="store_true", help="rebuild even if the cached model has the same inputs")
    args = p.parse_args(argv)
    from seal_verl import env_vars

    env_vars.check_or_exit("warm-start")
    if not os.path.isfile(os.path.join(args.base, "config.json")):
        p.error(f"--base {args.base}: not a model folder (no config.json)")
    from seal_verl.rollouts import quiet_libraries

    quiet_libraries()
    try:
        build_stage(args)
    except (WarmStartError, ValueError, FileNotFoundError) as e:
        print(f"warm-start: error: {e}", file=sys.stderr)
        return 2
    return 0


def main(argv: Optional[list[str]] = None) -> int:
    """``python -m seal_verl.models.warm_start.pipeline``: the library every stage shares; it builds nothing itself
    and names the stages that do (exit 2 on any argument but ``--help``)."""
    stages = ("bfcl_cpu", "ledger", "ledger_mix", "ledger_stages", "cue_reading stage")
    text = (f"usage: python -m seal_verl.models.warm_start.STAGE OUT --base MODEL ...\n{__doc__.splitlines()[0]}\n"
            "This module is the pipeline the stages share; run a stage: "
            + ", ".join(f"python -m seal_verl.models.warm_start.{s}" for s in stages))
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv in (["-h"], ["--help"]):
        print(text)
        return 0
    print(text.splitlines()[0], file=sys.stderr)
    print(f"python -m seal_verl.models.warm_start.pipeline: error: not a stage; run one of: {', '.join(stages)}",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
