"""The layout of ``env_wrappers/bfcl/``: four rooms that import only the rooms below them, no import cycle, no
import of the command line, and a sandbox whose failures are told apart by type, not by the text of a message.

- the tools (bfcl-eval's class map, calls, backends), the sandbox (worker, limits, slots, resets, judges, pool,
  client, memory probes, fault injection), the environment (tasks, the episode, prompts, data preparation, the
  verifier, the judge) and the evaluation (client, result files, runner, scoring) are subpackages, and no module
  sits loose beside them but ``registered`` (the registry's ``bfcl``, which joins the environment with the
  evaluation's subcommands);
- each room imports only the rooms before it in that order: the sandbox nothing of the environment, the
  environment nothing of the evaluation, which builds on it;
- no module under ``env_wrappers/`` imports ``seal_verl.cli`` or a sibling of it (``seal_verl.cli_*``): an
  environment's subcommands share only ``seal_verl.usage`` with the command line;
- the modules of ``env_wrappers.bfcl`` import each other without a cycle (every import counts, also one
  inside a function, and importing a module counts as importing the packages above it);
- no code under ``env_wrappers/bfcl/`` compares a string with the message of a worker failure (or with a
  marker such as ``"timeout"``) to find out which failure it was: the judge side catches
  ``WorkerTimeout`` / ``WorkerDied``.

Everything is read with ``ast`` from the source files; nothing is imported. Each check is a function of the
repository root, so it can be pointed at another checkout.
"""

from __future__ import annotations

import ast
from pathlib import Path

from _paths import REPO

ROOT = Path(REPO)
PACKAGE = "env_wrappers.bfcl"
#: the rooms from the bottom up: each imports only the rooms before it
ROOMS = {
    "tools": {"classes", "calls", "call_records", "python_calls", "json_calls", "backends"},
    "sandbox": {"worker", "limits", "slots", "resets", "judges", "pool", "client", "memory", "faults"},
    "environment": {"tasks", "env", "environment", "verifier", "judge", "prompts", "prepare_data"},
    "evaluation": {"openai_http", "result_files", "runner", "scoring", "commands"},
}
#: The one module beside the rooms: the environment as registered, serving the subcommands of both rooms.
JOINING = {"registered.py"}
#: Strings that named a kind of worker failure where a typed exception should: the marker the judge side once
#: returned for an overrunning call, and the message of a reply that did not come in time.
FAILURE_MARKERS = {"timeout", "no reply in time"}


# ------------------------------------------------------------------------------------------------ helpers

def _modules(root: Path, package: str) -> dict[str, Path]:
    """``{dotted module name: file}`` of every module under ``package`` (a package is its ``__init__``)."""
    base = root.joinpath(*package.split("."))
    out = {}
    for path in sorted(base.rglob("*.py")):
        rel = path.relative_to(root).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def _imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """Every module ``name`` imports, anywhere in its file, relative imports resolved; ``from X import y``
    counts as importing ``X.y`` when that is a module of ``known``, else ``X``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    here = name if _is_package(path) else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            out.add(module)
            for alias in node.names:
                if f"{module}.{alias.name}" in known or alias.name.startswith("cli"):
                    out.add(f"{module}.{alias.name}")
    return out


def _with_parents(module: str, known: dict[str, Path]) -> set[str]:
    """``module`` and the packages above it that are in ``known`` (importing it runs each of them)."""
    parts = module.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts) + 1) if ".".join(parts[:i]) in known}


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """The imports between the modules of ``env_wrappers.bfcl`` (an edge to a package stands for running its
    ``__init__``)."""
    known = _modules(root, PACKAGE)
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        targets: set[str] = set()
        for module in _imports(name, path, known):
            targets |= _with_parents(module, known)
        targets.discard(name)
        # A module's own packages run before it, never because of it: those edges are not imports.
        graph[name] = {t for t in targets if not name.startswith(t + ".")}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def layout_problems(root: Path = ROOT) -> list[str]:
    """What is missing from the three rooms, and what sits outside them."""
    base = root.joinpath(*PACKAGE.split("."))
    problems = []
    for room, expected in ROOMS.items():
        folder = base / room
        if not (folder / "__init__.py").is_file():
            problems.append(f"{PACKAGE}.{room} is not a package")
            continue
        have = {p.stem for p in folder.glob("*.py")}
        problems += [f"{PACKAGE}.{room} has no module {m}" for m in sorted(expected - have)]
    loose = sorted(p.name for p in base.glob("*.py") if p.name != "__init__.py" and p.name not in JOINING)
    problems += [f"{PACKAGE} has a module outside the rooms: {name}" for name in loose]
    return problems


def upward_imports(root: Path = ROOT) -> list[str]:
    """``module -> imported`` for every import of a room above the importing module's room (``ROOMS`` order)."""
    order = {room: i for i, room in enumerate(ROOMS)}

    def room_of(module: str):
        parts = module.split(".")
        return parts[2] if len(parts) > 2 and module.startswith(PACKAGE + ".") and parts[2] in order else None

    out = []
    for name, targets in sorted(import_graph(root).items()):
        mine = room_of(name)
        for target in sorted(targets):
            theirs = room_of(target)
            if mine is not None and theirs is not None and order[theirs] > order[mine]:
                out.append(f"{name} -> {target}")
    return out


