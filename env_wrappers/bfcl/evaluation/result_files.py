"""``bfcl generate`` result files (JSONL ``{"id": ..., "result": [turn][step]}``): reading them robustly, where
``seal-verl eval`` writes them, and the store it appends to.

Reading: each bad line is reported with its file and line number and skipped; the rest of the file is still
read. Writing (:class:`ResultStore`): one line per finished task, appended and flushed at once, and the files
rewritten atomically, one line per task, when a run starts and ends.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from typing import Any, Iterator

from seal_verl.atomic import atomic_write_text

from ..environment.tasks import BFCLTask

#: BFCL's prefix for a task that failed at inference; ``bfcl evaluate`` scores it as an inference error.
INFERENCE_ERROR_PREFIX = "Error during inference: "

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


# ---------------------------------------------------------------------------------- where eval writes them

def version_prefix() -> str:
    """The result-file prefix of the installed bfcl-eval (``BFCL_v4`` for 2026.3.23)."""
    try:
        from bfcl_eval.constants.category_mapping import VERSION_PREFIX
        return VERSION_PREFIX
    except Exception:  # noqa: BLE001 - an unexpected layout of the package: keep the known prefix
        return "BFCL_v4"


def model_dir_name(model: str) -> str:
    """BFCL's folder name for a model: ``/`` replaced by ``_``."""
    return model.replace("/", "_")


def result_path(out: str, model: str, category: str) -> str:
    return os.path.join(out, "result", model_dir_name(model), "multi_turn",
                        f"{version_prefix()}_{category}_result.json")


# ----------------------------------------------------------------------------------------- eval's store

class ResultStore:
    """The per-category result files: read what exists, append one line per finished task (thread-safe)."""

    def __init__(self, out: str, model: str):
        self.out, self.model = out, model
        self._lock = threading.Lock()

    def path(self, category: str) -> str:
        return result_path(self.out, self.model, category)

    def load(self, categories) -> dict[str, Any]:
        """``{id: result}`` of the entries already written (unreadable lines skipped: they are redone)."""
        done: dict[str, Any] = {}
        for cat in categories:
            p = self.path(cat)
            if not os.path.exists(p):
                continue
            with open(p, "rb") as f:
                for raw in f:
                    try:
                        obj = json.loads(raw.decode("utf-8"))
                    except (UnicodeDecodeError, ValueError):
                        continue
                    if isinstance(obj, dict) and isinstance(obj.get("id"), str) and "result" in obj:
                        done[obj["id"]] = obj["result"]
        return done

    def append(self, task: BFCLTask, result: Any) -> None:
        """Raises (before touching the file) when the line cannot be encoded, e.g. text with a lone surrogate."""
        line = (json.dumps({"id": task.id, "result": result}, ensure_ascii=False) + "\n").encode("utf-8")
        with self._lock:
            p = self.path(task.category)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "ab") as f:
                f.write(line)
                f.flush()
                os.fsync(f.fileno())

    def compact(self, categories, order: dict[str, int]) -> None:
        """Rewrite each file atomically: one line per id (the last written wins), sorted as BFCL sorts."""
        with self._lock:
            for cat in categories:
                p = self.path(cat)
                if not os.path.exists(p):
                    continue
                entries = {k: v for k, v in self.load([cat]).items()}
                ids = sorted(entries, key=lambda i: (order.get(i, 1 << 30), i))
                atomic_write_text(p, "".join(json.dumps({"id": i, "result": entries[i]}, ensure_ascii=False) + "\n"
                                             for i in ids))


def is_inference_error(result: Any) -> bool:
    """Whether a stored result is an inference-error entry (a text, where a played task has a list of turns)."""
    return isinstance(result, str)
