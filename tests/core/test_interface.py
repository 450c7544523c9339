"""Omega: evolution with hysteresis, the ablation flags, and the bounded, answer-free cue texts."""

import json
import re

import pytest

from seal_verl.core import taxonomy as tx
from seal_verl.core.cues import TRUNCATION_MARKER, call_format_cue, capability_cue, cue_stats, error_cue, schema_cue
from seal_verl.core.interface import (
    CUE_KINDS,
    DEFAULT_TRIGGERS,
    FAMILIES,
    InterfaceConfig,
    InterfaceState,
    active_families,
    active_kinds,
    evolve,
    initial_state,
    kinds_in_family,
)
from seal_verl.core.trace import PARSE_BAD_STRUCTURE, PARSE_BAD_SYNTAX, PARSE_NON_LITERAL, CallRecord

CFG = InterfaceConfig(on_threshold=0.15, off_threshold=0.05, patience=2).validate()
#: kind -> its trigger label under the default map, and the kinds that map switches on
TRIGGER = {kind: label for label, kind in DEFAULT_TRIGGERS.items()}
DEFAULT_KINDS = tuple(k for k in CUE_KINDS if k in TRIGGER)


def _run(seq, kind="tool_affordance", cfg=CFG):
    trigger = TRIGGER[kind]
    state = initial_state(cfg)
    out = []
    for p in seq:
        state = evolve(state, {trigger: p}, cfg)
        out.append(state.active[kind])
    return out


def test_activation_map_matches_design():
    expected = {
        tx.ARGUMENT_MISMATCH: "schema",
        tx.MISSING_TOOL_CALL: "capability",
        tx.RECOVERY_FAILURE: "error",
        tx.INVALID_TOOL_CALL: "schema",
        tx.SPURIOUS_TOOL_CALL: "capability",
    }
    assert {label: CUE_KINDS[k].family for label, k in DEFAULT_TRIGGERS.items()} == expected
    assert set(FAMILIES) == {k.family for k in CUE_KINDS.values()}
    assert set(kinds_in_family("schema")) == {"call_format", "schema_constraints"}


@pytest.mark.parametrize("kind", DEFAULT_KINDS)
def test_each_kind_is_switched_by_its_own_label_only(kind):
    state = evolve(initial_state(CFG), {TRIGGER[kind]: 0.5}, CFG)
    assert active_kinds(state) == {kind}
    assert active_families(state) == {CUE_KINDS[kind].family}


def test_hysteresis_sequence():
    seq = [0.10, 0.20, 0.10, 0.04, 0.10, 0.04, 0.04, 0.10, 0.14, 0.16]
    assert _run(seq) == [False, True, True, True, True, True, False, False, False, True]


def test_no_flapping_when_straddling_thresholds():
    # around the on threshold while on, around the off threshold with streak resets: never toggles
    seq = [0.2] + [0.14, 0.16] * 5 + [0.04, 0.06] * 5
    states = _run(seq)
    assert all(states)
    # around the on threshold from below while off: only the first crossing switches
    states = _run([0.149, 0.06, 0.149, 0.10])
    assert not any(states)
    transitions = sum(a != b for a, b in zip(states, states[1:]))
    assert transitions == 0


@pytest.mark.parametrize("patience", [1, 2, 3, 5])
def test_fade_out_after_patience(patience):
    cfg = InterfaceConfig(patience=patience).validate()
    states = _run([0.3] + [0.0] * (patience + 1), cfg=cfg)
    assert states[: patience] == [True] * patience  # on, then patience-1 steps below still on
    assert states[patience] is False
    assert states[patience + 1] is False


def test_streak_is_tracked_and_reset():
    s = evolve(initial_state(CFG), {tx.MISSING_TOOL_CALL: 0.3}, CFG)
    s = evolve(s, {tx.MISSING_TOOL_CALL: 0.01}, CFG)
    assert s.streak_below["tool_affordance"] == 1 and s.active["tool_affordance"]
    s = evolve(s, {tx.MISSING_TOOL_CALL: 0.07}, CFG)
    assert s.streak_below["tool_affordance"] == 0 and s.step == 3


