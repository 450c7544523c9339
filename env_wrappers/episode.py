"""A ready episode for small environments: user turns in order, tools run in-process on a backend.

An environment whose tools are plain Python (no sandbox, no time limit needed) has the same episode every time:
a message's tool-call blocks are decoded as untrusted text, each parsed call runs on the backend, a message
without a call ends the turn, a step limit ends the episode, and the trace records it all for Psi. Subclass
:class:`TurnEpisode` and name what differs: the pattern of a call block and its decoder, the tool names, the
argument check and the backend (a :class:`ToolBackend`: one method per tool).
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from typing import Any, Callable, Optional

from seal_verl.core.diagnosis import TurnCheck
from seal_verl.core.trace import (PARSE_BAD_STRUCTURE, PARSE_BAD_SYNTAX, PARSE_OK, PARSE_TOO_LARGE, Attempt, CallRecord,
                             Trace, TurnTrace)

from .protocol import StepResult, ToolResult, Verification

#: the part of a message the trace keeps (a hostile message cannot grow it without bound)
MAX_ATTEMPT_TEXT = 4000


class ToolBackend:
    """A backend whose tools are its methods: :meth:`run` calls one only if its name is in ``tool_names``, so the
    model's text never picks other code; a bad argument becomes an error result, not an exception."""

    tool_names: tuple = ()

    def run(self, name: str, arguments: dict) -> tuple[str, bool]:
        """(result text, is_error)."""
        if name not in self.tool_names:
            return f"Error: no tool named {name!r}", True
        try:
            return getattr(self, name)(**arguments), False
        except (TypeError, ValueError) as exc:
            return f"Error: {exc}", True


class TurnEpisode:
    """One rollout over ``task.turns`` (``task.id``, ``task.category``, ``task.turns``: a list of user messages) on
    ``backend``. A subclass sets ``call_block`` (a compiled pattern whose ``findall`` gives the call blocks of a
    message), ``tool_names``, and the static functions ``decode_block(text) -> CallRecord`` and
    ``check_arguments(name, arguments) -> list[str]``, and implements ``tools()``."""

    call_block: Any = None
    tool_names: tuple = ()
    decode_block: Any = None
    check_arguments: Any = None
    #: True: a message whose call blocks all fail to decode ends the turn (``parse_error``). False: each such block
    #: gets an error result the agent sees and the turn goes on, so a corrected call in the same turn counts (the
    #: turn is judged on its end state and results, as BFCL judges a call that returned an error).
    malformed_ends_turn: bool = True

    def __init__(self, task: Any, backend: ToolBackend, call_format: str = "json", max_steps_per_turn: int = 8):
        self.task = task
        self.backend = backend
        self.call_format = call_format
        self.max_steps_per_turn = max_steps_per_turn
        self.trace = Trace(task_id=task.id, category=task.category)
        self.turn = -1
        self.steps = 0
        self.done = False

    def decode(self, message: str) -> list[CallRecord]:
        """The message's tool calls, one record per call block, parsed or not (never executed here)."""
        return [self.decode_block(b) for b in self.call_block.findall(message)]

    def known(self, name: str) -> bool:
        return name in self.tool_names

    def argument_errors(self, name: str, arguments: dict) -> list[str]:
        return self.check_arguments(name, arguments)

    def run(self, name: str, arguments: dict) -> tuple[str, bool]:
        return self.backend.run(name, arguments)

    # ---- the episode
    def _begin(self, k: int) -> list[dict]:
        self.turn, self.steps = k, 0
        self.trace.turns.append(TurnTrace(index=k))
        return [{"role": "user", "content": self.task.turns[k]}]

    def reset(self) -> list[dict]:
        if self.turn != -1:
            raise RuntimeError("reset() called twice")
        return self._begin(0)

    def _end(self, reason: str, result: StepResult) -> StepResult:
        tt = self.trace.turns[-1]
        tt.ended_by, tt.ended_with_text = reason, reason == "text"
        result.turn_done = True
        if self.turn + 1 >= len(self.task.turns) or reason == "step_limit":
            self._finish(forced=reason == "step_limit")
            result.episode_done = True
        else:
            result.next_user = self._begin(self.turn + 1)
        return result

    def _finish(self, forced: bool) -> None:
        self.done = True
        self.trace.force_terminated = forced
        for k in range(len(self.trace.turns), len(self.task.turns)):
            self.trace.turns.append(TurnTrace(index=k, ended_by="episode_end"))

    def step(self, message: str) -> StepResult:
        if self.done:
            raise RuntimeError("episode is over")
        calls = self.decode(message)
        attempt = Attempt(text=message[:MAX_ATTEMPT_TEXT], calls=calls)
        self.trace.turns[-1].attempts.append(attempt)
        result = StepResult(attempt=attempt, failed_calls=[c for c in calls if not c.parsed])
        if not calls:
            return self._end("text", result)
        for rec in calls:
            if not rec.parsed:
                if not self.malformed_ends_turn:
                    rec.result, rec.is_error, rec.executed = undecodable_text(rec), True, False
                    result.tool_results.append(ToolResult(name=rec.name or "", call=rec.raw[:200], content=rec.result,
                                                          is_error=True))
                continue
            rec.known = rec.available = self.known(rec.name)
            rec.schema_errors = self.argument_errors(rec.name, rec.arguments) if rec.known else []
            rec.result, rec.is_error = self.run(rec.name, rec.arguments)
            rec.executed = rec.known
            result.tool_results.append(ToolResult(name=rec.name, call=rec.call, content=rec.result,
                                                  is_error=rec.is_error))
        if not result.tool_results:
            return self._end("parse_error", result)
        self.steps += 1
        if self.steps > self.max_steps_per_turn:
            return self._end("step_limit", result)
        return result

    def end_turn(self, reason: str = "token_budget") -> StepResult:
        return self._end(reason, StepResult())

    def terminate(self, reason: str = "token_budget") -> None:
        if not self.done:
            self.trace.turns[-1].ended_by = self.trace.turns[-1].ended_by or reason
            self._finish(False)


