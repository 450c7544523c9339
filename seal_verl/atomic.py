"""Crash-safe file writes: write a temporary file beside the target, fsync, then ``os.replace``.

A crash mid-write leaves the previous file intact, never a truncated one. Used for the closed-loop state
and the run folder, which a resumed run must be able to trust.
"""

from __future__ import annotations

import os
import tempfile


def atomic_write_text(path: str, text: str, prefix: str = ".seal.") -> str:
    """Replace ``path`` with ``text`` (UTF-8) atomically; creates the parent folder. Returns ``path``."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
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
