"""Many rollouts of the same task, interleaved, end exactly as their sequential replays; nothing leaks.

For each of several stateful tasks (a GorillaFileSystem task, MessageAPI + TradingBot and TicketAPI +
TravelAPI tasks whose backends draw ids from per-instance random generators, and a long_context task), 64+
rollouts, each with a different perturbed trajectory rendered in a rotating call format, are driven

- in one thread, in a random interleaving of their steps;
- from a pool of threads that pick random rollouts to advance (an environment migrates between threads;
  switch interval lowered so that the interpreter preempts often), with and without per-call timeouts;
- from asyncio tasks that yield at random points and run some steps in worker threads;

and each must end in the same public backend state (``env.backends.state()``), the same random-generator
states and the same trace as the same rollout run alone. Their traces are then judged concurrently and must
get the sequential verdicts and labels. Leaks between ``BFCLEnv`` instances of the same task would show as
differences; they are also checked directly: no mutable object is reachable from two rollouts' backends or
from a backend and the task data, the task data and the backend classes' and modules' mutable globals are
unchanged, and a rollout created before all others and never stepped still has the initial state.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import copy
import json
import pickle
import random
import sys
import threading
import types

import pytest

from env_wrappers.bfcl.environment.env import BFCLEnv
from env_wrappers.bfcl.environment.judge import judge_trace
from env_wrappers.bfcl.environment.perturb import KINDS, ground_truth_steps, perturb, render_step
from env_wrappers.bfcl.environment.tasks import load_tasks

TASK_IDS = ("multi_turn_base_10", "multi_turn_base_131", "multi_turn_base_196", "multi_turn_long_context_0",
            "multi_turn_long_context_91")
N_ROLLOUTS = 64
FORMATS = ("json", "python", "fc")
CLOSE = "Done."


def _trajectories(task, n: int) -> list:
    """n distinct trajectories: the ground truth, single perturbations, then pairs of them on different turns."""
    seen, out = set(), []

    def add(traj):
        key = json.dumps(traj)
        if key not in seen:
            seen.add(key)
            out.append(traj)

    add(ground_truth_steps(task))
    singles = []
    for seed in range(12):
        for kind in KINDS:
            p = perturb(task, kind, seed)
            if p is not None:
                singles.append(p)
                add(p[0])
    rng = random.Random(task.id)
    while len(out) < n:
        (a, ka), (b, kb) = rng.sample(singles, 2)
        if ka != kb:
            traj = [list(t) for t in a]
            traj[kb] = b[kb]
            add(traj)
    return out[:n]


def _messages(task, traj, fmt: str) -> list:
    """The assistant messages of one rollout: each step rendered in ``fmt``, each turn closed by text."""
    msgs = []
    for steps in traj:
        msgs.extend(render_step(task, s, fmt) for s in steps if s)
        msgs.append(CLOSE)
    return msgs


def _rng_states(env) -> dict:
    return {name: inst._random.getstate() for name, inst in env.backends.instances.items()
            if isinstance(getattr(inst, "_random", None), random.Random)}


def _outcome(env) -> tuple:
    return env.backends.state(), _rng_states(env), env.trace.to_dict()


def _same(a: tuple, b: tuple) -> bool:
    return a[0] == b[0] and a[1] == b[1] and a[2] == b[2]


class Rollouts:
    """The rollouts of one task: messages per rollout and the sequential reference outcome of each."""

    def __init__(self, task, call_timeout_s):
        self.task = task
        self.timeout = call_timeout_s
        trajs = _trajectories(task, N_ROLLOUTS)
        self.msgs = [_messages(task, t, FORMATS[i % len(FORMATS)]) for i, t in enumerate(trajs)]
        self.formats = [FORMATS[i % len(FORMATS)] for i in range(len(trajs))]

    def new_env(self, i: int) -> BFCLEnv:
        env = BFCLEnv(self.task, call_format=self.formats[i], call_timeout_s=self.timeout)
        env.reset()
        return env

    def run_alone(self, i: int) -> BFCLEnv:
        env = self.new_env(i)
        for m in self.msgs[i]:
            env.step(m)
        assert env.done
        return env


# ----------------------------------------------------------------------------------------------------------
# drivers: each returns the finished environments, index-aligned with the rollouts


def drive_interleaved(ro: Rollouts, seed: int) -> list:
    rng = random.Random(seed)
    envs = [None] * len(ro.msgs)
    cursor = [0] * len(ro.msgs)
    live = list(range(len(ro.msgs)))
    while live:
        i = rng.choice(live)
        if envs[i] is None:
            envs[i] = ro.new_env(i)
        else:
            envs[i].step(ro.msgs[i][cursor[i]])
            cursor[i] += 1
            if cursor[i] == len(ro.msgs[i]):
                live.remove(i)
    return envs


def drive_threads(ro: Rollouts, seed: int, n_threads: int = 16) -> list:
    n = len(ro.msgs)
    envs = [None] * n
    cursor = [0] * n
    busy = [False] * n
    lock = threading.Lock()
    errors = []

    def worker(wseed):
        rng = random.Random(wseed)
        while True:
            with lock:
                free = [i for i in range(n) if not busy[i] and cursor[i] < len(ro.msgs[i])]
                if not free:
                    if all(cursor[i] == len(ro.msgs[i]) for i in range(n)):
                        return
                    i = None
                else:
                    i = rng.choice(free)
                    busy[i] = True
            if i is None:
                threading.Event().wait(0.0005)
                continue
            try:
                if rng.random() < 0.2:
                    threading.Event().wait(rng.random() * 0.0005)
                if envs[i] is None:
                    envs[i] = ro.new_env(i)  # created on whichever thread gets there first
                else:
                    envs[i].step(ro.msgs[i][cursor[i]])
                    with lock:
                        cursor[i] += 1
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(repr(exc))
                with lock:
                    cursor[i] = len(ro.msgs[i])
            finally:
                with lock:
                    busy[i] = False

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        threads = [threading.Thread(target=worker, args=(seed * 1000 + k,)) for k in range(n_threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    finally:
        sys.setswitchinterval(old)
    assert not errors, errors[:5]
    return envs


def drive_asyncio(ro: Rollouts, seed: int) -> list:
    n = len(ro.msgs)
    envs = [None] * n

    async def rollout(i, rng):
        await asyncio.sleep(rng.random() * 0.001)
        envs[i] = await asyncio.to_thread(ro.new_env, i) if rng.random() < 0.5 else ro.new_env(i)
        for m in ro.msgs[i]:
            r = rng.random()
            if r < 0.4:
                await asyncio.sleep(0)
            elif r < 0.5:
                await asyncio.sleep(rng.random() * 0.0005)
            if rng.random() < 0.5:
                await asyncio.to_thread(envs[i].step, m)
            else:
                envs[i].step(m)

    async def main():
        rngs = [random.Random(seed * 7919 + i) for i in range(n)]
        await asyncio.gather(*(rollout(i, rngs[i]) for i in range(n)))

    asyncio.run(main())
    return envs


# ----------------------------------------------------------------------------------------------------------
# leak detectors

_IMMUTABLE = (str, bytes, int, float, complex, bool, type(None), range, frozenset)
_SKIP = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType)


def _mutable_ids(roots) -> set:
    """ids of every mutable object reachable from ``roots`` (containers and plain objects)."""
    seen, out, stack = set(), set(), list(roots)
    while stack:
        obj = stack.pop()
        if isinstance(obj, _IMMUTABLE) or isinstance(obj, _SKIP) or id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, tuple):
            stack.extend(obj)
            continue
        out.add(id(obj))
        if isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, (list, set)):
            stack.extend(obj)
        elif hasattr(obj, "__dict__"):
            stack.extend(vars(obj).values())
    return out


#: Module-level values BFCL's own backends overwrite on every call (see backends.SHARED_STATE_METHODS): in
#: long-context mode the vehicle backend stores each outside-temperature reading in this module dict.
KNOWN_GLOBAL_WRITES = {("LONG_WEATHER_EXTENSION", "outsideTemperature")}


def _backend_globals(task) -> bytes:
    """A pickle of the mutable globals of the task's backend classes and their modules."""
    snap = {}
    for name, inst in BFCLEnv(task, call_timeout_s=None).backends.instances.items():
        cls = type(inst)
        snap[name] = {k: v for k, v in vars(cls).items() if not k.startswith("__") and isinstance(v, (dict, list, set))}
        mod = sys.modules[cls.__module__]
        for k, v in vars(mod).items():
            if not k.startswith("__") and isinstance(v, (dict, list, set)):
                if isinstance(v, dict):
                    v = {kk: vv for kk, vv in v.items() if (k, kk) not in KNOWN_GLOBAL_WRITES}
                snap[f"{mod.__name__}.{k}"] = v
    return pickle.dumps(snap)


