"""The schema violations an environment records as evidence and the ones the error cue names are the same.

Both come from one check (seal_verl.core.schema). Each case lists the violations expected as (kind, parameter);
the environment's evidence lines and the cue's phrases must name exactly those. Cases marked "was split"
are ones where the cue's former checker disagreed with the environment's: a float 1.0 passed as an integer
(jsonschema accepts it, the cue did not), a wrong item inside a list and a missing field of a nested object
(the cue looked at top-level types only), a wrong-typed enum value (the cue named the type only), and
positional arguments of a Python-style call (the cue called them unknown parameters).
"""

import re

import pytest

from env_wrappers.bfcl.environment.env import BFCLEnv
from env_wrappers.bfcl.environment.schema import SchemaChecker, to_openai_tool
from env_wrappers.bfcl.environment.tasks import load_tasks
from seal_verl.core.cues import error_cue
from seal_verl.core.trace import CallRecord

DOC = {  # BFCL's dialect: "dict", "float", "any"
    "name": "store",
    "description": "Store a record.",
    "parameters": {
        "type": "dict",
        "properties": {
            "name": {"type": "string"},
            "count": {"type": "integer"},
            "ratio": {"type": "float"},
            "flag": {"type": "boolean"},
            "mode": {"type": "string", "enum": ["copy", "move"]},
            "tags": {"type": "array", "items": {"type": "string"}},
            "meta": {"type": "dict", "properties": {"owner": {"type": "string"}}, "required": ["owner"]},
            "anything": {"type": "any"},
        },
        "required": ["name"],
    },
}

CASES = {
    # was split: the cue also said `count` must be an integer
    "float_one_as_integer": ({"name": "a", "count": 1.0, "bogus": 1}, [("unknown", "bogus")]),
    # was split: the cue fell back to generic advice
    "wrong_list_item": ({"name": "a", "tags": ["x", 3]}, [("type", "tags")]),
    "nested_missing_field": ({"name": "a", "meta": {}}, [("nested_required", "meta")]),
    # was split: the cue named the type only
    "enum_of_wrong_type": ({"name": 5, "mode": 5}, [("type", "name"), ("type", "mode"), ("enum", "mode")]),
    "bool_is_no_integer": ({"name": "a", "count": True}, [("type", "count")]),
    "int_is_no_bool": ({"name": "a", "flag": 1}, [("type", "flag")]),
    "enum_member_missing": ({"name": "a", "mode": "delete"}, [("enum", "mode")]),
    "required_missing": ({"mode": "copy"}, [("missing", "name")]),
    "unknown_and_missing": ({"bogus": 1}, [("missing", "name"), ("unknown", "bogus")]),
    "object_for_string": ({"name": {"k": 1}}, [("type", "name")]),
    "int_is_a_float": ({"name": "a", "ratio": 2}, []),
    "any_takes_anything": ({"name": "a", "anything": {"x": [1, None]}}, []),
    "nested_extra_field_allowed": ({"name": "a", "meta": {"owner": "b", "x": 1}}, []),
}


def _evidence_names(kind: str, param: str, line: str) -> bool:
    where, _, what = line.partition(": ")
    return {
        "missing": where == "arguments" and what.startswith("missing required") and param in what.split(": ", 1)[1].split(", "),
        "unknown": where == "arguments" and what.startswith("unknown parameter") and param in what.split(": ", 1)[1].split(", "),
        "type": where.split(".")[0] == param and what.startswith("expected type"),
        "enum": where.split(".")[0] == param and what.startswith("value must be one of"),
        "nested_required": where == param and what.startswith("missing required"),
    }[kind]


def _cue_names(kind: str, param: str, phrase: str) -> bool:
    return {
        "missing": phrase == f"required parameter `{param}` is missing",
        "unknown": phrase.startswith(f"`{param}` is not a parameter of `store`"),
        "type": re.match(rf"`{param}`(\[\d+\])? must be of type ", phrase) is not None,
        "enum": phrase.startswith(f"`{param}` must be one of ["),
        "nested_required": phrase.startswith(f"`{param}` is missing required field"),
    }[kind]


def _cue_phrases(text: str) -> list[str]:
    m = re.search(r"break its schema: (.*?)\. Correct the arguments", text)
    assert m, text
    return m.group(1).split("; ")


@pytest.mark.parametrize("form", ["openai_tool", "bfcl_doc"])
@pytest.mark.parametrize("case", list(CASES))
def test_evidence_and_cue_name_the_same_violations(case, form):
    arguments, expected = CASES[case]
    tool = to_openai_tool(DOC)
    evidence = SchemaChecker([tool]).errors("store", arguments)
    call = CallRecord(name="store", arguments=arguments, call="store(...)", available=True, known=True,
                      schema_errors=evidence, executed=True)
    cue = error_cue(call, tool if form == "openai_tool" else DOC, {"schema_constraints"})
    if not expected:
        assert evidence == [] and cue == ""
        return
    phrases = _cue_phrases(cue)
    assert len(phrases) == len(expected), (phrases, expected)
    assert sum(len(line.split(": ", 1)[1].split(", ")) if line.startswith("arguments: ") else 1
               for line in evidence) == len(expected), (evidence, expected)
    for kind, param in expected:
        assert any(_evidence_names(kind, param, line) for line in evidence), (kind, param, evidence)
        assert any(_cue_names(kind, param, p) for p in phrases), (kind, param, phrases)


@pytest.fixture(scope="module")
def task():
    return load_tasks()["multi_turn_base_0"]


@pytest.mark.parametrize("message, evidence, phrases", [
    # was split: the cue called the positional argument an unknown parameter `__arg0`
    ("[mkdir('newdir', bogus=1)]", ["arguments: unknown parameter(s): bogus"],
     ["`bogus` is not a parameter of `mkdir`"]),
    # a positional argument fills the first parameter: only the second is missing
    ("[mv('a.txt')]", ["arguments: missing required parameter(s): destination"],
     ["required parameter `destination` is missing"]),
])
def test_positional_arguments_in_evidence_and_cue(task, message, evidence, phrases):
    env = BFCLEnv(task, call_format="python", call_timeout_s=None)
    env.reset()
    call = env.step(message).attempt.calls[0]
    assert call.parsed and call.available and call.schema_errors == evidence
    tool = next(t for t in env.tools() if t["function"]["name"] == call.name)
    got = _cue_phrases(error_cue(call, tool, {"schema_constraints"}))
    assert len(got) == len(phrases) and all(g.startswith(p) for g, p in zip(got, phrases)), got
