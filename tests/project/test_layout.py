"""Rules the test suite keeps about itself: an import bug in the project fails a test instead of skipping it,
and a fixture several modules share is defined once, in conftest.py."""

from __future__ import annotations

import ast
import os

from _paths import TESTS

#: The project's own top-level packages (the product card's top level).
OWN = ("seal_verl", "env_wrappers", "reward_fns", "recipes", "bench")


def _test_files():
    """Every Python file of the suite, by its path below tests/ (subject folders included)."""
    for folder, dirs, names in os.walk(TESTS):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_")) and d not in ("__pycache__", "envs"))
        for name in sorted(names):
            if name.endswith(".py"):
                yield os.path.relpath(os.path.join(folder, name), TESTS)


def _modules():
    for name in _test_files():
        path = os.path.join(TESTS, name)
        with open(path, encoding="utf-8") as f:
            yield name, ast.parse(f.read(), filename=path)


def test_no_importorskip_of_the_projects_own_modules():
    found = []
    for name, tree in _modules():
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "importorskip" and node.args
                    and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
                    and node.args[0].value.split(".")[0] in OWN):
                found.append(f"{name}:{node.lineno} importorskip({node.args[0].value!r})")
    assert not found, "an import error in the project must fail, not skip: " + "; ".join(found)


def test_the_all_tasks_fixture_is_defined_once():
    """A module may narrow ``tasks`` to the few it needs; a copy of conftest's all-tasks loader is refused."""
    copies = []
    for name, tree in _modules():
        if name == "conftest.py":
            continue
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name == "tasks":
                calls = [n for n in ast.walk(node) if isinstance(n, ast.Call)
                         and getattr(n.func, "id", getattr(n.func, "attr", None)) == "load_tasks"]
                if any(not c.args and not c.keywords for c in calls):
                    copies.append(f"{name}:{node.lineno}")
    assert not copies, "use the tasks fixture of conftest.py: " + ", ".join(copies)


def test_every_test_file_that_starts_ray_is_in_the_ray_work_unit():
    """``make test`` runs two pytest-xdist workers and keeps the files that start a local Ray cluster on one of
    them (tests/conftest.py); a new such file must join that list, or two clusters start at once again."""
    import re

    from conftest import RAY_MODULES, xdist_work_unit

    starting = {os.path.basename(name) for name in _test_files() if os.path.basename(name).startswith("test_")
                and re.search(r"\bray\.init\(", open(os.path.join(TESTS, name), encoding="utf-8").read())}
    assert starting <= RAY_MODULES, sorted(starting - RAY_MODULES)
    assert {xdist_work_unit(f"tests/{name}::t") for name in RAY_MODULES} == {"ray"}
    assert xdist_work_unit("tests/core/test_profile.py::test_x[a::b]") == "tests/core/test_profile.py"


def test_test_files_live_in_subject_folders_under_unique_names():
    """Test files sit in a folder named for their subject (tests/core, tests/bfcl, ...), never at the top, and
    no two share a basename: pytest imports each under its basename, and the Ray work unit goes by it."""
    files = [name for name in _test_files() if os.path.basename(name).startswith("test_")]
    top = [name for name in files if os.sep not in name]
    assert not top, f"test files at the top of tests/ (put each in its subject's folder): {top}"
    seen: dict[str, str] = {}
    twins = [(seen.setdefault(os.path.basename(n), n), n) for n in files if seen.get(os.path.basename(n), n) != n]
    assert not twins, f"test files with the same basename: {twins}"
