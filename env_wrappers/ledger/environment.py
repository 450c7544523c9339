"""The ledger environment behind the environment protocol: episodes, the per-turn verifier, scripting.

Made for learning on CPU: a first prompt of a few hundred tokens (four small tools), two user turns, and
failures Psi tells apart (bad JSON, wrong arguments, no call, an unrecovered error, a call where the agent
should ask, a wrong state change). The verifier judges each turn from the ground-truth state at its start,
so a mistake in turn 1 does not decide turn 2's label. A turn passes on its end state and the ground truth's
results, as BFCL judges a turn: a malformed call answered with an error and followed by the right call in the same
turn passes it (the error-recovery cue can help there); a failed turn keeps Psi's priority (a malformed call in it
makes it ``invalid_tool_call``).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Optional

from env_wrappers.episode import TurnEpisode, verify_by_turn
from env_wrappers.protocol import ABSTAIN_TEXT, CLOSING_TEXT, Environment, Verification
from seal_verl.core.trace import Trace

from .backend import TOOL_CALL, TOOL_NAMES, Ledger, decode_block, openai_tools, render_call, schema_errors
from .tasks import FAMILIES, LedgerTask, all_tasks


@lru_cache(maxsize=1)
def _tasks() -> dict:
    return all_tasks()


class LedgerEpisode(TurnEpisode):
    """One rollout: user turns in order; a message without a ``<tool_call>`` block ends the turn. A call block that
    does not decode gets an error result and the turn goes on (BFCL's judgement: a turn passes on its end state
    and the ground truth's results, so a corrected call after a failed one counts)."""

    call_block, tool_names = TOOL_CALL, TOOL_NAMES
    malformed_ends_turn = False
    decode_block, check_arguments = staticmethod(decode_block), staticmethod(schema_errors)

    def __init__(self, task, call_format: str = "json", max_steps_per_turn: int = 4):
        super().__init__(task, Ledger(task.balances), call_format, max_steps_per_turn)

    def tools(self) -> list[dict]:
        return openai_tools()


class LedgerEnvironment(Environment):
    """Registered as ``ledger``: 64 training and 32 held-out seeded tasks in five families."""

    name = "ledger"
    call_formats = ("json",)
    max_steps_per_turn = 4
    categories = FAMILIES

    def load_task(self, task_id: str) -> LedgerTask:
        for split in _tasks().values():
            if task_id in split:
                return split[task_id]
        raise KeyError(f"unknown ledger task id {task_id!r}")

    def task_ids(self, split: str) -> list[str]:
        if split not in ("train", "eval"):
            raise KeyError(f"ledger splits are train and eval, got {split!r}")
        return list(_tasks()[split])

    def start(self, task, *, call_format, max_steps_per_turn=None, call_timeout_s=None) -> LedgerEpisode:
        if call_format not in self.call_formats:
            raise ValueError(f"the ledger environment decodes JSON tool calls only, got call_format={call_format!r}")
        return LedgerEpisode(task, call_format, max_steps_per_turn or self.max_steps_per_turn)

    def initial_messages(self, task, messages, call_format):
        return [dict(m) for m in messages], openai_tools()

    def n_turns(self, task) -> int:
        return len(task.turns)

    def verify(self, task: LedgerTask, trace: Trace, *, strict_abstention: bool = True,
               call_timeout_s: Optional[float] = None) -> Verification:
        """Per turn from the ground-truth state at its start (``env_wrappers.episode.verify_by_turn``)."""
        return verify_by_turn(task, trace, Ledger(task.balances), strict_abstention)

    # ---------------------------------------------------------------------------------------- scripting
    def reference_turns(self, task: LedgerTask, call_format: str) -> list[list[str]]:
        """One message per ground-truth call (a ``sweep`` amount is read from the previous result), then text."""
        return [[render_call(c) for c in calls] + [CLOSING_TEXT] if calls else [ABSTAIN_TEXT]
                for calls in task.ground_truth]

    def failure_turns(self, task: LedgerTask, target: str, call_format: str, seed: int):
        reference = self.reference_turns(task, call_format)
        for k, calls in enumerate(task.ground_truth):
            if not calls:
                continue
            first = calls[0]
            if target == "invalid_tool_call":
                yield "bad_syntax", k, ['<tool_call>\n{"name": "' + first["name"] + '", \n</tool_call>', CLOSING_TEXT]
            elif target == "argument_mismatch":
                bad = dict(first, arguments=dict(first["arguments"], account="nobody")
                           if "account" in first["arguments"] else dict(first["arguments"], amount=1000))
                yield "wrong_value", k, [render_call(bad)] + reference[k][1:]
            elif target == "recovery_failure" and first["name"] == "get_balance":
                failing = {"name": "withdraw", "arguments": {"account": first["arguments"]["account"], "amount": 999}}
                yield "error_not_recovered", k, [render_call(failing), CLOSING_TEXT]
            elif target == "state_mismatch" and first["name"] in ("deposit", "withdraw"):
                other = "withdraw" if first["name"] == "deposit" else "deposit"
                wrong = {"name": other, "arguments": dict(first["arguments"], amount=1)}
                yield "wrong_function", k, [render_call(wrong), CLOSING_TEXT]
        yield from super().failure_turns(task, target, call_format, seed)
