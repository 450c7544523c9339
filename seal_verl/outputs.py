"""Output folders that are never emptied without consent, never shared by two commands, and never an input.

Every command that writes a folder of results claims it first (:func:`claim`): the CPU run scripts (``make run``,
``make run-bfcl``, and so ``make bench-learning``), ``seal-verl dry-run``, the warm starts and the cue-effect
measurement.

- A folder that is absent, empty, or holds only what this command wrote and may reuse (a run's prepared data,
  a warm start's own cache) is used as it is.
- A folder that holds anything else (an earlier run's results, a model, files this command did not write) is
  refused with one line saying what it holds, unless the user says so (``FORCE=1`` / ``--force``). Then the
  earlier contents are moved aside, whole, into a dated sibling folder (``<folder>.earlier-<YYYYmmdd-HHMMSS>``),
  never deleted, and the command says where they went.
- An output may be no input: a folder that is, holds or lies inside a folder or file the command reads (a model
  folder, a weight file, a metrics file) is refused whatever ``--force`` says (:func:`check_not_input`).
- A lock file (:data:`LOCK`: the holder's pid, host, command and start) keeps a second command out of a folder
  another one is writing; a lock whose holder has ended is taken over, with a line saying so.

Refusals are :class:`OutputRefused`, a :class:`seal_verl.usage.UsageError`: one line, exit status 2. No verl
import.
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import sys
from dataclasses import dataclass, field
from typing import Callable, Iterable, Optional

from seal_verl.usage import UsageError

#: the lock file a command holds in a folder it writes
LOCK = ".seal.lock"
#: what a moved-aside folder's name adds to the original's
EARLIER = ".earlier-"
#: files a weight-bearing model folder holds (what tells a model folder from a run folder)
MODEL_MARKERS = ("model.safetensors", "pytorch_model.bin", "build.json", "warm_start.json")


class OutputRefused(UsageError):
    """An output folder or file the command must not write into (held, not empty, or an input); one line."""


def _real(path: str) -> str:
    return os.path.realpath(os.path.abspath(path))


def _within(inner: str, outer: str) -> bool:
    return inner == outer or inner.startswith(outer.rstrip(os.sep) + os.sep)


def check_not_input(output: str, inputs: Iterable[Optional[str]], option: str = "output") -> None:
    """Refuse ``output`` if it is one of ``inputs``, lies inside one, or holds one (links followed).

    Raises:
        OutputRefused: naming both paths.
    """
    out = _real(output)
    for given in inputs:
        if not given:
            continue
        src = _real(given)
        if _within(out, src) or _within(src, out):
            how = "is" if out == src else ("lies inside" if _within(out, src) else "holds")
            raise OutputRefused(f"{option} {output} {how} the input {given}: an output is never an input; give "
                                "another folder")


# ------------------------------------------------------------------------------------------------ what a folder holds

@dataclass
class Contents:
    """A folder's entries by kind (names, sorted): what the command may reuse, and what it may not."""

    reusable: list[str] = field(default_factory=list)
    results: list[str] = field(default_factory=list)
    model: list[str] = field(default_factory=list)
    other: list[str] = field(default_factory=list)

    @property
    def kept(self) -> list[str]:
        """Entries the command must not overwrite or delete."""
        return sorted(self.results + self.model + self.other)

    def summary(self) -> str:
        parts = []
        if self.model:
            parts.append("a model (" + _names(self.model) + ")")
        if self.results:
            parts.append("the results of an earlier run (" + _names(self.results) + ")")
        if self.other:
            parts.append("files this command did not write (" + _names(self.other) + ")")
        return " and ".join(parts)


