"""What counts as an answer a cue must not leak: the argument values of a task's ground-truth calls, shared by the
leak tests of the cue texts (tests/core/test_no_leak.py, tests/core/test_affordance_cue.py)."""

from __future__ import annotations


def answer_values(v, out: set) -> None:
    """Add to ``out`` every value in ``v`` that could only come from the answer: strings of 3+ characters and
    numbers that are not single digits (nested lists and dicts walked)."""
    if isinstance(v, bool) or v is None:
        return
    if isinstance(v, str):
        if len(v.strip()) >= 3:
            out.add(v)
    elif isinstance(v, (int, float)):
        if abs(v) >= 10 or float(v) != int(v):  # single digits are everywhere (line numbers, counts)
            out.add(v)
    elif isinstance(v, (list, tuple)):
        for x in v:
            answer_values(x, out)
    elif isinstance(v, dict):
        for x in v.values():
            answer_values(x, out)
