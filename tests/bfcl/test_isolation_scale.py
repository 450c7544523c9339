"""Tool isolation at a cluster's batch size: hundreds of rollouts in one agent-loop process.

Each rollout holds a tool worker of its own (``env_wrappers.bfcl.sandbox``). At a cluster's batch size (512
tasks x 8 over 8 agent-loop workers: about 512 rollouts per process) that is:

- descriptors: each live worker costs this process ``FDS_PER_WORKER`` of them, all given back when it is
  stopped; a process whose open-files limit allows fewer workers than it has rollouts queues the rest (they
  all complete) instead of failing with ``EMFILE``, and the pool raises the soft limit towards the hard one
  when it starts, saying so;
- the event loop: dropping an environment hands its worker's reset to the pool's own threads, so the thread
  that drops it (often the event loop) never waits for the reset round trip, and ``shutdown`` still stops a
  worker whose reset hangs; tool steps from an event loop run
  in the sandbox's own threads, and a rollout beyond the process's bound waits for its slot on the loop,
  not in one of those threads;
- forks: a second busy period as large as the first forks no new worker (the idle pool keeps the last
  period's peak, within its memory budgets).

No test here depends on timing: a reset is held at an event (in this process) or by the deterministic fault
``tool=hold@reset`` (in the worker, released by a signal).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import signal
import socket
import subprocess
import sys
import threading

import pytest

from _paths import REPO

from env_wrappers.bfcl.environment.env import BFCLEnv
from env_wrappers.bfcl.environment.tasks import load_tasks
from env_wrappers.bfcl.sandbox import client as sandbox_client
from env_wrappers.bfcl.sandbox import faults
from env_wrappers.bfcl.sandbox import pool as sandbox_pool

ROOT = REPO
FS_TASK = "multi_turn_base_0"


@pytest.fixture(scope="module")
def tasks():
    return load_tasks([FS_TASK])


def call(name: str, **arguments) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def _pipes() -> set[tuple[str, str]]:
    """This process's open pipes and sockets as (descriptor, what it points to) (what a worker costs; the
    shared-memory arena the workers' progress boards live in is one file for all of them). Compared as sets, so
    that a descriptor another thread of the process opens meanwhile is not taken for a worker's."""
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(("pipe:", "socket:")):
            found.add((fd, target))
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def test_each_live_worker_costs_three_descriptors_and_gives_them_back_when_stopped():
    """16 live workers cost 16 x ``FDS_PER_WORKER`` descriptors (3: a pipe end and the two ends
    ``multiprocessing`` keeps to see the process end); once they are stopped, every one is closed again, not
    left open until some later worker starts."""
    sandbox_pool.pool().shutdown()
    before = _pipes()
    workers = [sandbox_pool.pool().acquire(None) for _ in range(16)]
    opened = _pipes() - before
    # a descriptor the rest of the process opens meanwhile (another test's thread, here a socket) is not a
    # worker's: counting every open descriptor before and after took it for one, under load
    other = socket.socket()
    try:
        for w in workers:
            w.kill()
        still = opened & _pipes()
    finally:
        other.close()
    assert not still, f"{len(still)} descriptors of 16 stopped workers are still open"
    assert len(opened) / len(workers) == 3 == sandbox_pool.FDS_PER_WORKER


