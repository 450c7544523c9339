"""One BFCL multi-turn rollout as an environment: user turns in, assistant messages in, tool results out.

The environment keeps BFCL's interaction protocol (what ``bfcl generate`` does for a model):

- the task's user turns are served in order; a miss_func turn with no question reveals the held-out
  functions with BFCL's message;
- an assistant message without a tool-call attempt ends the turn (a text answer); so does a message BFCL's
  decoder rejects, or one from which nothing decodes;
- every decoded call runs, by method dispatch on this rollout's own backend instances, also a call whose
  arguments break the schema or that names a miss_func function before it is offered (BFCL runs those);
  unknown, private and refused names and non-literal arguments run nothing and give BFCL's error text;
- more than ``max_steps_per_turn`` executed steps in one turn force-terminate the episode (BFCL fails such a
  task).

Availability and the schema check are recorded as evidence in the trace and never gate a call: SEAL changes
what the agent observes, never what the tools do.
"""

from __future__ import annotations

import json
import weakref
from typing import Any, Callable

from env_wrappers.protocol import StepResult, ToolResult  # noqa: F401 - re-exported for callers
from seal_verl.core.trace import PARSE_OK, Attempt, CallRecord, Trace, TurnTrace

from ..tools import calls as _calls
from ..tools.backends import ERROR_PREFIX, Backends, method_names
from .schema import SchemaChecker, to_openai_tool
from .tasks import BFCLTask

#: BFCL's message for a miss_func turn that reveals new functions.
REVEAL_MESSAGE = "I have updated some more functions you can choose from. What about now?"
#: BFCL's per-turn step cap (``MAXIMUM_STEP_LIMIT``).
MAX_STEPS_PER_TURN = 20


