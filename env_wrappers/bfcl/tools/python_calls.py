"""BFCL's prompt-mode Python call list (``[f(a=1), g(b='x')]``) and canonical call strings, parsed with ``ast``:
literal arguments only, nothing evaluated."""

from __future__ import annotations

import ast
import copy
import functools
import re
from typing import Any

from seal_verl.core.trace import (
    PARSE_BAD_NAME,
    PARSE_BAD_STRUCTURE,
    PARSE_BAD_SYNTAX,
    PARSE_NON_LITERAL,
    PARSE_OK,
    PARSE_TOO_LARGE,
    CallRecord,
)

from .call_records import (MAX_CALLS, MAX_DEPTH, MAX_TEXT_CHARS, NAME_RE, Decoded, NotLiteral, UndefinedName,
                           call_record, canonical_call, finish, jsonable, literal_value, too_deep)

# Applied after stripping leading whitespace: no two adjacent whitespace runs, so matching is linear.
_LOOKS_LIKE_PY_CALL = re.compile(r"\[?\s*[A-Za-z_][\w.]*\s*\(")


def _called_name(node: ast.Call) -> str | None:
    """The (possibly dotted) name a call node calls, or None when it calls anything but a name chain."""
    parts = []
    func = node.func
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if not isinstance(func, ast.Name):
        return None
    parts.append(func.id)
    return ".".join(reversed(parts))


def _resolve_call(node: ast.AST, raw: str) -> CallRecord:
    if not isinstance(node, ast.Call):
        return CallRecord(raw=raw, parse_status=PARSE_BAD_STRUCTURE, parse_error="list element is not a call")
    name = _called_name(node)
    if name is None:
        return CallRecord(raw=raw, parse_status=PARSE_BAD_NAME, parse_error="called object is not a name")
    try:
        args = tuple(literal_value(a) for a in node.args)
        kwargs = {}
        for kw in node.keywords:
            if kw.arg is None:
                raise NotLiteral("**kwargs unpacking is not a literal")
            kwargs[kw.arg] = literal_value(kw.value)
    except NotLiteral as exc:
        return CallRecord(raw=raw, parse_status=PARSE_NON_LITERAL, name=name if NAME_RE.match(name) else None,
                          parse_error=str(exc))
    except RecursionError:
        return CallRecord(raw=raw, parse_status=PARSE_TOO_LARGE, parse_error="arguments nested too deeply")
    if "." in name:
        # BFCL looks up the last component only on an unknown object and fails; keep the dotted name so the
        # environment reports it as an unknown function.
        return CallRecord(raw=raw, parse_status=PARSE_OK, name=name,
                          arguments={k: jsonable(v) for k, v in kwargs.items()},
                          call=canonical_call(name, args, kwargs))
    return call_record(raw, name, args, kwargs)


def _parse_python_ast(text: str) -> ast.AST:
    if len(text) > MAX_TEXT_CHARS:
        raise OverflowError(f"message of {len(text)} characters exceeds the limit of {MAX_TEXT_CHARS}")
    if too_deep(text):
        raise OverflowError(f"nesting deeper than {MAX_DEPTH}")
    return ast.parse(text, mode="eval")


def parse_call_string(text: str) -> CallRecord:
    """Parse one canonical (or BFCL ground-truth) call string such as ``cd(folder='x')``."""
    try:
        tree = _parse_python_ast(text.strip())
    except OverflowError as exc:
        return CallRecord(raw=text[:200], parse_status=PARSE_TOO_LARGE, parse_error=str(exc))
    except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
        return CallRecord(raw=text[:200], parse_status=PARSE_BAD_SYNTAX, parse_error=f"{type(exc).__name__}: {exc}"[:300])
    return _resolve_call(tree.body, text)


def split_call(text: str, bare_names: bool = True) -> tuple[str, tuple, dict]:
    """Split a single call string into ``(name, args, kwargs)`` with literal values; ``ValueError`` otherwise.

    Used to execute canonical call strings from traces and BFCL's ground truth. With ``bare_names=False``
    (execution) a bare identifier among the arguments raises :class:`UndefinedName` naming it and the
    called function, as BFCL's ``eval`` would fail on it.

    Short strings are parsed once and kept in a small LRU cache (the same ground-truth and model calls are
    executed by every rollout of a task and again by the verifier); every caller gets its own argument
    objects, so a backend that keeps or mutates an argument never touches another caller's.
    """
    if len(text) > _SPLIT_CACHE_MAX_CHARS:
        return _split_call(text, bare_names)
    name, args, kwargs, mutable = _split_call_cached(text, bare_names)
    if mutable:
        args, kwargs = copy.deepcopy((args, kwargs))
        return name, args, kwargs
    return name, args, dict(kwargs)


