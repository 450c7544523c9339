"""Warm-started tiny models that ship with the project, with the identity of what built them.

Building a CPU warm start takes minutes and, from the same code and seed, gives a different model on each machine
(the fine-tuning's early stages are chaotic at the learning rates that make them fast). A shipped model makes
every machine start from the same weights and a fresh clone train within minutes. Each shipped folder holds the
model's own files and ``build.json``:

- ``files``: the SHA-256 of every file (``verify`` checks them before a run uses the folder, and refuses a file the
  record does not name: the loaders read what is in the folder, so an added ``special_tokens_map.json`` would
  change the tokenizer unseen);
- ``command``: the command that rebuilds the model (the runs' ``REBUILD=1``), and ``built_by``: the git commit of
  the code that built it, the versions of Python, torch and transformers, the date; ``note``: what the model is and
  which warm start of ``seal_verl.models.warm_start`` built it (``make ship-warm-starts`` passes it);
- ``warm_start``: from the warm start's own record, the fingerprint of its inputs, its settings and its measured
  pass rate; the whole record, without the building machine's paths, is ``warm_start.json`` beside the weights,
  where the runs read it.

    python -m seal_verl.models.shipped ship SRC DEST --command "..."   # copy a built model in, record it
    python -m seal_verl.models.shipped verify DEST                     # exit 1 with one line if a file changed
    python -m seal_verl.models.shipped use DEST CACHE                  # verify, copy into a run's cache, print it
    python -m seal_verl.models.shipped clean-tree                      # exit 1 naming what is not committed

A commit names the code only when the checkout holds nothing else: ``ship`` refuses a checkout with uncommitted
changes (tracked files that differ from the commit, files git neither tracks nor ignores), and with
``--allow-dirty`` records each of them in ``built_by.uncommitted`` with the SHA-256 of its bytes (``deleted`` for a
removed file), so the record still says exactly what built the model. A record shipped without that list carries
``built_by.checked_against_commit`` instead: what was verified of its build against the commit afterwards.

:func:`check_model` is what every user of a model folder calls (the CPU runs for ``SEAL_CPU_MODEL`` /
``LEDGER_MODEL``, the cue-effect measurement): a folder with ``build.json`` is verified against it, a warm start's
cache against the file digests of its own record (``warm_start.json``), and a folder with neither is used as it is,
and said to be unverified. No verl import.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
from typing import Callable, Optional

BUILD_FILE = "build.json"
#: the files of a model folder that a run reads (weights, config, tokenizer, chat template) and the warm start's record
MODEL_FILES = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
               "chat_template.jinja", "special_tokens_map.json", "adapter_config.json", "adapter_model.safetensors")
#: what a shipped folder must hold: a whole model's weights and config, or a LoRA adapter's (peft's files; the base
#: model it adapts is built at set-up, named in the adapter's record)
WEIGHTS = (("model.safetensors", "config.json"), ("adapter_model.safetensors", "adapter_config.json"))
WARM_START_RECORD = "warm_start.json"
#: keys of the warm start's record that hold paths of the machine that built it
_PATH_KEYS = ("out", "base", "split_file")


class ShippedModelError(ValueError):
    """A model folder that cannot be used as it is; the message is one line."""


class CacheError(ShippedModelError):
    """The run's model cache cannot take a copy of a shipped model (the shipped folder itself is fine)."""


