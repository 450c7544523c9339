"""Load a script of the repository (a recipe's entry point, not part of an installed package) as a module."""

from __future__ import annotations

import importlib.util
import os

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_script(rel_path: str, module_name: str):
    """The module of ``REPO/rel_path``, executed under ``module_name``."""
    import sys

    spec = importlib.util.spec_from_file_location(module_name, os.path.join(REPO, rel_path))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod
