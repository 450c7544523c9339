"""BFCL's backend classes by name: the one reading of bfcl-eval's class-file map (``CLASS_FILE_PATH_MAPPING``)
and of its stateless classes, for the backends that instantiate the classes and the sandbox that imports them
before it forks its workers.

bfcl-eval is imported on first use only, so that importing this module stays cheap.
"""

from __future__ import annotations

import importlib
import threading

#: The classes BFCL V3's multi-turn tasks involve (the sandbox imports them before its first fork). The map
#: names more (BFCL V4's web search and memory backends, some of which need packages not installed here).
MULTI_TURN_CLASSES = ("GorillaFileSystem", "MathAPI", "MessageAPI", "TwitterAPI", "TicketAPI", "TradingBot",
                      "TravelAPI", "VehicleControlAPI")

_CACHE: dict[str, type] = {}
_LOCK = threading.Lock()
_STATELESS: frozenset | None = None


def class_modules() -> dict[str, str]:
    """bfcl-eval's map: class name -> the module that defines it."""
    from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING

    return dict(CLASS_FILE_PATH_MAPPING)


def class_for(class_name: str) -> type:
    """The backend class ``class_name`` (its module imported on first use).

    Raises:
        KeyError: bfcl-eval has no such class.
    """
    cls = _CACHE.get(class_name)
    if cls is not None:
        return cls
    modules = class_modules()
    if class_name not in modules:
        raise KeyError(f"unknown BFCL backend class {class_name!r}")
    with _LOCK:
        cls = getattr(importlib.import_module(modules[class_name]), class_name)
        _CACHE[class_name] = cls
    return cls


def stateless() -> frozenset[str]:
    """The classes bfcl-eval keeps no per-task state in (their instances need no initial configuration)."""
    global _STATELESS
    if _STATELESS is None:
        from bfcl_eval.constants.executable_backend_config import STATELESS_CLASSES

        _STATELESS = frozenset(STATELESS_CLASSES)
    return _STATELESS


def preload(names=MULTI_TURN_CLASSES) -> list[str]:
    """Import and resolve the classes ``names`` now (so that a forked worker never takes the lookup's lock);
    returns the names that could not be (a class missing from this bfcl-eval version)."""
    missing = []
    for name in names:
        try:
            class_for(name)
        except (ImportError, KeyError):  # pragma: no cover - a backend missing from this bfcl-eval version
            missing.append(name)
    return missing
