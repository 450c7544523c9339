"""``provenance.json``: what produced a run, in one place (the run folder's file; see ``seal_verl.runs.folder``).

BFCL multi-turn scores move with the seed, the prompt template, the model revision and the code; a result is only
comparable with another when both say exactly what ran. The record holds the launch command and every override
in it, the seal-verl version and commit (with a flag for uncommitted changes), the versions of verl, vLLM, torch
and Python, the model's identity (a revision or a content hash), a hash of the data split, every seed, the
hardware, and the recipe's preset and variant. The trainer glue builds it (``seal_verl.verl_glue.provenance``)
on every path that writes a run folder; ``seal-verl check`` and ``seal-verl report`` show it.

This module is the format only: the fields (:data:`FIELDS`, every one required: a fact that could not be found is
``None`` with the reason beside it, never a missing key), writing (a resumed run into the same folder keeps the
earlier launches' records under ``earlier``), reading, the check and the lines shown. No verl import.
"""

from __future__ import annotations

import json
import os
from typing import Any, Optional

from seal_verl.atomic import atomic_write_text
from seal_verl.runs.folder import PROVENANCE
FORMAT = 1

#: every field of a launch's record -> (its required sub-keys, what it holds)
FIELDS: dict[str, tuple[tuple[str, ...], str]] = {
    "format": ((), "the record's format (1)"),
    "written_at": ((), "when the record was written (UTC, ISO 8601)"),
    "trainer": ((), "the path that wrote it: verl's V1 trainer mode, the legacy trainer, or the dry run"),
    "launch": (("command", "source"), "the command line that started the run (and where it was read)"),
    "overrides": ((), "every Hydra override of the launch command, in order (the dry run: its options)"),
    "seal_verl": (("version", "commit", "dirty"), "the plugin's version, git commit, uncommitted changes"),
    "versions": (("verl", "vllm", "torch", "python"), "the versions of the libraries the run imported"),
    "model": (("path", "revision", "sha256"), "the model: its path, a hub revision and/or a content hash"),
    "data": (("files", "split_sha256"), "the training and validation files and their hashes"),
    "seeds": ((), "every seed of the configuration, by key"),
    "hardware": (("cpu", "gpus", "nodes"), "CPU model and count, GPU names and count, the Ray nodes"),
    "recipe": (("preset", "variant"), "the recipe's groups (preset, variant, backbone, hardware, mode, lora)"),
    "config_sha256": ((), "a hash of the whole resolved configuration (config.json holds it)"),
}


def problems(record: Any) -> list[str]:
    """What is missing from a launch's record (empty: complete)."""
    if not isinstance(record, dict):
        return [f"not a JSON object: {type(record).__name__}"]
    out = []
    for name, (subkeys, _what) in FIELDS.items():
        if name not in record:
            out.append(f"no field {name!r}")
            continue
        value = record[name]
        if subkeys and not isinstance(value, dict):
            out.append(f"field {name!r} is {type(value).__name__}, expected an object with {', '.join(subkeys)}")
            continue
        out += [f"no field {name}.{key}" for key in subkeys if key not in value]
    if not out and record.get("format") != FORMAT:
        out.append(f"format {record.get('format')!r}; this code reads format {FORMAT}")
    return out


def write(folder: str, record: dict) -> str:
    """Write ``record`` as the folder's ``provenance.json`` (atomically). An earlier launch's record in the folder
    (a run resumed into it) is kept, under ``earlier``. Returns the path.

    Raises:
        ValueError: ``record`` lacks a field (the writer never leaves a field out).
    """
    missing = problems(record)
    if missing:
        raise ValueError(f"incomplete provenance record: {'; '.join(missing)}")
    path = os.path.join(folder, PROVENANCE)
    previous, _damage = read(folder)
    earlier: list = []
    if isinstance(previous, dict):
        earlier = list(previous.get("earlier") or [])
        earlier.append({k: v for k, v in previous.items() if k != "earlier"})
    out = dict(record, earlier=earlier)
    atomic_write_text(path, json.dumps(out, indent=1, sort_keys=True, default=str), prefix=".seal_run.")
    return path


