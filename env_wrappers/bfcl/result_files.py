"""Reading ``bfcl generate`` result files (JSONL ``{"id": ..., "result": [turn][step]}``) robustly.

Each bad line is reported with its file and line number and skipped; the rest of the file is still read.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Iterator


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


def count_lines(path: str) -> int:
    try:
        with open(path, "rb") as f:
            return sum(1 for _ in f)
    except OSError:
        return 0


def read_entries(path: str, known_ids) -> Iterator[ResultEntry | ReadProblem]:
    """Yield entries and problems of one file, in order. ``known_ids``: ids that exist (others reported)."""
    try:
        f = open(path, "rb")
    except OSError as exc:
        yield ReadProblem(path, 0, f"cannot read file: {exc.strerror or exc}")
        return
    with f:
        for n, raw in enumerate(f, start=1):
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
