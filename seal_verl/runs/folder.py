"""What a SEAL run leaves on disk, in one place: the file names, the rows, one writer, one reader, the clean-up.

A run folder is written by the SEAL trainer (``seal.run_dir``: the V1 trainer and the legacy path, through
``verl_glue``), by ``seal-verl dry-run`` and by the CPU runs' launcher (``recipes/bfcl_v3/cpu/launch.py``); it is read
by ``seal-verl report``, ``seal-verl check``, the console watcher (``runs.watch``) and the benchmarks. Nothing here
deletes: a command that writes a run folder claims it first (``seal_verl.outputs``: earlier results are refused,
or moved aside with consent). Keeping the layout here means a new file or
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
- written by the CPU runs' launcher around verl, through :func:`write_timing` and :func:`write_prepare`:
  ``timing.json`` (:class:`Timing`), ``prepare.json`` (:class:`Prepared`), ``main_ppo.log`` (verl's console),
  ``checkpoints/`` (verl's, with ``global_step_N/seal_state.json``).

A run made with a fault-injection variable set (``seal_verl.env_vars``) says so in ``config.json``, in every
``metrics.jsonl`` row and in ``timing.json`` (:data:`FAULT_SETTINGS`: variable -> value; the V1 trainer's own
``faults`` lists the faults it planted).

Rows are plain JSON objects; their types and their builders are in :mod:`seal_verl.runs.rows`. Readers never fail
on a damaged row: a line cut by a crash or a line that is not a JSON object is skipped and reported as
:class:`Damage` (``runs.jsonl``: the lines every file is written and read as).
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

from seal_verl.atomic import atomic_write_text
from seal_verl.runs.jsonl import Damage, line, read_object, read_rows
# The row types and their builders live in ``seal_verl.runs.rows``; named here for the readers of this module.
from seal_verl.runs.rows import (CueEffect, Prepared, ProbeRow, StateRow, StepRow, Timing, TraceRow,  # noqa: F401
                                 ValRow, json_safe)

# ------------------------------------------------------------------------------------------------ file names

CONFIG = "config.json"
PROVENANCE = "provenance.json"
METRICS = "metrics.jsonl"
VALIDATION = "val_traces.jsonl"
TIMING = "timing.json"
LOG = "main_ppo.log"
CHECKPOINTS = "checkpoints"
#: the key under which config.json, every metrics row and timing.json record the fault-injection variables set
FAULT_SETTINGS = "fault_settings"
#: Hydra's own record of the composed config (``hydra.run.dir``)
HYDRA = "hydra"
#: the SEAL state inside each of verl's ``global_step_N`` checkpoint folders
CHECKPOINT_STATE = "seal_state.json"
#: the CPU runs' record of the model and data a run starts from, and the preparation's console output
PREPARE = "prepare.json"
PREPARE_LOG = "prepare.log"
DATA = "data"
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
         "checkpoints": CHECKPOINTS, "prepare": PREPARE, "prepare_log": PREPARE_LOG, "data": DATA, "hydra": HYDRA}


def traces_name(k: int) -> str:
    return f"{_TRACES[0]}{int(k)}{_TRACES[1]}"


def state_name(k: int) -> str:
    return f"{_STATE[0]}{int(k)}{_STATE[1]}"


def probe_name(k: int) -> str:
    return f"{_PROBE[0]}{int(k)}{_PROBE[1]}"


def checkpoint_state(run_dir: str, k: int) -> str:
    """Where verl's checkpoint of step ``k`` of a run keeps the SEAL state (the run scripts' checkpoint dir)."""
    return os.path.join(run_dir, CHECKPOINTS, f"global_step_{int(k)}", CHECKPOINT_STATE)


#: the most digits a step number of a file name may have (a longer one is no step of a run)
_STEP_DIGITS = 9


def _step_of(name: str, kind: tuple[str, str]) -> Optional[int]:
    m = re.fullmatch(re.escape(kind[0]) + r"(\d{1,%d})" % _STEP_DIGITS + re.escape(kind[1]), name)
    return int(m.group(1)) if m else None


def _looks_like_step_file(name: str) -> bool:
    """A name of a step file's kind whose step is not a number a run could have written."""
    return any(name.startswith(k[0]) and name.endswith(k[1]) and _step_of(name, k) is None
               for k in (_TRACES, _STATE, _PROBE))


def is_result(name: str) -> bool:
    """Whether ``name`` (an entry of a run folder) is part of a run's results: what a new run must not overwrite."""
    return (name in (CONFIG, PROVENANCE, METRICS, VALIDATION, TIMING, LOG, CHECKPOINTS, HYDRA)
            or any(_step_of(name, kind) is not None for kind in (_TRACES, _STATE, _PROBE)))


# ------------------------------------------------------------------------------------------------ writer