def read(folder: str) -> tuple[Optional[dict], Optional[str]]:
    """``(record, None)``; ``(None, None)`` when the folder has none; ``(None, reason)`` when it cannot be read."""
    path = os.path.join(folder, PROVENANCE)
    try:
        with open(path, encoding="utf-8") as fh:
            obj = json.load(fh)
    except FileNotFoundError:
        return None, None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        return None, f"{path}: cannot read it ({type(exc).__name__})"
    if not isinstance(obj, dict):
        return None, f"{path}: expected a JSON object"
    return obj, None


def _short(value: Any, n: int = 12) -> str:
    return "?" if value in (None, "") else str(value)[:n]


def summary(record: dict) -> list[str]:
    """A few lines for a reader: code, libraries, model, data, seeds, hardware, recipe, the command."""
    sv = record.get("seal_verl") or {}
    vs = record.get("versions") or {}
    model = record.get("model") or {}
    data = record.get("data") or {}
    hw = record.get("hardware") or {}
    recipe = record.get("recipe") or {}
    cpu = hw.get("cpu") or {}
    gpus = hw.get("gpus") or {}
    dirty = sv.get("dirty")
    code = (f"seal-verl {sv.get('version')} commit {_short(sv.get('commit'))}"
            + (" (uncommitted changes)" if dirty else "" if dirty is False else " (tree state unknown)"))
    libs = ", ".join(f"{k} {vs.get(k) or '?'}" for k in ("verl", "vllm", "torch", "python"))
    ident = (f"revision {model['revision']}" if model.get("revision") else "") + \
            (f"{' ' if model.get('revision') else ''}sha256 {_short(model.get('sha256'))}" if model.get("sha256") else "")
    gpu_txt = (f"{gpus.get('count')} x {', '.join(sorted(set(gpus.get('names') or []))) or 'GPU'}"
               if gpus.get("count") else "no GPU")
    seeds = record.get("seeds") or {}
    lines = [
        f"{code}; {libs}",
        f"model {model.get('path')} ({ident or 'identity unknown: ' + str(model.get('why') or '?')})",
        f"data split sha256 {_short(data.get('split_sha256'))} ({len(data.get('files') or [])} files); seeds "
        + (", ".join(f"{k}={v}" for k, v in sorted(seeds.items())) or "none"),
        f"hardware: {cpu.get('count')} x {cpu.get('model') or 'CPU'}, {gpu_txt}, {len(hw.get('nodes') or [])} node(s); "
        f"trainer {record.get('trainer')}; recipe " + ", ".join(f"{k} {recipe.get(k)}" for k in sorted(recipe)),
        f"launch: {(record.get('launch') or {}).get('command')}",
    ]
    earlier = record.get("earlier") or []
    if earlier:
        lines.append(f"{len(earlier)} earlier launch(es) into this folder (a resumed run) kept under 'earlier'")
    return lines


def report_lines(folder: str) -> list[str]:
    """What ``seal-verl report`` shows of a run folder's provenance (one line when there is none)."""
    record, damage = read(folder)
    if record is None:
        return [damage or f"no {PROVENANCE}: what produced this run is not recorded"]
    missing = problems(record)
    return summary(record) + ([f"incomplete record: {'; '.join(missing)}"] if missing else [])


def check_provenance(run: Any, rep: Any) -> None:
    """``seal-verl check``'s ``provenance`` item: the folder has a complete ``provenance.json``."""
    record, damage = read(run.path)
    if record is None:
        rep.add("provenance", False, damage or f"no {PROVENANCE} (written by the SEAL trainer at start-up)")
        return
    missing = problems(record)
    rep.add("provenance", not missing, "; ".join(missing) or " | ".join(summary(record)[:4]))
