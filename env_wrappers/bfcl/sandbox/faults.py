"""Deterministic fault injection for the tool and judge workers, so every way out of their happy path is tested.

A worker can fail in ways a test cannot provoke reliably with real calls (a kill at one exact moment, a reply
cut in half, a call that overruns its limit without making the test wait for the limit). The variable
:data:`ENV_VAR` names the faults to inject, as ``point=action`` pairs separated by commas; a worker forked
from a process that has it set reads it at each point (the parent process never does). Unset (always,
outside tests), every point is one dictionary lookup that finds nothing.

An action may end in ``#<selector>``: it then fires only for a subject (a task id, or a call's text) that
starts with the selector, so that one task of a batch fails and the test sees the next one judged normally.
Points (where a fault fires) and their actions:

- ``judge_call=overrun#<call>``: a judge worker's model call shows on the progress board as started long
  ago, then blocks: the parent finds it over its limit at once (no test waits out a real limit);
- ``judge_call=exit#<call>``: the judge worker ends at the start of the call (killed during a model call);
- ``judge=exit@start#<task>``: the judge worker ends right after it received the request, before any work
  (what a worker killed while idle looks like to the next judgement); ``exit@ground_truth`` while it runs
  the ground truth; ``exit@finish`` after the model calls, before it replies; ``exit@reply`` halfway
  through writing its reply;
- ``judge=garbage@reply`` / ``judge=shape@reply`` / ``judge=close@reply``: the reply cannot be unpickled,
  has the wrong shape, or never comes (the worker closes its end of the pipe and lives on);
- ``judge=memory@build`` / ``tool=memory@build``: the worker allocates past its memory cap while it builds
  the task's state: a real ``MemoryError`` from the address-space limit;
- ``tool=garbage@reply#<call>`` / ``tool=shape@reply#<call>`` / ``tool=exit@reply#<call>``: a tool
  worker's reply to that call cannot be unpickled, has the wrong shape, or is cut off by the worker's end;
- ``tool=hold@reset``: a tool worker that is asked to reset (its rollout ended) waits, before it does, until
  it receives ``HOLD_SIGNAL`` (sent before it got there, the signal waits for it): a test holds the reset
  pending exactly as long as it needs, without sleeping.
"""

from __future__ import annotations

import os
import signal

#: The environment variable naming the faults to inject (see the module docstring); registered in
#: ``seal_verl.env_vars``, which refuses it outside the test suite and checks it with :func:`parse_spec`.
ENV_VAR = "SEAL_BFCL_FAULTS"

#: Every fault a worker knows: point -> the (kind, place) pairs it fires (place "" for ``judge_call``, whose
#: action has no ``@place``).
KNOWN = {
    "judge_call": {("overrun", ""), ("exit", "")},
    "judge": {("exit", "start"), ("exit", "ground_truth"), ("exit", "finish"), ("exit", "reply"),
              ("garbage", "reply"), ("shape", "reply"), ("close", "reply"), ("memory", "build"), ("hold", "reset")},
    "tool": {("memory", "build"), ("garbage", "reply"), ("shape", "reply"), ("exit", "reply"), ("hold", "reset")},
}


def parse_spec(spec: str) -> list[tuple[str, str, str, str]]:
    """``(point, kind, place, selector)`` of every item of a fault spec; ``ValueError`` naming the first item
    that is not a fault a worker knows (a misspelt fault would otherwise never fire, and nobody would know)."""
    out = []
    for item in spec.split(","):
        item = item.strip()
        point, eq, action = item.partition("=")
        action, _, selector = action.partition("#")
        kind, _, place = action.partition("@")
        if not eq or (kind, place) not in KNOWN.get(point, ()):
            known = "; ".join(f"{p}=" + "|".join(sorted(f"{k}@{w}" if w else k for k, w in pairs))
                              for p, pairs in KNOWN.items())
            raise ValueError(f"{item!r:.80} is not a fault a worker knows ({known}; each may end in #<selector>)")
        out.append((point, kind, place, selector))
    return out


#: Set in a worker process only: a fault never fires in the process that runs the tests or training.
_IN_WORKER = False


#: The signal that lets a worker held by a ``hold`` fault go on.
HOLD_SIGNAL = signal.SIGUSR1


def enter_worker() -> None:
    """Called by a worker when it starts: faults may fire in this process from now on."""
    global _IN_WORKER
    _IN_WORKER = True
    if any(action.partition("@")[0] == "hold" for point in ("tool", "judge") for action, _ in _actions(point)):
        # Kept pending until the hold point takes it, so a signal sent early is not lost (nor fatal).
        signal.pthread_sigmask(signal.SIG_BLOCK, {HOLD_SIGNAL})


def hold() -> None:
    """Wait until this process receives ``HOLD_SIGNAL``."""
    signal.sigwait({HOLD_SIGNAL})


def _actions(point: str):
    spec = os.environ.get(ENV_VAR) if _IN_WORKER else None
    if not spec:
        return
    for item in spec.split(","):
        name, _, action = item.strip().partition("=")
        if name == point and action:
            action, _, selector = action.partition("#")
            yield action, selector


def active(point: str, subject: str = "") -> str | None:
    """The action injected at ``point`` for ``subject``, or None (the normal case)."""
    for action, selector in _actions(point):
        if str(subject).startswith(selector):
            return action
    return None


def at(point: str, where: str, subject: str = "") -> str | None:
    """The kind of fault (``exit``, ``garbage``, ``memory``, ...) injected at ``point`` in ``where`` for
    ``subject``, or None."""
    for action, selector in _actions(point):
        kind, _, place = action.partition("@")
        if place == where and str(subject).startswith(selector):
            return kind
    return None


def die() -> None:
    """End this process at once, as a kill would (no cleanup, no reply)."""
    os._exit(70)


def exhaust_memory() -> None:
    """Allocate past the worker's address-space cap: a real ``MemoryError``. Without a cap (nothing would stop
    the allocation short of the host's memory) the error is raised directly."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        raise MemoryError("fault injection: no memory cap to exceed")
    hold = bytearray(soft)  # more than the whole cap: refused by the kernel before any page is touched
    del hold


def send_faulty(conn, message, kind: str) -> None:
    """Send ``message`` the way fault ``kind`` says: ``garbage`` (bytes no unpickler reads), ``shape`` (a
    reply of the wrong shape), ``close`` (no reply: this end of the pipe closes, the process lives on until
    it is killed), ``exit`` (half the message, then the process ends)."""
    import pickle
    import struct
    import time

    if kind == "garbage":
        conn.send_bytes(b"\x80\x05not a pickle")
    elif kind == "shape":
        conn.send(("ok",))
    elif kind == "close":
        conn.close()
        while True:
            time.sleep(60)
    elif kind == "exit":
        data = pickle.dumps(message)
        os.write(conn.fileno(), struct.pack("!i", len(data)) + data[: len(data) // 2])
        die()
    else:
        conn.send(message)
