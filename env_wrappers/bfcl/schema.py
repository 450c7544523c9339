"""BFCL's tool-doc dialect -> standard JSON Schema, and the schema check of a decoded call.

BFCL docs use ``"type": "dict"``, ``"float"``, ``"tuple"`` and ``"any"`` and carry a ``response`` field. An
OpenAI-style ``tools`` list, chat templates and ``jsonschema`` need standard JSON Schema. The check result is
evidence for Psi (argument_mismatch); it never blocks a call.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonschema

_TYPE_MAP = {"dict": "object", "float": "number", "tuple": "array", "list": "array", "int": "integer",
             "str": "string", "bool": "boolean"}


def _convert(node: Any) -> Any:
    if isinstance(node, list):
        return [_convert(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if key == "type" and isinstance(value, str):
            if value == "any":
                continue  # no constraint
            out["type"] = _TYPE_MAP.get(value, value)
        elif key == "properties" and isinstance(value, dict):
            out["properties"] = {name: _convert(sub) for name, sub in value.items()}
        elif key in ("items", "additionalProperties"):
            out[key] = _convert(value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def to_json_schema(parameters: dict) -> dict:
    """Convert a BFCL ``parameters`` block into a JSON Schema object schema.

    The result forbids unknown parameters (``additionalProperties: false``): BFCL's backends are Python
    methods, and an unknown keyword is an error there too.
    """
    schema = _convert(parameters or {"type": "dict", "properties": {}})
    schema["type"] = "object"
    schema.setdefault("properties", {})
    schema.setdefault("additionalProperties", False)
    return schema


def to_openai_tool(doc: dict) -> dict:
    """One BFCL function doc -> an OpenAI-style ``{"type": "function", "function": {...}}`` tool entry."""
    return {
        "type": "function",
        "function": {
            "name": doc["name"],
            "description": doc.get("description", ""),
            "parameters": to_json_schema(doc.get("parameters", {})),
        },
    }


class SchemaChecker:
    """Validates decoded call arguments against the tools' JSON Schemas; compiled validators are cached."""

    def __init__(self, tools: list[dict]):
        self._validators: dict[str, jsonschema.protocols.Validator] = {}
        self._tools = {t["function"]["name"]: t for t in tools}

    def add(self, tools: list[dict]) -> None:
        for t in tools:
            self._tools[t["function"]["name"]] = t

    def tool(self, name: str) -> dict | None:
        return self._tools.get(name)

    def errors(self, name: str, arguments: dict) -> list[str]:
        """Human-readable constraint violations (empty list = valid). Unknown names return no errors here:
        availability is judged separately."""
        tool = self._tools.get(name)
        if tool is None:
            return []
        if surely_valid(tool["function"]["parameters"], arguments):
            return []  # what jsonschema would say, without its per-call machinery (most calls are valid)
        validator = self._validators.get(name)
        if validator is None:
            schema = tool["function"]["parameters"]
            validator = jsonschema.Draft7Validator(schema)
            self._validators[name] = validator
        out = []
        for err in sorted(validator.iter_errors(arguments), key=lambda e: list(e.path)):
            where = ".".join(str(p) for p in err.path) or "arguments"
            out.append(f"{where}: {_describe(err)}")
        return out


#: Schema keywords :func:`surely_valid` understands (the rest of Draft 7 sends a call to jsonschema).
_FAST_KEYWORDS = frozenset({"type", "properties", "required", "additionalProperties", "items", "description",
                            "default", "title"})
_FAST_TYPES = {
    "object": lambda v: type(v) is dict,
    "string": lambda v: type(v) is str,
    "number": lambda v: type(v) is int or type(v) is float,  # bool is no number for jsonschema
    "integer": lambda v: type(v) is int,  # a float like 1.0 is left to jsonschema
    "array": lambda v: type(v) is list,
    "boolean": lambda v: type(v) is bool,
    "null": lambda v: v is None,
}


def surely_valid(schema: Any, value: Any) -> bool:
    """True only when ``value`` certainly satisfies ``schema`` under Draft 7; False means "not sure".

    A conservative fast path for the simple schemas BFCL's tools have (types, properties, required,
    additionalProperties false, items). Anything else, and every possible violation, is left to
    jsonschema, so errors are reported exactly as before; this only skips jsonschema for valid calls.
    """
    if type(schema) is not dict or not schema.keys() <= _FAST_KEYWORDS:
        return False
    t = schema.get("type")
    if t is not None and (type(t) is not str or t not in _FAST_TYPES or not _FAST_TYPES[t](value)):
        return False
    if type(value) is dict:
        props = schema.get("properties", {})
        required = schema.get("required", [])
        extra = schema.get("additionalProperties", True)
        if type(props) is not dict or type(required) is not list or type(extra) is not bool:
            return False
        if any(r not in value for r in required):
            return False
        for k, v in value.items():
            if k in props:
                if not surely_valid(props[k], v):
                    return False
            elif not extra:
                return False
    elif type(value) is list and "items" in schema:
        return all(surely_valid(schema["items"], v) for v in value)
    return True


def _describe(err: jsonschema.ValidationError) -> str:
    """Describe a violation by constraint only, never by echoing a value (cues build on this text)."""
    v = err.validator
    if v == "required":
        missing = [p for p in err.validator_value if p not in (err.instance or {})]
        return "missing required parameter(s): " + ", ".join(missing)
    if v == "additionalProperties":
        allowed = set((err.schema.get("properties") or {}).keys())
        extra = [k for k in (err.instance or {}) if k not in allowed]
        return "unknown parameter(s): " + ", ".join(str(k) for k in extra)
    if v == "type":
        return f"expected type {err.validator_value}"
    if v == "enum":
        return "value must be one of the allowed values: " + ", ".join(map(str, err.validator_value))
    return f"violates '{v}'"
