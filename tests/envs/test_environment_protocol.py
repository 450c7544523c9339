"""The environment protocol's shape: a small required part, optional protocols with defaults, and subcommands whose
arguments the environment owns (so the command line holds none of an environment's arguments)."""

from __future__ import annotations

import argparse
import ast
import inspect
import os

from _paths import REPO

from env_wrappers.protocol import OPTIONAL, REQUIRED, Command, Environment

#: The subcommands the command line defines itself; every other one is an environment's.
OWN_SUBCOMMANDS = {"dry-run", "report", "check"}


def _own_methods(cls: type) -> set[str]:
    return {name for name, value in vars(cls).items() if callable(value) and not name.startswith("_")}


def test_the_required_part_has_at_most_six_methods():
    assert _own_methods(Environment) == set(REQUIRED)
    assert len(REQUIRED) <= 6


def test_the_optional_protocols_give_every_other_method_a_default_once():
    seen: dict[str, str] = {}
    for part in OPTIONAL:
        assert issubclass(Environment, part)
        for name in _own_methods(part):
            assert name not in seen and name not in REQUIRED, (name, part.__name__, seen.get(name))
            seen[name] = part.__name__
    # what the glue calls on any environment resolves on the base class, with no subclass writing it
    for name in ("category", "n_turns", "check_row", "reveal_messages", "dataset_rows", "commands",
                 "reference_turns", "failure_turns", "user_turn_texts"):
        assert name in seen, f"{name} is in no optional protocol"
    assert Environment().commands() == {}
    assert Environment().n_turns(object()) is None


def test_the_required_part_comes_first_in_the_environment_guide():
    """docs/add_an_environment.md's table of the environment lists the required methods before any optional one."""
    with open(os.path.join(REPO, "docs", "add_an_environment.md"), encoding="utf-8") as fh:
        text = fh.read()
    section = text[text.index("## 3."):text.index("## 4.")]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    required = [i for i, line in enumerate(rows) if any(f"`{name}(" in line for name in REQUIRED)]
    assert len(required) == len(REQUIRED), rows
    assert required == list(range(len(REQUIRED))), "the required methods are not the table's first rows"


def test_the_command_line_defines_no_argument_of_an_environment_command():
    path = os.path.join(REPO, "seal_verl", "cli.py")
    with open(path, encoding="utf-8") as fh:
        tree = ast.parse(fh.read(), path)
    defined = {node.args[0].value for node in ast.walk(tree)
               if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
               and node.func.attr == "add_parser" and node.args and isinstance(node.args[0], ast.Constant)}
    assert defined == OWN_SUBCOMMANDS


def test_bfcl_owns_its_subcommands_and_the_command_line_offers_them():
    from env_wrappers.registry import get_environment
    from seal_verl.cli import build_parser

    commands = get_environment("bfcl").commands()
    assert set(commands) == {"diagnose", "demo-results", "prepare-data", "preflight", "eval", "bfcl-ids"}
    for name, command in commands.items():
        assert isinstance(command, Command), name
        assert len(inspect.signature(command.add_arguments).parameters) == 1, name
        assert command.help, name
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert set(sub.choices) == set(commands) | OWN_SUBCOMMANDS


def test_a_new_environments_subcommand_reaches_the_command_line():
    from env_wrappers.registry import register_environment
    from seal_verl import cli

    ran = []

    def add(parser):
        parser.add_argument("--times", type=int, required=True)

    class Toy(Environment):
        def commands(self):
            return {"toy-count": Command(add, lambda args: ran.append(args.times) or 0, "count")}

    register_environment("toy_with_command", Toy, replace=True)
    parser = argparse.ArgumentParser(prog="seal-verl")
    sub = parser.add_subparsers(dest="command", required=True)
    cli._add_environment_commands(sub, "toy_with_command")
    args = parser.parse_args(["toy-count", "--times", "3"])
    assert args.func(args) == 0 and ran == [3]

