"""The one check of a decoded call's arguments against its function's parameter schema.

Two readers need the same verdict: an environment records the violations as evidence for Psi
(argument_mismatch), and the interface's error cue tells the agent which constraints it broke. When each kept
its own checker they could disagree (a float 1.0 for an integer, a wrong item inside a list, a positional
argument), so the cue contradicted the evidence it was raised for. Both now read :func:`check`'s violations
and only word them differently. It never blocks a call.

Schemas may be standard JSON Schema or the tool-doc dialect some benchmarks use (``"type": "dict"``,
``"float"``, ``"tuple"``, ``"any"``); :func:`to_json_schema` converts the dialect. Unknown parameters are
violations unless the schema explicitly allows them: tool backends are usually Python functions, where an
unknown keyword is an error too. Keys ``__arg0``, ``__arg1``, ... hold positional arguments (decoders of
Python-style calls write them); they fill parameters in declaration order and are not type-checked.
This module imports neither verl nor any benchmark.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import jsonschema

#: Key prefix of a positional argument in a decoded call's ``arguments`` (``__arg0`` is the first).
POSITIONAL_PREFIX = "__arg"

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
    """Convert a ``parameters`` block (standard or dialect) into a JSON Schema object schema.

    The result forbids unknown parameters (``additionalProperties: false``) unless the block allows them.
    Converting an already converted schema returns an equal schema.
    """
    schema = _convert(parameters or {"type": "dict", "properties": {}})
    schema["type"] = "object"
    schema.setdefault("properties", {})
    schema.setdefault("additionalProperties", False)
    return schema


@dataclass(frozen=True)
class Violation:
    """One broken constraint, described by schema facts and parameter names only (never by a value).

    ``path``: where in the arguments (``()`` = the arguments object itself; then parameter names and list
    indices). ``kind``: ``required``, ``unknown``, ``type``, ``enum`` or the JSON Schema keyword that failed.
    ``names``: the missing or unknown parameter names (for ``required`` / ``unknown``). ``expected``: the
    expected type or the allowed values (for ``type`` / ``enum``), else ``None``. ``evidence``: the one-line
    form an environment records (``"<path>: <constraint>"``).
    """

    path: tuple
    kind: str
    names: tuple = ()
    expected: Any = None
    evidence: str = ""


class ParameterSchema:
    """A compiled parameter schema; compile once per function and :meth:`check` many calls."""

    def __init__(self, parameters: dict, standard: bool = False):
        """``standard``: ``parameters`` is already :func:`to_json_schema`'s output (used as is, not copied)."""
        self.schema = parameters if standard else to_json_schema(parameters if isinstance(parameters, dict) else {})
        self._validator: jsonschema.protocols.Validator | None = None  # compiled on the first invalid call

    @property
    def properties(self) -> dict:
        return self.schema.get("properties") or {}

    def check(self, arguments: Any) -> list[Violation]:
        """The violations of ``arguments`` (empty = valid), ordered by path."""
        if isinstance(arguments, dict) and any(_is_positional(k) for k in arguments):
            kwargs = {k: v for k, v in arguments.items() if not _is_positional(k)}
            n_positional = len(arguments) - len(kwargs)
            filled = set(list(self.properties)[:n_positional])
            schema = dict(self.schema, required=[r for r in self.schema.get("required") or [] if r not in filled])
            return _violations(jsonschema.Draft7Validator(schema), schema, kwargs)
        if surely_valid(self.schema, arguments):
            return []  # what jsonschema would say, without its per-call machinery (most calls are valid)
        if self._validator is None:
            self._validator = jsonschema.Draft7Validator(self.schema)
        return _violations(self._validator, self.schema, arguments)


def check(parameters: dict, arguments: Any) -> list[Violation]:
    """The violations of ``arguments`` against one function's ``parameters`` (see :class:`ParameterSchema`)."""
    return ParameterSchema(parameters).check(arguments)


def _is_positional(key: Any) -> bool:
    return isinstance(key, str) and key.startswith(POSITIONAL_PREFIX)


def _violations(validator: jsonschema.protocols.Validator, schema: dict, arguments: Any) -> list[Violation]:
    out = []
    for err in sorted(validator.iter_errors(arguments), key=lambda e: list(e.path)):
        path = tuple(err.path)
        where = ".".join(str(p) for p in path) or "arguments"
        kind, names, expected = _facts(err)
        out.append(Violation(path=path, kind=kind, names=names, expected=expected,
                             evidence=f"{where}: {_describe(err)}"))
    return out


def _facts(err: jsonschema.ValidationError) -> tuple[str, tuple, Any]:
    v = err.validator
    if v == "required":
        return "required", tuple(p for p in err.validator_value if p not in (err.instance or {})), None
    if v == "additionalProperties":
        allowed = set((err.schema.get("properties") or {}).keys())
        return "unknown", tuple(k for k in (err.instance or {}) if k not in allowed), None
    if v in ("type", "enum"):
        return v, (), err.validator_value
    return str(v), (), None


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

    A conservative fast path for simple tool schemas (types, properties, required, additionalProperties
    false, items). Anything else, and every possible violation, is left to jsonschema, so violations are
    reported exactly as jsonschema finds them; this only skips jsonschema for valid calls.
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
