"""Small helpers every settings dataclass of the core shares: building one from a plain mapping, and reading
a boolean the way YAML does.

They live apart from ``settings.py`` so that ``weighting``, ``interface`` and ``loop`` can use them without
an import cycle (``settings`` imports those three).
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, Optional, TypeVar

T = TypeVar("T")

#: The YAML 1.1 spellings of a boolean (any letter case): a value given as a string in an override or a
#: quoted YAML scalar means what YAML would read. Anything else for a boolean option is an error.
_TRUE = frozenset({"true", "yes", "on", "y"})
_FALSE = frozenset({"false", "no", "off", "n"})


def parse_bool(value: Any, where: str) -> bool:
    """A boolean option's value: a bool, or a string YAML reads as one; ``ValueError`` naming ``where``
    otherwise (1 and 0 are refused: a number where a switch belongs is more likely a misplaced value)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        low = value.strip().lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
    raise ValueError(f"{where} must be a boolean (true or false), got {value!r}")


def from_mapping(cls: type[T], d: Optional[dict[str, Any]], what: str) -> T:
    """``cls(**d)`` after refusing keys ``cls`` has no field for, so that a misspelt option never falls back
    to its default silently. ``what`` names the options in the message ("weighting option")."""
    d = dict(d or {})
    allowed = [f.name for f in fields(cls)]
    unknown = sorted(set(d) - set(allowed))
    if unknown:
        raise ValueError(f"unknown {what}(s) {unknown}; allowed keys: {', '.join(allowed)}")
    return cls(**d)
