"""Sharing the closed-loop state between the trainer driver and the rollout workers.

The driver (verl's trainer, inside the TaskRunner actor) owns the truth: it runs ``closed_loop_step`` after
each training step and publishes the resulting ``ClosedLoopState`` as a plain dict. Rollout workers (verl's
agent-loop workers, one process each, possibly on other nodes) read it at the start of each rollout; they
cache it per training step so one step costs one remote call per worker.

The holder is a small Ray named actor:

- named, so any process of the job finds it with ``ray.get_actor`` (cluster-wide, so across nodes);
- namespace-aware: ``namespace=None`` means the caller's current namespace (the job's; the TaskRunner and
  every worker verl starts share it); pass an explicit namespace when driver and readers differ;
- detached-safe: created with ``get_if_exists``, so an actor left over from an earlier run (``detached``)
  is reused, and the driver always overwrites its content at start-up before any rollout is dispatched
  (``SealDriver.publish`` in ``_load_checkpoint``), so a reader never sees a previous run's state;
- zero CPUs, so it schedules on any node, also a GPU-only node with every CPU lent out;
- placeable: ``seal.state_actor.resources`` names Ray custom resources it asks for, so a cluster that labels
  a node with one (``ray start --resources``) keeps the actor there.

The payload is a JSON-like dict ``{"format": 1, "global_step": int, "run_id": str, "switches": {...},
"state": ClosedLoopState.to_dict()}``. This module imports neither verl nor the SEAL core, so it can run in
any worker.
"""

from __future__ import annotations

import asyncio
import copy
import re
from typing import Any, Optional

import ray

PAYLOAD_FORMAT = 1

#: Prefix of default actor names; the rest is the run's project and experiment name.
DEFAULT_NAME_PREFIX = "seal_state"


class SealStateError(RuntimeError):
    """The closed-loop state could not be found or read."""


class SealStateHolder:
    """Holds the latest published payload and a version counter. Plain Python; wrapped by ``ray.remote``."""

    def __init__(self) -> None:
        self._payload: Optional[dict] = None
        self._version = 0

    def set(self, payload: dict) -> int:
        if not isinstance(payload, dict):
            raise TypeError(f"SEAL state payload must be a dict, got {type(payload).__name__}")
        self._payload = copy.deepcopy(payload)
        self._version += 1
        return self._version

    def get(self) -> Optional[dict]:
        return self._payload

    def version(self) -> int:
        return self._version

    def ping(self) -> bool:
        return True


# Serial (one call at a time): every call is a dict copy or read, microseconds even with many readers.
_RemoteHolder = ray.remote(num_cpus=0)(SealStateHolder)


def default_actor_name(project_name: Any = None, experiment_name: Any = None) -> str:
    """``seal_state/<project>/<experiment>``, so two runs sharing a Ray cluster do not share a state."""
    parts = [DEFAULT_NAME_PREFIX]
    for p in (project_name, experiment_name):
        if p is not None and str(p) != "":
            parts.append(re.sub(r"[^A-Za-z0-9_.\-]", "_", str(p)))
    return "/".join(parts)


def actor_coordinates(config: Any) -> tuple[str, Optional[str], bool]:
    """(name, namespace, detached) of the state actor for a verl trainer config (DictConfig or dict).

    Reads ``seal.state_actor.{name,namespace,detached}``; an unset name defaults to
    ``default_actor_name(trainer.project_name, trainer.experiment_name)``. The driver and every rollout
    worker call this with the same config, so they agree on the actor without passing handles around.
    """

    def _get(node: Any, key: str, default: Any = None) -> Any:
        if node is None:
            return default
        try:
            value = node.get(key, default)
        except AttributeError:
            return default
        return default if value is None else value

    seal = _get(config, "seal")
    sa = _get(seal, "state_actor")
    trainer = _get(config, "trainer")
    name = _get(sa, "name")
    if not name:
        name = default_actor_name(_get(trainer, "project_name"), _get(trainer, "experiment_name"))
    namespace = _get(sa, "namespace")
    detached = bool(_get(sa, "detached", False))
    return str(name), (str(namespace) if namespace else None), detached


def get_or_create_state_actor(name: str, namespace: Optional[str] = None, detached: bool = False,
                              resources: Optional[dict] = None):
    """Return the handle of the named holder, creating it if needed. Requires ``ray.init`` to have run.

    ``resources`` (Ray custom resources, name -> amount) apply only when the actor is created here."""
    if not ray.is_initialized():
        raise SealStateError("Ray is not initialised; the SEAL state actor lives in the Ray cluster")
    options: dict[str, Any] = {"name": name, "get_if_exists": True}
    if namespace:
        options["namespace"] = namespace
    if detached:
        options["lifetime"] = "detached"
    if resources:
        options["resources"] = dict(resources)
    return _RemoteHolder.options(**options).remote()


