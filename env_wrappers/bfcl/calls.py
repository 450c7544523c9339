"""Decoding model output into tool calls, without ever evaluating it.

Three forms reach us, the same ones BFCL's handlers decode:

- ``json``: Qwen-style ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`` blocks (BFCL's
  Qwen FC handler); malformed blocks are dropped by BFCL, so here they are recorded as failed attempts and
  the well-formed ones still run; a block that is JSON but not a call makes the whole message undecodable.
- ``python``: BFCL's prompt-mode list ``[f(a=1), g(b='x')]`` parsed with ``ast`` (literals only).
- ``fc``: the decoded function-calling form of API models: a list of ``{name: arguments-as-JSON}`` objects.

Every decoded call is returned as a :class:`~seal_verl.trace.CallRecord` with a canonical call string
``name(k=repr(v), ...)``, the same string form BFCL's decoders produce, which only :func:`parse_call_string`
(literal-only) ever reads back. Nothing here runs code: no ``eval``, no ``exec``, no ``literal_eval`` on
whole messages (it is used only on already-validated constant nodes).
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from typing import Any

from seal_verl.trace import (
    PARSE_BAD_NAME,
    PARSE_BAD_STRUCTURE,
    PARSE_BAD_SYNTAX,
    PARSE_NON_LITERAL,
    PARSE_OK,
    PARSE_TOO_LARGE,
    CallRecord,
)

#: Largest message (characters) that is decoded at all; longer text is an invalid attempt.
MAX_TEXT_CHARS = 65_536
#: Deepest bracket nesting accepted in a call's arguments.
MAX_DEPTH = 32
#: Largest number of calls decoded from one message.
MAX_CALLS = 64

_TOOL_CALL_BLOCK = re.compile(r"<tool_call>\n(.*?)\n</tool_call>", re.DOTALL)
_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_LOOKS_LIKE_PY_CALL = re.compile(r"^\s*\[?\s*[A-Za-z_][\w.]*\s*\(")


class NotLiteral(ValueError):
    """An argument is an expression (call, operator, comprehension, ...) rather than a literal."""


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


# ----------------------------------------------------------------------------------------------------------
# literal values


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


def literal_value(node: ast.AST) -> Any:
    """Turn an ``ast`` node into a Python value if it is a literal, else raise :class:`NotLiteral`.

    Accepted: str, int, float, bool, None constants, a sign on a number, lists, tuples and dicts of those.
    A bare name becomes its identifier string, as BFCL's decoder does (``f(x=abc)`` means ``x='abc'``).
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
        raise NotLiteral("a sign may only precede a number")
    if isinstance(node, ast.List):
        return [literal_value(e) for e in node.elts]
    if isinstance(node, ast.Tuple):
        return tuple(literal_value(e) for e in node.elts)
    if isinstance(node, ast.Dict):
        out = {}
        for k, v in zip(node.keys, node.values):
            if k is None:
                raise NotLiteral("dict unpacking is not a literal")
            key = literal_value(k)
            if not isinstance(key, (str, int, float, bool)) and key is not None:
                raise NotLiteral("dict keys must be scalars")
            out[key] = literal_value(v)
        return out
    if isinstance(node, ast.Name):
        return node.id
    raise NotLiteral(f"{type(node).__name__} is not a literal")


def canonical_call(name: str, args: tuple = (), kwargs: dict | None = None) -> str:
    """The canonical string of a call: ``name(p0, k=v, ...)`` with ``repr`` values (BFCL's decoded form)."""
    parts = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in (kwargs or {}).items()]
    return f"{name}({','.join(parts)})"


def _jsonable(value: Any) -> Any:
    """A JSON view of a literal value for the trace (tuples become lists)."""
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return value


def _call_record(raw: str, name: Any, args: tuple, kwargs: dict) -> CallRecord:
    if not isinstance(name, str) or not _NAME_RE.match(name):
        shown = name if isinstance(name, str) else type(name).__name__
        return CallRecord(raw=raw, parse_status=PARSE_BAD_NAME,
                          parse_error=f"not a callable function name: {str(shown)[:80]!r}")
    if any(not isinstance(k, str) or not k.isidentifier() for k in kwargs):
        return CallRecord(raw=raw, parse_status=PARSE_BAD_STRUCTURE, name=name,
                          parse_error="argument names must be identifiers")
    arguments = {f"__arg{i}": _jsonable(a) for i, a in enumerate(args)}
    arguments.update({k: _jsonable(v) for k, v in kwargs.items()})
    return CallRecord(raw=raw, parse_status=PARSE_OK, name=name, arguments=arguments,
                      call=canonical_call(name, args, kwargs))


# ----------------------------------------------------------------------------------------------------------
# Python call syntax


