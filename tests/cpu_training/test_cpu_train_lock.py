"""The CPU training environment is installed from an exact lock with ``--no-deps``: whatever the plugin itself
needs at run time must be in it, or a command a user runs from that environment (``seal-verl report`` after
``make run``) stops with a ModuleNotFoundError."""

from __future__ import annotations

import ast
import os
import re

from _paths import REPO

LOCK = os.path.join(REPO, "recipes", "bfcl_v3", "cpu", "requirements-cpu-train.txt")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _locked() -> set[str]:
    with open(LOCK, encoding="utf-8") as fh:
        return {_norm(line.split("==", 1)[0]) for line in fh if "==" in line and not line.startswith("#")}


def _install_requires() -> list[str]:
    tree = ast.parse(open(os.path.join(REPO, "setup.py"), encoding="utf-8").read())
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "install_requires":
            return [re.split(r"[<>=!~\[ ]", ast.literal_eval(el))[0] for el in node.value.elts]
    raise AssertionError("setup.py has no install_requires")


def test_the_plugins_own_requirements_are_locked():
    missing = [r for r in _install_requires() if _norm(r) not in _locked()]
    assert not missing, f"the CPU training lock lacks the plugin's requirement(s) {missing}"


def test_matplotlib_and_what_it_imports_are_locked():
    # matplotlib's own run-time requirements (its metadata), which --no-deps would not bring
    needed = {"matplotlib", "contourpy", "cycler", "fonttools", "kiwisolver", "numpy", "packaging", "pillow",
              "pyparsing", "python-dateutil"}
    assert needed <= _locked(), sorted(needed - _locked())
