"""What a SEAL run leaves on disk, in one place: the file names, the rows, one writer, one reader, the clean-up.

A run folder is written by the SEAL trainer (``seal.run_dir``: the V1 trainer and the legacy path, through
``verl_glue``) and by ``seal-verl dry-run``; it is read by ``seal-verl report``, ``seal-verl check``, the console
watcher (``run_watch``), the benchmarks and the run scripts' clean-up. Keeping the layout here means a new file or
key is added once, and a folder from an older run (or copied off a cluster) reads the same way everywhere.
No verl import.

Layout (``k`` is verl's global step, from 1, the number the console and the checkpoints show):

- ``config.json``: what ran (rewritten with ``resumed_from_step`` by a resumed run);
- ``provenance.json``: what produced it (command, code, libraries, model, data, seeds, hardware;
  :mod:`seal_verl.runs.provenance`);
- ``state_step_{k}.json``: the closed-loop state after step ``k`` (``ClosedLoopState.to_dict()``);
- ``traces_step_{k}.jsonl``: one :class:`TraceRow` per rollout of step ``k``;
- ``probe_step_{k}.jsonl``: one :class:`ProbeRow` per rollout of the cue-effect probe run at step ``k``;
- ``metrics.jsonl``: one :class:`StepRow` per step, appended (a run resumed into the folder continues it);
- ``val_traces.jsonl``: one :class:`ValRow` per validation rollout, appended, each with its ``global_step``;
- written by the run scripts around verl: ``timing.json`` (exit code, seconds per phase), ``main_ppo.log``
  (verl's console), ``checkpoints/`` (verl's, with ``global_step_N/seal_state.json``), ``prepare.json``.

Rows are plain JSON objects; their types and their builders are in :mod:`seal_verl.runs.rows`. Readers never fail
on a damaged row: a line cut by a crash or a line that is not a JSON object is skipped and reported as
:class:`Damage`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

from seal_verl.atomic import atomic_write_text
# The row types and their builders live in ``seal_verl.runs.rows``; named here for the readers of this module.
from seal_verl.runs.rows import (CueEffect, ProbeRow, StateRow, StepRow, Timing, TraceRow, ValRow,  # noqa: F401
                                 json_safe)

# ------------------------------------------------------------------------------------------------ file names

CONFIG = "config.json"
PROVENANCE = "provenance.json"
METRICS = "metrics.jsonl"
VALIDATION = "val_traces.jsonl"
TIMING = "timing.json"
LOG = "main_ppo.log"
CHECKPOINTS = "checkpoints"
#: the SEAL state inside each of verl's ``global_step_N`` checkpoint folders
CHECKPOINT_STATE = "seal_state.json"
#: the CPU run scripts' record of the model and data a run starts from
PREPARE = "prepare.json"
#: the dry run's own files: its agent-loop file, the batches it feeds the worker, the tiny model it makes
DRY_AGENT_LOOPS = "agent_loops.yaml"
DRY_TRAIN_BATCH = "batch.parquet"
DRY_VAL_BATCH = "val.parquet"
DRY_PROBE_BATCH = "probe.parquet"
DRY_MODEL = "model"

_TRACES = ("traces_step_", ".jsonl")
_STATE = ("state_step_", ".json")
_PROBE = ("probe_step_", ".jsonl")
_TEMP_PREFIX = ".seal_run."

#: names ``python -m seal_verl.runs.folder path`` knows (the run scripts ask for these)
NAMED = {"config": CONFIG, "provenance": PROVENANCE, "metrics": METRICS, "validation": VALIDATION, "timing": TIMING, "log": LOG,
         "checkpoints": CHECKPOINTS, "prepare": PREPARE}


def traces_name(k: int) -> str:
    return f"{_TRACES[0]}{int(k)}{_TRACES[1]}"


def state_name(k: int) -> str:
    return f"{_STATE[0]}{int(k)}{_STATE[1]}"


def probe_name(k: int) -> str:
    return f"{_PROBE[0]}{int(k)}{_PROBE[1]}"


def checkpoint_state(run_dir: str, k: int) -> str:
    """Where verl's checkpoint of step ``k`` of a run keeps the SEAL state (the run scripts' checkpoint dir)."""
    return os.path.join(run_dir, CHECKPOINTS, f"global_step_{int(k)}", CHECKPOINT_STATE)


def _step_of(name: str, kind: tuple[str, str]) -> Optional[int]:
    m = re.fullmatch(re.escape(kind[0]) + r"(\d+)" + re.escape(kind[1]), name)
    return int(m.group(1)) if m else None


# ------------------------------------------------------------------------------------------------ writer

class RunFolder:
    """The writer of one run folder. Every file is written whole (temporary file + rename) or appended line by
    line with a flush, so a reader polling the folder sees complete files and at most one cut last line."""

    def __init__(self, path: str):
        self.path = os.path.abspath(path)
        os.makedirs(self.path, exist_ok=True)

    def file(self, name: str) -> str:
        return os.path.join(self.path, name)

    def write_config(self, info: dict) -> str:
        path = self.file(CONFIG)
        atomic_write_text(path, json.dumps(json_safe(info), indent=1, sort_keys=True), prefix=".seal_state.")
        return path

    def write_state(self, k: int, state: Any) -> str:
        """``state``: a ``ClosedLoopState`` (it writes itself, atomically)."""
        path = self.file(state_name(k))
        state.save(path)
        return path

    def write_traces(self, k: int, rows: list[TraceRow]) -> str:
        path = self.file(traces_name(k))
        atomic_write_text(path, "".join(_line(row) for row in rows), prefix=_TEMP_PREFIX)
        return path

    def write_probe(self, k: int, rows: list[ProbeRow]) -> str:
        path = self.file(probe_name(k))
        atomic_write_text(path, "".join(_line(row) for row in rows), prefix=_TEMP_PREFIX)
        return path

    def append_metrics(self, row: StepRow) -> str:
        return self._append(METRICS, [row])

    def append_val(self, rows: list[ValRow]) -> str:
        return self._append(VALIDATION, rows)

    def _append(self, name: str, rows: Iterable[dict]) -> str:
        path = self.file(name)
        with open(path, "a", encoding="utf-8") as fh:
            for row in rows:
                fh.write(_line(row))
            fh.flush()
        return path


def _line(row: dict) -> str:
    return json.dumps(json_safe(row), allow_nan=False) + "\n"


def used(path: str) -> bool:
    """The folder holds the results of an earlier training run (its metrics or verl's checkpoints)."""
    return os.path.exists(os.path.join(path, METRICS)) or os.path.isdir(os.path.join(path, CHECKPOINTS))


def clean(path: str, checkpoints: bool = True) -> list[str]:
    """Remove an earlier run's results from ``path`` (run-folder files, ``timing.json`` and, with
    ``checkpoints``, verl's checkpoints) so a fresh run neither appends to its rows nor leaves its later steps'
    files behind. The model, the data, the logs and the dry run's working files stay. Returns the names removed."""
    if not os.path.isdir(path):
        return []
    removed = []
    for name in sorted(os.listdir(path)):
        target = os.path.join(path, name)
        if name == CHECKPOINTS and checkpoints and os.path.isdir(target):
            shutil.rmtree(target)
        elif name in (CONFIG, PROVENANCE, METRICS, VALIDATION, TIMING) or any(_step_of(name, kind) is not None
                                                                  for kind in (_TRACES, _STATE, _PROBE)):
            os.remove(target)
        else:
            continue
        removed.append(name)
    return removed


# ------------------------------------------------------------------------------------------------ reader

@dataclass(frozen=True)
class Damage:
    """A row or file a reader skipped. ``cut``: the last line of a file ends without its newline (a row still
    being written, or a write cut by a crash), as opposed to a complete line that is not a JSON object."""

    file: str
    line: Optional[int]
    reason: str
    cut: bool = False

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        return f"{where}: {self.reason}"


def read_rows(path: str) -> tuple[list[dict], list[Damage]]:
    """The JSON-object lines of ``path`` (none if it does not exist) and the lines skipped."""
    rows: list[dict] = []
    damage: list[Damage] = []
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            lines = fh.readlines()
    except FileNotFoundError:
        return rows, damage
    except OSError as exc:
        return rows, [Damage(path, None, f"cannot read it: {exc.strerror or exc}")]
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        cut = n == len(lines) and not line.endswith("\n")
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):  # RecursionError: nesting deeper than the parser goes
            damage.append(Damage(path, n, "cut short (no end of line)" if cut else "not valid JSON", cut=cut))
            continue
        if isinstance(obj, dict):
            rows.append(obj)
        else:
            damage.append(Damage(path, n, f"a JSON {type(obj).__name__}, not an object"))
    return rows, damage


