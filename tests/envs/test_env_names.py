"""The environment protocol as a new user meets it, with nothing but ``docs/add_an_environment.md`` to go on.

- Every documented way to name an environment (import path, alias, entry point; the registered name is
  ``tests/envs/test_second_env.py``) trains in the dry run: rows and traces carry the name that resolved, not the
  class's own ``name``, which ``tests/envs/shop_plugin.py`` registers nowhere.
- The dry run takes any task object (the docs' example's tasks are plain dicts) and any task id (``count/a``).
- ``seal-verl dry-run --env NAME``.
- The docs hold what an author needs (call formats, call records and parse statuses, how Psi reads the checks,
  what failure proposals look like), and their smallest complete example trains as printed.

Each dry run is one step of one or two tasks with two rollouts.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import re
import sys

import pytest

from _paths import TESTS

HERE = TESTS
sys.path.insert(0, os.path.join(HERE, "envs"))
DOC = os.path.join(HERE, os.pardir, "docs", "add_an_environment.md")

from env_wrappers.registry import environment_names, get_environment, register_environment  # noqa: E402
from seal_verl import dry_run as D  # noqa: E402

#: The shop environment by import path; its class calls itself ``plugin_shop``, a name no registry knows.
PATH = "shop_plugin:PluginShop"
ALIAS = "shop_alias"
ENTRY = "shop_ep"


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return D.tiny_model(str(tmp_path_factory.mktemp("tiny") / "model"))


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    """The docs' smallest complete environment, written out exactly as printed; yields its module name."""
    with open(DOC) as f:
        text = f.read()
    m = re.search(r"<!-- smallest-example: (\w+)\.py[^>]*-->\s*```python\n(.*?)\n```", text, re.S)
    assert m, "docs/add_an_environment.md has no marked smallest complete example"
    folder = tmp_path_factory.mktemp("example")
    (folder / f"{m.group(1)}.py").write_text(m.group(2) + "\n")
    sys.path.insert(0, str(folder))
    yield m.group(1)
    sys.path.remove(str(folder))


@pytest.fixture
def entry_point(tmp_path, monkeypatch):
    """An installed distribution that declares ``shop_ep`` in the group ``seal_verl.environments`` (a dist-info
    folder on sys.path, which importlib.metadata reads like any installed package)."""
    dist = tmp_path / "seal_shop_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: seal-shop-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[seal_verl.environments]\n{ENTRY} = {PATH}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return ENTRY


def _train(out, env, model, tasks_per_step=1, val_tasks=0):
    """A one-step dry run of ``env``; returns its training trace records after checking they name ``env``."""
    import pandas as pd

    cfg = D.DryRunConfig(out=str(out), env=env, steps=1, tasks_per_step=tasks_per_step, rollouts=2,
                         val_tasks=val_tasks, model=model, prompt_length=4096, response_length=2048,
                         progress=False, verbose=False)
    D.run_dry(cfg)
    rows = pd.read_parquet(out / "batch.parquet")
    assert {r["env"] for r in rows["extra_info"]} == {env}
    records = [json.loads(line) for line in (out / "traces_step_1.jsonl").read_text().splitlines()]
    assert len(records) == 2 * tasks_per_step
    for rec in records:
        assert rec["trace"]["meta"]["env"] == env and rec["agent_loop"] == "seal_env"
        assert rec["plan"] is not None and rec["labels"] == rec["plan"]["labels"]
    return records


# ------------------------------------------------------------------------------------------------ naming


def test_each_name_form_is_the_name_rows_carry(entry_point):
    """``get_environment`` hands out the name it was asked for, so the rows an environment writes resolve."""
    register_environment(ALIAS, PATH, replace=True)
    assert "plugin_shop" not in environment_names() and ENTRY in environment_names()
    for name in (PATH, ALIAS, ENTRY):
        env = get_environment(name)
        assert env.name == name
        row = env.dataset_rows(["shop_0"], "train", "json")[0]
        assert get_environment(row["extra_info"]["env"]) is env

    # one instance behind two names: each name keeps its own
    from shop_plugin import PluginShop

    shared = PluginShop()
    register_environment("shop_first", shared, replace=True)
    register_environment("shop_second", shared, replace=True)
    assert (get_environment("shop_first").name, get_environment("shop_second").name) == ("shop_first", "shop_second")


def test_import_path_trains(tmp_path, model):
    _train(tmp_path / "run", PATH, model)


def test_alias_trains(tmp_path, model):
    register_environment(ALIAS, PATH, replace=True)
    _train(tmp_path / "run", ALIAS, model)


def test_entry_point_trains(tmp_path, model, entry_point):
    _train(tmp_path / "run", entry_point, model)


# ------------------------------------------------------------------------------------------------ task objects


