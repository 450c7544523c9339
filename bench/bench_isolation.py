"""Benchmark: what running a rollout's tool calls in a worker process costs, and what it buys.

Side by side in one run:

(a) rollouts with the in-process worker-thread time limit (``BFCLEnv(..., isolate=False)``);
(b) rollouts with the calls in a worker process of their own (``isolate=True``, the default).

Each rollout replays a task's ground truth through ``BFCLEnv.step`` (decoding, schema checks, execution,
trace), rendered in the Qwen JSON format, with a 10 s call limit. The two modes alternate chunk by chunk
and the fastest of ``--repeats`` runs per chunk counts, so background load hits both alike. Reported: the
environment time of both, the cost ratio (b)/(a); then, for (b) only, how long a 10 s limit takes to stop
``power(base=10, exponent=30000000)`` and the longest stall of a 0.1 s ticker thread meanwhile, and the time
to decode a 1 MB message.

    python bench/bench_isolation.py            # 200 tasks (all categories), limit check included
    python bench/bench_isolation.py --quick    # 40 tasks, no 10 s limit check
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
os.environ.setdefault("BFCL_PROJECT_ROOT", tempfile.mkdtemp(prefix="bfcl-bench-"))

from env_wrappers.bfcl import calls as calls_mod  # noqa: E402
from env_wrappers.bfcl.env import BFCLEnv  # noqa: E402
from env_wrappers.bfcl.perturb import ground_truth_steps  # noqa: E402
from env_wrappers.bfcl.tasks import CATEGORIES, load_tasks  # noqa: E402


def _render(step: list) -> str:
    blocks = []
    for c in step:
        rec = calls_mod.parse_call_string(c)
        args = {k: v for k, v in (rec.arguments or {}).items()}
        blocks.append("<tool_call>\n" + json.dumps({"name": rec.name, "arguments": args}) + "\n</tool_call>")
    return "\n".join(blocks)


def rollout_messages(task) -> list:
    msgs = []
    for steps in ground_truth_steps(task):
        msgs.extend(_render(s) for s in steps if s)
        msgs.append("Done.")
    return msgs


def run_rollout(task, msgs, isolate: bool) -> None:
    env = BFCLEnv(task, call_format="json", call_timeout_s=10.0, isolate=isolate)
    env.reset()
    for m in msgs:
        if env.done:
            break
        env.step(m)
    env.close()


def timed(cases, isolate: bool) -> float:
    t0 = time.perf_counter()
    for task, msgs in cases:
        run_rollout(task, msgs, isolate)
    return time.perf_counter() - t0


def side_by_side(cases, repeats: int, chunk: int) -> dict:
    total = {"a": 0.0, "b": 0.0}
    run_rollout(*cases[0], True)  # start the first worker outside the timing (one fork per process)
    for s in range(0, len(cases), chunk):
        part = cases[s:s + chunk]
        total["a"] += min(timed(part, False) for _ in range(repeats))
        total["b"] += min(timed(part, True) for _ in range(repeats))
    return total


def limit_check() -> tuple[float, float, str]:
    task = next(t for t in load_tasks().values() if "MathAPI" in t.involved_classes)
    env = BFCLEnv(task, call_format="json", call_timeout_s=10.0)
    env.reset()
    gaps = [0.0]
    stop = threading.Event()

    def tick():
        last = time.perf_counter()
        while not stop.is_set():
            time.sleep(0.1)
            now = time.perf_counter()
            gaps[0] = max(gaps[0], now - last - 0.1)
            last = now

    th = threading.Thread(target=tick)
    th.start()
    t0 = time.perf_counter()
    r = env.step('<tool_call>\n{"name": "power", "arguments": {"base": 10, "exponent": 30000000}}\n</tool_call>')
    took = time.perf_counter() - t0
    stop.set()
    th.join()
    return took, gaps[0], r.tool_results[0].content


def decode_check() -> float:
    msg = "<tool_call>\n" + '{"name": "ls", "arguments": {"a": "' + "x" * 1_000_000 + '"}}\n</tool_call>'
    worst = 0.0
    for m, fmt in ((msg, "json"), ("<tool_call>\n" * 90_000, "json"), ("\t" * 1_000_000 + "x(", "python"),
                   ("[" + "pwd()," * 170_000 + "]", "python")):
        t0 = time.perf_counter()
        calls_mod.decode(m, fmt)
        worst = max(worst, time.perf_counter() - t0)
    return worst


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="40 tasks, skip the 10 s limit check")
    ap.add_argument("--tasks", type=int, default=None, help="tasks per category (default 50, quick 10)")
    ap.add_argument("--repeats", type=int, default=3, help="timed runs per chunk and mode; the fastest counts")
    ap.add_argument("--chunk", type=int, default=20, help="rollouts per timed chunk (modes alternate by chunk)")
    args = ap.parse_args()
    per_cat = args.tasks or (10 if args.quick else 50)
    tasks = load_tasks()
    chosen = [t for c in CATEGORIES for t in [v for v in tasks.values() if v.category == c][:per_cat]]
    cases = [(t, rollout_messages(t)) for t in chosen]
    n_calls = sum(m.count("<tool_call>") for _, msgs in cases for m in msgs)
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, load average {os.getloadavg()[0]:.2f}")
    print(f"{len(cases)} rollouts ({n_calls} tool calls), ground truth rendered as <tool_call> JSON, 10 s call limit")
    total = side_by_side(cases, args.repeats, args.chunk)
    print("\n== environment time per rollout ==")
    print(f"(a) in-process worker thread    : {1000 * total['a'] / len(cases):7.2f} ms")
    print(f"(b) worker process (default)    : {1000 * total['b'] / len(cases):7.2f} ms")
    print(f"cost ratio time_b / time_a      : {total['b'] / total['a']:.2f}x  (fastest of {args.repeats} runs per chunk)")
    print(f"\n== decoding ==\nslowest of four ~1 MB messages: {decode_check() * 1000:.1f} ms")
    if not args.quick:
        took, gap, text = limit_check()
        print(f"\n== 10 s limit on power(base=10, exponent=30000000) ==\nreturned after {took:.1f} s; "
              f"longest stall of another thread {gap:.2f} s; result: {text}")


if __name__ == "__main__":
    main()