def read_object(path: str) -> tuple[Optional[dict], Optional[Damage]]:
    """A JSON file holding one object: ``(object, None)``, ``(None, None)`` when absent, ``(None, damage)``."""
    try:
        with open(path, encoding="utf-8") as fh:
            obj = json.load(fh)
    except FileNotFoundError:
        return None, None
    except (OSError, UnicodeDecodeError) as exc:
        return None, Damage(path, None, f"cannot read it: {exc}")
    except (ValueError, RecursionError):  # RecursionError: nesting deeper than the parser goes
        return None, Damage(path, None, "not valid JSON")
    if not isinstance(obj, dict):
        return None, Damage(path, None, "expected a JSON object")
    return obj, None


@dataclass
class StepFiles:
    """The per-step files present in a folder, by step: ``{k: path}``."""

    traces: dict[int, str] = field(default_factory=dict)
    states: dict[int, str] = field(default_factory=dict)
    probes: dict[int, str] = field(default_factory=dict)


def step_files(path: str) -> StepFiles:
    out = StepFiles()
    for name in sorted(os.listdir(path)):
        for kind, found in ((_TRACES, out.traces), (_STATE, out.states), (_PROBE, out.probes)):
            k = _step_of(name, kind)
            if k is not None:
                found[k] = os.path.join(path, name)
    return out