class RunFolder:
    """The writer of one run folder. Every file is written whole (temporary file + rename) or appended line by
    line with a flush, so a reader polling the folder sees complete files and at most one cut last line."""

    def __init__(self, path: str):
        from seal_verl import env_vars

        self.path = os.path.abspath(path)
        os.makedirs(self.path, exist_ok=True)
        #: fault-injection variables set in this process: recorded with the config and every step
        self.faults = env_vars.faults()  # {} without any

    def file(self, name: str) -> str:
        return os.path.join(self.path, name)

    def write_config(self, info: dict) -> str:
        path = self.file(CONFIG)
        info = dict(info, **{FAULT_SETTINGS: self.faults}) if self.faults else info
        atomic_write_text(path, json.dumps(json_safe(info), indent=1, sort_keys=True), prefix=".seal_state.")
        return path

    def write_state(self, k: int, state: Any) -> str:
        """``state``: a ``ClosedLoopState`` (it writes itself, atomically)."""
        path = self.file(state_name(k))
        state.save(path)
        return path

    def write_traces(self, k: int, rows: list[TraceRow]) -> str:
        path = self.file(traces_name(k))
        atomic_write_text(path, "".join(line(row) for row in rows), prefix=_TEMP_PREFIX)
        return path

    def write_probe(self, k: int, rows: list[ProbeRow]) -> str:
        path = self.file(probe_name(k))
        atomic_write_text(path, "".join(line(row) for row in rows), prefix=_TEMP_PREFIX)
        return path

    def append_metrics(self, row: StepRow) -> str:
        return self._append(METRICS, [dict(row, **{FAULT_SETTINGS: self.faults}) if self.faults else row])

    def append_val(self, rows: list[ValRow]) -> str:
        return self._append(VALIDATION, rows)

    def _append(self, name: str, rows: Iterable[dict]) -> str:
        path = self.file(name)
        with open(path, "a", encoding="utf-8") as fh:
            for row in rows:
                fh.write(line(row))
            fh.flush()
        return path


def write_timing(path: str, timing: Timing) -> str:
    """Write ``timing.json`` into the run folder ``path`` (whole, atomically)."""
    file = os.path.join(path, TIMING)
    atomic_write_text(file, json.dumps(json_safe(dict(timing)), indent=1, sort_keys=True) + "\n", prefix=_TEMP_PREFIX)
    return file


def write_prepare(path: str, record: Prepared) -> str:
    """Write ``prepare.json`` into the run folder ``path`` (whole, atomically)."""
    file = os.path.join(path, PREPARE)
    atomic_write_text(file, json.dumps(json_safe(dict(record)), indent=1) + "\n", prefix=_TEMP_PREFIX)
    return file


def read_prepare(path: str) -> Prepared:
    """The run folder's ``prepare.json``.

    Raises:
        ValueError: absent, unreadable, or without a ``model`` (one line naming the file).
    """
    record, damage = read_object(os.path.join(path, PREPARE))
    if record is None or not isinstance(record.get("model"), str):
        raise ValueError(f"{os.path.join(path, PREPARE)}: {damage or 'missing, or it names no model'}")
    return record  # type: ignore[return-value]


# ------------------------------------------------------------------------------------------------ reader

@dataclass
class StepFiles:
    """The per-step files present in a folder, by step: ``{k: path}``; ``odd``: names of a step file's kind
    whose step is no number a run writes (skipped, reported as damage by :func:`load`)."""

    traces: dict[int, str] = field(default_factory=dict)
    states: dict[int, str] = field(default_factory=dict)
    probes: dict[int, str] = field(default_factory=dict)
    odd: list[str] = field(default_factory=list)


def step_files(path: str) -> StepFiles:
    out = StepFiles()
    for name in sorted(os.listdir(path)):
        if _looks_like_step_file(name):
            out.odd.append(os.path.join(path, name))
        for kind, found in ((_TRACES, out.traces), (_STATE, out.states), (_PROBE, out.probes)):
            k = _step_of(name, kind)
            if k is not None:
                found[k] = os.path.join(path, name)
    return out


def steps_going_back(global_steps: list) -> Optional[str]:
    """A line when the global steps of ``metrics.jsonl`` go back (a step not after the one before it): a second
    run appended to the folder, or a run resumed from an earlier checkpoint than its last step. None otherwise."""
    global_steps = [k for k in global_steps if isinstance(k, int) and not isinstance(k, bool)]  # others: damage
    back = [b for a, b in zip(global_steps, global_steps[1:]) if b <= a]
    if not back:
        return None
    shown = global_steps if len(global_steps) <= 12 else global_steps[:12] + ["..."]
    return (f"the steps of {METRICS} go back ({', '.join(map(str, shown))}): two runs wrote into this folder, or a "
            "run was resumed from an earlier checkpoint into it; each run needs a folder of its own")


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
    damage += [Damage(f, None, f"not a step file of a run (its step number has more than {_STEP_DIGITS} digits)")
               for f in files.odd]
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
    """For shell scripts, so that they hold no file name of their own:

        python -m seal_verl.runs.folder path DIR NAME    # DIR/<file>, NAME one of config, metrics, log, ...
    """
    import argparse

    p = argparse.ArgumentParser(prog="python -m seal_verl.runs.folder", description="run-folder files for shell scripts")
    sub = p.add_subparsers(dest="command", required=True)
    path = sub.add_parser("path")
    path.add_argument("dir")
    path.add_argument("name", choices=sorted(NAMED))
    args = p.parse_args(argv)
    print(os.path.join(args.dir, NAMED[args.name]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