# A rollout process with a low open-files limit (soft = hard, so it cannot be raised): 48 rollouts that each
# hold their worker until all 48 have one, or until one of them is waiting for a slot (the process's bound
# reached). Without a bound, 48 workers need more descriptors than the limit allows.
_CROWD = r"""
import json, resource, sys, threading
from env_wrappers.bfcl.environment.env import BFCLEnv
from env_wrappers.bfcl.environment.tasks import load_tasks
from env_wrappers.bfcl.sandbox import pool as sandbox_pool

LIMIT, N = int(sys.argv[1]), int(sys.argv[2])
from env_wrappers.bfcl.tools import classes
task = load_tasks(["multi_turn_base_0"])["multi_turn_base_0"]
classes.preload()  # the backend modules, imported before the limit is lowered
resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, LIMIT))

def call(name, **arguments):
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"

def someone_waits():
    stats = getattr(sandbox_pool.pool(), "stats", None)
    return stats is not None and stats()["waiting"] > 0

started = [0]
changed = threading.Condition()

def rollout(i):
    try:
        env = BFCLEnv(task, call_format="json", call_timeout_s=20.0)
        env.reset()
        shown = [r.content for r in env.step(call("mkdir", dir_name=f"d{i}")).tool_results]
        with changed:
            started[0] += 1
            changed.notify_all()
            while started[0] < N and not someone_waits():
                changed.wait(0.05)
        shown += [r.content for r in env.step(call("ls")).tool_results]
        broken = env.backends.broken
        env.close()
        return {"ok": f"d{i}" in shown[-1] and broken is None, "broken": broken, "shown": shown[-1][:200]}
    except Exception as exc:  # a crash of the rollout itself
        return {"ok": False, "crash": f"{type(exc).__name__}: {exc}"[:300]}

threads = []
results = [None] * N
for i in range(N):
    t = threading.Thread(target=lambda i=i: results.__setitem__(i, rollout(i)))
    t.start()
    threads.append(t)
for t in threads:
    t.join()
stats = getattr(sandbox_pool.pool(), "stats", lambda: {})()
print(json.dumps({"results": results, "stats": stats}))
"""


