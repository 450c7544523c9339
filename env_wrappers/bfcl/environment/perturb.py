"""Deterministic perturbations of BFCL ground truth: benign wrong trajectories for tests and benchmarks.

A trajectory here is BFCL's decoded form: per turn, per step, a list of call strings. The kinds cover the
failures the agreement test and the benchmark need (wrong argument value, unknown function, missing call,
emptied turn, extra call, reordered calls, text-only turn). Everything generated is plain literal call text
with benign identifiers, so it is also safe input for BFCL's own checker in a subprocess.
"""

from __future__ import annotations

import json
import random

from ..tools.calls import canonical_call, split_call
from .tasks import BFCLTask

KINDS = ("wrong_value", "unknown_function", "missing_call", "empty_turn", "extra_call", "reorder", "text_only")


def ground_truth_steps(task: BFCLTask) -> list[list[list[str]]]:
    """The ground truth as a decoded trajectory: one step per non-empty turn."""
    return [[list(gt)] if gt else [] for gt in task.ground_truth]


def _mutate_value(v, rng: random.Random):
    if isinstance(v, bool):
        return not v
    if isinstance(v, int):
        return v + rng.choice([1, 2, 7])
    if isinstance(v, float):
        return v + 1.5
    if isinstance(v, str):
        return v + rng.choice(["_x", "2", " copy"])
    if isinstance(v, (list, tuple)):
        return type(v)(list(v)[:-1]) if v else type(v)(["x"])
    if isinstance(v, dict):
        return {**v, "extra_key": "x"}
    return "x"


def _wrong_value(call: str, rng: random.Random) -> str | None:
    name, args, kwargs = split_call(call)
    if kwargs:
        key = rng.choice(sorted(kwargs))
        kwargs = dict(kwargs)
        kwargs[key] = _mutate_value(kwargs[key], rng)
        return canonical_call(name, args, kwargs)
    if args:
        args = list(args)
        i = rng.randrange(len(args))
        args[i] = _mutate_value(args[i], rng)
        return canonical_call(name, tuple(args), kwargs)
    return None


def perturb(task: BFCLTask, kind: str, seed: int = 0) -> tuple[list[list[list[str]]], int] | None:
    """Apply ``kind`` at a seeded non-abstention turn; returns ``(trajectory, turn)`` or None if inapplicable."""
    if kind not in KINDS:
        raise ValueError(f"unknown perturbation {kind!r}; known: {', '.join(KINDS)}")
    rng = random.Random(f"{task.id}:{kind}:{seed}")
    traj = ground_truth_steps(task)
    turns = [k for k, gt in enumerate(task.ground_truth) if gt]
    if not turns:
        return None
    k = rng.choice(turns)
    calls = list(task.ground_truth[k])
    if kind == "wrong_value":
        idx = [i for i in range(len(calls)) if _wrong_value(calls[i], random.Random(0)) is not None]
        if not idx:
            return None
        i = rng.choice(idx)
        calls[i] = _wrong_value(calls[i], rng)
    elif kind == "unknown_function":
        i = rng.randrange(len(calls))
        name, args, kwargs = split_call(calls[i])
        calls[i] = canonical_call(name + "_unavailable", args, kwargs)
    elif kind == "missing_call":
        calls.pop(rng.randrange(len(calls)))
    elif kind in ("empty_turn", "text_only"):
        calls = []
    elif kind == "extra_call":
        pool = [c for gt in task.ground_truth for c in gt]
        calls.insert(rng.randrange(len(calls) + 1), rng.choice(pool))
    elif kind == "reorder":
        if len(calls) < 2:
            return None
        calls = list(reversed(calls))
    traj[k] = [calls] if calls else []
    return traj, k


def to_kwargs(task: BFCLTask, call: str) -> tuple[str, dict]:
    """Name and keyword arguments of a call; positional arguments named by the doc's parameter order."""
    name, args, kwargs = split_call(call)
    if args:
        doc = next((d for d in task.all_docs() if d["name"] == name), None)
        order = list((doc or {}).get("parameters", {}).get("properties", {}))
        kwargs = {**{order[i] if i < len(order) else f"arg{i}": a for i, a in enumerate(args)}, **kwargs}
    return name, kwargs


def render_step(task: BFCLTask, calls: list[str], fmt: str):
    """One step of a result file in format ``python`` (text list), ``json`` (Qwen blocks) or ``fc``."""
    if fmt == "python":
        return "[" + ", ".join(calls) + "]"
    pairs = [to_kwargs(task, c) for c in calls]
    if fmt == "json":
        return "\n".join("<tool_call>\n" + json.dumps({"name": n, "arguments": kw}) + "\n</tool_call>" for n, kw in pairs)
    if fmt == "fc":
        return [{n: json.dumps(kw)} for n, kw in pairs]
    raise ValueError(f"unknown format {fmt!r}")


def to_result(task: BFCLTask, traj: list[list[list[str]]], fmt: str, text_turns: tuple = (),
              closing_text: str = "Done.") -> list:
    """A ``bfcl generate`` style result (``[turn][step]``): every turn ends with a plain-text step."""
    result = []
    for k, steps in enumerate(traj):
        turn = [render_step(task, s, fmt) for s in steps if s]
        turn.append("I could not do that." if k in text_turns else closing_text)
        result.append(turn)
    return result