def file_sha256(path: str) -> str:
    """SHA-256 of a file's bytes, read in 1 MiB pieces."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def git_state(repo: str) -> Optional[dict]:
    """``{"commit": HEAD's hash, "uncommitted": {path: SHA-256 or "deleted"}}`` of the checkout at ``repo``: every
    tracked file that differs from the commit (staged or not) and every file git neither tracks nor ignores, by
    its path in the repository. None when ``repo`` is no git checkout (or git is missing)."""
    try:
        head = subprocess.run(["git", "-C", repo, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        top = subprocess.run(["git", "-C", repo, "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                             timeout=10)
        status = subprocess.run(["git", "-C", repo, "status", "--porcelain=v1", "-z", "--untracked-files=all"],
                                capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if head.returncode != 0 or top.returncode != 0 or status.returncode != 0:
        return None
    root = top.stdout.strip()
    changed: dict[str, str] = {}
    entries = iter(status.stdout.decode("utf-8", "surrogateescape").split("\0"))
    for entry in entries:
        if len(entry) < 4:
            continue
        code, path = entry[:2], entry[3:]
        if "R" in code or "C" in code:  # a rename or copy: the entry after it is the path it came from
            source = next(entries, "")
            if "R" in code and source:
                changed[source] = "deleted"
        file = os.path.join(root, path)
        changed[path] = file_sha256(file) if os.path.isfile(file) else "deleted"
    return {"commit": head.stdout.strip(), "uncommitted": dict(sorted(changed.items()))}


def _dirty_message(state: dict) -> str:
    paths = list(state["uncommitted"])
    shown = ", ".join(paths[:5]) + (f" and {len(paths) - 5} more" if len(paths) > 5 else "")
    return (f"the checkout has uncommitted changes ({shown}): commit them, so that build.json names the code that "
            "built the model, or pass --allow-dirty to record each changed file's SHA-256")


def _versions() -> dict:
    out = {"python": platform.python_version()}
    for name in ("torch", "transformers"):
        try:
            out[name] = __import__(name).__version__
        except ImportError:
            out[name] = None
    return out


def _scrubbed(record: dict) -> dict:
    """The warm start's record without the building machine's paths (kept as folder names only)."""
    out = dict(record)
    for key in _PATH_KEYS:
        if isinstance(out.get(key), str):
            out[key] = os.path.basename(out[key].rstrip("/"))
    return out


def ship(src: str, dest: str, command: str, repo: Optional[str] = None, note: str = "",
         allow_dirty: bool = False) -> dict:
    """Copy the model of ``src`` into ``dest`` (replacing it) and write ``build.json``; returns the record.

    ``repo``: the checkout whose commit built the model (default: the working folder); ``note``: what the model is;
    ``allow_dirty``: ship from a checkout with uncommitted changes, each recorded with its SHA-256 (without it such
    a checkout is refused before anything is copied)."""
    if not any(os.path.isfile(os.path.join(src, cfg)) for _, cfg in WEIGHTS):
        raise ShippedModelError(f"{src} is not a model or adapter folder (no config.json or adapter_config.json)")
    state = git_state(repo or os.getcwd())
    if state and state["uncommitted"] and not allow_dirty:
        raise ShippedModelError(_dirty_message(state))
    tmp = dest.rstrip("/") + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    files = {}
    for name in MODEL_FILES:
        path = os.path.join(src, name)
        if os.path.isfile(path):
            shutil.copyfile(path, os.path.join(tmp, name))
            files[name] = file_sha256(os.path.join(tmp, name))
    record = None
    if os.path.isfile(os.path.join(src, WARM_START_RECORD)):
        with open(os.path.join(src, WARM_START_RECORD), encoding="utf-8") as fh:
            record = _scrubbed(json.load(fh))
        # the runs and their checks read the warm start's measured pass rates beside the weights
        with open(os.path.join(tmp, WARM_START_RECORD), "w", encoding="utf-8") as fh:
            json.dump(record, fh, indent=1, sort_keys=True)
            fh.write("\n")
        files[WARM_START_RECORD] = file_sha256(os.path.join(tmp, WARM_START_RECORD))
    build = {
        "command": command,
        "built_by": dict(commit=state and state["commit"], **_versions(), date=datetime.date.today().isoformat(),
                         **({"uncommitted": state["uncommitted"]} if state and state["uncommitted"] else {})),
        "note": note,
        "files": files,
        # the whole record is warm_start.json; here what identifies the build and what it measured
        "warm_start": None if record is None else {
            k: record.get(k) for k in ("fingerprint", "params", "epochs_run", "mean_pass_rate", "base", "seconds")
            if k in record},
    }
    with open(os.path.join(tmp, BUILD_FILE), "w", encoding="utf-8") as fh:
        json.dump(build, fh, indent=1, sort_keys=True)
        fh.write("\n")
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(tmp, dest)
    return build


def read_record(path: str) -> dict:
    """A JSON object from ``path`` (``build.json``, a warm start's record).

    Raises:
        ShippedModelError: absent, unreadable, not JSON (nesting too deep included), or not an object; one line.
    """
    try:
        with open(path, encoding="utf-8") as fh:
            record = json.load(fh)
    except FileNotFoundError:
        raise ShippedModelError(f"{path} is missing") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ShippedModelError(f"{path} cannot be read: {exc}") from None
    except (ValueError, RecursionError):
        raise ShippedModelError(f"{path} is not valid JSON") from None
    if not isinstance(record, dict):
        raise ShippedModelError(f"{path} is not a JSON object")
    return record


def verify_files(folder: str, files: object, record: str, fix: str,
                 unrecorded_ok: Callable[[str], bool] = lambda name: False) -> None:
    """Check that ``folder`` holds exactly the files ``files`` (name -> SHA-256, from ``record``) records, with
    those bytes; entries ``unrecorded_ok`` accepts may be there too (the record itself, a renderer's data).

    Raises:
        ShippedModelError: one line naming the file, ending in ``fix`` (how to repair the folder).
    """
    if not isinstance(files, dict) or not any(w in files and c in files for w, c in WEIGHTS) \
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        raise ShippedModelError(f"{os.path.join(folder, record)} records no model files")
    for name in sorted(os.listdir(folder)):
        if name not in files and name != record and not unrecorded_ok(name):
            raise ShippedModelError(f"{os.path.join(folder, name)} is not recorded in {record}: the loaders read "
                                    f"every file of the folder, and this one is not the model as built; {fix}")
    for name, digest in sorted(files.items()):
        file = os.path.join(folder, name)
        if not os.path.isfile(file):
            raise ShippedModelError(f"{file} is missing (recorded in {record}); {fix}")
        if file_sha256(file) != digest:
            raise ShippedModelError(f"{file} differs from the model as built (SHA-256 mismatch); {fix}")


def _restore_hint(folder: str) -> str:
    return (f"restore the folder (git checkout -- {folder}), or build a model on this machine instead: "
            "REBUILD=1")


def verify(folder: str) -> dict:
    """The folder's ``build.json`` after checking every recorded file's SHA-256, and that it holds no other file.

    Raises:
        ShippedModelError: no record, a recorded file missing or changed, or a file the record does not name.
    """
    if not os.path.isfile(os.path.join(folder, BUILD_FILE)):
        raise ShippedModelError(f"{folder} has no {BUILD_FILE}: not a shipped model")
    build = read_record(os.path.join(folder, BUILD_FILE))
    verify_files(folder, build.get("files"), BUILD_FILE, _restore_hint(folder))
    return build


def check_model(folder: str, option: str = "model") -> str:
    """Check a model folder a command is given before any work; returns how it was verified, in words.

    Raises:
        ShippedModelError: not a folder, no ``config.json`` or no weights, or files that differ from the
            folder's ``build.json`` or warm-start record (one line, naming ``option``).
    """
    if not os.path.isdir(folder):
        raise ShippedModelError(f"{option}={folder}: not a folder")
    if not os.path.isfile(os.path.join(folder, "config.json")):
        raise ShippedModelError(f"{option}={folder}: not a model folder (no config.json)")
    if not any(n.endswith(".safetensors") or n == "pytorch_model.bin" for n in os.listdir(folder)):
        raise ShippedModelError(f"{option}={folder}: not a model folder (no weights: model.safetensors)")
    if os.path.exists(os.path.join(folder, BUILD_FILE)):
        verify(folder)
        return f"verified against its {BUILD_FILE}"
    record = os.path.join(folder, WARM_START_RECORD)
    if os.path.exists(record):
        files = read_record(record).get("files")
        if files is not None:
            verify_files(folder, files, WARM_START_RECORD, "rebuild it (REBUILD=1 rebuilds a cached warm start)",
                         lambda name: name.endswith(".parquet"))
            return f"verified against its {WARM_START_RECORD}"
    return f"not verified: it has no {BUILD_FILE}"


def check_run_inputs(model: Optional[str], models_dir: str) -> tuple[str, Optional[str]]:
    """What a CPU run's preparation checks before any work: the model it was given (``SEAL_CPU_MODEL``, verified by
    :func:`check_model`; none: one is made here) and its model cache folder (``SEAL_CPU_MODELS``, created).
    Returns how the model was verified and ``None``, or ``(.., the one-line error)``."""
    try:
        checked = check_model(model, "SEAL_CPU_MODEL") if model else "made here"
        os.makedirs(models_dir, exist_ok=True)
    except ShippedModelError as e:
        return "", str(e)
    except OSError as e:
        return "", f"the model cache {models_dir} (SEAL_CPU_MODELS): {e.strerror or e}"
    return checked, None


def use(folder: str, dest: str) -> str:
    """Check the shipped ``folder`` and copy it to ``dest`` (the runs' model cache) unless ``dest`` already holds
    these exact files; returns ``dest``. The runs never write into the shipped folder itself.

    Raises:
        ShippedModelError: the shipped folder is damaged (or has no ``build.json``).
        CacheError: ``dest`` cannot take the copy (a file or a link where the folder belongs, no permission).
    """
    build = verify(folder)
    if os.path.islink(dest) or (os.path.lexists(dest) and not os.path.isdir(dest)):
        raise CacheError(f"the model cache {dest} is {'a link' if os.path.islink(dest) else 'not a folder'}; the "
                         "runs copy the shipped model there: remove it, or point SEAL_CPU_MODELS elsewhere")
    try:
        same = verify(dest) == build
    except ShippedModelError:
        same = False
    if not same:
        tmp = dest.rstrip("/") + ".tmp"
        try:
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.copytree(folder, tmp)
            shutil.rmtree(dest, ignore_errors=True)  # a copy of the shipped model the runs made: never a user's
            os.replace(tmp, dest)
        except OSError as exc:
            raise CacheError(f"cannot copy the shipped model into the cache {dest}: {exc.strerror or exc}; point "
                             "SEAL_CPU_MODELS at a writable folder") from None
    return os.path.abspath(dest)


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m seal_verl.models.shipped", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("ship", help="copy a built model into a shipped folder and record it")
    s.add_argument("src")
    s.add_argument("dest")
    s.add_argument("--command", required=True, help="the command that rebuilds the model")
    s.add_argument("--note", default="")
    s.add_argument("--allow-dirty", action="store_true",
                   help="ship from a checkout with uncommitted changes, recording each changed file's SHA-256")
    v = sub.add_parser("verify", help="check a shipped folder's files against build.json")
    v.add_argument("folder")
    u = sub.add_parser("use", help="check a shipped folder and copy it into a run's model cache; prints the copy")
    u.add_argument("folder")
    u.add_argument("dest")
    sub.add_parser("clean-tree", help="exit 1 naming the uncommitted changes of the checkout here, if any "
                   "(before a build that will be shipped)")
    args = p.parse_args(argv)
    from seal_verl import env_vars

    env_vars.check_or_exit("shipped")
    try:
        if args.cmd == "ship":
            build = ship(args.src, args.dest, args.command, note=args.note, allow_dirty=args.allow_dirty)
            print(f"shipped {args.dest}: {len(build['files'])} files, built by {build['built_by']['commit']}")
        elif args.cmd == "use":
            print(use(args.folder, args.dest))
        elif args.cmd == "clean-tree":
            state = git_state(os.getcwd())
            if state is None:
                raise ShippedModelError("not a git checkout: a shipped model's record could name no commit")
            if state["uncommitted"]:
                raise ShippedModelError(_dirty_message(state))
            print(f"clean: {state['commit']}")
        else:
            verify(args.folder)
            print(f"{args.folder}: every file as shipped")
    except ShippedModelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
