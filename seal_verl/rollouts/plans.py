"""Scripted rollouts: a plan per (task, target label), proposed by the environment, confirmed by its verifier.

The environment proposes assistant messages that should show a label (``failure_turns``); a plan is kept only
when replaying it through a fresh episode and diagnosing it (the environment's verifier, then Psi) gives
exactly that label on the injected turns and ``pass`` elsewhere. The policy mix shifts over the steps of a run
from mostly failing to mostly passing, as a learning policy would.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from typing import Optional

from .environments import CLOSING_TEXT, environment


def own_task_id(task) -> Optional[str]:
    """The task's ``id`` attribute when it has a string one. Tasks are typed ``Any`` in the protocol (a dict, a
    dataclass, a string), so the dry run never requires it: it passes the id it loaded a task by."""
    value = getattr(task, "id", None)
    return value if isinstance(value, str) else None

TARGETS = (
    "pass",
    "invalid_tool_call",
    "argument_mismatch",
    "state_mismatch",
    "recovery_failure",
    "missing_tool_call",
    "response_mismatch",
    "spurious_tool_call",
)

#: Policy mix at the first and at the last step (linearly interpolated in between).
EARLY_MIX = {"pass": 0.10, "invalid_tool_call": 0.30, "argument_mismatch": 0.25, "state_mismatch": 0.05,
             "recovery_failure": 0.10, "missing_tool_call": 0.10, "response_mismatch": 0.05,
             "spurious_tool_call": 0.05}
LATE_MIX = {"pass": 0.60, "invalid_tool_call": 0.02, "argument_mismatch": 0.05, "state_mismatch": 0.08,
            "recovery_failure": 0.08, "missing_tool_call": 0.10, "response_mismatch": 0.02,
            "spurious_tool_call": 0.05}


@dataclass
class Plan:
    """What a scripted rollout says: per user turn, the assistant messages in order (the last is text).

    ``labels`` are the turn labels the real verifier + Psi give this plan when replayed offline through a
    fresh episode of the environment; the agent loop must reproduce them.
    """

    task_id: str
    target: str
    kind: str
    turn: Optional[int]
    fmt: str
    messages: list
    labels: list = field(default_factory=list)
    turns: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def replay_plan(task, messages: list[list[str]], fmt: str, env: Optional[str] = None):
    """Play ``messages`` through a fresh episode as the agent loop would; returns the trace."""
    env = environment(env).start(task, call_format=fmt, call_timeout_s=None)  # scripted, trusted calls: inline
    env.reset()
    while not env.done:
        k = env.turn
        turn_msgs = messages[k] if k < len(messages) else [CLOSING_TEXT]
        for text in list(turn_msgs) + [CLOSING_TEXT]:
            env.step(text)
            if env.done or env.turn != k:
                break
    return env.trace


def _judge(task, messages, fmt, env: Optional[str] = None) -> Optional[list]:
    """Psi's labels of a scripted rollout: replayed, verified (official semantics), diagnosed."""
    from seal_verl.core.diagnosis import diagnose

    try:
        trace = replay_plan(task, messages, fmt, env)
        verdict = environment(env).verify(task, trace, strict_abstention=False, call_timeout_s=None)
        return diagnose(trace, verdict.checks).labels
    except Exception:  # noqa: BLE001 - a candidate the environment cannot replay is just skipped
        return None


