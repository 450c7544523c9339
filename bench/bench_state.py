"""Benchmark: the size on disk of the closed-loop state over a long run, every row of the history in each state
file (the layout before ``loop.HISTORY_WINDOW``) against the bounded history written now.

Runs ``closed_loop_step`` for ``--steps`` steps on batches whose labels change from step to step, and counts the
bytes ``ClosedLoopState.save`` writes after each step (what the run folder's ``state_step_{k}.json`` and, inside
the driver's envelope, each checkpoint's ``seal_state.json`` hold). The whole-history size of every step is
computed from the same rows without writing them: the state without its history plus what each row adds to the
list (checked against one full serialisation at the last step).

    python -m bench.bench_state                  # 1,000 and 10,000 steps
    python -m bench.bench_state --steps 500
"""

from __future__ import annotations

import argparse
import json
import sys
import time

CATEGORIES = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context")
LABELS = ("pass", "argument_mismatch", "state_mismatch", "missing_tool_call", "invalid_tool_call")


def _records(k: int):
    from seal_verl.core.profile import TrajectoryRecord

    out = []
    for i in range(8):
        n = 2 + (k + i) % 3
        labels = [LABELS[(k * 7 + i * 3 + t) % len(LABELS)] for t in range(n)]
        abstention = [False] * n
        if (k + i) % 4 == 0:  # an abstention turn answered with a call now and then
            labels[-1], abstention[-1] = "spurious_tool_call", True
        out.append(TrajectoryRecord(labels=labels, abstention=abstention, category=CATEGORIES[i % 4],
                                    reward=float((k + i) % 2)))
    return out


def _dump(obj) -> str:
    return json.dumps(obj, indent=1, sort_keys=True)  # as ClosedLoopState.save writes it


def measure(steps: int) -> dict:
    """Per-file largest size and the sum over every step's file, whole history against bounded."""
    from seal_verl.core.interface import InterfaceConfig
    from seal_verl.core.loop import SealSwitches, closed_loop_step, initial
    from seal_verl.core.weighting import WeightingConfig

    sw, icfg, wcfg = SealSwitches(), InterfaceConfig(), WeightingConfig()
    state = initial(sw, icfg, wcfg)
    first_row = None
    rows_bytes = 0  # what the rows of the whole history add to the list after ``[first row]``
    empty = len(_dump({"h": []}))
    new_total = new_max = old_total = old_max = 0
    t0 = time.perf_counter()
    all_rows = []
    for k in range(1, steps + 1):
        state, _ = closed_loop_step(state, _records(k), sw, icfg, wcfg)
        row = state.history[-1]
        all_rows.append(row)
        if first_row is None:
            first_row = row
            history_bytes = len(_dump({"h": [row]})) - empty
        else:
            rows_bytes += len(_dump({"h": [first_row, row]})) - len(_dump({"h": [first_row]}))
            history_bytes = len(_dump({"h": [first_row]})) - empty + rows_bytes
        d = state.to_dict()
        new = len(_dump(d))
        whole = dict(d, history=[])
        whole.pop("history_start", None)
        old = len(_dump(whole)) + history_bytes
        new_total, new_max = new_total + new, max(new_max, new)
        old_total, old_max = old_total + old, max(old_max, old)
    seconds = time.perf_counter() - t0
    exact = dict(state.to_dict(), history=all_rows)
    exact.pop("history_start", None)
    assert len(_dump(exact)) == old, (len(_dump(exact)), old)  # the computed size is the written one
    return {"steps": steps, "old_max": old_max, "old_total": old_total, "new_max": new_max, "new_total": new_total,
            "seconds": seconds}


def _mb(n: int) -> str:
    return f"{n / 1e6:,.2f} MB" if n < 1e9 else f"{n / 1e9:,.1f} GB"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, nargs="+", default=[1_000, 10_000])
    args = p.parse_args()
    from seal_verl.core.loop import HISTORY_WINDOW

    print(f"closed-loop state files (history kept now: the last {HISTORY_WINDOW} rows)")
    print(f"{'steps':>7}  {'last file, whole history':>25}  {'last file, now':>15}  "
          f"{'all step files, whole history':>30}  {'all step files, now':>20}")
    for n in args.steps:
        m = measure(n)
        print(f"{n:>7,}  {_mb(m['old_max']):>25}  {_mb(m['new_max']):>15}  {_mb(m['old_total']):>30}  "
              f"{_mb(m['new_total']):>20}   ({m['seconds']:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
