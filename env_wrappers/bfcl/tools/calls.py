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

One module per job: :mod:`.call_records` (limits, literal values, the canonical string and the record of a call),
:mod:`.python_calls` (the Python form, call strings), :mod:`.json_calls` (JSON blocks and function-calling steps);
this module picks the decoder of a call format and gathers their public names.
"""

from __future__ import annotations

from typing import Any

from .call_records import (MAX_CALLS, MAX_DEPTH, MAX_MESSAGE_CHARS, MAX_TEXT_CHARS, Decoded, NotLiteral,
                           UndefinedName, canonical_call, literal_value)
from .json_calls import decode_fc, decode_json_blocks
from .python_calls import decode_python, parse_call_string, split_call

__all__ = ["MAX_CALLS", "MAX_DEPTH", "MAX_MESSAGE_CHARS", "MAX_TEXT_CHARS", "CALL_FORMATS", "Decoded", "NotLiteral",
           "UndefinedName", "canonical_call", "decode", "decode_fc", "decode_json_blocks", "decode_python",
           "literal_value", "parse_call_string", "split_call"]

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
