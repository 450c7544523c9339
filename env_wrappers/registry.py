"""Environments by name: how a dataset row's ``extra_info.env`` becomes an :class:`Environment`.

Three ways to make a name known, looked up in this order:

1. :func:`register_environment` in the running process (tests, notebooks, an ``import`` in your own code);
2. the built-in environments below, imported on first use (so naming one costs nothing until it is used);
3. an installed package's entry point in the group ``seal_verl.environments`` (``name = "pkg.mod:Class"``):
   the way to make your environment known in every Ray worker without touching this repository.

A name may also be written as an import path ``"pkg.module:Attr"`` directly. ``Attr`` is an
:class:`~env_wrappers.protocol.Environment` instance, a subclass of it, or a function written in Python that makes
one without arguments (nothing else is called: a built-in such as ``sys:exit`` is refused before it runs).
One instance per name and process is kept (environments cache their tasks).

Which names run code: a plain name never imports anything but the built-in environments, what was registered,
and what an installed package declares as an entry point. An import path imports its module, which runs that
module's top-level code as any ``import`` does: it is a name from your own configuration (the agent-loop YAML,
``seal-verl dry-run --env``, the ``env`` of your dataset rows), trusted like the rest of it. Before anything is
imported, an import path must be dotted Python identifiers on both sides of the ``:`` (so no path separators,
no ``..``, no relative import) and every name at most :data:`MAX_NAME_CHARS` characters without control
characters. A name that cannot be used is a ``KeyError``; a module, entry point or constructor that fails while
loading is one :class:`EnvironmentLoadError` whose one-line message names the environment and the error.

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
import inspect
import re
import threading
from importlib import metadata
from typing import Any, Union

from env_wrappers.protocol import Environment

__all__ = ["register_environment", "get_environment", "environment_names", "ENTRY_POINT_GROUP",
           "EnvironmentLoadError", "MAX_NAME_CHARS"]

ENTRY_POINT_GROUP = "seal_verl.environments"

#: Environments shipped with the project (import path of the class, imported on first use).
BUILTIN: dict[str, str] = {
    "bfcl": "env_wrappers.bfcl.registered:BFCL",
    "ledger": "env_wrappers.ledger.environment:LedgerEnvironment",
}

#: Longest environment name (an import path included) that is looked up at all.
MAX_NAME_CHARS = 200
_IDENTIFIERS = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*"
_IMPORT_PATH = re.compile(rf"({_IDENTIFIERS}):({_IDENTIFIERS})")


class EnvironmentLoadError(ImportError):
    """The code a name resolved to could not be loaded or did not make an environment; one line naming both."""


_REGISTERED: dict[str, Union[str, Any]] = {}
_INSTANCES: dict[str, Environment] = {}
_LOCK = threading.Lock()


def register_environment(name: str, target: Union[str, Environment, type], replace: bool = False) -> None:
    """Make ``name`` resolve to ``target`` (an Environment, a class / factory, or a ``"module:Attr"`` path).

    Registering another target under a taken name raises ``ValueError`` unless ``replace``.
    """
    try:
        _check_name(name)
    except KeyError as exc:
        raise ValueError(exc.args[0]) from None
    if ":" in name:
        raise ValueError(f"an environment name to register has no ':' (that is an import path), got {_shown(name)}")
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


def _shown(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit - 3]}..."


def _check_name(name: Any) -> None:
    """A ``KeyError`` for a name no environment can have: not a string, empty, too long, or with control
    characters (a line break would forge a second line of an error message)."""
    if not isinstance(name, str) or not name:
        raise KeyError(f"environment name must be a non-empty string, got {_shown(name)}")
    if len(name) > MAX_NAME_CHARS:
        raise KeyError(f"environment name {_shown(name)} is {len(name)} characters long; at most {MAX_NAME_CHARS}")
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise KeyError(f"environment name {_shown(name)} has control characters")


def _split_import_path(path: str) -> "tuple[str, str] | None":
    """``(module, attribute path)`` of ``"package.module:Attr"``, or None when ``path`` is not of that form."""
    m = _IMPORT_PATH.fullmatch(path)
    return None if m is None else (m.group(1), m.group(2))


def _bad_import_path(name: str, path: str) -> str:
    return (f"environment {_shown(name)}: an import path is 'package.module:Attr' with dotted Python identifiers on "
            f"both sides (no path separators, no '..'), got {_shown(path)}")


def _load(path: str, name: str) -> Any:
    parts = _split_import_path(path)
    if parts is None:
        raise ValueError(_bad_import_path(name, path))
    obj: Any = importlib.import_module(parts[0])
    for part in parts[1].split("."):
        obj = getattr(obj, part)
    return obj


def _make(target: Any, loaded: bool) -> Any:
    """The environment ``target`` stands for. What was ``loaded`` from a path is called only when it is an
    Environment class or a function written in Python (a factory); an object registered in Python may be any
    callable, as its owner chose."""
    if isinstance(target, Environment):
        return target
    if isinstance(target, type):
        if not issubclass(target, Environment):
            raise TypeError(f"{target.__name__} is not a subclass of env_wrappers.protocol.Environment")
        return target()
    if inspect.isfunction(target) or inspect.ismethod(target) or (callable(target) and not loaded):
        return target()
    raise TypeError(f"it names {type(target).__name__} {_shown(target, 60)}, not an environment, an Environment "
                    "class or a function that makes one")


def _instantiate(name: str, target: Any, where: str) -> Environment:
    try:
        loaded = isinstance(target, str)
        if loaded:
            target = _load(target, name)
        fresh = isinstance(target, type)  # a class makes a new object; an instance or a factory's may be shared
        env = _make(target, loaded)
    except (Exception, SystemExit) as exc:  # any failure of someone else's code: one line, not its traceback
        detail = " ".join(str(exc).split()) or "(no message)"
        if len(detail) > 300:
            detail = detail[:297] + "..."
        raise EnvironmentLoadError(f"environment {_shown(name)} ({where}) cannot be loaded: "
                                   f"{type(exc).__name__}: {detail}") from exc
    if not isinstance(env, Environment):
        raise EnvironmentLoadError(f"environment {_shown(name)} ({where}) resolved to {type(env).__name__}, not an "
                                   "env_wrappers.protocol.Environment")
    if env.name != name:
        # Rows and traces name the environment by env.name: it must be the name that resolved, not the class's
        # own (which may be registered nowhere). A shared object is copied so its other names keep theirs.
        if env.name and not fresh:
            env = copy.copy(env)
        env.name = name
    return env


def get_environment(name: str) -> Environment:
    """The environment registered as ``name`` (or at the import path ``name``).

    Raises:
        KeyError: an unknown name, or one no environment can have (see the module's docstring).
        EnvironmentLoadError: the code the name resolves to fails to import or to make an environment.
    """
    env = _INSTANCES.get(name) if isinstance(name, str) else None
    if env is not None:
        return env
    _check_name(name)
    with _LOCK:
        env = _INSTANCES.get(name)
        if env is not None:
            return env
        if name in _REGISTERED:
            target, where = _REGISTERED[name], "registered"
        elif name in BUILTIN:
            target, where = BUILTIN[name], "built in"
        elif ":" in name:
            if _split_import_path(name) is None:
                raise KeyError(_bad_import_path(name, name))
            target, where = name, "import path"
        else:
            target, where = _entry_points().get(name), f"entry point of the group {ENTRY_POINT_GROUP!r}"
            if target is None:
                raise KeyError(
                    f"unknown environment {_shown(name)}; known: {', '.join(environment_names()) or '(none)'}. "
                    f"Register it with env_wrappers.registry.register_environment, an entry point in the group "
                    f"{ENTRY_POINT_GROUP!r}, or give its import path 'package.module:Class'"
                )
            target = target.split("[", 1)[0].strip()  # an entry point's optional [extras] are not part of the path
        env = _instantiate(name, target, where)
        _INSTANCES[name] = env
        return env
