"""The cue texts of Omega: phi_schema (tool signatures, call syntax), phi_err (feedback on a failed call) and
phi_cap (what the tools can do for the pending request; behavioural reminders).

Renderers are pure and bounded. They only ever restate what they are given: names, types, enum members and
descriptions from the tool schemas, the agent's own call and error text, and fixed wording. In particular error
feedback never contains an argument value: the renderers have no access to ground truth, and they do not echo
values at all, so nothing can leak an answer. The affordance cue reads the user's request only to choose which
tools to name; it repeats none of the request's words. Which kinds are on, and when, is :mod:`seal_verl.core.interface`'s business;
this module only writes the words. It imports neither verl nor BFCL.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Optional

from seal_verl.core import schema as sc
from seal_verl.core import trace as tr
from seal_verl.core.interface import (
    ACT_WITH_TOOLS,
    ASK_OR_ABSTAIN,
    CALL_FORMAT,
    CUE_KINDS,
    DEFAULT_TRIGGERS,
    ERROR_RECOVERY,
    MIN_CUE_CHARS,
    SCHEMA_CONSTRAINTS,
    check_kinds,
)

__all__ = [
    "CALL_FORMATS",
    "TRUNCATION_MARKER",
    "schema_cue",
    "call_format_cue",
    "error_cue",
    "capability_cue",
    "affordance_cue",
    "cue_stats",
]

#: Call syntaxes ``call_format_cue`` can describe: Qwen-style JSON in <tool_call> tags, BFCL's Python list.
CALL_FORMATS: tuple[str, ...] = ("json", "python")

#: Appended to a cue that had to be cut to ``max_cue_chars``; the result, marker included, fits the bound.
TRUNCATION_MARKER = " [...]"

_NAME_CHARS = 64        # longest function / parameter name rendered
_PARSE_ERROR_CHARS = 160  # longest excerpt of the parser's own message rendered


def _bound(text: str, max_chars: int) -> str:
    """Cut ``text`` to at most ``max_chars`` characters, marking the cut."""
    if max_chars < MIN_CUE_CHARS:
        raise ValueError(f"max_chars must be >= {MIN_CUE_CHARS}, got {max_chars}")
    if len(text) <= max_chars:
        return text
    return text[: max_chars - len(TRUNCATION_MARKER)].rstrip() + TRUNCATION_MARKER


def _short(name: Any, limit: int = _NAME_CHARS) -> str:
    s = str(name)
    return s if len(s) <= limit else s[: limit - 3] + "..."


def _function_of(tool: dict) -> Optional[dict]:
    """Accept both ``{"type": "function", "function": {...}}`` and a bare ``{"name", "parameters"}`` doc."""
    if not isinstance(tool, dict):
        return None
    fn = tool.get("function") if isinstance(tool.get("function"), dict) else tool
    return fn if isinstance(fn.get("name"), str) else None


def _type_text(schema: Any, depth: int = 0) -> str:
    """Compact type of a parameter schema: type, enum members, array item type, one level of object fields."""
    if not isinstance(schema, dict):
        return "any"
    t = schema.get("type")
    if isinstance(t, list):
        text = "|".join(str(x) for x in t)
    elif isinstance(t, str):
        text = t
    else:
        text = "any"
    if text in ("array", "tuple", "list") and isinstance(schema.get("items"), dict):
        text = f"{text} of {_type_text(schema['items'], depth + 1)}"
    if text in ("object", "dict") and isinstance(schema.get("properties"), dict) and schema["properties"] and depth < 1:
        text = f"{text} {{{_params_text(schema, depth + 1)}}}"
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        # the members imply the type; "|" keeps them apart from the ", " between parameters
        text = "one of " + "|".join(json.dumps(m, ensure_ascii=False) for m in enum)
    return text


def _params_text(schema: dict, depth: int = 0) -> str:
    props = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(props, dict):
        return ""
    required = set(schema.get("required") or [])
    # required parameters first: they are the ones a call cannot omit
    names = sorted(props, key=lambda n: (n not in required, list(props).index(n)))
    parts = [f"{_short(n)}{'*' if n in required else ''}: {_type_text(props[n], depth)}" for n in names]
    return ", ".join(parts)


def schema_cue(tools: list[dict], names: Optional[list[str]] = None, max_chars: int = 600) -> str:
    """phi_schema: the constraints implicit in the tool schemas, one compact line per function.

    Example line: ``- sort(file_name*: string, reverse: boolean)`` (``*`` marks required parameters;
    enum members are listed as ``one of "a"|"b"``). Descriptions are left out: the agent already sees the full
    docs, the cue only pulls out what calls most often get wrong.

    Args:
        tools: OpenAI-style tool dicts (``{"type": "function", "function": {"name", "description",
            "parameters"}}``, ``parameters`` a JSON Schema object) or bare function docs.
        names: if given, only these functions (e.g. the ones revealed in this turn), in ``tools`` order;
            names not in ``tools`` are ignored, since the cue may only restate what it is given.
        max_chars: bound on the returned text.

    Returns:
        The cue, or ``""`` when no function is selected.
    """
    wanted = None if names is None else set(names)
    lines = []
    for tool in tools:
        fn = _function_of(tool)
        if fn is None or (wanted is not None and fn["name"] not in wanted):
            continue
        params = fn.get("parameters") if isinstance(fn.get("parameters"), dict) else {}
        lines.append(f"- {_short(fn['name'])}({_params_text(params)})")
    if not lines:
        return ""
    return _bound("Function parameters (* = required):\n" + "\n".join(lines), max_chars)


_CALL_FORMAT_TEXT = {
    "json": (
        "Tool call format: for each call write one block\n"
        "<tool_call>\n"
        '{"name": "<function name>", "arguments": {"<parameter>": <value>, ...}}\n'
        "</tool_call>\n"
        "The block must be valid JSON: double-quoted keys and strings, \"arguments\" an object (use {} when "
        "there are none). Use only function names from the tool list."
    ),
    "python": (
        "Tool call format: a Python list of calls, e.g. [function_name(parameter=value), "
        "other_function(parameter=value)]. Keyword arguments only, literal values only (quote strings), "
        "no other text around the list. Use only function names from the tool list."
    ),
}


def call_format_cue(call_format: str, max_chars: int = 600) -> str:
    """The legal call syntax (part of phi_schema), with placeholders only, never concrete values.

    Args:
        call_format: ``"json"`` (Qwen-style ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``)
            or ``"python"`` (BFCL's ``[func(a=1), g(b='x')]`` list).
        max_chars: bound on the returned text.

    Raises:
        ValueError: an unknown call format.
    """
    if call_format not in _CALL_FORMAT_TEXT:
        raise ValueError(f"unknown call format {call_format!r}; known formats: {', '.join(CALL_FORMATS)}")
    return _bound(_CALL_FORMAT_TEXT[call_format], max_chars)


_PARSE_REASONS = {
    tr.PARSE_BAD_SYNTAX: "its syntax is not valid for the call format",
    tr.PARSE_BAD_STRUCTURE: "it is not a call: a call needs a function name and an object of named arguments",
    tr.PARSE_NON_LITERAL: "an argument is an expression; arguments must be literal values",
    tr.PARSE_BAD_NAME: "the function name is not a callable function name",
    tr.PARSE_TOO_LARGE: "it is too large or too deeply nested",
}

def _violations(fname: str, arguments: Any, params: dict) -> list[str]:
    """The violations :mod:`seal_verl.core.schema` finds (the same the environment records as evidence), worded
    for the agent by schema facts and parameter names only."""
    if not isinstance(arguments, dict):
        return [f"the arguments of `{fname}` must be an object of named parameters"]
    checked = sc.ParameterSchema(params)
    given = params.get("properties") if isinstance(params.get("properties"), dict) else {}
    out = []
    for v in checked.check(arguments):
        if not v.path:
            if v.kind == "required":
                out.extend(f"required parameter `{_short(n)}` is missing" for n in v.names)
            elif v.kind == "unknown":
                known = ", ".join(_short(p) for p in checked.properties) or "none"
                out.extend(f"`{_short(n)}` is not a parameter of `{fname}` (its parameters: {known})"
                           for n in v.names)
            else:
                out.append(f"the arguments of `{fname}` violate the schema's '{_short(v.kind)}' constraint")
            continue
        where = f"`{_short(v.path[0])}`" + "".join(f"[{p}]" if isinstance(p, int) else f".{_short(p)}"
                                                 for p in v.path[1:])
        if v.kind == "type":
            sub = given.get(v.path[0]) if len(v.path) == 1 else None
            shown = sub["type"] if isinstance(sub, dict) and "type" in sub else v.expected  # the schema's own word
            out.append(f"{where} must be of type {_type_text({'type': shown})}")
        elif v.kind == "enum":
            allowed = v.expected if isinstance(v.expected, list) else [v.expected]
            members = ", ".join(json.dumps(m, ensure_ascii=False) for m in allowed)
            out.append(f"{where} must be one of [{members}]")
        elif v.kind == "required":
            out.append(f"{where} is missing required field(s): " + ", ".join(_short(n) for n in v.names))
        elif v.kind == "unknown":
            out.append(f"{where} has unknown field(s): " + ", ".join(_short(n) for n in v.names))
        else:
            out.append(f"{where} violates the schema's '{_short(v.kind)}' constraint")
    return out


def error_cue(
    call: tr.CallRecord,
    tool: Optional[dict],
    kind_active: set[str],
    available_names: Optional[list[str]] = None,
    max_chars: int = 600,
) -> str:
    """phi_err: recovery-oriented feedback for one failed call, or ``""`` if there is nothing to add.

    What is said depends on how the call failed and on which cue kinds are on (each failure type has its
    kind, ``error_recovery`` turns on structured feedback for all of them):

    - not decodable (``call_format`` or ``error_recovery``): why decoding failed, the parser's own message
      about the agent's text, and to resend in the required format;
    - a name that is not an available function (``call_format`` or ``error_recovery``): that it is not
      available and only listed functions may be called; the available names only if passed in;
    - schema violations (``schema_constraints`` or ``error_recovery``): which constraint failed, by
      parameter name, expected type, enum members or "required", as the schema states them;
    - an execution error (``error_recovery``): the error text is already in the agent's observation, so
      only a next step is suggested (inspect state with a read-only function, retry corrected).

    It never contains an argument value: not the agent's (it saw them) and, above all, never a value the
    agent has not produced itself. The only sources are the call record, the tool schema and fixed text.

    Args:
        call: the call as recorded in the trace.
        tool: the schema of ``call.name`` (OpenAI-style or bare doc), or ``None`` if unknown/unavailable.
        kind_active: the names of the cue kinds now on.
        available_names: the functions the agent may call now; listed only when given.
        max_chars: bound on the returned text.

    Raises:
        ValueError: an unknown cue kind in ``kind_active``.
    """
    kinds = check_kinds(kind_active)
    fmt_on = CALL_FORMAT in kinds or ERROR_RECOVERY in kinds
    schema_on = SCHEMA_CONSTRAINTS in kinds or ERROR_RECOVERY in kinds
    recovery_on = ERROR_RECOVERY in kinds

    if not call.parsed:
        if not fmt_on:
            return ""
        reason = _PARSE_REASONS.get(call.parse_status, "it is not in the required call format")
        text = f"Your tool call could not be decoded: {reason}."
        if call.parse_error:
            text += f" Parser message: {_short(call.parse_error, _PARSE_ERROR_CHARS)}."
        text += " Nothing was executed; rewrite the call in the required format and send it again."
        return _bound(text, max_chars)

    fname = _short(call.name or "")
    if not call.available:
        if not fmt_on:
            return ""
        text = f"`{fname}` is not an available function here. Call only functions from the tool list."
        if available_names:
            text += " Available now: " + ", ".join(_short(n) for n in available_names) + "."
        text += " If none of them fits the request, say so or ask the user instead of calling."
        return _bound(text, max_chars)

    parts = []
    if call.schema_errors and schema_on:
        fn = _function_of(tool) if tool is not None else None
        params = fn.get("parameters") if fn is not None and isinstance(fn.get("parameters"), dict) else None
        found = _violations(fname, call.arguments, params) if params is not None else []
        if found:
            parts.append(f"The arguments of `{fname}` break its schema: " + "; ".join(found) + ".")
        else:
            parts.append(
                f"The arguments of `{fname}` break its schema: check the required parameters, their types and "
                "allowed values in the function's description."
            )
        parts.append("Correct the arguments and call it again.")
    if call.is_error and recovery_on:
        parts.append(
            f"The call to `{fname}` failed (the error is in the tool response). Read what it says is wrong; if "
            "needed, check the current state with a read-only function first, then call again with corrected "
            "arguments or call the function that establishes what it needs. Do not move on or answer in text "
            "before the requested action has succeeded."
        )
    return _bound(" ".join(parts), max_chars) if parts else ""


_REMINDERS = {
    CALL_FORMAT: "Write every tool call exactly in the required call format, using only listed function names.",
    SCHEMA_CONSTRAINTS: (
        "Before calling, check each function's required parameters, their types and allowed values; "
        "pass only parameters the function defines."
    ),
    ACT_WITH_TOOLS: (
        "Complete every requested action with a tool call before answering in text; never report an action "
        "as done without calling the function for it."
    ),
    ERROR_RECOVERY: (
        "When a call returns an error, fix its cause (check the state with a read-only function if needed) "
        "and retry before moving on."
    ),
    ASK_OR_ABSTAIN: (
        "If a required parameter is missing or no offered function fits the request, ask the user instead "
        "of calling a function or guessing a value."
    ),
}


def capability_cue(prevalence: dict[str, float], active: set[str], max_chars: int = 600,
                   trigger_of: Optional[dict[str, str]] = None) -> str:
    """phi_cap's reminders: one short sentence per active kind that has one, the most prevalent failure first.

    The reminders are fixed behavioural sentences; the prevalence of each kind's trigger label only orders them
    (ties keep the order of ``CUE_KINDS``), it is not shown. ``tool_affordance`` has no reminder: it is rendered by
    :func:`affordance_cue` from the tools and the request. A caller that renders the schema-family cues separately
    may pass only the capability-family kinds (``kinds_in_family("capability")``).

    Args:
        prevalence: label -> prevalence (C_t or its EMA); missing labels count as 0.
        active: names of the cue kinds to remind of.
        max_chars: bound on the returned text.
        trigger_of: kind -> its trigger label (``InterfaceConfig.trigger_of()``); None: the default triggers.
            A kind without a trigger ranks as prevalence 0.

    Returns:
        The cue, or ``""`` when no active kind has a reminder.
    """
    kinds = {k for k in check_kinds(active) if k in _REMINDERS}
    if not kinds:
        return ""
    trigger = {v: k for k, v in DEFAULT_TRIGGERS.items()} if trigger_of is None else dict(trigger_of)
    order = list(CUE_KINDS)

    def rate(kind: str) -> float:
        label = trigger.get(kind)
        return float(prevalence.get(label, 0.0)) if label else 0.0

    ranked = sorted(kinds, key=lambda k: (-rate(k), order.index(k)))
    return _bound("Reminders:\n" + "\n".join(f"- {_REMINDERS[k]}" for k in ranked), max_chars)


# ------------------------------------------------------------------------------------------ the affordance cue

#: Most tools an affordance cue names.
AFFORDANCE_TOOLS = 3
#: A tool is named when its match with the request is at least this share of the best tool's.
AFFORDANCE_SHARE = 0.5
_DESCRIPTION_CHARS = 160

#: Words that say nothing about what a tool does (English function words and request politeness).
_STOP = frozenset("""
a about after again all also am an and any are as at be been before being both but by can could did do does
done for from had has have having he her here him his how i if in into is it its just let me more most my no
not now of off on once only or other our out over own please same she should so some such than that the their
them then there these they this those through to too under until up very was we were what when where which
while who whom why will with would you your
""".split())


def _stem(word: str) -> str:
    """A crude English stem, enough to match "files" with "file" and "moved" with "move"."""
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    for suffix in ("ing", "ed", "s"):
        if len(word) - len(suffix) >= 3 and word.endswith(suffix) and not word.endswith("ss"):
            word = word[: -len(suffix)]
            break
    return word[:-1] if len(word) > 3 and word.endswith("e") else word


def _terms(text: str) -> set[str]:
    """The content words of ``text`` as stems: identifiers split at ``_`` and camelCase, digits and function
    words left out."""
    words = re.findall(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])", str(text).replace("_", " "))
    return {_stem(w.lower()) for w in words if len(w) > 1 and w.lower() not in _STOP}


def _own_description(description: str, shared: set[str]) -> str:
    """The part of a tool's description that is its own: sentences no other offered tool's description shares
    (an API's preamble and closing notes are the same on every tool of it), a leading ``Label:`` removed, cut to
    ``_DESCRIPTION_CHARS``."""
    sentences = [x.strip() for x in re.split(r"(?<=[.!?])\s+", description.strip()) if x.strip()]
    own = " ".join(x for x in sentences if x not in shared)
    own = re.sub(r"^(?:[A-Za-z]+ ){0,2}[A-Za-z]+:\s+", "", own).strip()
    return _short(own, _DESCRIPTION_CHARS)


def affordance_cue(tools: list[dict], request: str, max_chars: int = 600) -> str:
    """phi_cap's tool-affordance cue: what the offered tools can do for the pending request.

    The tools whose names and descriptions share the most content words with the request are named, with the
    part of their description that is their own (words that many offered tools share count less: each word
    weighs log(1 + tools / tools that have it), a word of the name twice). At most ``AFFORDANCE_TOOLS`` tools,
    each matching at least ``AFFORDANCE_SHARE`` of the best match. The request only chooses the tools: the text
    is made of tool names and description sentences alone, so it repeats no value of the request and, having
    no access to the ground truth, none of the answer.

    Args:
        tools: OpenAI-style tool dicts or bare function docs (the tools offered now).
        request: the text of the pending user request.
        max_chars: bound on the returned text.

    Returns:
        The cue, or ``""`` when no offered tool shares a content word with the request.
    """
    fns = [fn for fn in (_function_of(t) for t in tools) if fn is not None]
    wanted = _terms(request)
    if not fns or not wanted:
        return ""
    described = {fn["name"]: str(fn.get("description") or "") for fn in fns}
    name_terms = {fn["name"]: _terms(fn["name"]) for fn in fns}
    text_terms = {n: name_terms[n] | _terms(d) for n, d in described.items()}
    df: dict[str, int] = {}
    for terms in text_terms.values():
        for w in terms:
            df[w] = df.get(w, 0) + 1
    n = len(fns)

    def score(name: str) -> float:
        return sum(math.log(1.0 + n / df[w]) * (2.0 if w in name_terms[name] else 1.0)
                   for w in wanted & text_terms[name])

    scores = {fn["name"]: score(fn["name"]) for fn in fns}
    best = max(scores.values())
    if best <= 0:
        return ""
    order = [fn["name"] for fn in fns]
    chosen = sorted((m for m in order if scores[m] >= AFFORDANCE_SHARE * best), key=lambda m: (-scores[m],
                                                                                            order.index(m)))
    counts: dict[str, int] = {}
    for d in described.values():
        for x in {x.strip() for x in re.split(r"(?<=[.!?])\s+", d.strip()) if x.strip()}:
            counts[x] = counts.get(x, 0) + 1
    shared = {x for x, c in counts.items() if c > 1}
    lines = []
    for m in chosen[:AFFORDANCE_TOOLS]:
        own = _own_description(described[m], shared)
        lines.append(f"- {_short(m)}: {own}" if own else f"- {_short(m)}")
    return _bound("What the offered tools can do for this request:\n" + "\n".join(lines), max_chars)


def cue_stats(text: str) -> dict[str, int]:
    """Size of a cue for metrics: characters, lines, and 1 when empty.

    Tokens are counted by callers, which own the tokenizer.

    Args:
        text: a rendered cue.
    """
    return {"chars": len(text), "lines": len(text.splitlines()), "empty": int(len(text) == 0)}