# ----------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tasks():
    return load_tasks(list(TASK_IDS))


@pytest.mark.parametrize("task_id", TASK_IDS)
def test_interleaved_rollouts_match_sequential_replays(tasks, task_id):
    task = tasks[task_id]
    config_before = copy.deepcopy(task.initial_config)
    globals_before = _backend_globals(task)
    untouched = BFCLEnv(task, call_timeout_s=None)  # created first, never stepped
    initial_state = copy.deepcopy(untouched.backends.state())

    ro_inline = Rollouts(task, call_timeout_s=None)
    ro_timed = Rollouts(task, call_timeout_s=10.0)
    assert len({json.dumps(m, default=str) for m in ro_inline.msgs}) == len(ro_inline.msgs) >= N_ROLLOUTS

    reference = [_outcome(ro_inline.run_alone(i)) for i in range(len(ro_inline.msgs))]
    again = [_outcome(ro_timed.run_alone(i)) for i in range(len(ro_timed.msgs))]
    assert all(_same(a, b) for a, b in zip(reference, again))  # deterministic, with or without the call pool
    # The trajectories really differ in what they leave behind.
    assert len({pickle.dumps(r[0]) for r in reference}) > 1

    runs = {
        "interleaved": drive_interleaved(ro_inline, seed=1),
        "threads": drive_threads(ro_inline, seed=2),
        "threads+timeout": drive_threads(ro_timed, seed=3),
        "asyncio": drive_asyncio(ro_inline, seed=4),
        "asyncio+timeout": drive_asyncio(ro_timed, seed=5),
    }
    for mode, envs in runs.items():
        assert all(e is not None and e.done for e in envs), mode
        bad = [i for i, e in enumerate(envs) if not _same(_outcome(e), reference[i])]
        assert not bad, f"{mode}: rollouts {bad[:10]} differ from their sequential replay"

    # Judging the interleaved traces concurrently gives the sequential verdicts and labels.
    seq_judged = [judge_trace(task, ro_inline.run_alone(i).trace) for i in range(len(ro_inline.msgs))]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        conc_judged = list(pool.map(lambda e: judge_trace(task, e.trace), runs["threads+timeout"]))
    for a, b in zip(seq_judged, conc_judged):
        assert (a.valid, a.error_type, a.labels) == (b.valid, b.error_type, b.labels)
    assert any(j.valid for j in seq_judged) and not all(j.valid for j in seq_judged)

    # No state leaks between instances of the same task.
    envs = runs["threads"]
    owned = [_mutable_ids(e.backends.instances.values()) for e in envs]
    shared = set()
    for i in range(len(owned)):
        for j in range(i + 1, len(owned)):
            shared |= owned[i] & owned[j]
    assert not shared, f"{len(shared)} mutable objects are reachable from two rollouts"
    task_data = _mutable_ids([task.initial_config, task.ground_truth, task.functions])
    assert not any(o & task_data for o in owned), "a rollout's backends hold the task's own data"
    assert task.initial_config == config_before
    assert _backend_globals(task) == globals_before, "a backend class or module global changed"
    assert untouched.backends.state() == initial_state
    assert BFCLEnv(task, call_timeout_s=None).backends.state() == initial_state