def _resolve_call(node: ast.AST, raw: str) -> CallRecord:
    if not isinstance(node, ast.Call):
        return CallRecord(raw=raw, parse_status=PARSE_BAD_STRUCTURE, parse_error="list element is not a call")
    parts = []
    func = node.func
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if not isinstance(func, ast.Name):
        return CallRecord(raw=raw, parse_status=PARSE_BAD_NAME, parse_error="called object is not a name")
    parts.append(func.id)
    name = ".".join(reversed(parts))
    try:
        args = tuple(literal_value(a) for a in node.args)
        kwargs = {}
        for kw in node.keywords:
            if kw.arg is None:
                raise NotLiteral("**kwargs unpacking is not a literal")
            kwargs[kw.arg] = literal_value(kw.value)
    except NotLiteral as exc:
        return CallRecord(raw=raw, parse_status=PARSE_NON_LITERAL, name=name if _NAME_RE.match(name) else None,
                          parse_error=str(exc))
    except RecursionError:
        return CallRecord(raw=raw, parse_status=PARSE_TOO_LARGE, parse_error="arguments nested too deeply")
    if "." in name:
        # BFCL looks up the last component only on an unknown object and fails; keep the dotted name so the
        # environment reports it as an unknown function.
        return CallRecord(raw=raw, parse_status=PARSE_OK, name=name,
                          arguments={k: _jsonable(v) for k, v in kwargs.items()},
                          call=canonical_call(name, args, kwargs))
    return _call_record(raw, name, args, kwargs)


def _parse_python_ast(text: str) -> ast.AST:
    if len(text) > MAX_TEXT_CHARS:
        raise OverflowError(f"message of {len(text)} characters exceeds the limit of {MAX_TEXT_CHARS}")
    if _max_depth(text) > MAX_DEPTH:
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


def split_call(text: str) -> tuple[str, tuple, dict]:
    """Split a single call string into ``(name, args, kwargs)`` with literal values; ``ValueError`` otherwise.

    Used to execute canonical call strings from traces and BFCL's ground truth.
    """
    try:
        tree = _parse_python_ast(text.strip())
    except (OverflowError, SyntaxError, ValueError, MemoryError, RecursionError) as exc:
        raise ValueError(f"{type(exc).__name__}: {exc}"[:300]) from None
    node = tree.body
    if not isinstance(node, ast.Call):
        raise ValueError("not a call")
    parts = []
    func = node.func
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if not isinstance(func, ast.Name):
        raise ValueError("called object is not a name")
    parts.append(func.id)
    try:
        args = tuple(literal_value(a) for a in node.args)
        kwargs = {}
        for kw in node.keywords:
            if kw.arg is None:
                raise NotLiteral("**kwargs unpacking is not a literal")
            kwargs[kw.arg] = literal_value(kw.value)
    except RecursionError:
        raise ValueError("arguments nested too deeply") from None
    return ".".join(reversed(parts)), args, kwargs


def decode_python(text: str) -> Decoded:
    """Decode BFCL's prompt-mode call list (``[f(a=1), g(b=2)]``; brackets optional)."""
    if not isinstance(text, str):
        return Decoded(calls=[CallRecord(raw=repr(text)[:200], parse_status=PARSE_BAD_STRUCTURE,
                                         parse_error="message is not text")], attempted=True, decodable=False)
    stripped = text.strip("`\n ")
    if not _LOOKS_LIKE_PY_CALL.match(stripped):
        return Decoded(attempted=False)  # a plain text answer
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
    for e in elts:
        seg = ast.get_source_segment(body, e) or ""
        calls.append(_resolve_call(e, seg[:2000]))
    # BFCL rejects the whole message when any element is not a call.
    decodable = all(c.parse_status != PARSE_BAD_STRUCTURE or c.parse_error != "list element is not a call" for c in calls)
    return _finish(calls, decodable)


# ----------------------------------------------------------------------------------------------------------
# JSON tool-call blocks


def _from_json_object(obj: Any, raw: str) -> CallRecord:
    if not isinstance(obj, dict) or "name" not in obj or "arguments" not in obj:
        return CallRecord(raw=raw, parse_status=PARSE_BAD_STRUCTURE,
                          parse_error='a tool call must be a JSON object with "name" and "arguments"')
    arguments = obj["arguments"]
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError) as exc:
            # BFCL's decoder raises here and drops the whole message, so this is a structural failure.
            return CallRecord(raw=raw, parse_status=PARSE_BAD_STRUCTURE,
                              parse_error=f"arguments string is not valid JSON: {exc}"[:300])
    if not isinstance(arguments, dict):
        return CallRecord(raw=raw, parse_status=PARSE_BAD_STRUCTURE,
                          parse_error='"arguments" must be a JSON object')
    return _call_record(raw, obj["name"], (), arguments)