def test_evolve_is_pure():
    s0 = initial_state(CFG)
    before = s0.to_dict()
    s1 = evolve(s0, {tx.INVALID_TOOL_CALL: 0.9}, CFG)
    assert s0.to_dict() == before and s1.active["call_format"]


def test_fixed_all_on_ignores_profile():
    cfg = InterfaceConfig(fixed_all_on=True).validate()
    s = initial_state(cfg)
    assert all(s.active.values())
    for _ in range(4):
        s = evolve(s, {k: 0.0 for k in tx.PROFILE_KEYS}, cfg)
    assert active_kinds(s) == set(DEFAULT_KINDS)


def test_disabled_is_always_off():
    cfg = InterfaceConfig(enabled=False, fixed_all_on=True).validate()
    s = initial_state(cfg)
    assert not any(s.active.values())
    s = evolve(s, {label: 1.0 for label in DEFAULT_TRIGGERS}, cfg)
    assert not any(s.active.values())


@pytest.mark.parametrize("fixed_all_on", [False, True])
def test_without_proactive_cues_capability_kinds_never_switch_on(fixed_all_on):
    """Capability kinds only add text before the agent acts; with reactive cues only they have nothing to
    give, so they stay off even when their triggers are at 1, while every other kind still follows its label."""
    cfg = InterfaceConfig(proactive_cues=False, fixed_all_on=fixed_all_on).validate()
    reactive = {k for k in DEFAULT_KINDS if CUE_KINDS[k].family != "capability"}
    assert set(cfg.switchable_kinds()) == reactive and reactive == {"call_format", "schema_constraints", "error_recovery"}
    s = initial_state(cfg)
    assert active_kinds(s) == (reactive if fixed_all_on else set())
    for _ in range(3):
        s = evolve(s, {label: 1.0 for label in DEFAULT_TRIGGERS}, cfg)
        assert active_kinds(s) == reactive


def test_switchable_kinds_follow_the_switches():
    assert InterfaceConfig().switchable_kinds() == DEFAULT_KINDS
    assert InterfaceConfig(enabled=False).switchable_kinds() == ()
    assert InterfaceConfig(enabled=False, proactive_cues=False).switchable_kinds() == ()


def test_evolve_rejects_bad_prevalence():
    with pytest.raises(ValueError, match="unknown prevalence key"):
        evolve(initial_state(CFG), {"missing_call": 0.2}, CFG)
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        evolve(initial_state(CFG), {tx.PASS: 1.5}, CFG)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"on_threshold": 0.05, "off_threshold": 0.05}, "must be < on_threshold"),
        ({"on_threshold": 0.1, "off_threshold": 0.2}, "must be < on_threshold"),
        ({"on_threshold": 1.5}, r"in \[0, 1\]"),
        ({"off_threshold": -0.1}, r"in \[0, 1\]"),
        ({"patience": 0}, "patience must be >= 1"),
        ({"max_cue_chars": 49}, "max_cue_chars must be >= 50"),
        ({"ema_beta": 0.0}, "ema_beta"),
        ({"proactive_cues": "no"}, "proactive_cues must be true or false"),
        ({"proactive_cues": 0}, "proactive_cues must be true or false"),
    ],
)
def test_config_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        InterfaceConfig(**kwargs).validate()


def test_config_from_dict_rejects_unknown_keys():
    with pytest.raises(ValueError, match="allowed keys: on_threshold"):
        InterfaceConfig.from_dict({"on_treshold": 0.2})
    assert InterfaceConfig.from_dict({"patience": 3}).patience == 3


def test_state_round_trip_and_unknown_kind():
    s = evolve(initial_state(CFG), {tx.SPURIOUS_TOOL_CALL: 0.4}, CFG)
    back = InterfaceState.from_dict(json.loads(json.dumps(s.to_dict())))
    assert back == s
    with pytest.raises(ValueError, match="unknown cue kind"):
        InterfaceState.from_dict({"active": {"telepathy": True}, "streak_below": {}, "step": 0})


