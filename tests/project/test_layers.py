"""Layers, read from the imports (ast, also imports inside functions): the environments do not import the verl
glue, the tiny-model builders do not import each other, and the recipe tools use no private helper of the package."""

from __future__ import annotations

import ast
import os

import env_wrappers
import seal_verl

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(seal_verl.__file__)))


def _imports(path: str) -> list[tuple[str, list[str], int]]:
    """(module, imported names, line) of every absolute import in ``path``."""
    with open(path, encoding="utf-8") as fh:
        tree = ast.parse(fh.read(), path)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, [], node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.module, [a.name for a in node.names], node.lineno))
    return out


def _py_files(folder: str):
    for root, _dirs, files in os.walk(folder):
        for f in files:
            if f.endswith(".py"):
                yield os.path.join(root, f)


def test_environments_do_not_import_the_verl_glue():
    bad = [f"{os.path.relpath(p, ROOT)}:{line}"
           for p in _py_files(os.path.dirname(os.path.abspath(env_wrappers.__file__)))
           for module, _names, line in _imports(p) if module.startswith("seal_verl.verl_glue")]
    assert bad == []


def test_tiny_model_builders_do_not_import_each_other():
    tiny_model = os.path.join(ROOT, "seal_verl", "models", "tiny_model.py")
    backbone_tiny = os.path.join(ROOT, "seal_verl", "models", "backbones", "tiny.py")
    one_way = any(m.startswith("seal_verl.models.backbones") for m, _n, _l in _imports(tiny_model))
    other_way = any(m == "seal_verl.models.tiny_model" for m, _n, _l in _imports(backbone_tiny))
    assert not (one_way and other_way), "seal_verl/models/tiny_model.py and seal_verl/models/backbones/tiny.py import each other"


def test_recipes_use_no_private_helper_of_the_package():
    bad = [f"{os.path.relpath(p, ROOT)}:{line} {module}.{name}"
           for p in _py_files(os.path.join(ROOT, "recipes"))
           for module, names, line in _imports(p) if module.split(".")[0] == "seal_verl"
           for name in names if name.startswith("_")]
    assert bad == []


def _importers_of(folder: str, prefix: str) -> list[str]:
    """``file:line module`` of every import under ``folder`` (relative to the repository) of ``prefix`` or below."""
    return [f"{os.path.relpath(p, ROOT)}:{line} {module}" for p in _py_files(os.path.join(ROOT, folder))
            for module, names, line in _imports(p)
            if module == prefix or module.startswith(prefix + ".")
            or (module == prefix.rpartition(".")[0] and prefix.rpartition(".")[2] in names)]


def test_the_warm_start_and_the_recipes_do_not_use_the_dry_run_as_a_toolbox():
    """The rows, verl set-up and scripted assistant they share live in ``seal_verl.rollouts``; the dry run is one
    of their users, not their home."""
    assert _importers_of(os.path.join("seal_verl", "models", "warm_start"), "seal_verl.dry_run") == []
    assert _importers_of("recipes", "seal_verl.dry_run") == []


def test_the_rollout_toolbox_imports_neither_the_dry_run_nor_verl():
    """verl is reached through the glue (``seal_verl.verl_glue.in_process``), as everywhere outside it."""
    folder = os.path.join("seal_verl", "rollouts")
    assert _importers_of(folder, "seal_verl.dry_run") == []
    assert _importers_of(folder, "verl") == []


#: Rooms whose imports go one way (issue 41): a room is a module or a package, by its dotted name.
ROOMS = ("env_wrappers.protocol", "env_wrappers.bfcl.environment", "env_wrappers.bfcl.sandbox",
         "env_wrappers.bfcl.evaluation", "seal_verl.dry_run", "seal_verl.rollouts", "seal_verl.models.warm_start")
#: Pairs that still import each other both ways while their decoupling lands on another branch (empty: the
#: sandbox stopped importing the environment with issue 44).
BEING_DECOUPLED: set[tuple[str, str]] = set()


def _module_name(path: str, root: str) -> str:
    rel = os.path.relpath(path, root)[:-3].replace(os.sep, ".")
    return rel[: -len(".__init__")] if rel.endswith(".__init__") else rel


def _all_imports(path: str, root: str) -> set[str]:
    """Every module ``path`` imports, anywhere in the file, relative imports resolved (``from X import y`` counts
    as ``X`` and ``X.y``)."""
    with open(path, encoding="utf-8") as fh:
        tree = ast.parse(fh.read(), path)
    name = _module_name(path, root)
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(max(node.level - 1, 0)):
                base = base.rpartition(".")[0]
            module = (f"{base}.{node.module}" if node.module else base) if node.level else (node.module or "")
            out.add(module)
            out.update(f"{module}.{a.name}" for a in node.names)
    return out


def _room(module: str):
    return next((r for r in ROOMS if module == r or module.startswith(r + ".")), None)


def room_pairs_both_ways(root: str = ROOT) -> set[tuple[str, str]]:
    """The pairs of :data:`ROOMS` of which each imports the other (every import counts, also one in a function)."""
    edges = set()
    for top in ("env_wrappers", "seal_verl"):
        for path in _py_files(os.path.join(root, top)):
            source = _room(_module_name(path, root))
            for target in filter(None, map(_room, _all_imports(path, root)) if source else ()):
                if target != source:
                    edges.add((source, target))
    return {tuple(sorted(e)) for e in edges if (e[1], e[0]) in edges}


def test_no_two_rooms_import_each_other_both_ways():
    assert room_pairs_both_ways() - BEING_DECOUPLED == set()


def test_the_room_check_finds_a_pair(tmp_path):
    for rel, text in (("env_wrappers/protocol.py", "from seal_verl.dry_run import run\n"),
                      ("seal_verl/dry_run/__init__.py", ""),
                      ("seal_verl/dry_run/run.py", "def f():\n    from env_wrappers import protocol\n")):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert room_pairs_both_ways(str(tmp_path)) == {("env_wrappers.protocol", "seal_verl.dry_run")}
