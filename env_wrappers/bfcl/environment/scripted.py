"""Scripted BFCL rollouts for the dry run and the agent-loop tests: ground-truth calls, and failures of each label.

:func:`reference_turns` renders a task's ground truth as the assistant messages that solve it (per turn: one
message with the turn's calls, then a text answer; an abstention turn asks instead). :func:`failure_turns`
proposes, for one failure label, replacement messages for single turns, most natural first (bad call syntax,
an unknown function, a wrong argument value, an extra or a missing call, an unrecovered error, a call where
the agent should ask). Whether a proposal really shows the label is for the verifier and Psi to say: the dry
run replays each through a fresh episode and keeps only those that do.
"""

from __future__ import annotations

import random
from typing import Optional

from env_wrappers.protocol import ABSTAIN_TEXT, CLOSING_TEXT

from ..tools.calls import canonical_call, split_call
from .perturb import perturb, render_step


def _turn_messages(task, calls: list[str], fmt: str, abstention: bool) -> list[str]:
    if not calls:
        return [ABSTAIN_TEXT if abstention else CLOSING_TEXT]
    return [render_step(task, calls, fmt), CLOSING_TEXT]


def reference_turns(task, fmt: str) -> list[list[str]]:
    return [_turn_messages(task, list(gt), fmt, not gt) for gt in task.ground_truth]


def _bad_syntax(task, calls: list[str], fmt: str) -> str:
    good = render_step(task, calls[:1], fmt)
    if fmt == "json":
        return good.replace("}\n</tool_call>", "\n</tool_call>", 1)  # drop a closing brace: invalid JSON
    return good.rstrip("]").rstrip(")") + ", "  # unclosed call list


def _mutate(call: str, rng: random.Random) -> Optional[str]:
    name, args, kwargs = split_call(call)
    if kwargs:
        key = rng.choice(sorted(kwargs))
        v = kwargs[key]
        kwargs = dict(kwargs)
        kwargs[key] = (v + "_zz") if isinstance(v, str) else (v + 7 if isinstance(v, int) and not isinstance(v, bool) else "zz_missing")
        return canonical_call(name, args, kwargs)
    if args:
        args = list(args)
        args[0] = "zz_missing" if not isinstance(args[0], str) else args[0] + "_zz"
        return canonical_call(name, tuple(args), kwargs)
    return None


def failure_turns(task, target: str, fmt: str, seed: int):
    """Candidate (kind, turn, turn_messages) for ``target``, most natural first; deterministic in ``seed``."""
    rng = random.Random(f"{task.id}:{target}:{seed}")
    gt = task.ground_truth
    act = [k for k, g in enumerate(gt) if g]
    abst = [k for k, g in enumerate(gt) if not g]
    pool = [c for g in gt for c in g]
    rng.shuffle(act)

    def steps_of(traj_turn):
        return [c for s in traj_turn for c in s]

    if target == "pass":
        yield "ground_truth", None, None
        return
    if target == "spurious_tool_call":
        for k in abst:
            # the next turn's calls first (guessing the missing parameter), then any other (a read-only call
            # leaves the later turns passing)
            nxt = [c for j in range(k + 1, len(gt)) for c in gt[j]]
            seen = set()
            for c in nxt + pool:
                if c not in seen:
                    seen.add(c)
                    yield "call_on_abstention", k, [render_step(task, [c], fmt), CLOSING_TEXT]
        return
    for k in act:
        calls = list(gt[k])
        if target == "invalid_tool_call":
            yield "bad_syntax", k, [_bad_syntax(task, calls, fmt)]
            name, args, kwargs = split_call(calls[0])
            bad = [canonical_call(name + "_unavailable", args, kwargs)] + calls[1:]
            yield "unknown_function", k, [render_step(task, bad, fmt), CLOSING_TEXT]
        elif target == "argument_mismatch":
            out = perturb(task, "wrong_value", seed=seed * 31 + k)
            if out and out[1] == k:
                yield "wrong_value", k, [render_step(task, steps_of(out[0][k]), fmt), CLOSING_TEXT]
            for i in range(len(calls)):
                m = _mutate(calls[i], rng)
                if m:
                    yield "wrong_value", k, [render_step(task, calls[:i] + [m] + calls[i + 1:], fmt), CLOSING_TEXT]
            name, args, kwargs = split_call(calls[0])
            extra = canonical_call(name, args, {**kwargs, "zz_flag": True})
            yield "unknown_parameter", k, [render_step(task, [extra] + calls[1:], fmt), CLOSING_TEXT]
        elif target == "state_mismatch":
            for c in pool:
                if c not in calls:
                    yield "extra_call", k, [render_step(task, calls + [c], fmt), CLOSING_TEXT]
            yield "duplicate_call", k, [render_step(task, calls + calls[-1:], fmt), CLOSING_TEXT]
        elif target == "recovery_failure":
            names = {split_call(c)[0] for c in calls}
            others = [c for c in pool if split_call(c)[0] not in names]
            for i in range(len(calls)):
                for c in others[:6]:
                    e = _mutate(c, rng)
                    if e:
                        yield "error_not_recovered", k, [render_step(task, calls[:i] + calls[i + 1:] + [e], fmt),
                                                         CLOSING_TEXT]
        elif target == "missing_tool_call":
            yield "text_only", k, [CLOSING_TEXT]
            if len(calls) > 1:
                yield "dropped_call", k, [render_step(task, calls[1:], fmt), CLOSING_TEXT]
        elif target == "response_mismatch":
            names = {split_call(c)[0] for c in calls}
            extras = [c for c in pool if split_call(c)[0] not in names]
            for i in range(len(calls)):
                m = _mutate(calls[i], rng)
                if not m:
                    continue
                for c in extras[:4]:
                    yield "extra_and_wrong_value", k, [render_step(task, calls[:i] + [m] + calls[i + 1:] + [c], fmt),
                                                       CLOSING_TEXT]