def test_more_rollouts_than_the_open_files_limit_allows_all_complete():
    """48 concurrent rollouts in a process whose open-files limit (128, soft and hard) fits about 25 workers:
    the rollouts beyond the bound wait for a slot and every one completes with its own results; none fails
    with ``EMFILE`` (before: the workers past the limit could not start and their rollouts' tools closed)."""
    limit, n = 128, 48
    proc = subprocess.run([sys.executable, "-c", _CROWD, str(limit), str(n)], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    failed = [r for r in out["results"] if not r["ok"]]
    assert not failed, (len(failed), failed[:3])
    stats = out["stats"]
    assert stats["max_workers"] * sandbox_pool.FDS_PER_WORKER < limit
    assert stats["slot_waits"] > 0 and stats["forks"] <= n


_RAISE = r"""
import logging, resource, sys
logging.basicConfig(level=logging.WARNING, format="%(name)s %(message)s")
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))
from env_wrappers.bfcl.sandbox import pool as sandbox_pool
sandbox_pool.pool()
sandbox_pool.pool()
print(resource.getrlimit(resource.RLIMIT_NOFILE)[0], hard)
"""


def test_the_pool_raises_the_soft_open_files_limit_once_and_says_so():
    """A process started with a soft limit of 64 (the hard one left as it is): its pool raises the soft limit
    towards the hard one (at most ``OPEN_FILES_TARGET``) when it starts, in one log line."""
    proc = subprocess.run([sys.executable, "-c", _RAISE], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    soft, hard = (int(x) for x in proc.stdout.split())
    expected = min(hard, 65536) if hard >= 0 else 65536  # OPEN_FILES_TARGET, at most the hard limit
    assert soft == expected > 64
    lines = [line for line in proc.stderr.splitlines() if line.startswith("env_wrappers.bfcl.sandbox.pool ")]
    assert len(lines) == 1 and f"from 64 to {expected}" in lines[0], proc.stderr[-2000:]


def test_dropping_an_environment_on_the_event_loop_does_not_wait_for_its_reset(tasks, monkeypatch):
    """The event loop closes an environment whose worker's reset is held at a gate (an event) that only
    another coroutine of the same loop opens: that coroutine runs while the reset is still pending, and the
    reset then completes (before: the loop's thread waited in the reset round trip itself, so the other
    coroutine could not run until the gate's safety limit had failed the reset)."""
    from env_wrappers.bfcl.sandbox import worker as sandbox_worker

    gate, seen = threading.Event(), {}
    request = sandbox_worker.Worker.request

    def gated(self, msg, timeout):
        if msg[:1] == ("reset",):
            seen["reset on the loop's thread"] = threading.current_thread() is threading.main_thread()
            if not gate.wait(60):  # a safety limit only: the test fails if it is ever reached
                seen["gate never opened"] = True
                raise sandbox_worker.WorkerTimeout("the gate stayed closed")
            reply = request(self, msg, timeout)
            seen["reset done"] = True
            return reply
        return request(self, msg, timeout)

    sandbox_pool.pool().shutdown()
    env = BFCLEnv(tasks[FS_TASK], call_format="json", call_timeout_s=10.0)
    env.reset()
    assert not env.step(call("pwd")).tool_results[0].is_error
    pid = env.backends._box[0].process.pid
    monkeypatch.setattr(sandbox_worker.Worker, "request", gated)

    async def main():
        async def other():
            seen["reset pending while another coroutine ran"] = "reset done" not in seen
            gate.set()

        waiter = asyncio.get_running_loop().create_task(other())
        env.close()  # on the event loop's own thread
        await waiter

    try:
        asyncio.run(main())
        settle = getattr(sandbox_pool.pool(), "settle", None)
        if settle is not None:
            assert settle(60)
        assert seen == {"reset on the loop's thread": False, "reset pending while another coroutine ran": True,
                        "reset done": True}, seen
        assert [w.process.pid for w in sandbox_pool.pool()._idle] == [pid]  # reset and kept, as before
    finally:
        gate.set()
        sandbox_pool.pool().shutdown()


def test_steps_from_an_event_loop_run_in_sandbox_threads_and_wait_for_a_slot_on_the_loop(tasks, monkeypatch):
    """12 rollouts on one event loop, a bound of 3 workers and 2 sandbox threads: every step runs in a sandbox
    thread, never more than 3 workers live at once, and every rollout completes: the 9 waiting for a slot
    wait on the loop, so the 3 that hold one always find a thread (had they waited in the threads, the 2
    threads would be taken by waiters and the holders could never go on)."""
    small = sandbox_pool.WorkerPool(max_workers=3)
    executor = concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix=sandbox_client.TOOL_THREAD_NAME)
    monkeypatch.setattr(sandbox_pool, "_POOL", small)
    monkeypatch.setattr(sandbox_client, "_EXECUTOR", (os.getpid(), executor))
    threads, live = set(), []

    def step(env, message):
        threads.add(threading.current_thread().name)
        result = env.step(message)
        live.append(small.stats()["live"])
        return result

    async def rollout(i: int):
        env = BFCLEnv(tasks[FS_TASK], call_format="json", call_timeout_s=20.0)
        env.reset()
        shown = []
        for message in (call("mkdir", dir_name=f"d{i}"), call("cd", folder=f"d{i}"), call("pwd")):
            await asyncio.sleep(0)  # where a real agent loop awaits its generation
            result = await env.run_blocking(lambda m=message: step(env, m))
            shown.append(result.tool_results[0].content)
        broken = env.backends.broken
        env.close()
        return shown, broken

    async def main():
        return await asyncio.wait_for(asyncio.gather(*(rollout(i) for i in range(12))), 300)

    try:
        results = asyncio.run(main())
    finally:
        executor.shutdown()
        small.shutdown()
    assert all(broken is None and f"d{i}" in shown[-1] for i, (shown, broken) in enumerate(results)), results
    assert threads and all(name.startswith(sandbox_client.TOOL_THREAD_NAME) for name in threads), threads
    assert max(live) <= 3
    assert small.counts["slot_waits"] >= 9


def test_a_second_busy_period_of_the_same_size_forks_no_new_worker(tasks):
    """80 rollouts at once (more than ``MAX_IDLE_WORKERS``), twice: the second time every rollout gets a warm
    worker of the first (before: the pool kept 64, so 16 new workers were forked)."""
    n = 80
    sandbox_pool.pool().shutdown()

    def period() -> set:
        barrier = threading.Barrier(n, timeout=300)

        def rollout(i: int) -> int:
            env = BFCLEnv(tasks[FS_TASK], call_format="json", call_timeout_s=20.0)
            env.reset()
            assert not env.step(call("mkdir", dir_name=f"d{i}")).tool_results[0].is_error
            pid = env.backends._box[0].process.pid
            barrier.wait()  # every rollout holds its worker: the peak is all of them
            env.close()
            return pid

        with concurrent.futures.ThreadPoolExecutor(n) as ex:
            pids = set(ex.map(rollout, range(n)))
        settle = getattr(sandbox_pool.pool(), "settle", None)
        if settle is not None:
            settle(120)
        return pids

    try:
        first = period()
        second = period()
    finally:
        sandbox_pool.pool().shutdown()
    assert len(first) == len(second) == n
    assert second <= first, f"{len(second - first)} workers forked for the second period"


def test_shutdown_stops_a_worker_whose_reset_is_held(tasks, monkeypatch):
    """A worker held in its reset (fault ``tool=hold@reset``, a reset limit of 300 s): ``shutdown`` stops it
    and returns without waiting for the reset's limit, and no worker is left."""
    monkeypatch.setenv(faults.ENV_VAR, "tool=hold@reset")
    monkeypatch.setattr(sandbox_pool, "RESET_TIMEOUT_S", 300.0)
    sandbox_pool.pool().shutdown()  # workers forked from now on see the fault
    try:
        env = BFCLEnv(tasks[FS_TASK], call_format="json", call_timeout_s=10.0)
        env.reset()
        assert not env.step(call("pwd")).tool_results[0].is_error
        pid = env.backends._box[0].process.pid
        env.close()
        assert _alive(pid) and sandbox_pool.pool().stats()["releasing"] == 1
        sandbox_pool.pool().shutdown()
        stats = sandbox_pool.pool().stats()
        assert not _alive(pid) and stats["releasing"] == stats["live"] == stats["idle"] == 0, stats
    finally:
        monkeypatch.delenv(faults.ENV_VAR)
        sandbox_pool.pool().shutdown()


def test_a_hold_fault_keeps_an_early_signal(monkeypatch):
    """The hold fault's signal, sent before the worker reaches the hold, is kept for it (not lost, not fatal):
    the reset then goes on at once."""
    monkeypatch.setenv(faults.ENV_VAR, "tool=hold@reset")
    sandbox_pool.pool().shutdown()
    try:
        w = sandbox_pool.pool().acquire(None)
        assert w.request(("load", ["MathAPI"], {}, False), timeout=30)[0] == "ok"
        os.kill(w.process.pid, signal.SIGUSR1)
        status, _ = w.request(("reset",), timeout=60)
        assert status == "ok" and w.alive()
        w.kill()
    finally:
        monkeypatch.delenv(faults.ENV_VAR)
        sandbox_pool.pool().shutdown()


def test_the_bench_runs_both_pools_side_by_side_and_loses_nothing():
    """``python -m bench.bench_isolation --concurrent 16 --periods 2`` (the benchmark's own path, small): both
    pools run every rollout with its tools, the bounded pool forks nothing in the second period, and no worker
    is left after shutdown."""
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.run([sys.executable, "-m", "bench.bench_isolation", "--concurrent", "16", "--periods", "2"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = {line[:44].strip(): line[44:].split() for line in proc.stdout.splitlines() if len(line) > 44}
    assert rows["rollouts that lost their tools"][:2] == ["0", "0"], proc.stdout
    assert rows["rollouts that met EMFILE"][:2] == ["0", "0"], proc.stdout
    assert rows["worker processes left after shutdown"][:2] == ["0", "0"], proc.stdout
    assert rows["workers forked, each period"][1] == "16/0", proc.stdout
    assert rows["tool calls (all periods)"][0] == rows["tool calls (all periods)"][1] != "0", proc.stdout
    assert "per-call latency: p99 (ms)" in rows, proc.stdout


@pytest.mark.parametrize("sizes, expected", [("1024", "256 and 1024"), ("4", "at least 8"), ("x", "whole numbers")])
def test_the_bench_reads_its_sizes(sizes, expected):
    """A single size above 256 runs beside 256; sizes too small or not numbers are a usage error (exit 2)."""
    from bench import bench_isolation

    import argparse

    ap = argparse.ArgumentParser()
    if expected == "256 and 1024":
        assert bench_isolation._sizes(ap, sizes) == [256, 1024]
        return
    with pytest.raises(SystemExit) as exc:
        bench_isolation._sizes(ap, sizes)
    assert exc.value.code == 2


@pytest.mark.parametrize("value", ["abc", "0", "-3", "2.5"])
def test_a_bad_tool_threads_setting_is_one_error_naming_it(monkeypatch, value):
    """``SEAL_BFCL_TOOL_THREADS`` is read like the pool's other settings: anything but a positive whole number is
    a ValueError that names the variable (a word used to give int()'s own message)."""
    monkeypatch.setattr(sandbox_client, "_EXECUTOR", None)
    monkeypatch.setenv(sandbox_client.ENV_TOOL_THREADS, value)
    with pytest.raises(ValueError, match=sandbox_client.ENV_TOOL_THREADS):
        sandbox_client.tool_executor()
