"""The executable-evidence record of one rollout.

A trace is plain data: every assistant attempt of every user turn, every tool call with its parse status,
name, arguments, availability, schema check and execution result, and whether the turn ended in text.
It is what Psi reads, what the reward function re-verifies, and what goes into verl's ``extra_fields``.
It never holds code: call arguments are JSON values, and ``call`` is a canonical Python-call string that
is only ever re-read by a literal-only parser.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

# Why a parse failed; used by Psi (all mean invalid_tool_call) and by the call-format cues.
PARSE_OK = "ok"
PARSE_BAD_SYNTAX = "bad_syntax"          # not valid JSON / Python syntax
PARSE_BAD_STRUCTURE = "bad_structure"    # parsed, but not a call (missing name, arguments not an object, ...)
PARSE_NON_LITERAL = "non_literal"        # an argument is an expression, not a literal
PARSE_BAD_NAME = "bad_name"              # private, dunder or otherwise non-dispatchable name
PARSE_TOO_LARGE = "too_large"            # payload over the size or depth limit


@dataclass
class CallRecord:
    """One tool call the model attempted.

    ``parse_status`` is ``"ok"`` when the call was decoded; then ``name``/``arguments`` hold it and ``call``
    its canonical string form. ``available`` says whether ``name`` was an offered function at that moment;
    ``known`` whether it is a method of an involved backend at all (BFCL executes known methods even when
    not offered). ``schema_errors`` lists violated schema constraints (empty = valid). ``executed`` is true
    when a backend method ran; ``result`` holds the text the agent saw and ``is_error`` whether it was an
    error.
    """

    raw: str = ""
    parse_status: str = PARSE_OK
    parse_error: str = ""
    name: Optional[str] = None
    arguments: Optional[dict] = None
    call: Optional[str] = None
    available: bool = False
    known: bool = False
    schema_errors: list = field(default_factory=list)
    executed: bool = False
    result: str = ""
    is_error: bool = False

    @property
    def parsed(self) -> bool:
        return self.parse_status == PARSE_OK


@dataclass
class Attempt:
    """One assistant message inside a user turn, with the calls decoded from it (possibly none)."""

    text: str = ""
    calls: list = field(default_factory=list)  # list[CallRecord]

    @property
    def has_call_attempt(self) -> bool:
        return len(self.calls) > 0


@dataclass
class TurnTrace:
    """All attempts of one user turn.

    ``ended_with_text``: the turn ended with an assistant message that contained no call attempt.
    ``ended_by``: why the turn ended: ``text``, ``parse_error``, ``step_limit``, ``token_budget``,
    ``episode_end``.
    """

    index: int
    attempts: list = field(default_factory=list)  # list[Attempt]
    revealed_functions: list = field(default_factory=list)
    ended_with_text: bool = False
    ended_by: str = ""

    def calls(self) -> list:
        return [c for a in self.attempts for c in a.calls]

    def executed_steps(self) -> list[list[str]]:
        """The turn as BFCL's checker sees it: one list of decoded calls per step, empty steps dropped."""
        steps = []
        for a in self.attempts:
            step = [c.call for c in a.calls if c.parsed and c.call is not None]
            if step:
                steps.append(step)
        return steps


@dataclass
class Trace:
    """The evidence of one rollout of one task."""

    task_id: str
    category: str
    turns: list = field(default_factory=list)  # list[TurnTrace]
    force_terminated: bool = False
    meta: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Trace":
        turns = []
        for t in d.get("turns", []):
            attempts = [
                Attempt(text=a.get("text", ""), calls=[CallRecord(**c) for c in a.get("calls", [])])
                for a in t.get("attempts", [])
            ]
            turns.append(
                TurnTrace(
                    index=t["index"],
                    attempts=attempts,
                    revealed_functions=list(t.get("revealed_functions", [])),
                    ended_with_text=bool(t.get("ended_with_text", False)),
                    ended_by=t.get("ended_by", ""),
                )
            )
        return cls(
            task_id=d["task_id"],
            category=d.get("category", ""),
            turns=turns,
            force_terminated=bool(d.get("force_terminated", False)),
            meta=dict(d.get("meta", {})),
        )

    @classmethod
    def from_json(cls, s: str) -> "Trace":
        return cls.from_dict(json.loads(s))

    def decoded_steps(self) -> list[list[list[str]]]:
        """Per turn, per step, the decoded call strings: the input format of BFCL's multi-turn checker."""
        return [t.executed_steps() for t in self.turns]
