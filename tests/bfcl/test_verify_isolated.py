"""No model call runs in the judging process: the verifier of a rollout and of a result file meets a memory
bomb and a call that holds the interpreter lock, and stays within its memory and the call's time limit.

The bomb is ``find`` below 115 nested directories with 30,000-character names (about 200 million characters
of result, several hundred MB to build); the lock-holding call is ``power(base=10, exponent=30000000)``
(about half a minute of big-integer arithmetic). Each case runs in a fresh interpreter so that its peak
resident memory (``ru_maxrss``, which counts this process only, not its workers) says what judging cost,
read at exit so that a call the judgement abandoned to a thread, still running, counts as well.
The workers' memory cap is lowered to 256 MB for the test, so the bomb stays small for the machine too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from _paths import REPO

ROOT = REPO
TASK = "multi_turn_base_15"  # GorillaFileSystem + MathAPI
LIMIT_S = 2.0
CAP_MB = 256

SCRIPT = r"""
import json, resource, sys, time
from env_wrappers.bfcl.environment.env import BFCLEnv
from env_wrappers.bfcl.environment.environment import BFCLEnvironment
from env_wrappers.bfcl.environment.judge import judge_result
from env_wrappers.bfcl.environment.tasks import load_tasks
from env_wrappers.bfcl.sandbox import pool as sandbox_pool
from env_wrappers.bfcl.sandbox import worker as sandbox_worker
from env_wrappers.bfcl.sandbox.client import IsolatedBackends

mode, task_id, limit, cap = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
sandbox_worker.DEFAULT_MEMORY_LIMIT_MB = cap  # the cap of every worker this process starts from now on
task = load_tasks([task_id])[task_id]
depth, width = 115, 30_000
names = [(str(k) * width)[:width] for k in range(depth)]
steps = [[f"mkdir(dir_name='{n}')", f"cd(folder='{n}')"] for n in names]
steps += [["cd(folder='..')"] * 50, ["cd(folder='..')"] * 50, ["cd(folder='..')"] * (depth - 100)]
steps += [["find(path='.')"], ["power(base=10, exponent=30000000)"]]


def tool_call(c):
    name, args = c.split("(", 1)
    key, value = args.rstrip(")").split("=", 1)
    if name == "power":
        return {"name": name, "arguments": {"base": 10, "exponent": 30000000}}
    return {"name": name, "arguments": {key: value.strip("'")}}


def peak():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


if mode == "rollout":
    env = BFCLEnv(task, call_format="json", call_timeout_s=limit, max_steps_per_turn=len(steps) + 5)
    env._backends = IsolatedBackends(*env._backend_args[:3], call_timeout_s=limit, memory_limit_mb=cap)
    env.reset()
    for s in steps:
        env.step("".join("<tool_call>\n" + json.dumps(tool_call(c)) + "\n</tool_call>" for c in s))
    while not env.done:
        env.step("Done.")
    env.close()
    sandbox_pool.pool().shutdown()
    before, t0 = peak(), time.perf_counter()
    v = BFCLEnvironment().verify(task, env.trace, call_timeout_s=limit)
    elapsed = time.perf_counter() - t0
    trace = env.trace
    checks = len(v.checks)
else:
    result = [["[" + ", ".join(s) + "]" for s in steps] + ["Done."]] + [["Done."]] * (task.n_turns - 1)
    before, t0 = peak(), time.perf_counter()
    from env_wrappers.bfcl.environment.judge import _judge_replayed, _replay

    env = _replay(task, result, "python", limit)
    j = _judge_replayed(task, env, False, limit)
    elapsed = time.perf_counter() - t0
    trace = env.trace
    checks = len(j.labels)
recorded = [c.result for t in trace.turns for a in t.attempts for c in a.calls if c.parsed]
out = {"elapsed": elapsed, "checks": checks, "n_turns": task.n_turns, "find": recorded[-2][:200],
       "power": recorded[-1][:200]}


def report():  # at exit, after any thread the judgement left behind has finished: its memory counts too
    out["grown"] = peak() - before
    print(json.dumps(out), flush=True)