def _json_loads_bounded(text: str) -> Any:
    if len(text) > MAX_TEXT_CHARS:
        raise OverflowError(f"tool call of {len(text)} characters exceeds the limit of {MAX_TEXT_CHARS}")
    if _max_depth(text) > MAX_DEPTH:
        raise OverflowError(f"nesting deeper than {MAX_DEPTH}")
    return json.loads(text)


def decode_json_blocks(text: str) -> Decoded:
    """Decode Qwen-style ``<tool_call>`` blocks the way BFCL's Qwen FC handler does, recording failures."""
    if not isinstance(text, str):
        return Decoded(calls=[CallRecord(raw=repr(text)[:200], parse_status=PARSE_BAD_STRUCTURE,
                                         parse_error="message is not text")], attempted=True, decodable=False)
    if "<tool_call>" not in text and "</tool_call>" not in text:
        return Decoded(attempted=False)
    calls: list[CallRecord] = []
    consumed = 0
    for m in _TOOL_CALL_BLOCK.finditer(text):
        consumed += 1
        block = m.group(1)
        raw = block[:2000]
        if len(calls) >= MAX_CALLS:
            calls.append(CallRecord(raw=raw[:200], parse_status=PARSE_TOO_LARGE,
                                    parse_error=f"more than {MAX_CALLS} calls in one message"))
            continue
        try:
            obj = _json_loads_bounded(block)
        except OverflowError as exc:
            calls.append(CallRecord(raw=raw, parse_status=PARSE_TOO_LARGE, parse_error=str(exc)))
            continue
        except (ValueError, RecursionError) as exc:
            calls.append(CallRecord(raw=raw, parse_status=PARSE_BAD_SYNTAX, parse_error=f"invalid JSON: {exc}"[:300]))
            continue
        calls.append(_from_json_object(obj, raw))
    opened = text.count("<tool_call>")
    if opened > consumed:
        # Tags that the block pattern could not match (missing newline, unclosed tag, ...).
        calls.append(CallRecord(raw=text[:2000], parse_status=PARSE_BAD_SYNTAX,
                                parse_error="tool call not in the form <tool_call>\\n{...}\\n</tool_call>"))
    # BFCL's decoder fails the whole message when a block is JSON but not a call object.
    decodable = not any(c.parse_status == PARSE_BAD_STRUCTURE for c in calls)
    return _finish(calls, decodable)


def decode_fc(step: Any) -> Decoded:
    """Decode an API model's function-calling step: a list of ``{name: arguments-as-JSON}`` objects."""
    if isinstance(step, dict):
        step = [step]
    if not isinstance(step, list):
        return Decoded([CallRecord(raw=repr(step)[:200], parse_status=PARSE_BAD_STRUCTURE,
                                   parse_error="function-calling step must be a list of objects")], True, False)
    calls = []
    for item in step[: MAX_CALLS + 1]:
        raw = json.dumps(item, ensure_ascii=False, default=str)[:2000] if not isinstance(item, str) else item[:2000]
        if not isinstance(item, dict) or not item:
            calls.append(CallRecord(raw=raw, parse_status=PARSE_BAD_STRUCTURE,
                                    parse_error="each call must be an object {name: arguments}"))
            continue
        for name, arguments in item.items():
            calls.append(_from_json_object({"name": name, "arguments": arguments}, raw))
    if len(step) > MAX_CALLS:
        calls.append(CallRecord(raw="", parse_status=PARSE_TOO_LARGE, parse_error=f"more than {MAX_CALLS} calls"))
    decodable = not any(c.parse_status in (PARSE_BAD_STRUCTURE, PARSE_BAD_SYNTAX) for c in calls)
    return _finish(calls, decodable)


def _finish(calls: list[CallRecord], decodable: bool) -> Decoded:
    if not decodable:
        for c in calls:
            if c.parse_status == PARSE_OK:
                c.parse_status = PARSE_BAD_STRUCTURE
                c.parse_error = "message not decodable: another call in the same message is malformed"
                c.call = None
    return Decoded(calls=calls, attempted=True, decodable=decodable)


CALL_FORMATS = ("json", "python", "fc", "auto")


def decode(message: Any, call_format: str) -> Decoded:
    """Decode one assistant message in ``call_format`` (``json``, ``python``, ``fc`` or ``auto``).

    ``auto`` picks by form: a list/dict is a decoded function-calling step, text containing a
    ``<tool_call>`` tag is Qwen-style JSON, any other text is BFCL's Python call list (or plain text).
    """
    if call_format == "auto":
        if isinstance(message, (list, dict)):
            call_format = "fc"
        elif isinstance(message, str) and ("<tool_call>" in message or "</tool_call>" in message):
            call_format = "json"
        else:
            call_format = "python"
    decoders = {"json": decode_json_blocks, "python": decode_python, "fc": decode_fc}
    if call_format not in decoders:
        raise ValueError(f"unknown call format {call_format!r}; expected one of {', '.join(CALL_FORMATS)}")
    out = decoders[call_format](message)
    out.form = call_format
    return out