def lookup_state_actor(name: str, namespace: Optional[str] = None):
    """Handle of an existing holder; ``SealStateError`` with the name and namespace if there is none."""
    if not ray.is_initialized():
        raise SealStateError("Ray is not initialised; cannot look up the SEAL state actor")
    try:
        return ray.get_actor(name, namespace=namespace)
    except ValueError as e:  # ray raises ValueError for an unknown actor name
        raise SealStateError(
            f"SEAL state actor {name!r} (namespace {namespace or '<current>'}) not found. The SEAL trainer "
            "creates it at start-up: run with trainer.v1.trainer_mode=seal (or the legacy trainer with a "
            "seal section), and check that seal.state_actor matches between driver and workers."
        ) from e


class StatePublisher:
    """Driver side: owns the holder and stores payloads in it.

    The publisher keeps the actor handle for its lifetime: a non-detached named actor is destroyed by Ray
    as soon as its owner holds no handle to it any more.
    """

    def __init__(self, name: str, namespace: Optional[str] = None, detached: bool = False,
                 resources: Optional[dict] = None):
        self.name, self.namespace, self.detached = name, namespace, detached
        self.resources = dict(resources or {})
        self._handle = None

    def publish(self, payload: dict) -> int:
        """Store ``payload`` (created on first use); returns the holder's version."""
        if self._handle is None:
            self._handle = get_or_create_state_actor(self.name, namespace=self.namespace, detached=self.detached,
                                                     resources=self.resources)
        return int(ray.get(self._handle.set.remote(payload)))


def read_state(name: str, namespace: Optional[str] = None) -> dict:
    """One uncached read (driver-side checks, tests). Raises if the actor or the payload is missing."""
    payload = ray.get(lookup_state_actor(name, namespace).get.remote())
    if payload is None:
        raise SealStateError(f"SEAL state actor {name!r} exists but no state was published yet")
    return payload


def kill_state_actor(name: str, namespace: Optional[str] = None) -> bool:
    """Remove the holder (needed for detached actors, which outlive their job). False if there was none."""
    try:
        handle = ray.get_actor(name, namespace=namespace)
    except ValueError:
        return False
    ray.kill(handle, no_restart=True)
    return True


class StateClient:
    """Rollout-worker side reader with a per-step cache.

    ``get(step)`` / ``await aget(step)`` return the payload published most recently, fetched once per
    ``step`` (verl passes ``global_steps`` to every agent loop; all rollouts of a step see the same state).
    The returned dict is shared between callers of the same step: treat it as read-only.

    A ``slot`` keeps a cache of its own. The cue-effect probe's rollouts read in theirs: they run at the start
    of a step, before the probe's result may change the state (a retired cue kind), and the step's training
    rollouts must then read the state as published after the probe, not the one the probe cached.
    """

    #: the training rollouts' slot
    ROLLOUTS = "rollouts"

    def __init__(self, name: str, namespace: Optional[str] = None):
        self.name = name
        self.namespace = namespace
        self._handle = None
        self._cached: dict[str, tuple[int, dict]] = {}
        self._lock: Optional[asyncio.Lock] = None
        self.fetches = 0  # remote reads so far (for tests and metrics)

    def _actor(self):
        if self._handle is None:
            self._handle = lookup_state_actor(self.name, self.namespace)
        return self._handle

    def _hit(self, step: int, slot: str) -> Optional[dict]:
        cached = self._cached.get(slot)
        return cached[1] if cached is not None and cached[0] == int(step) else None

    def _store(self, step: int, payload: Optional[dict], slot: str) -> dict:
        if payload is None:
            raise SealStateError(
                f"SEAL state actor {self.name!r} holds no state yet (the trainer publishes it at start-up)"
            )
        if payload.get("format") != PAYLOAD_FORMAT:
            raise SealStateError(f"unsupported SEAL state payload format {payload.get('format')!r}")
        self.fetches += 1
        self._cached[slot] = (int(step), payload)
        return payload

    def get(self, step: int, slot: str = ROLLOUTS) -> dict:
        hit = self._hit(step, slot)
        if hit is not None:
            return hit
        return self._store(step, ray.get(self._actor().get.remote()), slot)

    async def aget(self, step: int, slot: str = ROLLOUTS) -> dict:
        hit = self._hit(step, slot)
        if hit is not None:
            return hit
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            hit = self._hit(step, slot)
            if hit is not None:
                return hit
            payload = await self._actor().get.remote()
            return self._store(step, payload, slot)


_CLIENTS: dict[tuple[str, Optional[str]], StateClient] = {}


def client_for(config: Any) -> StateClient:
    """The per-process ``StateClient`` for a verl trainer config (see ``actor_coordinates``)."""
    name, namespace, _ = actor_coordinates(config)
    key = (name, namespace)
    if key not in _CLIENTS:
        _CLIENTS[key] = StateClient(name, namespace)
    return _CLIENTS[key]