def undecodable_text(rec: CallRecord) -> str:
    """The error result of a call block that did not decode (what failed, never a guess at the intended call)."""
    return f"Error: the tool call could not be decoded ({rec.parse_status}: {rec.parse_error[:120]})"


def decode_json_call(text: str, canonical: Callable[[str, dict], str],
                     max_chars: Optional[int] = None) -> CallRecord:
    """One call block holding ``{"name": ..., "arguments": {...}}`` -> a :class:`CallRecord`, parsed or why not.
    The text is untrusted: ``json.loads`` only, and a block over ``max_chars`` is not even parsed."""
    raw = text.strip()
    if max_chars is not None and len(raw) > max_chars:
        return CallRecord(raw=raw[:500], parse_status=PARSE_TOO_LARGE, parse_error="call text too long")
    try:
        data = json.loads(raw)
    except ValueError as exc:
        return CallRecord(raw=raw[:500], parse_status=PARSE_BAD_SYNTAX, parse_error=str(exc))
    if not isinstance(data, dict) or not isinstance(data.get("name"), str) or not isinstance(
            data.get("arguments", {}), dict):
        return CallRecord(raw=raw[:500], parse_status=PARSE_BAD_STRUCTURE, parse_error="expected {name, arguments}")
    args = data.get("arguments", {})
    return CallRecord(raw=raw[:500], parse_status=PARSE_OK, name=data["name"], arguments=args,
                      call=canonical(data["name"], args))


def argument_share(gt_calls: list, made: list) -> float:
    """How near the model's calls came to a turn's ground truth, argument by argument, in [0, 1].

    Per ground-truth call (``{name, arguments}``): the largest share of its arguments (name and value equal)
    that one of the model's parsed calls of the same function has; a ground-truth call without arguments counts
    1 when the function was called. The turn's share is the mean over its ground-truth calls; 0 when none."""
    if not gt_calls:
        return 0.0
    total = 0.0
    for gt in gt_calls:
        want = gt["arguments"]
        best = 0.0
        for call in made:
            if call.name != gt["name"]:
                continue
            got = call.arguments if isinstance(call.arguments, dict) else {}
            best = max(best, 1.0 if not want else sum(k in got and got[k] == v for k, v in want.items()) / len(want))
        total += best
    return total / len(gt_calls)


def verify_by_turn(task: Any, trace: Trace, gt_backend: ToolBackend, strict_abstention: bool) -> Verification:
    """Each turn judged from the ground-truth state at its start: the model's parsed calls of the turn on one copy
    of ``gt_backend``, the ground truth's (``task.ground_truth``: per turn a list of ``{name, arguments}``) on the
    backend itself; the states (``state()``) must match and every ground-truth result must be among the model's.
    A mistake in one turn thus does not decide the next turn's label; up to the first failure this is the
    cumulative judgement. A turn without ground-truth calls is an abstention turn (a call there fails the reward
    under ``strict_abstention``)."""
    checks, valid, reward_valid = [], True, not trace.force_terminated
    for turn, gt_calls in zip(trace.turns, task.ground_truth):
        mine = copy.deepcopy(gt_backend)
        model_results = [mine.run(c.name, c.arguments)[0] for a in turn.attempts for c in a.calls if c.parsed]
        gt_results = [gt_backend.run(c["name"], c["arguments"])[0] for c in gt_calls]
        attempted = any(a.calls for a in turn.attempts)
        if not gt_calls:
            checks.append(TurnCheck(abstention=True, passed=True))
            reward_valid &= not (strict_abstention and attempted)
            continue
        state_ok = mine.state() == gt_backend.state()
        response_ok = not (Counter(gt_results) - Counter(model_results))
        passed = state_ok and response_ok
        made = [c for a in turn.attempts for c in a.calls if c.parsed]
        checks.append(TurnCheck(abstention=False, passed=passed, state_ok=state_ok, response_ok=response_ok,
                                gt_functions=[c["name"] for c in gt_calls],
                                argument_share=argument_share(gt_calls, made)))
        valid &= passed
    valid &= not trace.force_terminated
    return Verification(task_id=task.id, category=task.category, valid=valid, reward_valid=valid and reward_valid,
                        checks=checks)
