"""A second tool environment, written only against ``env_wrappers.protocol``: a tiny shopping cart.

It exists to prove that an environment is one folder: tasks in ``tasks.json`` (four tools with JSON schemas,
a cart as state, per-turn ground truth), an :class:`Episode` that decodes Qwen-style ``<tool_call>`` JSON and
runs the calls on its own cart, and a verifier that checks every turn from the ground-truth state at its start
(state and response checks, abstention turns). It touches nothing under ``seal_verl/`` beyond the trace and
check records every environment fills in. ``docs/add_an_environment.md`` walks through it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Optional

from env_wrappers.episode import ToolBackend, TurnEpisode, decode_json_call, verify_by_turn
from env_wrappers.protocol import ABSTAIN_TEXT, CLOSING_TEXT, Environment, Verification
from seal_verl.core.schema import check as check_arguments
from seal_verl.core.trace import CallRecord, Trace

DATA = json.loads((Path(__file__).parent / "tasks.json").read_text())
TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


# ------------------------------------------------------------------------------------------------ the tools


class Cart(ToolBackend):
    """The domain state. Each public method is a tool; a bad call raises ``ValueError`` (shown as an error)."""

    tool_names = tuple(t["name"] for t in DATA["tools"])

    def __init__(self, prices: dict):
        self.prices = dict(prices)
        self.items: dict[str, int] = {}
        self.paid_with: Optional[str] = None

    def state(self) -> dict:
        return {"items": dict(sorted(self.items.items())), "paid_with": self.paid_with}

    def add_item(self, item: str, qty: int) -> str:
        if item not in self.prices:
            raise ValueError(f"unknown item {item!r}")
        if not isinstance(qty, int) or qty < 1:
            raise ValueError("qty must be a positive integer")
        self.items[item] = self.items.get(item, 0) + qty
        return f"cart: {json.dumps(self.state()['items'])}"

    def remove_item(self, item: str) -> str:
        if item not in self.items:
            raise ValueError(f"{item!r} is not in the cart")
        del self.items[item]
        return f"cart: {json.dumps(self.state()['items'])}"

    def cart_total(self) -> str:
        return str(sum(self.prices[i] * q for i, q in self.items.items()))

    def checkout(self, payment: str) -> str:
        if not self.items:
            raise ValueError("the cart is empty")
        self.paid_with = payment
        return f"paid {self.cart_total()} by {payment}"



TOOL_NAMES = Cart.tool_names
SCHEMAS = {t["name"]: t["parameters"] for t in DATA["tools"]}


def schema_errors(name: str, arguments: dict) -> list[str]:
    """The core's check, so the evidence recorded here is what the interface's error cue names."""
    return [v.evidence for v in check_arguments(SCHEMAS.get(name, {}), arguments)]


def render_call(call: dict) -> str:
    """A ground-truth or scripted call as the model writes it (Qwen-style JSON)."""
    return "<tool_call>\n" + json.dumps(call) + "\n</tool_call>"


def _canonical(name: str, arguments: dict) -> str:
    return name + "(" + json.dumps(arguments, sort_keys=True) + ")"


# ------------------------------------------------------------------------------------------------ tasks


class ShopTask:
    def __init__(self, raw: dict):
        self.id = raw["id"]
        self.category = raw["category"]
        self.turns = list(raw["turns"])
        self.ground_truth = [list(t) for t in raw["ground_truth"]]


TASKS = {t["id"]: ShopTask(t) for t in DATA["tasks"]}


def openai_tools() -> list[dict]:
    return [{"type": "function", "function": dict(t)} for t in DATA["tools"]]


# ------------------------------------------------------------------------------------------------ an episode
# (model text is untrusted: a call block is decoded with json.loads, never evaluated)


def decode_block(text: str) -> CallRecord:
    return decode_json_call(text, _canonical)


class ShopEpisode(TurnEpisode):
    """One rollout: user turns in order; a message without a ``<tool_call>`` ends the turn."""

    call_block, tool_names = TOOL_CALL, TOOL_NAMES
    decode_block, check_arguments = staticmethod(decode_block), staticmethod(schema_errors)

    def __init__(self, task, call_format: str = "json", max_steps_per_turn: int = 8):
        super().__init__(task, Cart(DATA["prices"]), call_format, max_steps_per_turn)

    def tools(self) -> list[dict]:
        return openai_tools()


# ------------------------------------------------------------------------------------------------ the environment


class ShopEnvironment(Environment):
    """The shopping-cart environment, registered by the tests as ``mock_shop``."""

    name = "mock_shop"
    call_formats = ("json",)
    max_steps_per_turn = 8

    def load_task(self, task_id: str) -> ShopTask:
        if task_id not in TASKS:
            raise KeyError(f"unknown mock_shop task id {task_id!r}")
        return TASKS[task_id]

    def task_ids(self, split: str) -> list[str]:
        return list(DATA["split"][split])

    def start(self, task, *, call_format, max_steps_per_turn=None, call_timeout_s=None) -> ShopEpisode:
        return ShopEpisode(task, call_format, max_steps_per_turn or self.max_steps_per_turn)

    def initial_messages(self, task, messages, call_format):
        return [dict(m) for m in messages], openai_tools()

    def n_turns(self, task) -> int:
        return len(task.turns)

    def verify(self, task: ShopTask, trace: Trace, *, strict_abstention: bool = True,
               call_timeout_s: Optional[float] = None) -> Verification:
        """Each turn from the ground-truth state at its start (``env_wrappers.episode.verify_by_turn``)."""
        return verify_by_turn(task, trace, Cart(DATA["prices"]), strict_abstention)

    # ---------------------------------------------------------------------------------------- scripting
    def reference_turns(self, task: ShopTask, call_format: str) -> list[list[str]]:
        return [["\n".join(render_call(c) for c in calls), CLOSING_TEXT] if calls else [ABSTAIN_TEXT]
                for calls in task.ground_truth]

    def failure_turns(self, task: ShopTask, target: str, call_format: str, seed: int):
        for k, calls in enumerate(task.ground_truth):
            if not calls:
                continue
            first = calls[0]
            if target == "invalid_tool_call":
                yield "bad_syntax", k, ['<tool_call>\n{"name": "' + first["name"] + '", \n</tool_call>']
            elif target == "argument_mismatch":
                args = {key: "zz" for key in first["arguments"]} or {"zz": 1}
                bad = [{"name": first["name"], "arguments": args}] + calls[1:]
                yield "wrong_value", k, ["\n".join(render_call(c) for c in bad), CLOSING_TEXT]
            elif target == "state_mismatch":
                names = {c["name"] for c in calls}
                for extra in ({"name": "add_item", "arguments": {"item": "tea", "qty": 1}},
                              {"name": "remove_item", "arguments": {"item": first["arguments"].get("item", "tea")}},
                              {"name": "checkout", "arguments": {"payment": "card"}}):
                    if extra["name"] not in names:
                        yield "extra_call", k, ["\n".join(render_call(c) for c in calls + [extra]), CLOSING_TEXT]
            elif target == "recovery_failure":
                failing = {"name": "add_item", "arguments": {"item": "tea", "qty": 0}}  # valid schema, raises
                yield "error_not_recovered", k, [render_call(failing), CLOSING_TEXT]
        yield from super().failure_turns(task, target, call_format, seed)
