"""Crash-safe file writes: write a temporary file beside the target, fsync, then ``os.replace``.

A crash mid-write leaves the previous file intact, never a truncated one. Used for the closed-loop state
and the run folder, which a resumed run must be able to trust. A process killed between creating the
temporary file and the rename leaves that file behind; the next save (or load) of the same target removes
such leftovers once they are older than any write in progress could be.
"""

from __future__ import annotations

import glob
import os
import tempfile
import time

#: A temporary file older than this (seconds) belongs to no write in progress: every write finishes in far
#: less time than this.
STALE_TEMP_AGE_S = 60.0


def remove_stale_temp_files(path: str, prefix: str = ".seal.", min_age_s: float = STALE_TEMP_AGE_S) -> int:
    """Remove temporary files of interrupted atomic writes beside ``path`` (same prefix, older than
    ``min_age_s``). Returns how many were removed; never raises."""
    directory = os.path.dirname(os.path.abspath(path))
    removed = 0
    now = time.time()
    for tmp in glob.glob(os.path.join(glob.escape(directory), glob.escape(prefix) + "*.tmp")):
        try:
            if now - os.path.getmtime(tmp) >= min_age_s:
                os.unlink(tmp)
                removed += 1
        except OSError:
            pass
    return removed


def atomic_write_text(path: str, text: str, prefix: str = ".seal.") -> str:
    """Replace ``path`` with ``text`` (UTF-8) atomically; creates the parent folder. Returns ``path``."""
    return atomic_write_bytes(path, text.encode("utf-8"), prefix)


def atomic_write_bytes(path: str, data: bytes, prefix: str = ".seal.") -> str:
    """Replace ``path`` with ``data`` atomically; creates the parent folder. Returns ``path``."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    remove_stale_temp_files(path, prefix)
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=directory)
    try:
        # mkstemp makes the file 0600; a file written whole gets the mode a plain open() would give it (0666 less
        # the umask), like the files appended to beside it
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path


def _umask() -> int:
    """This process's umask: from ``/proc`` (setting it to read it back would change it for other threads
    meanwhile), else by setting it and setting it back."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for row in fh:
                if row.startswith("Umask:"):
                    return int(row.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


class FileContentError(ValueError):
    """A file that exists but cannot be used; the message is one line that names the file."""


def read_json_object(path: str, what: str, temp_prefix: str | None = None) -> dict:
    """Read a JSON file that must hold an object (after removing leftovers of interrupted writes with
    ``temp_prefix`` beside it). Every failure is a :class:`FileContentError` naming the file and ``what`` it
    should hold: unreadable, empty, not JSON, not an object."""
    if temp_prefix is not None:
        remove_stale_temp_files(path, temp_prefix)
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise FileContentError(f"{path}: cannot read the {what}: {exc}") from None
    if not text.strip():
        raise FileContentError(f"{path}: the {what} file is empty")
    try:
        import json

        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise FileContentError(f"{path}: the {what} is not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise FileContentError(f"{path}: expected a JSON object as the {what}, got {type(data).__name__}")
    return data
