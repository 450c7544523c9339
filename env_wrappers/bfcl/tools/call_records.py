"""What a decoded call becomes, whichever form it came in: the limits every decoder keeps, literal values (an
``ast`` node or a decoded JSON value checked to be data), the canonical call string and the
:class:`~seal_verl.core.trace.CallRecord`, and :class:`Decoded`, the calls of one message.

The decoders of the two text forms (:mod:`.python_calls`, :mod:`.json_calls`) build on this; :mod:`.calls` picks
one by call format. Nothing here runs code.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Any

from seal_verl.core.schema import POSITIONAL_PREFIX
from seal_verl.core.trace import (
    PARSE_BAD_NAME,
    PARSE_BAD_STRUCTURE,
    PARSE_NON_LITERAL,
    PARSE_OK,
    PARSE_TOO_LARGE,
    CallRecord,
)

#: Largest message (characters) that is decoded at all; longer text is an invalid attempt.
MAX_TEXT_CHARS = 65_536
#: Deepest bracket nesting accepted in a call's arguments.
MAX_DEPTH = 32
#: Largest number of calls decoded from one message, in every format (a function-calling object with
#: several keys counts one call per key).
MAX_CALLS = 64
#: Largest message (characters) that is searched for ``<tool_call>`` blocks at all. A longer message that
#: tries to call a tool is one invalid attempt (``too_large``) whose error text says why.
MAX_MESSAGE_CHARS = 4 * MAX_TEXT_CHARS

#: A function name a decoded call may call (dispatchable: no private, dunder or dotted name).
NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


class NotLiteral(ValueError):
    """An argument is an expression (call, operator, comprehension, ...) rather than a literal."""


class UndefinedName(NotLiteral):
    """A bare identifier in a call string that is executed (only with ``bare_names=False``).

    Canonical call strings are ``repr`` text, where a bare identifier can only come from a non-finite float
    (``nan``, ``inf``). BFCL's ``eval`` looks such a name up and fails with ``name 'nan' is not defined``;
    execution reproduces that instead of reading the name as a string. ``func`` is the called name.
    """

    def __init__(self, name: str, func: str = ""):
        super().__init__(f"name '{name}' is not defined")
        self.name = name
        self.func = func


@dataclass
class Decoded:
    """The calls decoded from one assistant message.

    ``attempted`` is true when the message tried to call a tool at all (even if nothing decoded); a message
    with ``attempted`` false is a plain text answer. ``decodable`` is false when BFCL's decoder would reject
    the whole message (then no call of it runs and the turn ends).
    """

    calls: list = field(default_factory=list)  # list[CallRecord]
    attempted: bool = False
    decodable: bool = True
    form: str = ""  # json, python or fc: which decoder read the message

    @property
    def executable(self) -> list:
        return [c for c in self.calls if c.parse_status == PARSE_OK]


def finish(calls: list[CallRecord], decodable: bool) -> Decoded:
    """The calls of a message that tried to call a tool; in an undecodable message none runs (BFCL's rule)."""
    if not decodable:
        for c in calls:
            if c.parse_status == PARSE_OK:
                c.parse_status = PARSE_BAD_STRUCTURE
                c.parse_error = "message not decodable: another call in the same message is malformed"
                c.call = None
    return Decoded(calls=calls, attempted=True, decodable=decodable)


# ----------------------------------------------------------------------------------------------------------
# literal values


def too_deep(text: str) -> bool:
    """Whether bracket nesting (outside string literals) exceeds MAX_DEPTH."""
    if text.count("(") + text.count("[") + text.count("{") <= MAX_DEPTH:
        return False  # nesting cannot exceed the number of opening brackets: no need to scan
    return _max_depth(text) > MAX_DEPTH


def _max_depth(text: str) -> int:
    depth = best = 0
    in_str: str | None = None
    escape = False
    for ch in text:
        if in_str:
            if escape:
                escape = False
            elif ch == "\\":
                escape = True
            elif ch == in_str:
                in_str = None
            continue
        if ch in "\"'":
            in_str = ch
        elif ch in "([{":
            depth += 1
            best = max(best, depth)
        elif ch in ")]}":
            depth -= 1
    return best


def literal_value(node: ast.AST, bare_names: bool = True) -> Any:
    """Turn an ``ast`` node into a Python value if it is a literal, else raise :class:`NotLiteral`.

    Accepted: str, int, float, bool, None constants, a sign on a number, lists, tuples and dicts of those.
    A bare name becomes its identifier string, as BFCL's decoder does (``f(x=abc)`` means ``x='abc'``);
    with ``bare_names=False`` (executing a canonical call string) it raises :class:`UndefinedName`.
    Everything else (calls, operators, attribute access, comprehensions, f-strings, bytes, sets) is refused.
    """
    if isinstance(node, ast.Constant):
        if isinstance(node.value, (str, int, float, bool)) or node.value is None:
            return node.value
        raise NotLiteral(f"unsupported constant of type {type(node.value).__name__}")
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        if isinstance(node.operand, ast.Constant) and type(node.operand.value) in (int, float):
            v = node.operand.value
            return -v if isinstance(node.op, ast.USub) else v
        if not bare_names and isinstance(node.operand, ast.Name):
            raise UndefinedName(node.operand.id)
        raise NotLiteral("a sign may only precede a number")
    if isinstance(node, ast.List):
        return [literal_value(e, bare_names) for e in node.elts]
    if isinstance(node, ast.Tuple):
        return tuple(literal_value(e, bare_names) for e in node.elts)
    if isinstance(node, ast.Dict):
        out = {}
        for k, v in zip(node.keys, node.values):
            if k is None:
                raise NotLiteral("dict unpacking is not a literal")
            key = literal_value(k, bare_names)
            if not isinstance(key, (str, int, float, bool)) and key is not None:
                raise NotLiteral("dict keys must be scalars")
            out[key] = literal_value(v, bare_names)
        return out
    if isinstance(node, ast.Name):
        if not bare_names:
            raise UndefinedName(node.id)
        return node.id
    raise NotLiteral(f"{type(node).__name__} is not a literal")


def _value_problem(value: Any, depth: int = 1) -> tuple[str, str] | None:
    """Why a decoded argument value cannot become a literal call string, or None if it can.

    JSON tool calls and function-calling steps hand us Python values; only JSON-like literals (exact str,
    int, float, bool, None, list, tuple, dict with scalar keys) are accepted, nested no deeper than a call
    string may be (``depth`` counts the call's own parentheses). Checked before ``repr`` so that nothing
    recurses without bound and no foreign ``__repr__`` runs.
    """
    t = type(value)
    if value is None or t is str or t is int or t is float or t is bool:
        return None
    if depth > MAX_DEPTH and t in (list, tuple, dict):
        return PARSE_TOO_LARGE, f"arguments nested deeper than {MAX_DEPTH}"
    if t is list or t is tuple:
        for v in value:
            p = _value_problem(v, depth + 1)
            if p:
                return p
        return None
    if t is dict:
        for k, v in value.items():
            if k is not None and type(k) not in (str, int, float, bool):
                return PARSE_NON_LITERAL, "dict keys must be scalars"
            p = _value_problem(v, depth + 1)
            if p:
                return p
        return None
    return PARSE_NON_LITERAL, f"unsupported value of type {t.__name__}"


def canonical_call(name: str, args: tuple = (), kwargs: dict | None = None) -> str:
    """The canonical string of a call: ``name(p0, k=v, ...)`` with ``repr`` values (BFCL's decoded form)."""
    parts = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in (kwargs or {}).items()]
    return f"{name}({','.join(parts)})"