def test_module_level_writes_of_bfcl_backends_stay_per_rollout(tasks):
    """BFCL's long-context vehicle backend writes each temperature reading into a module-level dict and
    returns that dict: concurrent rollouts must still each see only their own readings."""
    from env_wrappers.bfcl.tools.backends import Backends

    task = tasks["multi_turn_long_context_91"]
    call = "get_outside_temperature_from_google()"
    n_threads, n_calls = 24, 150

    def backends(k: int, timeout):
        b = Backends(task.involved_classes, task.initial_config, task.long_context, timeout)
        for _ in range(k):  # a different position in the (per-instance, seeded) random sequence
            b.execute(call)
        return b

    for timeout in (None, 10.0):
        expected = []
        for k in range(n_threads):
            b = backends(k, None)
            expected.append([b.execute(call)[0] for _ in range(n_calls)])
        got = [None] * n_threads
        start = threading.Barrier(n_threads)

        def run(k):
            b = backends(k, timeout)
            start.wait()
            got[k] = [b.execute(call)[0] for _ in range(n_calls)]

        old = sys.getswitchinterval()
        sys.setswitchinterval(1e-6)
        try:
            threads = [threading.Thread(target=run, args=(k,)) for k in range(n_threads)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
        finally:
            sys.setswitchinterval(old)
        assert len({r[0] for r in expected}) > 1  # the rollouts really read different values
        bad = [k for k in range(n_threads) if got[k] != expected[k]]
        assert not bad, f"call_timeout_s={timeout}: rollouts {bad} saw another rollout's readings"


def test_batched_execution_matches_call_by_call(tasks, monkeypatch):
    """Backends.execute_many (one worker-thread hand-off per batch) returns exactly what call-by-call
    execute returns, leaves the same state, and keeps each call's own time limit: a hung call in the middle
    of a batch times out alone, later invocations get the broken-backend error without running, and checks
    that need no backend (unknown or refused names) answer as before."""
    from env_wrappers.bfcl.tools.backends import Backends

    task = tasks["multi_turn_base_10"]
    calls = [c for turn in task.ground_truth for c in turn]
    calls += ["teleport(x=1)", "remove(file_name='a')", "mkdir(dir_name=nan)", "cd(folder=5)", "ls(a=True)",
              "mkdir(dir_name='x', bogus=1)", "_load_scenario(scenario={})", "cd('..')"]
    for timeout in (None, 10.0):
        one = Backends(task.involved_classes, task.initial_config, task.long_context, timeout)
        many = Backends(task.involved_classes, task.initial_config, task.long_context, timeout)
        assert [one.execute(c) for c in calls] == many.execute_many(calls)
        assert one.state() == many.state()

    release = threading.Event()
    cls = type(Backends(task.involved_classes, task.initial_config).instances["GorillaFileSystem"])
    monkeypatch.setattr(cls, "pwd", lambda self: release.wait(5) or "late", raising=True)
    batch = ["ls()", "pwd()", "mkdir(dir_name='after')", "teleport(x=1)", "ls()"]
    one = Backends(task.involved_classes, task.initial_config, task.long_context, 0.3)
    many = Backends(task.involved_classes, task.initial_config, task.long_context, 0.3)
    import time

    t0 = time.monotonic()
    try:
        by_call = [one.execute(c) for c in batch]
        batched = many.execute_many(batch)
    finally:
        release.set()
    assert time.monotonic() - t0 < 3.0  # two hung calls, each cut off at its own 0.3 s limit
    assert batched == by_call
    assert batched[1][0].endswith("timed out after 0.3s") and batched[1][2]
    assert batched[2][1] and not batched[2][2]  # broken: not run
    assert batched[3][0] == "Error during execution: name 'teleport' is not defined"