def cli_imports(root: Path = ROOT) -> list[str]:
    """``module -> imported`` for every import of ``seal_verl.cli`` or ``seal_verl.cli_*`` under env_wrappers."""
    known = _modules(root, "env_wrappers")
    out = []
    for name, path in known.items():
        for module in sorted(_imports(name, path, known)):
            if module == "seal_verl.cli" or module.startswith(("seal_verl.cli.", "seal_verl.cli_")):
                out.append(f"{name} -> {module}")
    return out


def _failure_messages(trees: dict[str, ast.AST]) -> set[str]:
    """The constant text (of an f-string, the part before its first field) of every ``WorkerDied(...)`` and
    ``WorkerTimeout(...)`` built in these modules."""
    texts = set()
    for tree in trees.values():
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and node.args):
                continue
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called not in ("WorkerDied", "WorkerTimeout"):
                continue
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                texts.add(arg.value)
            elif isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
                texts.add(str(arg.values[0].value))
    return {t.strip() for t in texts if t.strip()}


def message_matches(root: Path = ROOT) -> list[str]:
    """``module:line`` of every comparison (``==``, ``!=``, ``in``, ``startswith``, ...) of a string with a worker
    failure's message or a failure marker, under env_wrappers/bfcl."""
    known = _modules(root, PACKAGE)
    trees = {name: ast.parse(path.read_text(encoding="utf-8")) for name, path in known.items()}
    messages = _failure_messages(trees) | FAILURE_MARKERS

    def is_message(node: ast.AST) -> bool:
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            return False
        text = node.value.strip()
        return bool(text) and any(m == text or m.startswith(text) for m in messages)

    hits = []
    for name, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare):
                operands = [node.left, *node.comparators]
                if any(is_message(o) for o in operands):
                    hits.append(f"{name}:{node.lineno}")
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                  and node.func.attr in ("startswith", "endswith", "find", "index", "count")
                  and any(is_message(a) for a in node.args)):
                hits.append(f"{name}:{node.lineno}")
    return hits


# -------------------------------------------------------------------------------------------------- tests

def test_bfcl_has_four_rooms_and_nothing_outside_them():
    assert layout_problems() == []


def test_each_room_imports_only_the_rooms_below_it():
    """The sandbox imports nothing from the environment (it once took the backends' private class lookup, and
    restated bfcl-eval's class map beside it); the tools import neither; the environment nothing of the
    evaluation."""
    assert upward_imports() == []


def test_no_environment_module_imports_the_command_line():
    assert cli_imports() == []


def test_bfcl_modules_import_each_other_without_a_cycle():
    graph = import_graph()
    assert len(graph) > 20, "the import graph is suspiciously small: were the modules found?"
    assert cycles(graph) == []


def test_the_sandbox_does_not_import_the_verifier_or_the_judge():
    graph = import_graph()
    sandbox = {m for m in graph if m.startswith(f"{PACKAGE}.sandbox")}
    assert sandbox, "no sandbox modules found"
    reached, todo = set(), list(sandbox)
    while todo:
        for target in graph.get(todo.pop(), ()):
            if target not in reached:
                reached.add(target)
                todo.append(target)
    judge_side = {f"{PACKAGE}.environment.{m}" for m in ("verifier", "judge", "isolated_verify")}
    assert not (reached & judge_side), sorted(reached & judge_side)
    assert not any(m.startswith(f"{PACKAGE}.evaluation") for m in reached), sorted(reached)