_SPLIT_CACHE_MAX_CHARS = 500


def _is_mutable(v: Any) -> bool:
    return isinstance(v, (list, dict)) or (isinstance(v, tuple) and any(_is_mutable(x) for x in v))


@functools.lru_cache(maxsize=4096)
def _split_call_cached(text: str, bare_names: bool) -> tuple[str, tuple, dict, bool]:
    name, args, kwargs = _split_call(text, bare_names)
    return name, args, kwargs, any(_is_mutable(v) for v in (*args, *kwargs.values()))


def _split_call(text: str, bare_names: bool) -> tuple[str, tuple, dict]:
    try:
        tree = _parse_python_ast(text.strip())
    except (OverflowError, SyntaxError, ValueError, MemoryError, RecursionError) as exc:
        raise ValueError(f"{type(exc).__name__}: {exc}"[:300]) from None
    node = tree.body
    if not isinstance(node, ast.Call):
        raise ValueError("not a call")
    name = _called_name(node)
    if name is None:
        raise ValueError("called object is not a name")
    try:
        args = tuple(literal_value(a, bare_names) for a in node.args)
        kwargs = {}
        for kw in node.keywords:
            if kw.arg is None:
                raise NotLiteral("**kwargs unpacking is not a literal")
            kwargs[kw.arg] = literal_value(kw.value, bare_names)
    except UndefinedName as exc:
        exc.func = name
        raise
    except RecursionError:
        raise ValueError("arguments nested too deeply") from None
    return name, args, kwargs


def decode_python(text: str) -> Decoded:
    """Decode BFCL's prompt-mode call list (``[f(a=1), g(b=2)]``; brackets optional)."""
    if not isinstance(text, str):
        return Decoded(calls=[CallRecord(raw=repr(text)[:200], parse_status=PARSE_BAD_STRUCTURE,
                                         parse_error="message is not text")], attempted=True, decodable=False)
    stripped = text.strip("`\n ")
    if not _LOOKS_LIKE_PY_CALL.match(stripped.lstrip()) and not (
            stripped.startswith("[") and stripped.endswith("]") and "(" in stripped):
        # A plain text answer. A bracketed list with a parenthesis is a call attempt even when what precedes
        # the parenthesis is no valid name (``[1cd(x=1)]``, ``[cd\x00()]``, ``[(lambda: 0)()]``): it is then an
        # undecodable attempt (invalid_tool_call), not prose.
        return Decoded(attempted=False)
    body = stripped
    if not body.startswith("["):
        body = "[" + body
    if not body.endswith("]"):
        body = body + "]"
    raw = text[:2000]
    try:
        tree = _parse_python_ast(body)
    except OverflowError as exc:
        return Decoded([CallRecord(raw=raw, parse_status=PARSE_TOO_LARGE, parse_error=str(exc))], True, False)
    except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
        return Decoded([CallRecord(raw=raw, parse_status=PARSE_BAD_SYNTAX,
                                   parse_error=f"{type(exc).__name__}: {exc}"[:300])], True, False)
    elts = tree.body.elts if isinstance(tree.body, (ast.List, ast.Tuple)) else [tree.body]
    if len(elts) > MAX_CALLS:
        return Decoded([CallRecord(raw=raw, parse_status=PARSE_TOO_LARGE,
                                   parse_error=f"more than {MAX_CALLS} calls in one message")], True, False)
    calls = []
    one_ascii_line = "\n" not in body and "\r" not in body and body.isascii()
    for e in elts:
        if one_ascii_line:  # offsets are byte offsets, equal to character offsets here
            seg = body[e.col_offset:e.end_col_offset]
        else:
            seg = ast.get_source_segment(body, e) or ""
        calls.append(_resolve_call(e, seg[:2000]))
    # BFCL rejects the whole message when any element is not a call.
    decodable = all(c.parse_status != PARSE_BAD_STRUCTURE or c.parse_error != "list element is not a call" for c in calls)
    return finish(calls, decodable)
