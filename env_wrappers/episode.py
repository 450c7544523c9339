"""A ready episode for small environments: user turns in order, tools run in-process on a backend.

An environment whose tools are plain Python (no sandbox, no time limit needed) has the same episode every time:
a message's tool-call blocks are decoded as untrusted text, each parsed call runs on the backend, a message
without a call ends the turn, a step limit ends the episode, and the trace records it all for Psi. Subclass
:class:`TurnEpisode` and give it the four things that differ: how to find and decode call blocks, which tool
names exist, how to check arguments, and the backend call.
"""

from __future__ import annotations

from typing import Any

from seal_verl.trace import Attempt, CallRecord, Trace, TurnTrace

from .protocol import StepResult, ToolResult

#: the part of a message the trace keeps (a hostile message cannot grow it without bound)
MAX_ATTEMPT_TEXT = 4000


class TurnEpisode:
    """One rollout over ``task.turns`` (``task.id``, ``task.category``, ``task.turns``: a list of user messages).

    Subclasses implement :meth:`decode`, :meth:`known`, :meth:`argument_errors` and :meth:`run`."""

    def __init__(self, task: Any, call_format: str = "json", max_steps_per_turn: int = 8):
        self.task = task
        self.call_format = call_format
        self.max_steps_per_turn = max_steps_per_turn
        self.trace = Trace(task_id=task.id, category=task.category)
        self.turn = -1
        self.steps = 0
        self.done = False

    # ---- what an environment supplies
    def decode(self, message: str) -> list[CallRecord]:
        """The message's tool calls, one record per call block, parsed or not (never executed here)."""
        raise NotImplementedError

    def known(self, name: str) -> bool:
        raise NotImplementedError

    def argument_errors(self, name: str, arguments: dict) -> list[str]:
        raise NotImplementedError

    def run(self, name: str, arguments: dict) -> tuple[str, bool]:
        """(result text, is_error) of one call on the backend."""
        raise NotImplementedError

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
