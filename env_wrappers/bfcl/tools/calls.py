"""Decoding model output into tool calls, without ever evaluating it.

Three forms reach us, the same ones BFCL's handlers decode:

- ``json``: Qwen-style ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`` blocks (BFCL's
  Qwen FC handler); malformed blocks are dropped by BFCL, so here they are recorded as failed attempts and
  the well-formed ones still run; a block that is JSON but not a call makes the whole message undecodable.
- ``python``: BFCL's prompt-mode list ``[f(a=1), g(b='x')]`` parsed with ``ast`` (literals only).
- ``fc``: the decoded function-calling form of API models: a list of ``{name: arguments-as-JSON}`` objects.

Every decoded call is returned as a :class:`~seal_verl.core.trace.CallRecord` with a canonical call string
``name(k=repr(v), ...)``, the same string form BFCL's decoders produce, which only :func:`parse_call_string`
(literal-only) ever reads back. Nothing here runs code: no ``eval``, no ``exec``, no ``literal_eval`` on
whole messages (it is used only on already-validated constant nodes).
"""

from __future__ import annotations

import ast
import copy
import functools
import json
import re
from dataclasses import dataclass, field
from typing import Any

from seal_verl.core.schema import POSITIONAL_PREFIX
from seal_verl.core.trace import (
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
#: Largest number of calls decoded from one message, in every format (a function-calling object with
#: several keys counts one call per key).
MAX_CALLS = 64
#: Largest message (characters) that is searched for ``<tool_call>`` blocks at all. A longer message that
#: tries to call a tool is one invalid attempt (``too_large``) whose error text says why.
MAX_MESSAGE_CHARS = 4 * MAX_TEXT_CHARS

_OPEN_TAG = "<tool_call>\n"
_CLOSE_TAG = "\n</tool_call>"
_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
# Applied after stripping leading whitespace: no two adjacent whitespace runs, so matching is linear.
_LOOKS_LIKE_PY_CALL = re.compile(r"\[?\s*[A-Za-z_][\w.]*\s*\(")


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


# ----------------------------------------------------------------------------------------------------------
# literal values


def _too_deep(text: str) -> bool:
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
    arguments = {f"{POSITIONAL_PREFIX}{i}": _jsonable(a) for i, a in enumerate(args)}
    arguments.update({k: _jsonable(v) for k, v in kwargs.items()})
    return CallRecord(raw=raw, parse_status=PARSE_OK, name=name, arguments=arguments, call=call)


# ----------------------------------------------------------------------------------------------------------
# Python call syntax


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
    if _too_deep(text):
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
            arguments = _json_loads_bounded(arguments)
        except OverflowError as exc:
            return CallRecord(raw=raw, parse_status=PARSE_TOO_LARGE, parse_error=str(exc))
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
    if _too_deep(text):
        raise OverflowError(f"nesting deeper than {MAX_DEPTH}")
    return json.loads(text)


def _tool_call_blocks(text: str):
    """The bodies of ``<tool_call>\\n...\\n</tool_call>`` blocks, as a non-greedy DOTALL regex finds them,
    in one left-to-right pass: each block ends at the first closing tag after its opening tag, and once no
    closing tag follows an opening tag, none follows a later one either (a regex search would retry from
    every later opening tag: quadratic time on a message of unclosed tags)."""
    pos = 0
    while True:
        start = text.find(_OPEN_TAG, pos)
        if start < 0:
            return
        end = text.find(_CLOSE_TAG, start + len(_OPEN_TAG))
        if end < 0:
            return
        yield text[start + len(_OPEN_TAG):end]
        pos = end + len(_CLOSE_TAG)


def _too_large_message(text: str) -> Decoded:
    """A call attempt in a message over :data:`MAX_MESSAGE_CHARS`: one undecodable, labelled attempt."""
    return Decoded([CallRecord(raw=text[:200], parse_status=PARSE_TOO_LARGE,
                               parse_error=f"message of {len(text)} characters exceeds the limit of "
                                           f"{MAX_MESSAGE_CHARS} characters; no call in it was read")],
                   attempted=True, decodable=False)


def decode_json_blocks(text: str) -> Decoded:
    """Decode Qwen-style ``<tool_call>`` blocks the way BFCL's Qwen FC handler does, recording failures."""
    if not isinstance(text, str):
        return Decoded(calls=[CallRecord(raw=repr(text)[:200], parse_status=PARSE_BAD_STRUCTURE,
                                         parse_error="message is not text")], attempted=True, decodable=False)
    if "<tool_call>" not in text and "</tool_call>" not in text:
        return Decoded(attempted=False)
    if len(text) > MAX_MESSAGE_CHARS:
        return _too_large_message(text)
    calls: list[CallRecord] = []
    consumed = 0
    for block in _tool_call_blocks(text):
        consumed += 1
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
    """Decode an API model's function-calling step: a list of ``{name: arguments-as-JSON}`` objects.

    A text step (a string: the model answered without calling a tool, as BFCL's FC result files record it)
    is a plain text answer, not a call attempt.
    """
    if isinstance(step, str):
        return Decoded(attempted=False)
    if isinstance(step, dict):
        step = [step]
    if not isinstance(step, list):
        return Decoded([CallRecord(raw=repr(step)[:200], parse_status=PARSE_BAD_STRUCTURE,
                                   parse_error="function-calling step must be a list of objects")], True, False)
    calls = []
    n_calls = 0  # calls counted so far: one per key of each object
    for item in step[: MAX_CALLS + 1]:
        raw = _raw_text(item)
        if not isinstance(item, dict) or not item:
            calls.append(CallRecord(raw=raw, parse_status=PARSE_BAD_STRUCTURE,
                                    parse_error="each call must be an object {name: arguments}"))
            continue
        for name, arguments in item.items():
            n_calls += 1
            if n_calls > MAX_CALLS:
                break
            calls.append(_from_json_object({"name": name, "arguments": arguments}, raw))
        if n_calls > MAX_CALLS:
            break
    if n_calls > MAX_CALLS or len(step) > MAX_CALLS:
        calls.append(CallRecord(raw="", parse_status=PARSE_TOO_LARGE,
                                parse_error=f"more than {MAX_CALLS} calls in one message"))
    decodable = not any(c.parse_status in (PARSE_BAD_STRUCTURE, PARSE_BAD_SYNTAX) for c in calls)
    return _finish(calls, decodable)


def _raw_text(item: Any) -> str:
    """The raw text of one function-calling item for the trace, bounded and never raising."""
    if isinstance(item, str):
        return item[:2000]
    try:
        return json.dumps(item, ensure_ascii=False, default=lambda o: f"<{type(o).__name__}>")[:2000]
    except (ValueError, TypeError, RecursionError):  # too deep, an oversized int, a cyclic structure
        return f"<unserialisable {type(item).__name__}>"


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