import atexit
atexit.register(report)
"""


def _judge_in_fresh_process(mode: str) -> dict:
    env = dict(os.environ, PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-c", SCRIPT, mode, TASK, str(LIMIT_S), str(CAP_MB)], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("mode", ["rollout", "result_file"])
def test_the_verifier_runs_no_model_call_in_the_judging_process(mode):
    """The reward path (``Environment.verify`` on a rollout's trace) and the result-file path (``judge_result``:
    ``diagnose``, ``eval`` scoring) judge a trajectory with a memory bomb and a lock-holding call: the judging
    process grows by far less than the bomb, the judgement ends within a few time limits, the lock-holding
    call is recorded as stopped at its limit and the bomb as an error, and every turn still gets a check."""
    from env_wrappers.bfcl.tools.backends import is_timeout_result

    r = _judge_in_fresh_process(mode)
    assert r["checks"] == r["n_turns"]
    assert r["grown"] < 64 * 2**20, f"judging grew the judging process by {r['grown'] / 2**20:.0f} MB"
    assert r["elapsed"] < 4 * LIMIT_S + 10, f"judging took {r['elapsed']:.1f}s with a {LIMIT_S:g}s call limit"
    assert is_timeout_result(r["power"]), r["power"]
    assert r["find"].startswith("Error during execution: "), r["find"]


def _fragment_heap(mb: int = 200) -> bytes:
    """Leave ``mb`` MB of freed but resident 60 KB chunks in this process's heap, below a live chunk that keeps
    the allocator from handing them back: what a parent that ran hundreds of tests looks like. A worker forked
    from it reuses those chunks, so its resident memory does not grow while its private memory does."""
    chunks = [bytes([i % 251]) * 60_000 for i in range(mb * 1000 // 60)]
    pin = bytes(60_000)
    del chunks
    return pin


@pytest.mark.parametrize("fragmented_parent", [False, True], ids=["plain-parent", "fragmented-parent"])
def test_a_judgement_worker_that_grew_is_not_reused(monkeypatch, fragmented_parent):
    """A judgement whose model calls built ~60 MB of state (under a 160 MB cap) leaves its worker stopped, not
    idle (what it took, the allocator may keep); a plain judgement after it gets a clean worker, which is
    kept warm. Nothing is left after shutdown. With a fragmented parent (the case of a full test run), the
    growth is in private pages only: a worker's resident peak did not see it."""
    from env_wrappers.bfcl.environment.isolated_verify import verify_isolated
    from env_wrappers.bfcl.environment.tasks import load_tasks
    from env_wrappers.bfcl.sandbox import pool as sandbox_pool
    from env_wrappers.bfcl.sandbox import worker as sandbox_worker

    task = load_tasks(["multi_turn_base_0"])["multi_turn_base_0"]
    monkeypatch.setattr(sandbox_worker, "DEFAULT_MEMORY_LIMIT_MB", 160)
    pool = sandbox_pool.pool()
    pool.shutdown()
    pin = _fragment_heap() if fragmented_parent else None  # noqa: F841  # kept alive until the workers fork
    heavy = ["mkdir(dir_name='d')", "cd(folder='d')"]
    for i in range(1000):
        heavy += [f"touch(file_name='f{i}')", f"echo(content='{chr(97 + i % 26) * 60_000}', file_name='f{i}')"]
    rest = [[] for _ in range(task.n_turns - 1)]
    official, _, outcomes = verify_isolated(task, [[heavy]] + rest, [True] + [False] * len(rest), False, 20.0,
                                            None, True)
    assert not any(ev.checker_error for ev in official.turns), official.turns[0].checker_error
    assert sum(1 for o in outcomes[0] if o[1]) == 0  # every call ran (within the cap)
    assert pool._judges.idle == [], "a judgement worker that grew by ~60 MB went back to the pool"
    official, _, _ = verify_isolated(task, [[["pwd()"]]] + rest, [True] + [False] * len(rest), False, 20.0, None,
                                     False)
    assert not official.turns[0].checker_error
    assert len(pool._judges.idle) == 1
    pids = [w.process.pid for w in pool._judges.idle]
    pool.shutdown()
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split(")")[1].split()[0] == "Z"
