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

With ``--concurrent [SIZES]``, instead: a cluster's batch size in one rollout process. For each size (default
256; ``--concurrent 1024`` runs 256 and 1024 side by side), ``--periods`` busy periods (training steps) of
that many rollouts on one event loop, as verl's agent loop runs them (8 per task), every rollout holding its
worker until all have one, then replaying its task's ground truth through ``BFCLEnv.step``. Side by side:

- *before*: the pool as it was before the sandbox bounded its workers (emulated by a subclass: a released
  worker is reset on the thread that drops the environment, here the event loop; at most 64 idle workers; no
  bound on live workers; the soft open-files limit left alone; steps in the event loop's default executor);
- *after*: the pool as it is (resets in the pool's threads, idle workers up to the last period's peak within
  the memory budgets, live workers bounded by the open-files limit, which the pool raises), steps through
  ``BFCLEnv.run_blocking`` in the sandbox's own threads.

Reported per size and mode: per-call latency p50/p99 (each step's time on the event loop divided by its
calls), live workers and this process's descriptors at the peak (and per worker), the workers forked in each
period, their summed private memory (and per rollout) and this process's resident memory at the peak, the
time ``close()`` held the event loop and the loop's lag, rollouts that lost their tools and descriptor errors
(``EMFILE``), the wall time per period, and the worker processes left after ``pool().shutdown()``.

    python -m bench.bench_isolation --concurrent                   # 256 at once
    python -m bench.bench_isolation --concurrent 1024              # 256 and 1024 at once; ~5 min on 2 cores
    python -m bench.bench_isolation --concurrent 256,512,1024
    python -m bench.bench_isolation --concurrent 1024 --nofile 1024          # each mode starts at soft limit 1024
    python -m bench.bench_isolation --concurrent 1024 --nofile 1024 --hard   # ... hard too: the pool must queue
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import sys
import tempfile
import threading
import time

os.environ.setdefault("BFCL_PROJECT_ROOT", tempfile.mkdtemp(prefix="bfcl-bench-"))

from env_wrappers.bfcl.tools import calls as calls_mod  # noqa: E402
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


# ----------------------------------------------------------------------------------------------------------
# --concurrent: hundreds of rollouts on one event loop, the pool before and after


def _open_descriptors() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:  # out of descriptors: the listing itself needs one
        return -1


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _before_pool():
    """The pool as it was before the changes this benchmark measures: a released worker is reset on the thread
    that drops its rollout, at most ``MAX_IDLE_WORKERS`` are kept idle, live workers are not bounded and the
    open-files limit is left as it is."""
    from env_wrappers.bfcl.sandbox import limits as sandbox_limits
    from env_wrappers.bfcl.sandbox import pool as sandbox_pool

    class BeforePool(sandbox_pool.WorkerPool):
        def idle_cap(self) -> int:
            return sandbox_limits.MAX_IDLE_WORKERS

        def release(self, worker, slot: bool = False) -> None:
            with self._lock:
                if worker is not None:
                    self._unlease(worker)
                if slot:  # never waited for: the bound is out of reach
                    self.give_slot()
            if worker is not None:
                self._reset(worker, self._generation)

    return BeforePool(max_workers=10**6, raise_open_files=False)


def _busy_period(pool, cases: list, mode: str) -> dict:
    """One busy period: every case a rollout on one event loop (see the module docstring)."""
    import asyncio

    n = len(cases)
    out = {"close": [], "lag": [], "calls": [], "broken": 0, "emfile": 0, "crashed": 0, "peak": {}}

    async def period():
        loop = asyncio.get_running_loop()
        started = [0]
        all_in = asyncio.Event()
        measuring = [0]
        running = [True]

        async def ticker():  # the event loop's lag: how late a 10 ms sleep wakes up
            while running[0]:
                before, t0 = measuring[0], loop.time()
                await asyncio.sleep(0.01)
                if measuring[0] == before:
                    out["lag"].append(loop.time() - t0 - 0.01)

        def measure():
            measuring[0] += 1
            try:
                pids = _worker_pids()
                out["peak"] = {"workers": len(pids), "fds": _open_descriptors(), "rss": _rss_mb(),
                               "private": sum(_private_mb(p) for p in pids)}
            except OSError:  # out of descriptors (the "before" pool at a low limit): counted from the pool
                out["peak"] = {"workers": pool.stats()["live"], "fds": -1, "rss": -1, "private": -1}
            measuring[0] += 1

        async def blocking(env, fn):
            if mode == "before":
                return await loop.run_in_executor(None, fn)
            return await env.run_blocking(fn)

        async def rollout(task, msgs):
            env = BFCLEnv(task, call_format="json", call_timeout_s=10.0)
            env.reset()
            try:
                await blocking(env, env.backends.state)  # lease and load the worker now
            except OSError as exc:  # no worker could start (EMFILE): the rollout goes on, its steps fail
                out["crashed"] += 1
                emfile = exc.errno == errno.EMFILE
            else:
                emfile = False
            started[0] += 1
            if started[0] == n:
                measure()
                all_in.set()
            while not all_in.is_set() and not pool.stats()["waiting"]:  # hold it until every rollout has one
                try:
                    await asyncio.wait_for(all_in.wait(), 0.05)
                except asyncio.TimeoutError:
                    pass
            for m in msgs:
                if env.done:
                    break
                await asyncio.sleep(0)  # where the agent loop awaits its generation
                t0 = time.perf_counter()
                r = await blocking(env, lambda m=m: env.step(m))
                if r.tool_results:
                    out["calls"].append((time.perf_counter() - t0) / len(r.tool_results))
            broken = env.backends.broken
            out["broken"] += bool(broken)
            emfile = emfile or bool(broken) and ("Errno 24" in broken or "Too many open files" in broken)
            out["emfile"] += emfile  # rollouts that met a descriptor error
            t0 = time.perf_counter()
            env.close()  # on the event loop's thread, as the agent loop does when a rollout ends
            out["close"].append(time.perf_counter() - t0)

        tick = loop.create_task(ticker())
        await asyncio.gather(*(rollout(t, m) for t, m in cases))
        running[0] = False
        await tick

    forks = pool.counts["forks"]
    t0 = time.perf_counter()
    asyncio.run(period())
    pool.settle(120)
    out["wall"] = time.perf_counter() - t0
    out["forks"] = pool.counts["forks"] - forks
    out["idle"] = pool.stats()["idle"]
    out["slot_waits"] = pool.stats()["slot_waits"]
    return out


def concurrent_check(tasks: dict, sizes: list, periods: int, nofile: int | None, hard_too: bool = False) -> None:
    """``--concurrent``: each size in both modes, ``periods`` busy periods each (see the module docstring)."""
    import logging
    import resource

    from env_wrappers.bfcl.sandbox import pool as sandbox_pool

    logging.basicConfig(level=logging.WARNING, format="  [log] %(message)s")
    if nofile and hard_too:  # for good: no pool can raise the soft limit then
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    ordered = [t for c in CATEGORIES for t in [v for v in tasks.values() if v.category == c]]
    for n in sizes:
        n_tasks = max(1, n // 8)
        chosen = [ordered[(k * len(ordered)) // n_tasks] for k in range(n_tasks)]
        cases = [(t, rollout_messages(t)) for t in chosen] * (n // n_tasks)
        runs = {}
        for mode in ("before", "after"):
            if nofile:
                resource.setrlimit(resource.RLIMIT_NOFILE, (min(nofile, hard), hard))
            print(f"  {n} at once, {mode}: soft open-files limit "
                  f"{resource.getrlimit(resource.RLIMIT_NOFILE)[0]}", flush=True)
            base_fds = _open_descriptors()
            pool = _before_pool() if mode == "before" else sandbox_pool.WorkerPool()
            sandbox_pool._POOL = pool
            runs[mode] = [_busy_period(pool, cases, mode) for _ in range(periods)]
            runs[mode][0]["base_fds"] = base_fds
            runs[mode][0]["max_workers"] = pool.max_workers
            pool.shutdown()
            sandbox_pool._POOL = None
            deadline = time.monotonic() + 10
            while _worker_pids() and time.monotonic() < deadline:
                time.sleep(0.1)
            runs[mode][0]["left"] = len(_worker_pids())
        _print_concurrent(n, len(chosen), runs)


def _print_concurrent(n: int, n_tasks: int, runs: dict) -> None:
    b, a = runs["before"], runs["after"]
    print(f"\n== {n} rollouts at once on one event loop ({n_tasks} tasks x {n // n_tasks}), "
          f"{len(b)} busy periods per mode ==")
    print(f"{'':44}{'before':>14}{'after':>14}{'after/before':>14}")

    def row(label, before, after, ratio=False, fmt="{:.0f}"):
        r = ""
        if ratio:
            try:
                r = f"{float(after) / float(before):.3f}x" if float(before) else ""
            except (TypeError, ValueError):
                r = ""
        bs = before if isinstance(before, str) else fmt.format(before)
        as_ = after if isinstance(after, str) else fmt.format(after)
        print(f"{label:44}{bs:>14}{as_:>14}{r:>14}")

    def peak(run, key):
        return max(p["peak"].get(key, 0) for p in run)

    def per_worker(run):
        p = run[0]["peak"]
        return (p["fds"] - run[0]["base_fds"]) / max(1, p["workers"])

    row("bound on live tool workers", str(b[0]["max_workers"] if b[0]["max_workers"] < 10**6 else "none"),
        str(a[0]["max_workers"]))
    calls_b = [x for p in b for x in p["calls"]]
    calls_a = [x for p in a for x in p["calls"]]
    pick = lambda v, q: sorted(v)[min(len(v) - 1, int(q * len(v)))] * 1000 if v else 0.0  # noqa: E731
    row("tool calls (all periods)", len(calls_b), len(calls_a))
    row("per-call latency: p50 (ms)", pick(calls_b, 0.5), pick(calls_a, 0.5), True, "{:.2f}")
    row("per-call latency: p99 (ms)", pick(calls_b, 0.99), pick(calls_a, 0.99), True, "{:.2f}")
    row("live tool workers at the peak", peak(b, "workers"), peak(a, "workers"))
    row("descriptors of this process at the peak", peak(b, "fds"), peak(a, "fds"))
    row("  per live worker (above the idle process)", per_worker(b), per_worker(a), fmt="{:.2f}")
    row("workers forked, each period", "/".join(str(p["forks"]) for p in b), "/".join(str(p["forks"]) for p in a))
    row("  forks after the first period", sum(p["forks"] for p in b[1:]), sum(p["forks"] for p in a[1:]), True)
    row("idle workers kept after a period", b[-1]["idle"], a[-1]["idle"])
    row("summed private memory of workers (MiB)", peak(b, "private"), peak(a, "private"), True)
    row("  per rollout (MiB)", peak(b, "private") / n, peak(a, "private") / n, True, "{:.2f}")
    row("rollout process RSS at the peak (MiB)", peak(b, "rss"), peak(a, "rss"), True)
    closes_b = [x for p in b for x in p["close"]]
    closes_a = [x for p in a for x in p["close"]]
    row("close() on the event loop: p50 (ms)", pick(closes_b, 0.5), pick(closes_a, 0.5), True, "{:.3f}")
    row("close() on the event loop: max (ms)", max(closes_b) * 1000, max(closes_a) * 1000, True, "{:.3f}")
    row("close() on the event loop: sum (ms)", sum(closes_b) * 1000, sum(closes_a) * 1000, True, "{:.1f}")
    lag_b = [x for p in b for x in p["lag"]] or [0.0]
    lag_a = [x for p in a for x in p["lag"]] or [0.0]
    row("event-loop lag: p99 (ms)", pick(lag_b, 0.99), pick(lag_a, 0.99), True, "{:.1f}")
    row("event-loop lag: max (ms)", max(lag_b) * 1000, max(lag_a) * 1000, True, "{:.1f}")
    row("rollouts that waited for a slot", b[-1]["slot_waits"], a[-1]["slot_waits"])
    row("rollouts whose worker could not start (error)", sum(p["crashed"] for p in b), sum(p["crashed"] for p in a))
    row("rollouts that lost their tools", sum(p["broken"] for p in b), sum(p["broken"] for p in a))
    row("rollouts that met EMFILE", sum(p["emfile"] for p in b), sum(p["emfile"] for p in a))
    row("wall time per period (s)", "/".join(f"{p['wall']:.1f}" for p in b), "/".join(f"{p['wall']:.1f}" for p in a))
    row("worker processes left after shutdown", b[0]["left"], a[0]["left"])


def _sizes(ap: argparse.ArgumentParser, text: str) -> list[int]:
    """``--concurrent``'s sizes: whole numbers of at least 8 (one task's group); one size above 256 runs
    beside 256, the cluster size the numbers are read against."""
    try:
        sizes = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        ap.error(f"--concurrent takes comma-separated whole numbers, got {text!r}")
    if not sizes or any(n < 8 for n in sizes):
        ap.error(f"--concurrent sizes must be at least 8 (one task's group of rollouts), got {text!r}")
    if len(sizes) == 1 and sizes[0] > 256:
        sizes = [256, *sizes]
    return sizes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="40 tasks, skip the 10 s limit check")
    ap.add_argument("--tasks", type=int, default=None, help="tasks per category (default 50, quick 10)")
    ap.add_argument("--repeats", type=int, default=3, help="timed runs per chunk and mode; the fastest counts")
    ap.add_argument("--chunk", type=int, default=20, help="rollouts per timed chunk (modes alternate by chunk)")
    ap.add_argument("--concurrent", nargs="?", const="256", default=None, metavar="SIZES",
                    help="only the rollouts-at-once check, before and after: comma-separated sizes (default 256; "
                    "a single size above 256 runs beside 256)")
    ap.add_argument("--periods", type=int, default=2, help="with --concurrent: busy periods per size and mode")
    ap.add_argument("--nofile", type=int, default=None,
                    help="with --concurrent: the soft open-files limit each mode starts with (default: as it is)")
    ap.add_argument("--hard", action="store_true",
                    help="with --nofile: lower the hard limit to it as well (the pool cannot raise it: it queues)")
    args = ap.parse_args()
    per_cat = args.tasks or (10 if args.quick else 50)
    tasks = load_tasks()
    if args.concurrent is not None:
        import resource

        sizes = _sizes(ap, args.concurrent)
        if args.periods < 1:
            ap.error("--periods must be at least 1")
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, load average {os.getloadavg()[0]:.2f}, "
              f"open-files limit {resource.getrlimit(resource.RLIMIT_NOFILE)}")
        concurrent_check(tasks, sizes, args.periods, args.nofile, args.hard)
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
