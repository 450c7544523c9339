"""The ledger's tools: a deterministic in-memory set of account balances, and the call decoder.

Model text is untrusted: a call is decoded with ``json.loads`` from a ``<tool_call>`` block (size-limited), and
only the four tool names dispatch, each to a fixed method; nothing in the text chooses code.
"""

from __future__ import annotations

import json
import re

from env_wrappers.episode import ToolBackend, decode_json_call
from seal_verl.core.schema import check as check_arguments
from seal_verl.core.trace import PARSE_BAD_SYNTAX, CallRecord

TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
MAX_CALL_CHARS = 2000

_ACCOUNT = {"type": "string"}
_AMOUNT = {"type": "integer", "minimum": 1}
TOOLS = [
    {"name": "get_balance", "description": "Balance of an account.",
     "parameters": {"type": "object", "properties": {"account": _ACCOUNT}, "required": ["account"]}},
    {"name": "deposit", "description": "Add money to an account.",
     "parameters": {"type": "object", "properties": {"account": _ACCOUNT, "amount": _AMOUNT},
                    "required": ["account", "amount"]}},
    {"name": "withdraw", "description": "Take money out of an account.",
     "parameters": {"type": "object", "properties": {"account": _ACCOUNT, "amount": _AMOUNT},
                    "required": ["account", "amount"]}},
    {"name": "transfer", "description": "Move money between accounts.",
     "parameters": {"type": "object", "properties": {"source": _ACCOUNT, "target": _ACCOUNT, "amount": _AMOUNT},
                    "required": ["source", "target", "amount"]}},
]
TOOL_NAMES = tuple(t["name"] for t in TOOLS)
SCHEMAS = {t["name"]: t["parameters"] for t in TOOLS}


def openai_tools() -> list[dict]:
    return [{"type": "function", "function": dict(t)} for t in TOOLS]


class Ledger(ToolBackend):
    """Account balances. Each tool method returns the text the agent sees; a bad call raises ``ValueError``."""

    tool_names = TOOL_NAMES

    def __init__(self, balances: dict):
        self.balances = dict(balances)

    def state(self) -> dict:
        return dict(sorted(self.balances.items()))

    def _account(self, name) -> str:
        if not isinstance(name, str) or name not in self.balances:
            raise ValueError(f"unknown account {name!r}")
        return name

    @staticmethod
    def _amount(amount) -> int:
        if isinstance(amount, bool) or not isinstance(amount, int) or amount < 1:
            raise ValueError("amount must be a whole number of at least 1")
        return amount

    def get_balance(self, account) -> str:
        return f"{self._account(account)} has {self.balances[account]}"

    def deposit(self, account, amount) -> str:
        self.balances[self._account(account)] += self._amount(amount)
        return f"{account} has {self.balances[account]}"

    def withdraw(self, account, amount) -> str:
        self._account(account)
        if self._amount(amount) > self.balances[account]:
            raise ValueError(f"{account} has only {self.balances[account]}")
        self.balances[account] -= amount
        return f"{account} has {self.balances[account]}"

    def transfer(self, source, target, amount) -> str:
        self._account(source), self._account(target)
        if self._amount(amount) > self.balances[source]:
            raise ValueError(f"{source} has only {self.balances[source]}")
        self.balances[source] -= amount
        self.balances[target] += amount
        return f"{source} has {self.balances[source]}, {target} has {self.balances[target]}"



def schema_errors(name: str, arguments: dict) -> list[str]:
    return [v.evidence for v in check_arguments(SCHEMAS.get(name, {}), arguments)]


def canonical(name: str, arguments: dict) -> str:
    return name + "(" + json.dumps(arguments, sort_keys=True) + ")"


def render_call(call: dict) -> str:
    """A call as the model writes it (Qwen-style JSON in a ``<tool_call>`` block)."""
    return "<tool_call>\n" + json.dumps(call) + "\n</tool_call>"


def decode_block(text: str) -> CallRecord:
    """One ``<tool_call>`` block's text -> a :class:`CallRecord` (parsed, or why not). Nesting deeper than the
    JSON parser's recursion allows (a few hundred brackets fit in a block) is a syntax error, not a crash."""
    try:
        return decode_json_call(text, canonical, MAX_CALL_CHARS)
    except RecursionError:
        return CallRecord(raw=text.strip()[:500], parse_status=PARSE_BAD_SYNTAX, parse_error="nested too deeply")