def read_steps(path: str) -> tuple[list[StepRow], list[Damage]]:
    return read_rows(os.path.join(path, METRICS))  # type: ignore[return-value]


def read_traces(path: str, k: int) -> tuple[list[TraceRow], list[Damage]]:
    return read_rows(os.path.join(path, traces_name(k)))  # type: ignore[return-value]


def read_probe(path: str, k: int) -> tuple[list[ProbeRow], list[Damage]]:
    return read_rows(os.path.join(path, probe_name(k)))  # type: ignore[return-value]


def read_validation(path: str) -> tuple[list[ValRow], list[Damage]]:
    return read_rows(os.path.join(path, VALIDATION))  # type: ignore[return-value]


def read_log(path: str) -> Optional[str]:
    """verl's console output of the run (``main_ppo.log``), or None."""
    try:
        with open(os.path.join(path, LOG), encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except FileNotFoundError:
        return None


@dataclass
class RunData:
    """Everything :func:`load` read from a run folder; rows in file order."""

    path: str
    config: dict = field(default_factory=dict)                  # {} without config.json
    steps: list[StepRow] = field(default_factory=list)
    traces: dict[int, list[TraceRow]] = field(default_factory=dict)
    states: dict[int, StateRow] = field(default_factory=dict)
    probes: dict[int, list[ProbeRow]] = field(default_factory=dict)
    validation: list[ValRow] = field(default_factory=list)
    timing: Optional[Timing] = None
    damage: list[Damage] = field(default_factory=list)

    def warnings(self, cut: bool = True) -> list[str]:
        """One line per skipped row or file (``cut=False``: leave out cut last lines, normal while a run writes)."""
        return [f"skipped {d}" for d in self.damage if cut or not d.cut]


def load(path: str) -> RunData:
    """Read a whole run folder. A damaged row or file is skipped and listed in ``damage``, never raised.

    Raises:
        OSError: ``path`` is not a readable folder.
    """
    path = os.path.abspath(path)
    files = step_files(path)
    data = RunData(path=path)
    damage = data.damage
    config, bad = read_object(os.path.join(path, CONFIG))
    data.config = config or {}
    damage += [bad] if bad else []
    data.timing, bad = read_object(os.path.join(path, TIMING))  # type: ignore[assignment]
    damage += [bad] if bad else []
    data.steps, bad_rows = read_steps(path)
    damage += bad_rows
    for rows_of, at in ((data.traces, files.traces), (data.probes, files.probes)):
        for k, file in at.items():
            rows_of[k], bad_rows = read_rows(file)
            damage += bad_rows
    for k, file in files.states.items():
        state, bad = read_object(file)
        if state is not None:
            data.states[k] = state  # type: ignore[assignment]
        damage += [bad] if bad else []
    data.validation, bad_rows = read_validation(path)
    damage += bad_rows
    return data


# ------------------------------------------------------------------------------------------------ shell

def main(argv: Optional[list[str]] = None) -> int:
    """For the run scripts, so that they hold no file name of their own:

        python -m seal_verl.runs.folder clean DIR        # remove an earlier run's results (prints what went)
        python -m seal_verl.runs.folder used DIR         # exit 0 if DIR holds an earlier run's results, else 1
        python -m seal_verl.runs.folder path DIR NAME    # DIR/<file>, NAME one of config, metrics, log, ...
    """
    import argparse

    p = argparse.ArgumentParser(prog="python -m seal_verl.runs.folder", description="run-folder files for shell scripts")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("clean").add_argument("dir")
    sub.add_parser("used").add_argument("dir")
    path = sub.add_parser("path")
    path.add_argument("dir")
    path.add_argument("name", choices=sorted(NAMED))
    args = p.parse_args(argv)
    if args.command == "clean":
        removed = clean(args.dir)
        if removed:
            print(f"removed from {args.dir}: {', '.join(removed)}")
        return 0
    if args.command == "used":
        return 0 if used(args.dir) else 1
    print(os.path.join(args.dir, NAMED[args.name]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