class BFCLEnv:
    """A single rollout of one BFCL task (an :class:`env_wrappers.protocol.Episode`). Create one per
    trajectory; nothing is shared between instances.

    Args:
        task: the task to play.
        call_format: ``json`` (Qwen ``<tool_call>`` blocks), ``python`` (BFCL's prompt-mode call list) or
            ``fc`` (pre-decoded ``{name: arguments}`` steps) or ``auto`` (each message by its form; replay).
        max_steps_per_turn: executed steps allowed per user turn before the episode is force-terminated.
        call_timeout_s: per-call time limit for backend calls (None = no limit, run inline: for trusted,
            scripted calls only).
        isolate: run the calls in a worker process of this rollout's own (``sandbox.client.IsolatedBackends``),
            where the time limit holds for any call and no process-wide setting is shared with another
            rollout. The default whenever there is a time limit; ``False`` keeps the in-process worker-thread
            limit, which a call that holds the interpreter lock overruns.
    """

    def __init__(self, task: BFCLTask, call_format: str = "json", max_steps_per_turn: int = MAX_STEPS_PER_TURN,
                 call_timeout_s: float | None = 10.0, isolate: bool | None = None):
        if call_format not in _calls.CALL_FORMATS:
            raise ValueError(f"call_format must be one of {', '.join(_calls.CALL_FORMATS)}, got {call_format!r}")
        if max_steps_per_turn < 1:
            raise ValueError("max_steps_per_turn must be >= 1")
        self.task = task
        self.call_format = call_format
        self.max_steps_per_turn = max_steps_per_turn
        self._backends = None  # Backends or IsolatedBackends, built on first use: see the backends property
        self._backend_args = (task.involved_classes, task.initial_config, task.long_context, call_timeout_s)
        self.isolate = call_timeout_s is not None if isolate is None else bool(isolate)
        if self.isolate and call_timeout_s is None:
            raise ValueError("isolate=True needs a call_timeout_s")
        self._methods = method_names(task.involved_classes)
        self.schemas = SchemaChecker([_tool for _tool in _all_tools(task)])
        self.offered: set[str] = {d["name"] for d in task.functions}
        self.trace = Trace(task_id=task.id, category=task.category)
        self.turn = -1
        self.steps_in_turn = 0
        self.done = False
        self._deferred: list = []  # (call record, tool result) queued by feed(..., defer=True)
        self._unannotated: list = []  # call records of feed(..., defer=True) not yet given their schema facts
        self._ran = False  # whether any call ran on this environment's own backends

    @property
    def backends(self):
        """This rollout's own backend instances, built on first use (a replay that ``judge_result`` judges
        never runs a call here: the verifier's model path runs them). In a worker process when isolated."""
        if self._backends is None:
            if self.isolate:
                from ..sandbox.client import IsolatedBackends

                self._backends = IsolatedBackends(*self._backend_args)
            else:
                self._backends = Backends(*self._backend_args)
        return self._backends

    def close(self) -> None:
        """Release this rollout's tool worker now (it is also released when the environment is collected).
        Returns at once: the worker's reset runs in the sandbox's own threads."""
        close = getattr(self._backends, "close", None)
        if close is not None:
            close()

    async def run_blocking(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn``, one of this episode's blocking methods (a step), from the running event loop: in the
        sandbox's own threads (not the loop's default executor), after this rollout has its place among the
        tool workers of its process, which it waits for on the loop without holding a thread (see
        ``sandbox.client.run_blocking``)."""
        from ..sandbox.client import run_blocking

        return await run_blocking(fn, self.backends if self.isolate else None)

    # ------------------------------------------------------------------------------------------------------
    def tools(self) -> list[dict]:
        """OpenAI-style tools offered right now (initial functions plus those revealed so far)."""
        return self.task.tools(upto_turn=max(self.turn, 0) if self.turn >= 0 else None)

    def reset(self) -> list[dict]:
        """Start the episode; returns the first turn's user messages."""
        if self.turn != -1:
            raise RuntimeError("reset() called twice; create a new BFCLEnv per rollout")
        msgs, _ = self._begin_turn(0)
        return msgs

    def _begin_turn(self, k: int) -> tuple[list[dict], list[dict]]:
        self.turn = k
        self.steps_in_turn = 0
        revealed_docs = self.task.missed_functions.get(k, [])
        tt = TurnTrace(index=k, revealed_functions=[d["name"] for d in revealed_docs])
        self.trace.turns.append(tt)
        msgs = [dict(m) for m in self.task.questions[k]]
        if revealed_docs:
            self.offered.update(d["name"] for d in revealed_docs)
            if not msgs:
                msgs = [{"role": "user", "content": REVEAL_MESSAGE}]
        revealed_tools = [to_openai_tool(d) for d in revealed_docs]
        return msgs, revealed_tools

    def _end_turn(self, reason: str, result: StepResult) -> StepResult:
        tt = self.trace.turns[-1]
        tt.ended_by = reason
        tt.ended_with_text = reason == "text"
        result.turn_done = True
        if self.turn + 1 >= self.task.n_turns or reason == "step_limit":
            self._finish(reason == "step_limit")
            result.episode_done = True
        else:
            result.next_user, result.revealed_tools = self._begin_turn(self.turn + 1)
        return result

    def _finish(self, forced: bool) -> None:
        self.done = True
        self.trace.force_terminated = forced
        # Turns never reached (after a forced stop) still belong to the trace: empty turns.
        for k in range(len(self.trace.turns), self.task.n_turns):
            self.trace.turns.append(TurnTrace(index=k, ended_by="episode_end"))

    # ------------------------------------------------------------------------------------------------------
    def step(self, message) -> StepResult:
        """Feed one assistant message (text, or a decoded step for ``fc``); execute what BFCL would.

        The turn ends, as in ``bfcl generate``, on a text answer, on a message BFCL cannot decode, or when
        nothing decodes; the episode ends after the last turn or when the step cap is exceeded.
        """
        result, end_reason = self._record(message)
        if end_reason is not None:
            return self._end_turn(end_reason, result)
        self.steps_in_turn += 1
        if self.steps_in_turn > self.max_steps_per_turn:
            return self._end_turn("step_limit", result)
        return result

    def feed(self, message, defer: bool = False) -> StepResult:
        """Replay mode: record and execute one message of the current turn without ending the turn.

        Used to rebuild a trace from a result file, where the file, not the protocol, says where turns end.
        With ``defer`` the message's calls are queued instead and run, in order, by :meth:`flush` (a replay
        needs no result before the end, and one batch costs one thread hand-off under a call time limit);
        until then their records and tool results hold no result, nor their schema facts (``known`` and
        ``schema_errors``: see :meth:`annotate`). Anything that executes flushes first.
        """
        result, _ = self._record(message, defer)
        return result

    def annotate(self) -> None:
        """Give the calls fed with ``defer`` their schema facts. Nothing in the replay depends on them, so a
        judgement does this while the verifier's worker runs the calls (``judge``); :meth:`flush` and
        :meth:`settle` do it too, so a completed replay always has them."""
        pending, self._unannotated = self._unannotated, []
        for rec in pending:
            self._annotate(rec)

    def flush(self) -> None:
        """Run the calls queued by ``feed(..., defer=True)`` and fill in their results."""
        self.annotate()
        pending, self._deferred = self._deferred, []
        self._run(pending)

    def settle(self, outcomes: list) -> bool:
        """Complete the calls queued by ``feed(..., defer=True)`` with outcomes ``(text, is_error, executed)``
        obtained by running exactly those calls, in order, on fresh instances of this task elsewhere (the
        verifier's model path). This environment's own backends then stay unused. Returns False, changing
        nothing, if the count does not match or anything already ran here."""
        if len(outcomes) != len(self._deferred) or self._ran:
            return False
        self.annotate()
        pending, self._deferred = self._deferred, []
        for (rec, shown), (text, is_error, executed) in zip(pending, outcomes):
            rec.result, rec.is_error, rec.executed = text, is_error, executed
            shown.content, shown.is_error = text, is_error
        return True

    def abandon(self, text: str) -> None:
        """Complete the calls queued by ``feed(..., defer=True)`` without running them: each gets ``text`` as
        an error result (not executed). For a replay whose judgement failed as a whole (see ``judge``)."""
        self.annotate()
        pending, self._deferred = self._deferred, []
        for rec, shown in pending:
            rec.result, rec.is_error, rec.executed = text, True, False
            shown.content, shown.is_error = text, True

    def _run(self, pairs: list) -> None:
        if not pairs:
            return
        self._ran = True
        outcomes = self.backends.execute_many([rec.call for rec, _ in pairs])
        for (rec, shown), (text, is_error, executed) in zip(pairs, outcomes):
            rec.result, rec.is_error, rec.executed = text, is_error, executed
            shown.content, shown.is_error = text, is_error

    def advance(self) -> StepResult:
        """Replay mode: close the current turn and open the next (or finish the episode)."""
        tt = self.trace.turns[-1]
        last = tt.attempts[-1] if tt.attempts else None
        reason = "text" if last is not None and not last.has_call_attempt else ("episode_end" if last is None else "replay")
        return self._end_turn(reason, StepResult())

    def _record(self, message, defer: bool = False) -> tuple[StepResult, str | None]:
        if self.done:
            raise RuntimeError("episode is over")
        if self.turn < 0:
            raise RuntimeError("call reset() first")
        if self._deferred and not defer:
            self.flush()
        decoded = _calls.decode(message, self.call_format)
        if isinstance(message, str):
            text = message[:_calls.MAX_TEXT_CHARS]
        else:
            text = _safe_dump(message)
        attempt = Attempt(text=text, calls=decoded.calls)
        self.trace.turns[-1].attempts.append(attempt)
        result = StepResult(attempt=attempt)
        if not decoded.attempted:
            return result, "text"
        for rec in decoded.calls:
            if rec.name is not None:
                rec.available = rec.name in self.offered  # as offered now (a later turn may reveal it)
        if defer:
            self._unannotated.extend(decoded.calls)
        else:
            for rec in decoded.calls:
                self._annotate(rec)
        result.failed_calls = [c for c in decoded.calls if c.parse_status != PARSE_OK]
        if not decoded.decodable:
            return result, "parse_error"
        shown = [c for c in decoded.calls if c.parse_status == PARSE_OK or _bfcl_shows_error(c, decoded.form)]
        if not shown:
            return result, "parse_error"
        pairs = []
        for rec in shown:
            if rec.parse_status != PARSE_OK:
                rec.result, rec.is_error, rec.executed = ERROR_PREFIX + rec.parse_error, True, False
            result.tool_results.append(ToolResult(name=rec.name or "", call=rec.call or rec.raw[:200],
                                                  content=rec.result, is_error=rec.is_error))
            if rec.parse_status == PARSE_OK:
                pairs.append((rec, result.tool_results[-1]))
        # One batch per message (or per replay when deferred): with a per-call time limit that is one
        # thread hand-off, not one per call.
        if defer:
            self._deferred.extend(pairs)
        else:
            self._run(pairs)
        return result, None

    def end_turn(self, reason: str = "token_budget") -> StepResult:
        """End the current turn from outside (the agent loop's token budget); returns like :meth:`step`."""
        if self.done:
            raise RuntimeError("episode is over")
        return self._end_turn(reason, StepResult())

    def terminate(self, reason: str = "token_budget") -> None:
        """Stop the episode now (trajectory budget exhausted); remaining turns are recorded empty."""
        if self.done:
            return
        tt = self.trace.turns[-1]
        tt.ended_by = tt.ended_by or reason
        self._finish(False)
        self.trace.meta["terminated_by"] = reason

    def _annotate(self, rec: CallRecord) -> None:
        """The facts that do not change during the episode (``available`` is set when the call is recorded)."""
        if rec.name is None:
            return
        rec.known = rec.name in self._methods
        if rec.parse_status == PARSE_OK and rec.known:
            rec.schema_errors = self.schemas.errors(rec.name, rec.arguments or {})


def _bfcl_shows_error(rec: CallRecord, form: str) -> bool:
    """BFCL turns bad names and non-literal arguments of a decoded message into an execution error the agent
    sees; a JSON block that did not parse is silently dropped instead."""
    return form != "json" and rec.parse_status in ("bad_name", "non_literal", "too_large")


def _safe_dump(message) -> str:
    try:
        return json.dumps(message, ensure_ascii=False, default=repr)[: _calls.MAX_TEXT_CHARS]
    except (TypeError, ValueError, RecursionError):
        return repr(type(message))


_TOOLS_CACHE: dict[int, tuple] = {}


def _all_tools(task: BFCLTask) -> list[dict]:
    """Every doc of the task as an OpenAI-style tool, converted once per task object (a performance cache:
    converting ~20 schemas for every rollout cost more than the rollout's tool calls). The list is only
    read, by this rollout's SchemaChecker."""
    hit = _TOOLS_CACHE.get(id(task))
    if hit is not None and hit[0]() is task:
        return hit[1]
    tools = [to_openai_tool(d) for d in task.all_docs()]
    key = id(task)
    _TOOLS_CACHE[key] = (weakref.ref(task, lambda _ref, k=key: _TOOLS_CACHE.pop(k, None)), tools)
    return tools
