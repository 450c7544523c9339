"""Hand-made trajectories on real BFCL tasks, one per Psi label: the reference cases for docs and demos.

Each example is ``(task_id, call_format, result)`` with ``result`` in ``bfcl generate`` form. The expected
labels live in the tests, not here, so a wrong rule cannot hide behind a wrong expectation.
"""

from __future__ import annotations

from .perturb import render_step
from .tasks import BFCLTask, load_tasks

_BASE = "multi_turn_base_0"       # cd/mkdir/mv | cd/grep | sort | cd/mv/cd/diff
_MISS_FUNC = "multi_turn_miss_func_0"  # sort is held out until turn 3; turn 2 is an abstention turn


def _result(task: BFCLTask, turns: list, fmt: str) -> list:
    out = []
    for turn in turns:
        steps = [s[1] if isinstance(s, tuple) else render_step(task, s, fmt) for s in turn]
        out.append(steps + ["Done."])
    return out


def examples(fmt: str = "json") -> dict[str, tuple[str, list]]:
    """``{name: (task_id, result)}`` for every label, rendered in ``fmt`` (json, python or fc)."""
    tasks = load_tasks([_BASE, _MISS_FUNC])
    b, m = tasks[_BASE], tasks[_MISS_FUNC]
    g = [[list(x)] for x in b.ground_truth]
    gm = [[list(x)] if x else [] for x in m.ground_truth]
    # A raw (already rendered) step is marked as ("raw", step); plain lists are call strings to render.
    bad = ("raw", {"json": "<tool_call>\n{\"name\": \"grep\", \"arguments\": {\"file_name\": \n</tool_call>",
           "python": "[grep(file_name='final_report.pdf', pattern=)]",
           "fc": [{"grep": "{\"file_name\": "}]}[fmt])
    cases = {
        "pass": (_BASE, g),
        "invalid_tool_call": (_BASE, [g[0], [bad], g[2], g[3]]),
        "argument_mismatch_schema": (_BASE, [[["cd(folder='document')", "mkdir(dir_name=5)",
                                               "mv(source='final_report.pdf', destination='temp')"]], g[1], g[2], g[3]]),
        "argument_mismatch_value": (_BASE, [g[0], [["cd(folder='temp')",
                                                     "grep(file_name='final_report.pdf', pattern='revenue')"]], g[2], g[3]]),
        "state_mismatch": (_BASE, [[list(b.ground_truth[0]) + ["touch(file_name='notes.txt')"]], g[1], g[2], g[3]]),
        "recovery_failure": (_BASE, [g[0], [["cd(folder='temp')", "ls()", "cat(file_name='missing.txt')"]], g[2], g[3]]),
        "missing_tool_call": (_BASE, [g[0], g[1], [], g[3]]),
        "response_mismatch": (_BASE, [g[0], [["cd(folder='temp')", "ls()",
                                               "grep(file_name='final_report.pdf', pattern='zzz')"]], g[2], g[3]]),
        "spurious_tool_call": (_MISS_FUNC, gm[:2] + [[["sort('final_report.pdf')"]]] + gm[3:]),
        "hidden_function_called": (_MISS_FUNC, [gm[0], [["cd(folder='temp')", "sort('final_report.pdf')"]]] + gm[2:]),
    }
    return {name: (tid, _result(tasks[tid], turns, fmt)) for name, (tid, turns) in cases.items()}
