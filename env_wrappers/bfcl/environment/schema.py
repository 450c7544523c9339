"""BFCL tool docs as OpenAI-style tools, and the per-rollout schema check of decoded calls.

BFCL docs use the dialect ``"type": "dict"``, ``"float"``, ``"tuple"`` and ``"any"`` and carry a ``response``
field; chat templates need standard JSON Schema. The conversion and the check itself are the SEAL core's
(:mod:`seal_verl.core.schema`), so the violations recorded here as evidence for Psi are the ones the interface's
error cue names to the agent. The check never blocks a call.
"""

from __future__ import annotations

from seal_verl.core.schema import ParameterSchema, _describe, surely_valid, to_json_schema  # noqa: F401 (re-exported)


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
    """The tools offered in one rollout by name (as :func:`to_openai_tool` makes them), each schema compiled
    once on first use."""

    def __init__(self, tools: list[dict]):
        self._compiled: dict[str, ParameterSchema] = {}
        self._tools = {t["function"]["name"]: t for t in tools}

    def add(self, tools: list[dict]) -> None:
        for t in tools:
            self._tools[t["function"]["name"]] = t
            self._compiled.pop(t["function"]["name"], None)

    def tool(self, name: str) -> dict | None:
        return self._tools.get(name)

    def errors(self, name: str, arguments: dict) -> list[str]:
        """One line per violated constraint (empty list = valid), positional arguments included. Unknown
        names return no errors here: availability is judged separately."""
        tool = self._tools.get(name)
        if tool is None:
            return []
        compiled = self._compiled.get(name)
        if compiled is None:
            # the tools are to_openai_tool's output: their parameters are standard JSON Schema already
            compiled = self._compiled[name] = ParameterSchema(tool["function"]["parameters"], standard=True)
        return [v.evidence for v in compiled.check(arguments)]