def find_plan(task, target: str, fmt: str, seed: int = 0, tries_per_turn: int = 8,
              max_injected: Optional[int] = None, env: Optional[str] = None,
              task_id: Optional[str] = None) -> Optional[Plan]:
    """A plan whose offline replay carries ``target`` on every injected turn and ``pass`` elsewhere.

    ``task_id``: the id the task was loaded by, recorded in the plan (default: the task's own ``id``, if any).

    Each eligible turn is searched on its own (the verifier judges a turn after a failure from the ground
    truth state, so turns are independent); the turns that work are then injected together (up to
    ``max_injected``), so a failing rollout fails on most of its turns, as a weak policy does.
    """
    environment_ = environment(env)
    task_id = task_id if task_id is not None else (own_task_id(task) or "")
    base = environment_.reference_turns(task, fmt)
    if target == "pass":
        labels = _judge(task, base, fmt, env)
        if labels is None or any(lab != "pass" for lab in labels):
            return None
        return Plan(task_id=task_id, target=target, kind="ground_truth", turn=None, fmt=fmt, messages=base,
                    labels=labels)
    found: dict[int, tuple[str, list]] = {}
    tries: dict[int, int] = {}
    for kind, k, turn_msgs in environment_.failure_turns(task, target, fmt, seed):
        if k in found or tries.get(k, 0) >= tries_per_turn:
            continue
        tries[k] = tries.get(k, 0) + 1
        messages = [list(m) for m in base]
        messages[k] = turn_msgs
        labels = _judge(task, messages, fmt, env)
        if labels is not None and labels[k] == target and all(lab == "pass" for j, lab in enumerate(labels) if j != k):
            found[k] = (kind, turn_msgs)
    if not found:
        return None
    ks = sorted(found)[: max_injected or None]
    while ks:
        messages = [list(m) for m in base]
        for k in ks:
            messages[k] = found[k][1]
        labels = _judge(task, messages, fmt, env)
        if labels is not None and all((labels[j] == target) if j in ks else (labels[j] == "pass") for j in range(len(labels))):
            kinds = sorted({found[k][0] for k in ks})
            return Plan(task_id=task_id, target=target, kind="+".join(kinds), turn=ks[0], fmt=fmt,
                        messages=messages, labels=labels, turns=list(ks))
        ks = ks[:-1]
    return None


class PlanBook:
    """Plans per (task, target), searched once and cached.

    A task is known by ``task_id`` when given (the id it was loaded by; remembered for later calls with the same
    task object), else by its own string ``id``, else by the object itself: any task object works.
    """

    def __init__(self, fmt: str, seed: int = 0, env: Optional[str] = None):
        self.fmt = fmt
        self.seed = seed
        self.env = env
        self._plans: dict[tuple, Optional[Plan]] = {}
        self._ids: dict[int, tuple] = {}  # id(task) -> (task, its id): the task is kept, so id() stays unique

    def _task_id(self, task, task_id: Optional[str]) -> Optional[str]:
        if task_id is not None:
            self._ids[id(task)] = (task, task_id)
            return task_id
        known = self._ids.get(id(task))
        return known[1] if known is not None else own_task_id(task)

    def get(self, task, target: str, task_id: Optional[str] = None) -> Optional[Plan]:
        task_id = self._task_id(task, task_id)
        if task_id is None:
            self._ids[id(task)] = (task, None)  # keep it alive: the key below is its identity
        key = (("id", task_id) if task_id is not None else ("object", id(task)), target)
        if key not in self._plans:
            self._plans[key] = find_plan(task, target, self.fmt, self.seed, env=self.env, task_id=task_id)
        return self._plans[key]

    def available(self, task, task_id: Optional[str] = None) -> dict[str, Plan]:
        return {t: p for t in TARGETS if (p := self.get(task, t, task_id)) is not None}


def mix_at(step: int, steps: int) -> dict[str, float]:
    """The policy's target distribution at ``step`` of ``steps`` (EARLY_MIX -> LATE_MIX)."""
    a = 0.0 if steps <= 1 else step / (steps - 1)
    return {t: (1 - a) * EARLY_MIX[t] + a * LATE_MIX[t] for t in TARGETS}


def draw_plans(book: PlanBook, task, n: int, mix: dict[str, float], rng: random.Random,
               task_id: Optional[str] = None) -> list[Plan]:
    """``n`` plans for one task drawn from ``mix``; a target this task cannot show is redrawn among the rest
    (plans are searched lazily, only for targets that are drawn)."""
    out = []
    for _ in range(n):
        weights = dict(mix)
        while True:
            targets = [t for t in TARGETS if weights.get(t, 0.0) > 0]
            if not targets:
                out.append(book.get(task, "pass", task_id))
                break
            t = rng.choices(targets, weights=[weights[x] for x in targets])[0]
            plan = book.get(task, t, task_id)
            if plan is not None:
                out.append(plan)
                break
            weights[t] = 0.0
    return out