def test_scripted_assistant_takes_task_ids_with_a_slash(model):
    from transformers import AutoTokenizer

    env = get_environment(PATH)
    task = env.load_task("shop_0")
    plan = D.find_plan(task, "pass", "json", env=PATH)
    tok = AutoTokenizer.from_pretrained(model)
    llm = D.ScriptedLLM(tok, {"orders/shop_0": task}, env=PATH)
    llm.queue("orders/shop_0", [plan])
    prompt = tok.encode(env.user_turn_texts(task)[0])
    out = asyncio.run(llm.generate("orders/shop_0/0123abcd", prompt_ids=prompt, sampling_params={}))
    assert tok.decode(out.token_ids, skip_special_tokens=True) == plan.messages[0][0]
    assert llm.records[0]["task_id"] == "orders/shop_0"


def test_plans_for_tasks_without_an_id_attribute(example):
    name = f"{example}:CounterEnvironment"
    env = get_environment(name)
    task = env.load_task("count/a")
    assert isinstance(task, dict) and not hasattr(task, "id")
    assert D.find_plan(task, "pass", "json", env=name).labels == ["pass", "pass"]
    book = D.PlanBook("json", env=name)
    plan = book.get(task, "argument_mismatch", "count/a")
    assert plan.task_id == "count/a" and plan.labels == ["argument_mismatch", "argument_mismatch"]
    assert book.get(task, "pass").task_id == "count/a"  # the id given once is remembered for the object
    import random

    drawn = D.draw_plans(book, task, 3, D.mix_at(0, 1), random.Random(0), task_id="count/a")
    assert len(drawn) == 3 and all(p.task_id == "count/a" for p in drawn)
    assert D.find_plan(task, "pass", "json", env=name, task_id="count/a").task_id == "count/a"


def test_docs_example_trains_with_dict_tasks_and_slash_ids(tmp_path, model, example):
    records = _train(tmp_path / "run", f"{example}:CounterEnvironment", model, tasks_per_step=2)
    assert {r["task_id"] for r in records} == {"count/a", "count/b"}


# ------------------------------------------------------------------------------------------------ command line


def test_cli_dry_run_picks_the_environment(tmp_path, capsys):
    from seal_verl.cli import build_parser, main

    args = build_parser().parse_args(["dry-run", "--env", PATH])
    assert args.env == PATH and args.call_format is None
    sub = next(a for a in build_parser()._actions if a.dest == "command").choices["dry-run"]
    helps = " ".join(a.help for a in sub._actions if a.help)
    assert "--env" in sub.format_help() and "BFCL training tasks" not in helps

    assert main(["dry-run", "--env", "no_such_env", "--out", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err
    assert "unknown environment 'no_such_env'" in err and "Traceback" not in err
    assert main(["dry-run", "--env", PATH, "--call-format", "python", "--out", str(tmp_path / "b")]) == 2
    assert "decodes json" in capsys.readouterr().err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_cli_dry_run_trains_the_docs_example(tmp_path, model, example):
    from seal_verl.cli import main

    out = tmp_path / "run"
    assert main(["dry-run", "--env", f"{example}:CounterEnvironment", "--out", str(out), "--steps", "1",
                 "--tasks-per-step", "2", "--rollouts", "2", "--val-tasks", "1", "--model", model,
                 "--no-progress"]) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["dry_run"]["env"] == f"{example}:CounterEnvironment"
    assert config["dry_run"]["call_format"] == "json"
    val = [json.loads(x) for x in (out / "val_traces.jsonl").read_text().splitlines()]
    assert [v["score"] for v in val] == [1.0] and val[0]["cue_tokens"] == 0


# ------------------------------------------------------------------------------------------------ the docs


def test_docs_say_what_an_author_needs():
    """What the first outside author had to read source for is on the page, generated from the source."""
    from seal_verl.core import taxonomy as tx
    from seal_verl.core import trace as tr
    from seal_verl.core.diagnosis import TurnCheck
    from seal_verl.core.cues import CALL_FORMATS

    with open(DOC) as f:
        doc = f.read()
    statuses = [getattr(tr, k) for k in dir(tr) if k.startswith("PARSE_")]
    needed = {
        "call record fields": [f"`{f.name}`" for f in dataclasses.fields(tr.CallRecord)],
        "parse statuses": [f"`{s}`" for s in statuses] + [f"`{k}`" for k in dir(tr) if k.startswith("PARSE_")],
        "turn check fields": [f"`{f.name}`" for f in dataclasses.fields(TurnCheck)],
        "labels": [f"`{lab}`" for lab in tx.LABELS],
        "call formats": [f"`{fmt}`" for fmt in CALL_FORMATS] + ["<tool_call>", "[add(n=2)"],
        "failure proposals": ["(kind, turn, messages)", "CLOSING_TEXT", "ABSTAIN_TEXT"],
    }
    missing = {what: [w for w in words if w not in doc] for what, words in needed.items()}
    assert not any(missing.values()), f"docs/add_an_environment.md does not explain: {missing}"
    # Psi's rules appear in its priority order
    rows = [doc.index(f"| `{lab}` |") for lab in tx.PRIORITY if lab != tx.PASS]
    assert rows == sorted(rows)