def jsonable(value: Any) -> Any:
    """A JSON view of a literal value for the trace (tuples become lists)."""
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    return value


def call_record(raw: str, name: Any, args: tuple, kwargs: dict) -> CallRecord:
    if not isinstance(name, str) or not NAME_RE.match(name):
        shown = name if isinstance(name, str) else type(name).__name__
        return CallRecord(raw=raw, parse_status=PARSE_BAD_NAME,
                          parse_error=f"not a callable function name: {str(shown)[:80]!r}")
    if any(not isinstance(k, str) or not k.isidentifier() for k in kwargs):
        return CallRecord(raw=raw, parse_status=PARSE_BAD_STRUCTURE, name=name,
                          parse_error="argument names must be identifiers")
    # The canonical string must be what split_call reads back: literal values, bounded depth and size.
    problem = _value_problem(list(args) + list(kwargs.values()))
    if problem is None:
        try:
            call = canonical_call(name, args, kwargs)
        except ValueError:  # an integer beyond Python's int-to-str digit limit
            problem = PARSE_TOO_LARGE, "integer literal too large"
        else:
            if len(call) > MAX_TEXT_CHARS:
                problem = PARSE_TOO_LARGE, f"call of {len(call)} characters exceeds the limit of {MAX_TEXT_CHARS}"
    if problem is not None:
        return CallRecord(raw=raw, parse_status=problem[0], name=name, parse_error=problem[1])
    arguments = {f"{POSITIONAL_PREFIX}{i}": jsonable(a) for i, a in enumerate(args)}
    arguments.update({k: jsonable(v) for k, v in kwargs.items()})
    return CallRecord(raw=raw, parse_status=PARSE_OK, name=name, arguments=arguments, call=call)
