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

With ``--concurrent``, instead: 256 rollouts at once (32 tasks, 8 rollouts each: a GRPO batch), one thread
each, every rollout holding its worker from before the first step until all have finished. Reported: the
number of live workers and the summed memory (private memory of the workers, sampled every 0.25 s and when all rollouts hold their worker; peak),
the per-call latency (each step's time divided by its calls; percentiles, against the same rollouts run one
at a time), and what is left after ``pool().shutdown()`` (worker processes of this process: must be none).

    python -m bench.bench_isolation            # 200 tasks (all categories), limit check included
    python -m bench.bench_isolation --quick    # 40 tasks, no 10 s limit check
    python -m bench.bench_isolation --concurrent               # 32 tasks x 8 rollouts at once
    python -m bench.bench_isolation --concurrent --group 8x4   # smaller: 8 tasks x 4 rollouts
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time

os.environ.setdefault("BFCL_PROJECT_ROOT", tempfile.mkdtemp(prefix="bfcl-bench-"))

from env_wrappers.bfcl.environment import calls as calls_mod  # noqa: E402
from env_wrappers.bfcl.environment.env import BFCLEnv  # noqa: E402
from env_wrappers.bfcl.environment.perturb import ground_truth_steps  # noqa: E402
from env_wrappers.bfcl.environment.tasks import CATEGORIES, load_tasks  # noqa: E402


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


def _worker_pids() -> list[int]:
    """Live child processes of this process (the tool workers), from /proc."""
    me, out = os.getpid(), []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                if int(fields[1]) == me and fields[0] not in ("Z", "X"):
                    out.append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    return out


def _private_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            return sum(int(x.split()[1]) for x in f if x.startswith(("Private_Clean:", "Private_Dirty:"))) / 1024
    except (OSError, IndexError, ValueError):
        return 0.0


def _percentiles(values: list) -> str:
    v = sorted(values)
    pick = lambda q: v[min(len(v) - 1, int(q * len(v)))] * 1000  # noqa: E731
    return f"p50 {pick(0.5):7.2f} ms  p95 {pick(0.95):7.2f} ms  p99 {pick(0.99):7.2f} ms  max {v[-1] * 1000:7.2f} ms"


def concurrent_check(chosen: list, per_task: int) -> None:
    """``per_task`` rollouts of every task in ``chosen`` at once (see the module docstring)."""
    import concurrent.futures

    from env_wrappers.bfcl.sandbox import pool as sandbox_pool

    cases = [(t, rollout_messages(t)) for t in chosen] * per_task
    n = len(cases)

    def steps_of(task, msgs, barrier=None) -> list:
        env = BFCLEnv(task, call_format="json", call_timeout_s=10.0)
        env.reset()
        env.backends.state()  # lease and load the worker now
        if barrier is not None:
            barrier.wait()
        lat = []
        for m in msgs:
            if env.done:
                break
            t0 = time.perf_counter()
            r = env.step(m)
            if r.tool_results:
                lat.append((time.perf_counter() - t0) / len(r.tool_results))
        if barrier is not None:
            barrier.wait()  # every worker stays leased until all rollouts are done: the peak is all of them
        broken = env.backends.broken
        env.close()
        return lat, broken

    sequential = [x for t, m in cases[:len(chosen)] for x in steps_of(t, m)[0]]
    sandbox_pool.pool().shutdown()
    peak = {"workers": 0, "private": 0.0, "parent": 0.0}
    stop = threading.Event()

    def measure():
        pids = _worker_pids()
        peak["workers"] = max(peak["workers"], len(pids))
        peak["private"] = max(peak["private"], sum(_private_mb(p) for p in pids))
        with open("/proc/self/statm") as f:  # the rollout process: its resident memory (shared with forks)
            peak["parent"] = max(peak["parent"], int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20)

    def sample():
        while not stop.is_set():
            measure()
            stop.wait(0.25)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    barrier = threading.Barrier(n, action=measure, timeout=900)  # also measured when all hold their worker
    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=n) as ex:
        results = list(ex.map(lambda c: steps_of(c[0], c[1], barrier), cases))
    elapsed = time.perf_counter() - t0
    stop.set()
    sampler.join()
    lat = [x for r, _ in results for x in r]
    broken = sum(1 for _, b in results if b)
    idle = sandbox_pool.pool().idle_memory()
    sandbox_pool.pool().shutdown()
    deadline = time.monotonic() + 10
    while _worker_pids() and time.monotonic() < deadline:
        time.sleep(0.1)
    left = _worker_pids()
    print(f"\n== {n} concurrent rollouts ({len(chosen)} tasks x {per_task}), {len(lat)} tool calls, "
          f"{elapsed:.1f} s in all ==")
    print(f"live workers at the peak            : {peak['workers']}")
    print(f"summed private memory of the workers: peak {peak['private']:.0f} MiB "
          f"({peak['private'] / max(1, peak['workers']):.1f} MiB per worker); rollout process RSS {peak['parent']:.0f} MiB")
    print(f"per-call latency, {n:>3} at once       : {_percentiles(lat)}")
    print(f"per-call latency, one at a time     : {_percentiles(sequential)}")
    print(f"rollouts whose tools were closed    : {broken}")
    print(f"idle workers before shutdown        : {idle[0]} holding {idle[1] / 2**20:.0f} MiB above their start")
    print(f"worker processes left after shutdown: {len(left)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="40 tasks, skip the 10 s limit check")
    ap.add_argument("--tasks", type=int, default=None, help="tasks per category (default 50, quick 10)")
    ap.add_argument("--repeats", type=int, default=3, help="timed runs per chunk and mode; the fastest counts")
    ap.add_argument("--chunk", type=int, default=20, help="rollouts per timed chunk (modes alternate by chunk)")
    ap.add_argument("--concurrent", action="store_true", help="only the 256-concurrent-rollouts check")
    ap.add_argument("--group", default="32x8", help="with --concurrent: TASKSxROLLOUTS (default 32x8)")
    args = ap.parse_args()
    per_cat = args.tasks or (10 if args.quick else 50)
    tasks = load_tasks()
    if args.concurrent:
        n_tasks, per_task = (int(x) for x in args.group.lower().split("x"))
        per = -(-n_tasks // len(CATEGORIES))
        chosen = [t for c in CATEGORIES for t in [v for v in tasks.values() if v.category == c][:per]][:n_tasks]
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, load average {os.getloadavg()[0]:.2f}")
        concurrent_check(chosen, per_task)
        return
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
