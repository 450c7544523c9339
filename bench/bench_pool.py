"""Benchmark: the tool-worker pool's limits, in numbers (see ``env_wrappers/bfcl/sandbox/``).

1. release cost: the time to hand a worker back after a short rollout (reset, cyclic garbage collection,
   the allocator's free pages back to the system, the memory check), per rollout;
2. a worker that filled its memory: what it holds after its reset, and whether it is kept;
3. a worker killed while idle: the extra time of the next step (a new worker and the replay);
4. an overrun after a long history: a call over a 2 s limit after 12 calls that each take about 0.5 s;
   the target is at most about twice the limit (the call, then a replay bounded as a whole by the limit);
5. a huge result: ``find`` below nested directories with long names (``--huge-chars`` characters of
   result): the time of the step and this process's peak resident memory.

    python -m bench.bench_pool
    python -m bench.bench_pool --huge-chars 360000000   # the size of the finding (the worker needs ~2 GB)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import tempfile
import time

os.environ.setdefault("BFCL_PROJECT_ROOT", tempfile.mkdtemp(prefix="bfcl-bench-"))

from env_wrappers.bfcl.environment.env import BFCLEnv  # noqa: E402
from env_wrappers.bfcl.environment.tasks import load_tasks  # noqa: E402
from env_wrappers.bfcl.sandbox import limits as sandbox_limits  # noqa: E402
from env_wrappers.bfcl.sandbox import pool as sandbox_pool  # noqa: E402
from env_wrappers.bfcl.sandbox.client import IsolatedBackends  # noqa: E402


def call(name: str, **arguments) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def release_cost(n: int = 200) -> float:
    times = []
    for _ in range(n):
        b = IsolatedBackends(["GorillaFileSystem", "MathAPI"], {}, False, call_timeout_s=10.0)
        b.execute_many(["mkdir(dir_name='x')", "add(a=1, b=2)"])
        t0 = time.perf_counter()
        b.close()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2]


def filled_worker(cap_mb: int = 400, files: int = 5000) -> tuple:
    b = IsolatedBackends(["GorillaFileSystem"], {}, False, call_timeout_s=20.0, memory_limit_mb=cap_mb)
    b.execute_many(["mkdir(dir_name='d')", "cd(folder='d')"])
    for k in range(0, files, 16):
        b.execute_many([c for i in range(k, min(files, k + 16))
                        for c in (f"touch(file_name='f{i}')", f"echo(content='{'x' * 60_000}', file_name='f{i}')")])
    w = b._box[0]
    status, report = w.request(("reset",), timeout=10.0)
    (vm0, own0), (vm, own) = report
    kept = sandbox_limits.fits(w, report)
    b._discard_worker()
    return (vm - vm0) / 2**20, (own - own0) / 2**20, kept


def killed_while_idle(task) -> tuple[float, float]:
    env = BFCLEnv(task, call_format="json", call_timeout_s=10.0, max_steps_per_turn=50)
    env.reset()
    for k in range(20):
        env.step(call("mkdir", dir_name=f"d{k}"))
    t0 = time.perf_counter()
    env.step(call("ls"))
    plain = time.perf_counter() - t0
    pid = env.backends._box[0].process.pid
    os.kill(pid, signal.SIGKILL)
    env.backends._box[0].process.join(5)
    t0 = time.perf_counter()
    shown = env.step(call("ls")).tool_results[0]
    after = time.perf_counter() - t0
    assert not shown.is_error and "d19" in shown.content, shown.content[:200]
    env.close()
    return plain, after


def overrun_after_history(limit: float = 2.0) -> tuple[float, str]:
    exponent = 100_000
    for _ in range(14):
        t0 = time.perf_counter()
        _ = 10 ** exponent
        if time.perf_counter() - t0 >= limit / 4:
            break
        exponent = int(exponent * 1.4)
    b = IsolatedBackends(["MathAPI"], {}, False, call_timeout_s=limit)
    for _ in range(12):
        b.execute(f"power(base=10, exponent={exponent})")
    t0 = time.perf_counter()
    b.execute("power(base=10, exponent=30000000)")
    elapsed = time.perf_counter() - t0
    outcome = b.broken or "tools kept"
    b.close()
    return elapsed, outcome


def huge_result(task, chars: int) -> tuple[float, int, str]:
    depth = 100
    width = max(1, min(60_000, int(2 * chars / depth**2)))
    env = BFCLEnv(task, call_format="json", call_timeout_s=60.0, max_steps_per_turn=depth + 10)
    env.reset()
    for k in range(depth):
        name = (str(k) * width)[:width]
        env.step(call("mkdir", dir_name=name) + call("cd", folder=name))
    for k in range(0, depth, 50):
        env.step("".join(call("cd", folder="..") for _ in range(k, min(depth, k + 50))))
    t0 = time.perf_counter()
    shown = env.step(call("find", path=".")).tool_results[0]
    elapsed = time.perf_counter() - t0
    env.close()
    return elapsed, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024, shown.content[:160]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--huge-chars", type=int, default=50_000_000, help="size of the huge result (characters)")
    args = ap.parse_args()
    tasks = load_tasks(["multi_turn_base_0"])
    task = tasks["multi_turn_base_0"]
    print("(measuring: this takes about a minute)", flush=True)
    elapsed, peak, text = huge_result(task, args.huge_chars)  # first: the peak is this process's so far
    print(f"5. find with a ~{args.huge_chars:,}-character result: {elapsed:.2f} s, peak RSS of this process "
          f"{peak} MB; observation: {text}")
    print(f"1. release of a worker after a short rollout (median): {release_cost() * 1e3:.2f} ms")
    vm, own, kept = filled_worker()
    print(f"2. after ~300 MB of state under a 400 MB cap and the reset: {vm:.0f} MB more mapped, {own:.0f} MB more "
          f"private; back to the pool: {kept}")
    plain, after = killed_while_idle(task)
    print(f"3. a step: {plain * 1e3:.1f} ms; the step after the worker was killed while idle: {after * 1e3:.1f} ms")
    elapsed, outcome = overrun_after_history()
    print(f"4. overrun with a 2 s limit after 12 calls of ~0.5 s: {elapsed:.2f} s ({outcome})")
    sandbox_pool.pool().shutdown()


if __name__ == "__main__":
    main()
