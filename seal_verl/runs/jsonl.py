"""JSON-lines files that survive a crash and hostile content: a row as one line of plain values (:func:`line`, through
``rows.json_safe``), and readers that skip a damaged row or file and say which (:func:`read_rows`,
:func:`read_object`, :class:`Damage`), never raise on one.

The run folder (``seal_verl.runs.folder``) writes and reads every file through these; nothing here knows a
run folder's names.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Optional

from seal_verl.runs.rows import json_safe


def line(row: dict) -> str:
    """``row`` as one JSON line (non-finite floats as null)."""
    return json.dumps(json_safe(row), allow_nan=False) + "\n"


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
