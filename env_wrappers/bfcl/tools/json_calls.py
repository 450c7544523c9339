"""Qwen-style ``<tool_call>`` JSON blocks and API models' function-calling steps, decoded the way BFCL's handlers
decode them, with every malformed call recorded as a failed attempt."""

from __future__ import annotations

import json
from typing import Any

from seal_verl.core.trace import PARSE_BAD_STRUCTURE, PARSE_BAD_SYNTAX, PARSE_TOO_LARGE, CallRecord

from .call_records import MAX_CALLS, MAX_DEPTH, MAX_MESSAGE_CHARS, MAX_TEXT_CHARS, Decoded, call_record, finish, too_deep

_OPEN_TAG = "<tool_call>\n"
_CLOSE_TAG = "\n</tool_call>"


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
    return call_record(raw, obj["name"], (), arguments)


def _json_loads_bounded(text: str) -> Any:
    if len(text) > MAX_TEXT_CHARS:
        raise OverflowError(f"tool call of {len(text)} characters exceeds the limit of {MAX_TEXT_CHARS}")
    if too_deep(text):
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
    return finish(calls, decodable)


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
    return finish(calls, decodable)


def _raw_text(item: Any) -> str:
    """The raw text of one function-calling item for the trace, bounded and never raising."""
    if isinstance(item, str):
        return item[:2000]
    try:
        return json.dumps(item, ensure_ascii=False, default=lambda o: f"<{type(o).__name__}>")[:2000]
    except (ValueError, TypeError, RecursionError):  # too deep, an oversized int, a cyclic structure
        return f"<unserialisable {type(item).__name__}>"
