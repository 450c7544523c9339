"""Environments by name: how a dataset row's ``extra_info.env`` becomes an :class:`Environment`.

Three ways to make a name known, looked up in this order:

1. :func:`register_environment` in the running process (tests, notebooks, an ``import`` in your own code);
2. the built-in environments below, imported on first use (so naming one costs nothing until it is used);
3. an installed package's entry point in the group ``seal_verl.environments`` (``name = "pkg.mod:Class"``):
   the way to make your environment known in every Ray worker without touching this repository.

A name may also be written as an import path ``"pkg.module:Attr"`` directly. ``Attr`` is an
:class:`~env_wrappers.protocol.Environment` instance, or a class or function that makes one without arguments.
One instance per name and process is kept (environments cache their tasks).

The environment :func:`get_environment` returns carries the name it was asked for in ``env.name`` (an alias, an
entry point's name, an import path), whatever its class declares: that is the name
:meth:`~env_wrappers.protocol.Environment.dataset_rows` writes into ``extra_info.env`` and the agent loop writes
into the trace, so every row and trace names its environment in a way that resolves again. An instance
registered under a name other than its own is served as a shallow copy, so one object can stand behind several
names.
"""

from __future__ import annotations

import copy
import importlib
import threading
from importlib import metadata
from typing import Any, Union

from env_wrappers.protocol import Environment

__all__ = ["register_environment", "get_environment", "environment_names", "ENTRY_POINT_GROUP"]

ENTRY_POINT_GROUP = "seal_verl.environments"

#: Environments shipped with the project (import path of the class, imported on first use).
BUILTIN: dict[str, str] = {
    "bfcl": "env_wrappers.bfcl.environment:BFCLEnvironment",
    "ledger": "env_wrappers.ledger.environment:LedgerEnvironment",
}

_REGISTERED: dict[str, Union[str, Any]] = {}
_INSTANCES: dict[str, Environment] = {}
_LOCK = threading.Lock()


def register_environment(name: str, target: Union[str, Environment, type], replace: bool = False) -> None:
    """Make ``name`` resolve to ``target`` (an Environment, a class / factory, or a ``"module:Attr"`` path).

    Registering another target under a taken name raises ``ValueError`` unless ``replace``.
    """
    if not isinstance(name, str) or not name or ":" in name:
        raise ValueError(f"an environment name must be a non-empty string without ':', got {name!r}")
    with _LOCK:
        old = _REGISTERED.get(name)
        if old is not None and old is not target and not replace:
            raise ValueError(f"environment {name!r} is already registered ({old!r}); pass replace=True")
        _REGISTERED[name] = target
        _INSTANCES.pop(name, None)


def _entry_points() -> dict[str, str]:
    return {ep.name: ep.value for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}


def environment_names() -> list[str]:
    """Every name :func:`get_environment` resolves (registered, built-in, entry points)."""
    return sorted(set(_REGISTERED) | set(BUILTIN) | set(_entry_points()))


def _load(path: str) -> Any:
    module, _, attr = path.partition(":")
    if not module or not attr:
        raise ValueError(f"an environment import path must look like 'package.module:Attr', got {path!r}")
    obj: Any = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def _instantiate(name: str, target: Any) -> Environment:
    if isinstance(target, str):
        target = _load(target)
    fresh = isinstance(target, type)  # a class makes a new object; an instance or a factory's may be shared
    env = target if isinstance(target, Environment) else target()
    if not isinstance(env, Environment):
        raise TypeError(f"environment {name!r} resolved to {type(env).__name__}, not an env_wrappers.protocol."
                        "Environment")
    if env.name != name:
        # Rows and traces name the environment by env.name: it must be the name that resolved, not the class's
        # own (which may be registered nowhere). A shared object is copied so its other names keep theirs.
        if env.name and not fresh:
            env = copy.copy(env)
        env.name = name
    return env


def get_environment(name: str) -> Environment:
    """The environment registered as ``name`` (or at the import path ``name``); ``KeyError`` if unknown."""
    if not isinstance(name, str) or not name:
        raise KeyError(f"environment name must be a non-empty string, got {name!r}")
    env = _INSTANCES.get(name)
    if env is not None:
        return env
    with _LOCK:
        env = _INSTANCES.get(name)
        if env is not None:
            return env
        if name in _REGISTERED:
            target: Any = _REGISTERED[name]
        elif name in BUILTIN:
            target = BUILTIN[name]
        elif ":" in name:
            target = name
        else:
            target = _entry_points().get(name)
            if target is None:
                raise KeyError(
                    f"unknown environment {name!r}; known: {', '.join(environment_names()) or '(none)'}. "
                    f"Register it with env_wrappers.registry.register_environment, an entry point in the group "
                    f"{ENTRY_POINT_GROUP!r}, or give its import path 'package.module:Class'"
                )
        env = _instantiate(name, target)
        _INSTANCES[name] = env
        return env