def room_imports(source: str, target: str, root: Path = ROOT) -> list[str]:
    """``module -> imported`` for every import of a module of room ``target`` by a module of room ``source``."""
    graph = import_graph(root)
    return sorted(f"{m} -> {t}" for m, targets in graph.items() if m.startswith(f"{PACKAGE}.{source}")
                  for t in targets if t.startswith(f"{PACKAGE}.{target}"))


def test_the_environment_room_does_not_import_the_evaluation():
    """The evaluation builds on the environment; the environment's subcommands list reaches the evaluation's only
    through the joining module above both rooms (``registered``)."""
    assert room_imports("evaluation", "environment"), "the evaluation should build on the environment"
    assert room_imports("environment", "evaluation") == []


def test_worker_failures_are_told_apart_by_type_not_by_message_text():
    assert message_matches() == []
    judge_side = ROOT.joinpath(*PACKAGE.split("."), "environment", "isolated_verify.py")
    names = {n.id for n in ast.walk(ast.parse(judge_side.read_text(encoding="utf-8"))) if isinstance(n, ast.Name)}
    assert {"WorkerTimeout", "WorkerDied"} <= names, "the judge side should catch the sandbox's typed failures"


def test_the_checks_find_what_they_look_for(tmp_path):
    """Each check reports a planted mistake: a cycle, an import of the command line, a loose module, a failure
    told by its message."""
    pkg = tmp_path.joinpath(*PACKAGE.split("."))
    for room in ROOMS:
        (pkg / room).mkdir(parents=True)
        (pkg / room / "__init__.py").write_text("")
        for module in ROOMS[room]:
            (pkg / room / f"{module}.py").write_text("")
    for folder in (tmp_path / "env_wrappers", pkg):
        (folder / "__init__.py").write_text("")
    assert layout_problems(tmp_path) == [] and cli_imports(tmp_path) == [] and message_matches(tmp_path) == []
    assert upward_imports(tmp_path) == [] and room_imports("environment", "evaluation", tmp_path) == []
    (pkg / "loose.py").write_text("")
    (pkg / "registered.py").write_text("")
    (pkg / "environment" / "environment.py").write_text("def commands():\n    from ..evaluation import commands\n")
    (pkg / "sandbox" / "worker.py").write_text(
        "from ..environment import verifier\n"
        "def f(detail):\n    return detail.startswith('worker process ended')\n"
        "def g():\n    raise WorkerDied(f'worker process ended ({1})')\n")
    (pkg / "environment" / "verifier.py").write_text(
        "def h():\n    from ..sandbox.worker import f\n    from seal_verl import cli_checks\n")
    (pkg / "evaluation" / "runner.py").write_text("def k(x):\n    return x == 'timeout'\n")
    assert layout_problems(tmp_path) == [f"{PACKAGE} has a module outside the rooms: loose.py"]
    assert room_imports("environment", "evaluation", tmp_path) == [
        f"{PACKAGE}.environment.environment -> {PACKAGE}.evaluation",
        f"{PACKAGE}.environment.environment -> {PACKAGE}.evaluation.commands"]
    assert cli_imports(tmp_path) == [f"{PACKAGE}.environment.verifier -> seal_verl.cli_checks"]
    assert cycles(import_graph(tmp_path)) == [[f"{PACKAGE}.environment.verifier", f"{PACKAGE}.sandbox.worker"]]
    assert upward_imports(tmp_path) == [f"{PACKAGE}.environment.environment -> {PACKAGE}.evaluation",
                                        f"{PACKAGE}.environment.environment -> {PACKAGE}.evaluation.commands",
                                        f"{PACKAGE}.sandbox.worker -> {PACKAGE}.environment",
                                        f"{PACKAGE}.sandbox.worker -> {PACKAGE}.environment.verifier"]
    assert sorted(message_matches(tmp_path)) == [f"{PACKAGE}.evaluation.runner:2", f"{PACKAGE}.sandbox.worker:3"]


if __name__ == "__main__":  # a report for another checkout: python tests/bfcl/test_bfcl_layout.py ROOT
    import sys

    where = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT
    print("layout:", layout_problems(where) or "ok")
    print("imports of the command line:", cli_imports(where) or "none")
    print("import cycles:", cycles(import_graph(where)) or "none")
    print("environment -> evaluation:", room_imports("environment", "evaluation", where) or "none")
    print("failures told by message:", message_matches(where) or "none")