# ------------------------------------------------------------------ cue texts

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "mv",
            "description": "Move a file. Example: mv('draft.txt', 'old')",
            "parameters": {
                "type": "object",
                "properties": {
                    "source": {"type": "string", "description": "file to move"},
                    "destination": {"type": "string", "description": "target"},
                    "mode": {"type": "string", "enum": ["copy", "move"]},
                },
                "required": ["source", "destination"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "ls",
            "description": "List files.",
            "parameters": {"type": "object", "properties": {"a": {"type": "boolean"}}, "required": []},
        },
    },
]

MANY_TOOLS = [
    {"type": "function", "function": {"name": f"function_number_{i}", "parameters": {
        "type": "object", "properties": {f"param_{j}": {"type": "integer"} for j in range(5)},
        "required": ["param_0"]}}}
    for i in range(40)
]


def test_schema_cue_content():
    text = schema_cue(TOOLS)
    assert "mv(" in text and "ls(" in text
    assert "source*: string" in text and "destination*: string" in text
    assert '"copy"|"move"' in text
    assert "a: boolean" in text and "a*:" not in text
    assert "Example" not in text and "draft.txt" not in text  # descriptions are left out
    only = schema_cue(TOOLS, names=["ls", "not_offered"])
    assert "ls(" in only and "mv(" not in only and "not_offered" not in only
    assert schema_cue(TOOLS, names=[]) == ""


def test_call_format_cue():
    js = call_format_cue("json")
    assert "<tool_call>" in js and '"arguments"' in js
    py = call_format_cue("python")
    assert "[" in py and "(parameter=value)" in py
    with pytest.raises(ValueError, match="unknown call format"):
        call_format_cue("xml")


BIG_CALL = CallRecord(raw="x" * 5000, parse_status=PARSE_BAD_SYNTAX, parse_error="Expecting value " * 100)


@pytest.mark.parametrize("max_chars", [50, 80, 200, 600])
@pytest.mark.parametrize(
    "render",
    [
        lambda n: schema_cue(MANY_TOOLS, max_chars=n),
        lambda n: call_format_cue("json", max_chars=n),
        lambda n: call_format_cue("python", max_chars=n),
        lambda n: capability_cue({}, set(CUE_KINDS), max_chars=n),
        lambda n: error_cue(BIG_CALL, None, set(CUE_KINDS), max_chars=n),
        lambda n: error_cue(
            CallRecord(name="mv", arguments={f"k{i}": i for i in range(80)}, available=True, schema_errors=["x"],
                       executed=True, is_error=True), TOOLS[0], set(CUE_KINDS), max_chars=n),
    ],
    ids=["schema", "format_json", "format_python", "capability", "error_parse", "error_schema_exec"],
)
def test_cues_are_bounded(render, max_chars):
    text = render(max_chars)
    assert 0 < len(text) <= max_chars
    if len(render(10_000)) > max_chars:
        assert text.endswith(TRUNCATION_MARKER)


def test_bound_rejects_tiny_limit():
    with pytest.raises(ValueError, match="max_chars"):
        schema_cue(TOOLS, max_chars=10)


# The answer the agent is supposed to find. The cue functions never receive it; the test makes sure that
# nothing in their output carries a value the agent did not produce or see in the schema.
GROUND_TRUTH = {"name": "mv", "arguments": {"source": "q3_revenue_final.xlsx", "destination": "archive_2024",
                                            "mode": "move"}}
AGENT_ARGS = {"source": "report.txt", "destination": 42, "mode": "teleport", "force": True}

SCENARIOS = {
    "parse": CallRecord(raw='<tool_call>{"name": "mv", "arguments": {"source": report.txt}}</tool_call>',
                        parse_status=PARSE_BAD_SYNTAX, parse_error="Expecting value: line 1 column 40"),
    "structure": CallRecord(raw="{}", parse_status=PARSE_BAD_STRUCTURE, parse_error="no function name"),
    "non_literal": CallRecord(raw="[mv(source=x+1)]", parse_status=PARSE_NON_LITERAL, parse_error=""),
    "unavailable": CallRecord(name="archive_file", arguments={"path": "report.txt"}, call="archive_file(path='report.txt')",
                              available=False, known=True, executed=True, is_error=True,
                              result="Error during execution: no such function"),
    "schema": CallRecord(name="mv", arguments=dict(AGENT_ARGS), call="mv(...)", available=True, known=True,
                         schema_errors=["destination: expected type string"], executed=True, is_error=False),
    "missing_required": CallRecord(name="mv", arguments={"source": "report.txt"}, available=True, known=True,
                                   schema_errors=["arguments: missing required parameter(s): destination"],
                                   executed=True, is_error=True, result="Error: missing destination"),
    "exec": CallRecord(name="mv", arguments={"source": "report.txt", "destination": "old"}, available=True,
                       known=True, executed=True, is_error=True, result="Error: no such file: report.txt"),
}


