"""BFCLEnv keeps BFCL's protocol and tool semantics; schema conversion yields standard JSON Schema."""

import json

import jsonschema

from env_wrappers.bfcl.tools.backends import Backends
from env_wrappers.bfcl.environment.env import REVEAL_MESSAGE, BFCLEnv
from env_wrappers.bfcl.environment.schema import to_openai_tool
from env_wrappers.bfcl.environment.tasks import CATEGORIES, load_split


def test_all_800_tasks_and_split(tasks):
    assert len(tasks) == 800
    for cat in CATEGORIES:
        assert sum(t.category == cat for t in tasks.values()) == 200
    split = load_split()
    assert len(split["train"]) == len(split["eval"]) == 400
    assert not set(split["train"]) & set(split["eval"])
    assert set(split["train"]) | set(split["eval"]) <= set(tasks)
    assert "SEAL" in split["description"]


def test_tool_docs_are_standard_json_schema(tasks):
    seen = 0
    for t in tasks.values():
        for doc in t.all_docs():
            tool = to_openai_tool(doc)
            schema = tool["function"]["parameters"]
            jsonschema.Draft7Validator.check_schema(schema)
            blob = json.dumps(schema)
            assert '"dict"' not in blob and '"float"' not in blob
            assert "response" not in tool["function"]
            seen += 1
    assert seen > 5000


def _block(name, **kw):
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": kw}) + "\n</tool_call>"


def test_protocol_reveal_text_and_results(tasks):
    task = tasks["multi_turn_miss_func_0"]
    env = BFCLEnv(task)
    assert "sort" not in {t["function"]["name"] for t in env.tools()}
    msgs = env.reset()
    assert msgs[0]["content"].startswith("Move 'final_report.pdf'")
    r = env.step(_block("cd", folder="document") + "\n" + _block("mkdir", dir_name="temp"))
    assert not r.turn_done and [x.content for x in r.tool_results] == [
        '{"current_working_directory": "document"}', "None"]
    r = env.step("All done.")
    assert r.turn_done and r.next_user[0]["content"].startswith("Perform a detailed search")
    env.step("ok")
    r = env.step("nothing to do")  # turn 2 (abstention) ends; turn 3 reveals sort
    assert r.next_user == [{"role": "user", "content": REVEAL_MESSAGE}]
    assert [t["function"]["name"] for t in r.revealed_tools] == ["sort"]
    assert "sort" in {t["function"]["name"] for t in env.tools()}
    assert env.trace.turns[3].revealed_functions == ["sort"]


def test_schema_violations_still_execute_and_are_recorded(tasks):
    env = BFCLEnv(tasks["multi_turn_base_0"])
    env.reset()
    r = env.step(_block("mkdir", dir_name=5, bogus=1))
    call = r.attempt.calls[0]
    assert call.executed and call.available
    assert any("unknown parameter" in e for e in call.schema_errors)
    assert r.tool_results[0].content.startswith("Error during execution: ")


def test_unknown_and_hidden_names(tasks):
    env = BFCLEnv(tasks["multi_turn_miss_func_0"])
    env.reset()
    r = env.step(_block("teleport", to="x") + "\n" + _block("sort", file_name="final_report.pdf"))
    unknown, hidden = r.attempt.calls
    assert unknown.result == "Error during execution: name 'teleport' is not defined" and not unknown.executed
    assert hidden.executed and not hidden.available  # BFCL runs it; availability is only evidence


def test_text_step_cap_force_terminates(tasks):
    env = BFCLEnv(tasks["multi_turn_base_0"], max_steps_per_turn=3)
    env.reset()
    for _ in range(3):
        assert not env.step(_block("pwd")).turn_done
    r = env.step(_block("pwd"))
    assert r.episode_done and env.trace.force_terminated
    assert len(env.trace.turns) == tasks["multi_turn_base_0"].n_turns


def test_backends_do_not_share_state(tasks):
    t = tasks["multi_turn_base_0"]
    a = Backends(t.involved_classes, t.initial_config)
    b = Backends(t.involved_classes, t.initial_config)
    a.execute("mkdir(dir_name='only_in_a')")
    assert a.state() != b.state()


def test_refused_and_private_names(tasks):
    b = Backends(tasks["multi_turn_base_0"].involved_classes, tasks["multi_turn_base_0"].initial_config)
    assert b.execute("remove(x=1)")[0] == "Error during execution: Function call remove is not allowed."
    text, is_err, executed = b.execute("_load_scenario(scenario={})")
    assert is_err and not executed


def test_hung_backend_call_does_not_block(tasks, monkeypatch):
    import threading

    t = tasks["multi_turn_base_0"]
    b = Backends(t.involved_classes, t.initial_config, call_timeout_s=0.2)
    release = threading.Event()
    cls = type(b.instances["GorillaFileSystem"])
    monkeypatch.setattr(cls, "pwd", lambda self: release.wait(5) or "late", raising=True)
    text, is_err, _ = b.execute("pwd()")
    assert is_err and "timed out" in text
    text2, is_err2, executed2 = b.execute("ls()")
    assert is_err2 and not executed2  # instances possibly mid-mutation: refuse further calls
    release.set()