def _names(names: list[str], most: int = 4) -> str:
    shown = ", ".join(names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


def survey(path: str, reusable: Callable[[str], bool] = lambda name: False) -> Contents:
    """What ``path`` holds (nothing when it does not exist): entries ``reusable(name)`` accepts, run-folder
    results, model files, and the rest. The lock file is nobody's content."""
    out = Contents()
    try:
        names = sorted(os.listdir(path))
    except FileNotFoundError:
        return out
    from seal_verl.runs import folder as RF

    names = [n for n in names if n != LOCK]
    weights = any(n in MODEL_MARKERS or n.endswith(".safetensors") for n in names)
    for name in names:
        if reusable(name):
            out.reusable.append(name)
        elif weights and (name == "config.json" or not RF.is_result(name)):
            out.model.append(name)  # a folder with weights: its config, tokenizer and template are the model's
        elif RF.is_result(name):
            out.results.append(name)
        else:
            out.other.append(name)
    return out


# ------------------------------------------------------------------------------------------------ moving aside

def aside_name(path: str, now: Optional[datetime.datetime] = None) -> str:
    """A sibling of ``path`` that does not exist yet: ``<path>.earlier-<YYYYmmdd-HHMMSS>`` (``-2``, ``-3``, ...
    after it when one of that second exists)."""
    stamp = (now or datetime.datetime.now()).strftime("%Y%m%d-%H%M%S")
    base = f"{os.path.abspath(path).rstrip(os.sep)}{EARLIER}{stamp}"
    candidate, n = base, 1
    while os.path.lexists(candidate):
        n += 1
        candidate = f"{base}-{n}"
    return candidate


def move_aside(path: str, names: Optional[list[str]] = None) -> Optional[str]:
    """Move the entries of ``path`` (``names``, else all but the lock file) into a new dated sibling folder;
    returns it (None when there was nothing to move). Renames only: nothing is copied or deleted."""
    names = sorted(n for n in os.listdir(path) if n != LOCK) if names is None else names
    if not names:
        return None
    dest = aside_name(path)
    os.makedirs(dest)
    for name in names:
        os.rename(os.path.join(path, name), os.path.join(dest, name))
    return dest


# ------------------------------------------------------------------------------------------------ the lock

def _start_ticks(pid: int) -> Optional[int]:
    """A process's start time (clock ticks since boot), to tell it from a later process with the same pid."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _alive(holder: dict) -> bool:
    try:
        pid = int(holder["pid"])
    except (KeyError, TypeError, ValueError):
        return False
    if holder.get("host") != socket.gethostname():
        return True  # another machine's process: it cannot be asked, so it is taken to be alive
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    ticks = holder.get("start")
    return ticks is None or _start_ticks(pid) in (None, ticks)


def _holder_text(holder: dict) -> str:
    return (f"{holder.get('command') or 'a command'} (pid {holder.get('pid')} on {holder.get('host')}, since "
            f"{holder.get('since')})")


def read_lock(path: str) -> Optional[dict]:
    """The holder recorded in ``path``'s lock file (None without one; ``{}`` for an unreadable one)."""
    try:
        with open(os.path.join(path, LOCK), encoding="utf-8") as fh:
            data = json.load(fh)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def lock(path: str, command: str) -> Optional[str]:
    """Take ``path``'s lock for this process; returns a line to show when a stale lock was taken over.

    Raises:
        OutputRefused: a live process holds it.
    """
    file = os.path.join(path, LOCK)
    me = {"pid": os.getpid(), "host": socket.gethostname(), "command": command, "start": _start_ticks(os.getpid()),
          "since": datetime.datetime.now().isoformat(timespec="seconds")}
    note = None
    for _ in range(3):
        try:
            fd = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            holder = read_lock(path)
            if holder is None:
                continue  # released meanwhile
            if holder.get("pid") == os.getpid() and holder.get("host") == me["host"]:
                return None  # this process holds it already
            if holder and _alive(holder):
                raise OutputRefused(f"{path} is being written by {_holder_text(holder)}: two runs never share "
                                    f"a folder; wait for it, or choose another folder") from None
            try:  # taken over by whoever renames it first
                os.rename(file, f"{file}.stale-{os.getpid()}")
                os.remove(f"{file}.stale-{os.getpid()}")
            except FileNotFoundError:
                continue
            note = (f"{path}: took over the lock of {_holder_text(holder)}, which has ended" if holder else
                    f"{path}: replaced an unreadable lock file")
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(me, fh)
        return note
    raise OutputRefused(f"{path}: could not take its lock ({LOCK}); another command keeps taking it")


def unlock(path: str) -> None:
    """Give ``path``'s lock back if this process holds it."""
    holder = read_lock(path)
    if holder and holder.get("pid") == os.getpid() and holder.get("host") == socket.gethostname():
        try:
            os.remove(os.path.join(path, LOCK))
        except FileNotFoundError:
            pass


# ------------------------------------------------------------------------------------------------ claiming

@dataclass
class Claim:
    """A folder this process writes: its path, where its earlier contents went (None: nowhere), and the lock it
    holds until :meth:`release` (or the end of a ``with`` block)."""

    path: str
    moved_to: Optional[str] = None
    locked: bool = False
    notes: list[str] = field(default_factory=list)

    def release(self) -> None:
        if self.locked:
            unlock(self.path)
            self.locked = False

    def __enter__(self) -> "Claim":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def claim(path: str, command: str, *, reusable: Callable[[str], bool] = lambda name: False, force: bool = False,
          force_hint: str = "--force", other_hint: str = "another folder", inputs: Iterable[Optional[str]] = (),
          keep_results: bool = False, option: str = "output folder", hold: bool = True) -> Claim:
    """Claim ``path`` for ``command`` (see the module docstring); creates it.

    Args:
        path: the folder.
        command: names the holder in the lock file and in another command's refusal.
        reusable: the entry names this command wrote and may reuse as they are.
        force: the user's consent: the folder's other contents are moved aside (not deleted).
        force_hint, other_hint: how the user gives consent, or avoids the need (in the refusal's line).
        inputs: folders and files the command reads; the folder may be none of them, nor inside nor around one.
        keep_results: the command continues what is there (a resumed run): nothing is refused or moved.
        option: names the folder in messages (``OUT``, ``--out``).
        hold: take the lock (False: the caller only needs the folder checked and emptied).

    Raises:
        OutputRefused: one line: an input, a file, a folder held by a live command, or contents kept without
            ``force``.
    """
    check_not_input(path, inputs, option)
    path = os.path.abspath(path)
    if os.path.lexists(path) and not os.path.isdir(path):
        raise OutputRefused(f"{option} {path} is not a folder")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise OutputRefused(f"{option} {path}: cannot create it: {exc.strerror or exc}") from None
    result = Claim(path)
    if hold:
        note = lock(path, command)
        result.locked = True
        if note:
            result.notes.append(note)
    try:
        contents = survey(path, reusable)
        if contents.kept and not keep_results:
            if not force:
                raise OutputRefused(f"{option} {path} holds {contents.summary()}; {force_hint} moves them aside "
                                    f"to {os.path.basename(aside_name(path))}, or use {other_hint}")
            result.moved_to = move_aside(path)
            result.notes.append(f"moved the earlier contents of {path} to {result.moved_to}")
    except BaseException:
        result.release()
        raise
    return result


def say(claim_: Claim, prefix: str, out=None) -> None:
    """Print the claim's notes (a lock taken over, where earlier contents went), one line each."""
    for note in claim_.notes:
        print(f"{prefix} {note}", file=out or sys.stdout, flush=True)
