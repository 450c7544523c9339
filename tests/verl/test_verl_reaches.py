"""verl is reached from one place: the glue. A source scan (ast) of what ``pip install .`` installs.

- No module outside ``seal_verl/verl_glue/`` imports verl (at the top or inside a function).
- Every private name of verl or OmegaConf that the glue reads, overrides or replaces, and every verl module
  attribute it assigns, is named in ``compat.REACHES`` with what it relies on. A new reach that is not listed
  fails here instead of breaking silently on the next verl release.
"""

from __future__ import annotations

import ast
import os
import re

import pytest

import env_wrappers
import reward_fns
import seal_verl
from seal_verl.verl_glue import compat

#: the installed packages (setup.py's find_packages), by their source folders
PACKAGES = [os.path.dirname(os.path.abspath(m.__file__)) for m in (seal_verl, env_wrappers, reward_fns)]
GLUE = os.path.join(PACKAGES[0], "verl_glue")
UPSTREAM = ("verl", "omegaconf")

#: installed folders outside the glue that still import verl, with why: none. (The CPU platform, which patches verl
#: for CPU-only runs, is its own distribution under recipes/bfcl_v3/cpu/platform, installed by the CPU set-up only.)
OUTSIDE_GLUE: dict[str, str] = {}

#: the glue's own attributes and methods whose names happen to equal a private name somewhere in verl
OWN_NAMES = {
    "_compute_score": "in_process.InProcessRewardWorker's own method (it wraps verl's public compute_score)",
    "_store": "state_actor's own attribute of the state actor",
    "_lock": "state_actor's own lock",
}


def _py_files(roots):
    for root in roots:
        for folder, _dirs, files in os.walk(root):
            for f in files:
                if f.endswith(".py"):
                    yield os.path.join(folder, f)


def _tree(path):
    with open(path, encoding="utf-8") as fh:
        return ast.parse(fh.read(), path)


def _imports_upstream(node, names=("verl",)) -> bool:
    if isinstance(node, ast.Import):
        return any(a.name.split(".")[0] in names for a in node.names)
    if isinstance(node, ast.ImportFrom):
        return node.level == 0 and (node.module or "").split(".")[0] in names
    return False


def verl_imports_outside_glue() -> list[str]:
    out = []
    for path in _py_files(PACKAGES):
        if path.startswith(GLUE + os.sep):
            continue
        for node in ast.walk(_tree(path)):
            if _imports_upstream(node):
                out.append(f"{os.path.relpath(path, os.path.dirname(PACKAGES[0]))}:{node.lineno}")
    return out


#: a private name defined in a source file: ``def _x``, ``class _x``, ``self._x = ...``, a module-level ``_x = ...``
_DEFINED = re.compile(r"(?:\bdef|\bclass)\s+(_[A-Za-z0-9]\w*)|\b(?:self|cls)\.(_[A-Za-z0-9]\w*)\s*(?::[^=\n]*)?=(?!=)"
                      r"|^(_[A-Za-z0-9]\w*)\s*(?::[^=\n]*)?=(?!=)", re.MULTILINE)


def _upstream_private_names() -> set[str]:
    """Private names (one leading underscore) that verl's and OmegaConf's own source define (read as text: the
    whole of verl parsed as ast takes minutes on a loaded machine)."""
    import omegaconf
    import verl

    out = set()
    for path in _py_files([os.path.dirname(verl.__file__), os.path.dirname(omegaconf.__file__)]):
        with open(path, encoding="utf-8", errors="replace") as fh:
            for match in _DEFINED.finditer(fh.read()):
                out.add(next(g for g in match.groups() if g))
    return out


def glue_reaches() -> dict[str, list[str]]:
    """name -> where: verl/OmegaConf private names the glue uses (attribute, import, method of the same name),
    and verl module attributes it assigns (``module.name = ...``)."""
    upstream = _upstream_private_names()
    found: dict[str, list[str]] = {}
    for path in _py_files([GLUE]):
        tree = _tree(path)
        where = os.path.relpath(path, os.path.dirname(PACKAGES[0]))
        modules = set()  # local names bound to verl modules or classes in this file
        for node in ast.walk(tree):
            if _imports_upstream(node, ("verl",)):
                modules.update((a.asname or a.name).split(".")[0] for a in node.names)
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Attribute):
                names.append(node.attr)
                if (isinstance(node.ctx, ast.Store) and isinstance(node.value, ast.Name)
                        and node.value.id in modules):
                    names.append(f"{node.value.id}.{node.attr}")
            elif _imports_upstream(node, UPSTREAM):
                names += [a.name for a in node.names]
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names.append(node.name)
            for name in names:
                if "." in name or (name in upstream and name not in OWN_NAMES):
                    found.setdefault(name, []).append(f"{where}:{node.lineno}")
    return found


def test_no_verl_import_outside_the_glue():
    found = verl_imports_outside_glue()
    unexpected = [f for f in found if not any(f.startswith(prefix) for prefix in OUTSIDE_GLUE)]
    assert unexpected == [], f"verl imported outside seal_verl/verl_glue/: {unexpected}"
    # an exemption that is no longer needed is dropped, so it cannot hide a new import later
    for prefix in OUTSIDE_GLUE:
        assert any(f.startswith(prefix) for f in found), f"{prefix} no longer imports verl: drop its exemption"


def test_every_reach_is_listed_in_compat():
    listed = " ".join(compat.REACHES.values())
    reaches = glue_reaches()
    # the reaches the issue names are found by the scan (so the scan itself works)
    for name in ("_compute_advantage", "_compute_metrics", "_validate", "_save_checkpoint", "_load_checkpoint",
                 "_get_root", "ray_trainer.compute_advantage", "ray_trainer.compute_data_metrics"):
        assert name in reaches, name
    missing = {name: where for name, where in reaches.items()
               if not re.search(r"(?<!\w)" + re.escape(name) + r"(?!\w)", listed)}
    assert missing == {}, f"reach verl/OmegaConf internals not listed in compat.REACHES: {missing}"


@pytest.mark.parametrize("name", sorted(OWN_NAMES))
def test_own_names_are_still_own(name):
    """An exempted name is still defined by the glue itself (else the exemption hides a reach)."""
    defined = False
    for path in _py_files([GLUE]):
        for node in ast.walk(_tree(path)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
                defined = True
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and node.attr == name:
                defined = True
    assert defined, name
