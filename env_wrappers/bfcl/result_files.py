"""Reading ``bfcl generate`` result files (JSONL ``{"id": ..., "result": [turn][step]}``) robustly.

Each bad line is reported with its file and line number and skipped; the rest of the file is still read.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Iterator

#: Longest result line read (bytes). A line this long is reported and skipped without being held whole.
MAX_LINE_BYTES = 64 * 2**20
_CHUNK = 2**20


@dataclass
class ResultEntry:
    path: str
    line: int
    id: str
    result: object


@dataclass
class ReadProblem:
    path: str
    line: int  # 0 = the file as a whole
    message: str

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        return f"{where}: {self.message}"


def expand_paths(paths: list[str]) -> list[str]:
    """Files as given; folders expanded to the ``*.json``/``*.jsonl`` files below them (sorted)."""
    out = []
    for p in paths:
        if os.path.isdir(p):
            for root, _, files in os.walk(p):
                out.extend(os.path.join(root, f) for f in sorted(files) if f.endswith((".json", ".jsonl")))
        else:
            out.append(p)
    return out


def _not_regular(path: str) -> str | None:
    """Why ``path`` cannot be read as a result file (a device, a pipe, a missing file), or None."""
    try:
        st = os.stat(path)
    except OSError as exc:
        return f"cannot read file: {exc.strerror or exc}"
    import stat

    if not stat.S_ISREG(st.st_mode):
        return "not a regular file (a device, pipe or socket is never read)"
    return None


def count_lines(path: str) -> int:
    """Newlines in a regular file, counted in fixed-size chunks (0 for anything else)."""
    if _not_regular(path):
        return 0
    n = 0
    try:
        with open(path, "rb") as f:
            while chunk := f.read(_CHUNK):
                n += chunk.count(b"\n")
            if chunk is not None and f.tell() and not _ends_with_newline(f):
                n += 1
    except OSError:
        return 0
    return n


def _ends_with_newline(f) -> bool:
    f.seek(-1, os.SEEK_END)
    return f.read(1) == b"\n"


def _lines(f, limit: int) -> Iterator[tuple[bytes | None, int]]:
    """Lines of a binary file with their numbers; a line over ``limit`` bytes is yielded as None (its
    bytes are skipped in chunks, never held whole)."""
    n = 0
    while True:
        raw = f.readline(limit + 1)
        if not raw:
            return
        n += 1
        if len(raw) > limit and not raw.endswith(b"\n"):
            while True:  # skip the rest of the line
                rest = f.readline(_CHUNK)
                if not rest or rest.endswith(b"\n"):
                    break
            yield None, n
            continue
        yield raw, n


def read_entries(path: str, known_ids) -> Iterator[ResultEntry | ReadProblem]:
    """Yield entries and problems of one file, in order. ``known_ids``: ids that exist (others reported)."""
    why = _not_regular(path)
    if why:
        yield ReadProblem(path, 0, why)
        return
    try:
        f = open(path, "rb")
    except OSError as exc:
        yield ReadProblem(path, 0, f"cannot read file: {exc.strerror or exc}")
        return
    with f:
        for raw, n in _lines(f, MAX_LINE_BYTES):
            if raw is None:
                yield ReadProblem(path, n, f"line longer than {MAX_LINE_BYTES} bytes; skipped")
                continue
            if not raw.strip():
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                yield ReadProblem(path, n, f"not valid UTF-8 ({exc.reason} at byte {exc.start})")
                continue
            try:
                obj = json.loads(text)
            except (ValueError, RecursionError) as exc:
                yield ReadProblem(path, n, f"not valid JSON ({str(exc)[:120]})")
                continue
            if not isinstance(obj, dict):
                yield ReadProblem(path, n, "expected a JSON object with 'id' and 'result'")
                continue
            task_id = obj.get("id")
            if not isinstance(task_id, str):
                yield ReadProblem(path, n, "missing or non-string 'id'")
                continue
            if "result" not in obj:
                yield ReadProblem(path, n, f"entry {task_id!r} has no 'result'")
                continue
            if task_id not in known_ids:
                yield ReadProblem(path, n, f"unknown task id {task_id!r} (not a BFCL V3 multi-turn task)")
                continue
            yield ResultEntry(path, n, task_id, obj["result"])