def _values(obj):
    if isinstance(obj, dict):
        for v in obj.values():
            yield from _values(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _values(v)
    else:
        yield obj


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_error_cue_never_reveals_the_answer(name):
    call = SCENARIOS[name]
    text = error_cue(call, TOOLS[0] if call.name == "mv" else None, set(CUE_KINDS), available_names=["mv", "ls"])
    assert text, "a failed call with every kind active must get feedback"
    seen = json.dumps([call.raw, call.name, call.arguments, call.parse_error, TOOLS])
    for value in _values(GROUND_TRUTH["arguments"]):
        if str(value) not in seen:  # values the agent never saw must never appear
            assert str(value) not in text
    # stronger: no argument value is echoed at all, only names from the call or schema and fixed wording
    for value in _values(AGENT_ARGS):
        if not isinstance(value, bool) and str(value) not in ("mv",):
            assert str(value) not in text
    allowed_names = {call.name, "mv", "ls", *TOOLS[0]["function"]["parameters"]["properties"], *(call.arguments or {})}
    for quoted in re.findall(r"`([^`]*)`", text):
        assert quoted in allowed_names


def test_error_cue_names_the_failed_constraint():
    text = error_cue(SCENARIOS["schema"], TOOLS[0], {"schema_constraints"})
    assert "`destination` must be of type string" in text
    assert '`mode` must be one of ["copy", "move"]' in text
    assert "`force` is not a parameter of `mv`" in text
    text = error_cue(SCENARIOS["missing_required"], TOOLS[0], {"schema_constraints"})
    assert "required parameter `destination` is missing" in text


def test_error_cue_unavailable_lists_names_only_when_given():
    with_names = error_cue(SCENARIOS["unavailable"], None, {"call_format"}, available_names=["mv", "ls"])
    assert "`archive_file` is not an available function" in with_names and "mv, ls" in with_names
    without = error_cue(SCENARIOS["unavailable"], None, {"call_format"})
    assert "Available now" not in without and "mv" not in without


@pytest.mark.parametrize(
    "name,kinds,expect_text",
    [
        ("parse", {"call_format"}, True),
        ("parse", {"schema_constraints"}, False),
        ("parse", {"error_recovery"}, True),
        ("unavailable", {"ask_or_abstain"}, False),
        ("schema", {"schema_constraints"}, True),
        ("schema", {"call_format"}, False),
        ("exec", {"error_recovery"}, True),
        ("exec", {"schema_constraints", "call_format"}, False),
        ("exec", set(), False),
    ],
)
def test_error_cue_gated_by_active_kinds(name, kinds, expect_text):
    call = SCENARIOS[name]
    assert bool(error_cue(call, TOOLS[0] if call.name == "mv" else None, kinds)) is expect_text


def test_error_cue_silent_on_a_good_call():
    ok = CallRecord(name="ls", arguments={}, available=True, known=True, executed=True, result="[]")
    assert error_cue(ok, TOOLS[1], set(CUE_KINDS)) == ""
    with pytest.raises(ValueError, match="unknown cue kind"):
        error_cue(ok, TOOLS[1], {"hints"})


def test_error_cue_exec_hint_does_not_repeat_error_text():
    text = error_cue(SCENARIOS["exec"], TOOLS[0], {"error_recovery"})
    assert "read-only" in text and "no such file" not in text


def test_capability_cue_orders_by_prevalence():
    prev = {tx.SPURIOUS_TOOL_CALL: 0.3, tx.MISSING_TOOL_CALL: 0.4}
    # the behavioural sentence ranks by the label the trigger map gives it
    act = {"ask_or_abstain": tx.SPURIOUS_TOOL_CALL, "act_with_tools": tx.MISSING_TOOL_CALL}
    text = capability_cue(prev, {"ask_or_abstain", "act_with_tools"}, trigger_of=act)
    assert text.index("tool call before answering in text") < text.index("ask the user")
    prev[tx.SPURIOUS_TOOL_CALL] = 0.5
    text = capability_cue(prev, {"ask_or_abstain", "act_with_tools"}, trigger_of=act)
    assert text.index("ask the user") < text.index("tool call before answering in text")
    # the affordance kind has no reminder (affordance_cue renders it from the tools and the request)
    assert capability_cue(prev, {"tool_affordance"}) == ""
    assert "0.5" not in text
    assert capability_cue(prev, set()) == ""
    with pytest.raises(ValueError, match="unknown cue kind"):
        capability_cue(prev, {"nope"})


def test_cue_stats():
    assert cue_stats("") == {"chars": 0, "lines": 0, "empty": 1}
    assert cue_stats("ab\ncd") == {"chars": 5, "lines": 2, "empty": 0}


# ------------------------------------------------------------------------------------------ the trigger map


def test_the_paper_names_three_triggers_and_the_default_adds_two():
    from seal_verl.core.interface import PAPER_TRIGGERS

    assert PAPER_TRIGGERS == {tx.ARGUMENT_MISMATCH: "schema_constraints", tx.MISSING_TOOL_CALL: "tool_affordance",
                              tx.RECOVERY_FAILURE: "error_recovery"}
    assert DEFAULT_TRIGGERS == {**PAPER_TRIGGERS, tx.INVALID_TOOL_CALL: "call_format",
                                tx.SPURIOUS_TOOL_CALL: "ask_or_abstain"}
    assert "act_with_tools" in CUE_KINDS and "act_with_tools" not in DEFAULT_TRIGGERS.values()


def test_a_switched_off_trigger_keeps_its_kind_off_and_out_of_the_state():
    cfg = InterfaceConfig(triggers={**DEFAULT_TRIGGERS, tx.INVALID_TOOL_CALL: None}).validate()
    assert cfg.kinds() == tuple(k for k in DEFAULT_KINDS if k != "call_format")
    s = evolve(initial_state(cfg), {label: 1.0 for label in DEFAULT_TRIGGERS}, cfg)
    assert active_kinds(s) == set(cfg.kinds()) and "call_format" not in s.active
    fixed = InterfaceConfig(triggers=dict(cfg.triggers), fixed_all_on=True).validate()
    assert active_kinds(initial_state(fixed)) == set(cfg.kinds())
    # a state saved under this map comes back with the same kinds
    assert InterfaceState.from_dict(s.to_dict()).active == s.active


def test_a_label_can_switch_another_kind_on():
    cfg = InterfaceConfig(triggers={tx.MISSING_TOOL_CALL: "act_with_tools", tx.STATE_MISMATCH: "error_recovery"})
    cfg.validate()
    s = evolve(initial_state(cfg), {tx.MISSING_TOOL_CALL: 0.5, tx.RECOVERY_FAILURE: 0.9}, cfg)
    assert active_kinds(s) == {"act_with_tools"}
    s = evolve(s, {tx.STATE_MISMATCH: 0.5}, cfg)
    assert active_kinds(s) == {"act_with_tools", "error_recovery"}


@pytest.mark.parametrize("triggers,msg", [
    ({"pass": "call_format"}, "not a failure label"), ({tx.MISSING_TOOL_CALL: "hint_everything"}, "unknown cue kind"),
    ({tx.MISSING_TOOL_CALL: "tool_affordance", tx.STATE_MISMATCH: "tool_affordance"}, "named by both"),
    ("call_format", "mapping")])
def test_bad_trigger_maps_are_refused(triggers, msg):
    with pytest.raises(ValueError, match=msg):
        InterfaceConfig(triggers=triggers).validate()


def test_placement_is_one_of_two():
    assert InterfaceConfig().placement == "start_of_task"
    InterfaceConfig(placement="every_observation").validate()
    with pytest.raises(ValueError, match="placement must be one of start_of_task, every_observation"):
        InterfaceConfig(placement="everywhere").validate()
