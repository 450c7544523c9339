"""The SEAL observation wrapper: cue placement, kind gating, transparency, unchanged tool semantics."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from types import SimpleNamespace

import pytest

from env_wrappers.bfcl.environment import perturb as P
from env_wrappers.bfcl.environment.env import REVEAL_MESSAGE, BFCLEnv
from env_wrappers.bfcl.environment.examples import examples
from env_wrappers.bfcl.environment.tasks import load_tasks
from seal_verl.core.observation import (
    CUE_SEPARATOR,
    HINT_PREFIX,
    PREVIOUS_TURN_PREFIX,
    SealObservationWrapper,
    empty_cue_stats,
)
from seal_verl.core import cues as cue_text
from seal_verl.core import interface as omega
from seal_verl.core.trace import Attempt, CallRecord

ALL = set(omega.CUE_KINDS)
BASE, MISS_FUNC = "multi_turn_base_0", "multi_turn_miss_func_0"


def state(*kinds):
    return omega.InterfaceState(active={k: k in kinds for k in omega.CUE_KINDS})


def block(name, **kw):
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": kw}) + "\n</tool_call>"


BROKEN = "<tool_call>\n{\"name\": \"cd\", \"arguments\": {\n</tool_call>"


@pytest.fixture(scope="module")
def tasks():
    return load_tasks([BASE, MISS_FUNC])


class Recorder:
    """A BFCLEnv proxy that keeps deep copies of what the bare environment returned."""

    def __init__(self, env):
        self.env = env
        self.raw = []

    def reset(self):
        m = self.env.reset()
        self.raw.append(copy.deepcopy(m))
        return m

    def step(self, msg):
        r = self.env.step(msg)
        self.raw.append((r, copy.deepcopy(obs(r))))
        return r

    def end_turn(self, reason="token_budget"):
        r = self.env.end_turn(reason)
        self.raw.append((r, copy.deepcopy(obs(r))))
        return r

    def tools(self):
        return self.env.tools()

    def __getattr__(self, name):
        if name.startswith("__") or name == "env":
            raise AttributeError(name)
        return getattr(self.env, name)


def obs(r):
    """Everything an agent loop can observe from a step result, as plain data."""
    return {
        "tool_results": [(t.name, t.call, t.content, t.is_error) for t in r.tool_results],
        "turn_done": r.turn_done,
        "episode_done": r.episode_done,
        "next_user": r.next_user,
        "revealed_tools": r.revealed_tools,
    }


def drive(env, turns):
    """Play ``turns`` (per turn, assistant messages; each turn closed by a text answer) through ``env``."""
    out = [env.reset()]
    for steps in turns:
        if env.done if not hasattr(env, "unwrapped") else env.unwrapped.done:
            break
        for step in list(steps) + ["Done."]:
            r = env.step(step)
            out.append(obs(r))
            if r.turn_done:
                break
    return out


def example_turns(fmt="json"):
    """Every labelled example as per-turn messages (the closing "Done." of each turn dropped)."""
    return {name: (tid, [t[:-1] for t in result]) for name, (tid, result) in examples(fmt).items()}


EXTRA = {
    "undecodable_first": (BASE, [[BROKEN], [], [], []]),
    "undecodable_last": (BASE, [[], [], [], [BROKEN]]),
    "dropped_block": (BASE, [[BROKEN + "\n" + block("pwd")], [], [], []]),
    "errors": (MISS_FUNC, [[block("cd", folder="nope") + "\n" + block("mkdir", dir_name=5, bogus=1) + "\n"
                            + block("sort", file_name="x") + "\n" + block("teleport")], [], [], [], []]),
}


def all_cases():
    cases = dict(example_turns("json"))
    cases.update(EXTRA)
    return cases


# ----------------------------------------------------------------------------------------------------------
# transparency and tool semantics
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["disabled", "no_kinds", "disabled_overrides_fixed_all_on"])
@pytest.mark.parametrize("name", sorted(all_cases()))
def test_transparent_when_off(tasks, name, how):
    tid, turns = all_cases()[name]
    cfg = {"disabled": omega.InterfaceConfig(enabled=False),
           "no_kinds": omega.InterfaceConfig(),
           "disabled_overrides_fixed_all_on": omega.InterfaceConfig(enabled=False, fixed_all_on=True)}[how]
    st = state() if how == "no_kinds" else state(*ALL)
    bare_env = BFCLEnv(tasks[tid])
    bare = drive(bare_env, turns)
    w = SealObservationWrapper(BFCLEnv(tasks[tid]), st, cfg, {"pass": 0.5})
    wrapped = drive(w, turns)
    assert json.dumps(wrapped, sort_keys=True) == json.dumps(bare, sort_keys=True)
    assert w.trace.to_json() == bare_env.trace.to_json()
    assert w.inserted_cues == [] and w.cue_stats == empty_cue_stats([], enabled=cfg.enabled)
    assert not w.active


def test_transparent_returns_the_environments_own_objects(tasks):
    env = BFCLEnv(tasks[BASE])
    seen = {}
    real_reset, real_step = env.reset, env.step
    env.reset = lambda: seen.setdefault("reset", real_reset())
    env.step = lambda m: seen.setdefault("step", real_step(m))
    w = SealObservationWrapper(env, state(), omega.InterfaceConfig(), {})
    assert w.reset() is seen["reset"]
    assert w.step(block("pwd")) is seen["step"]


@pytest.mark.parametrize("name", sorted(all_cases()))
def test_all_cues_on_changes_observations_only(tasks, name):
    """Same messages, every kind on: the same calls run with the same results, the trace is identical, and
    each observation is the bare one plus appended cue blocks."""
    tid, turns = all_cases()[name]
    bare_env = BFCLEnv(tasks[tid])
    bare = drive(bare_env, turns)
    rec = Recorder(BFCLEnv(tasks[tid]))
    w = SealObservationWrapper(rec, state(*ALL), omega.InterfaceConfig(), {"missing_tool_call": 0.3})
    wrapped = drive(w, turns)
    assert w.trace.to_json() == bare_env.trace.to_json()
    # the bare environment's own objects were never mutated by the wrapper
    for r, snapshot in [x for x in rec.raw if isinstance(x, tuple)]:
        assert obs(r) == snapshot
    assert len(wrapped) == len(bare)
    stripped = json.dumps(wrapped)
    for cue in sorted(set(w.inserted_cues), key=len, reverse=True):
        stripped = stripped.replace(json.dumps(cue)[1:-1], "")
    assert stripped == json.dumps(bare)
    assert w.inserted_cues, "every case gets at least the start-of-task cues"


# ----------------------------------------------------------------------------------------------------------
# placement and gating
# ----------------------------------------------------------------------------------------------------------


def hints(text):
    return [b for b in text.split(CUE_SEPARATOR) if b.startswith(HINT_PREFIX)]


def test_first_message_cues(tasks):
    task = tasks[MISS_FUNC]
    w = SealObservationWrapper(BFCLEnv(task), state(*ALL), omega.InterfaceConfig(max_cue_chars=5000), {})
    msgs = w.reset()
    bare = BFCLEnv(task).reset()
    assert msgs[0]["content"].startswith(bare[0]["content"] + CUE_SEPARATOR + HINT_PREFIX)
    blocks = hints(msgs[0]["content"])
    assert len(blocks) == 4
    assert blocks[0].startswith(HINT_PREFIX + "Function parameters")
    assert "- cd(folder*: string)" in blocks[0] and "sort(" not in blocks[0]  # held-out function not shown
    assert blocks[1].startswith(HINT_PREFIX + "Tool call format") and "<tool_call>" in blocks[1]
    assert blocks[2].startswith(HINT_PREFIX + "Reminders:")
    assert blocks[3].startswith(HINT_PREFIX + "What the offered tools can do for this request:")
    assert w.cue_stats["by_family"] == {"schema": 2, "error": 0, "capability": 2}
    assert w.cue_stats["count"] == 4 and w.cue_stats["chars"] == sum(map(len, w.inserted_cues))
    assert len(msgs[0]["content"]) - len(bare[0]["content"]) == w.cue_stats["chars"]


@pytest.mark.parametrize("kinds,families", [
    ({"schema_constraints"}, {"schema": 1, "capability": 0}),
    ({"call_format"}, {"schema": 1, "capability": 0}),
    ({"tool_affordance"}, {"schema": 0, "capability": 1}),
    ({"ask_or_abstain", "act_with_tools"}, {"schema": 0, "capability": 1}),
    ({"ask_or_abstain", "tool_affordance"}, {"schema": 0, "capability": 2}),
    ({"error_recovery"}, {"schema": 0, "capability": 0}),
])
def test_first_message_gated_by_kind(tasks, kinds, families):
    w = SealObservationWrapper(BFCLEnv(tasks[BASE]), state(*kinds), omega.InterfaceConfig(), {})
    w.reset()
    got = {k: v for k, v in w.cue_stats["by_family"].items() if k != "error"}
    assert got == families
    assert w.cue_stats["active_kinds"] == sorted(kinds)


ACT = omega.InterfaceConfig(triggers={**omega.DEFAULT_TRIGGERS, "missing_tool_call": "act_with_tools"}).validate()


def test_capability_cue_follows_prevalence(tasks):
    kinds = ("act_with_tools", "ask_or_abstain")
    a = SealObservationWrapper(BFCLEnv(tasks[BASE]), state(*kinds), ACT,
                               {"spurious_tool_call": 0.5, "missing_tool_call": 0.1}).reset()[0]["content"]
    b = SealObservationWrapper(BFCLEnv(tasks[BASE]), state(*kinds), ACT,
                               {"spurious_tool_call": 0.1, "missing_tool_call": 0.5}).reset()[0]["content"]
    assert a.index("ask the user") < a.index("Complete every") and b.index("Complete every") < b.index("ask the user")


@pytest.mark.parametrize("fmt,expect", [("json", "<tool_call>"), ("python", "Python list"), ("fc", None)])
def test_call_format_cue_follows_the_env_format(tasks, fmt, expect):
    w = SealObservationWrapper(BFCLEnv(tasks[BASE], call_format=fmt), state("call_format"), omega.InterfaceConfig(), {})
    content = w.reset()[0]["content"]
    if expect is None:
        assert w.inserted_cues == []  # replay formats have no syntax to describe
    else:
        assert expect in hints(content)[0]


def test_revealed_functions_get_a_schema_cue_in_the_revealing_turn(tasks):
    w = SealObservationWrapper(BFCLEnv(tasks[MISS_FUNC]), state("schema_constraints"), omega.InterfaceConfig(), {})
    w.reset()
    for _ in range(3):
        r = w.step("ok")
    assert r.next_user[0]["content"].startswith(REVEAL_MESSAGE + CUE_SEPARATOR + HINT_PREFIX)
    (cue,) = hints(r.next_user[0]["content"])
    assert "- sort(file_name*: string)" in cue and "cd(" not in cue
    assert [t["function"]["name"] for t in r.revealed_tools] == ["sort"]
    # no reveal cue without the schema kind
    w2 = SealObservationWrapper(BFCLEnv(tasks[MISS_FUNC]), state("call_format"), omega.InterfaceConfig(), {})
    w2.reset()
    for _ in range(3):
        r2 = w2.step("ok")
    assert r2.next_user == [{"role": "user", "content": REVEAL_MESSAGE}]


def step_cues(tasks, kinds, message, tid=MISS_FUNC):
    w = SealObservationWrapper(BFCLEnv(tasks[tid]), state(*kinds), omega.InterfaceConfig(), {})
    w.reset()
    n = len(w.inserted_cues)
    r = w.step(message)
    return w, r, w.inserted_cues[n:]


def test_error_feedback_is_appended_to_its_tool_result(tasks):
    msg = (block("cd", folder="nope") + "\n" + block("mkdir", dir_name=5, bogus=1) + "\n" + block("sort", file_name="x")
           + "\n" + block("pwd"))
    w, r, new = step_cues(tasks, ALL, msg)
    cd, mkdir, sort, pwd = r.tool_results
    assert "[hint] The call to `cd` failed" in cd.content
    assert "`bogus` is not a parameter of `mkdir`" in mkdir.content and "`dir_name` must be of type string" in mkdir.content
    assert "`sort` is not an available function" in sort.content and "Available now:" in sort.content
    assert HINT_PREFIX not in pwd.content
    assert w.cue_stats["by_family"]["error"] == 3 == len(new)


@pytest.mark.parametrize("kinds,cd,mkdir,sort", [
    ({"error_recovery"}, True, True, True),
    ({"schema_constraints"}, False, True, False),  # schema violations only
    ({"call_format"}, False, False, True),  # unavailable names only
    ({"tool_affordance", "ask_or_abstain"}, False, False, False),
])
def test_error_feedback_gated_by_kind(tasks, kinds, cd, mkdir, sort):
    msg = block("cd", folder="nope") + "\n" + block("mkdir", dir_name=5, bogus=1) + "\n" + block("sort", file_name="x")
    _, r, _ = step_cues(tasks, kinds, msg)
    got = tuple(HINT_PREFIX in t.content for t in r.tool_results)
    assert got == (cd, mkdir, sort)


def test_dropped_block_feedback_goes_to_the_last_tool_result(tasks):
    w, r, new = step_cues(tasks, {"call_format"}, BROKEN + "\n" + block("pwd") + "\n" + block("ls"), tid=BASE)
    assert not r.turn_done and len(r.tool_results) == 2
    assert HINT_PREFIX not in r.tool_results[0].content
    assert "could not be decoded" in r.tool_results[1].content
    assert len(new) == 1


def test_silent_turn_end_carries_feedback_to_the_next_user_message(tasks):
    w, r, new = step_cues(tasks, {"call_format"}, BROKEN, tid=BASE)
    assert r.turn_done and not r.tool_results
    (cue,) = hints(r.next_user[0]["content"])
    assert cue.startswith(HINT_PREFIX + PREVIOUS_TURN_PREFIX + "Your tool call could not be decoded")
    assert len(cue) <= len(HINT_PREFIX) + omega.InterfaceConfig().max_cue_chars
    assert w.cue_stats["dropped"] == 0


def test_silent_end_of_the_last_turn_is_counted_as_dropped(tasks):
    w = SealObservationWrapper(BFCLEnv(tasks[BASE]), state("call_format"), omega.InterfaceConfig(), {})
    w.reset()
    for _ in range(3):
        w.step("ok")
    n = len(w.inserted_cues)
    r = w.step(BROKEN)
    assert r.episode_done and w.inserted_cues[n:] == []
    assert w.cue_stats["dropped"] == 1


def test_end_turn_from_outside_delivers_revealed_schema(tasks):
    w = SealObservationWrapper(BFCLEnv(tasks[MISS_FUNC]), state("schema_constraints"), omega.InterfaceConfig(), {})
    w.reset()
    w.step("ok")
    w.step("ok")
    r = w.end_turn("token_budget")
    assert "sort(file_name*: string)" in r.next_user[0]["content"]


def test_identical_feedback_is_inserted_once_per_observation(tasks):
    # JSON that is not a call makes the whole message undecodable: every block gets a failure record
    msg = "<tool_call>\n{\"function\": \"cd\"}\n</tool_call>\n" + block("pwd") + "\n" + block("ls")
    w, r, _ = step_cues(tasks, {"call_format"}, msg, tid=BASE)
    assert r.turn_done
    cues = hints(r.next_user[0]["content"])
    assert len(cues) == len(set(cues)) == 2  # "not a call" and "another call is malformed"


def test_cues_are_bounded_and_stats_are_consistent(tasks):
    cfg = omega.InterfaceConfig(max_cue_chars=120, max_schema_cue_chars=300)
    for name, (tid, turns) in all_cases().items():
        w = SealObservationWrapper(BFCLEnv(tasks[tid]), state(*ALL), cfg, {"pass": 1.0})
        drive(w, turns)
        st = w.cue_stats
        overhead = len(CUE_SEPARATOR) + len(HINT_PREFIX)
        assert all(len(c) <= overhead + 300 for c in w.inserted_cues), name
        # only schema cues may use the larger schema bound
        long_ones = [c for c in w.inserted_cues if len(c) > overhead + 120]
        assert len(long_ones) <= st["by_family"].get("schema", 0), name
        assert st["count"] == len(w.inserted_cues) == sum(st["by_family"].values())
        assert st["chars"] == sum(map(len, w.inserted_cues)) == sum(st["chars_by_family"].values())
        json.dumps(st)
        w.annotate_trace()
        assert w.trace.meta["cues"] == st and w.trace.meta["cues"] is not st


def test_fixed_all_on_ignores_the_state(tasks):
    w = SealObservationWrapper(BFCLEnv(tasks[BASE]), state(), omega.InterfaceConfig(fixed_all_on=True), {})
    assert w.kinds == frozenset(omega.DEFAULT_TRIGGERS.values())  # every configured kind


def test_bad_prevalence_is_rejected(tasks):
    with pytest.raises(ValueError, match="unknown prevalence key"):
        SealObservationWrapper(BFCLEnv(tasks[BASE]), state(), omega.InterfaceConfig(), {"nope": 0.1})
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        SealObservationWrapper(BFCLEnv(tasks[BASE]), state(), omega.InterfaceConfig(), {"pass": 1.5})
    # an EMA's rounding overshoot is clamped, not an error
    w = SealObservationWrapper(BFCLEnv(tasks[BASE]), state(), omega.InterfaceConfig(), {"pass": 1.0 + 1e-12})
    assert w.prevalence == {"pass": 1.0}


def test_delegates_everything_else(tasks):
    env = BFCLEnv(tasks[BASE])
    w = SealObservationWrapper(env, state(*ALL), omega.InterfaceConfig(), {})
    assert w.tools() == env.tools() and w.call_format == "json" and w.trace is env.trace
    assert w.unwrapped is env and w.task is env.task
    w.reset()
    w.terminate("token_budget")
    assert env.done


# ----------------------------------------------------------------------------------------------------------
# environment neutrality
# ----------------------------------------------------------------------------------------------------------


def test_module_does_not_import_bfcl():
    code = ("import sys, seal_verl.core.observation; "
            "print(sorted(m for m in sys.modules if m.startswith(('env_wrappers.bfcl', 'bfcl_eval', 'verl'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


class ToyEnv:
    """A two-turn toy environment with the BFCLEnv-like interface and nothing of BFCL."""

    call_format = "python"

    def __init__(self):
        self.turn = 0
        self.trace = SimpleNamespace(meta={})

    def tools(self):
        return [{"type": "function", "function": {"name": "add", "parameters": {
            "type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}}]

    def reset(self):
        return [{"role": "user", "content": "Add one."}]

    def step(self, msg):
        if msg == "bad":
            rec = CallRecord(raw="[add(", parse_status="bad_syntax", parse_error="SyntaxError")
            self.turn += 1
            return SimpleNamespace(tool_results=[], attempt=Attempt(text=msg, calls=[rec]), failed_calls=[rec],
                                   next_user=[{"role": "user", "content": "Again."}], revealed_tools=[],
                                   turn_done=True, episode_done=False)
        rec = CallRecord(raw=msg, name="add", arguments={"a": "x"}, call="add(a='x')", available=True, known=True,
                         schema_errors=["a: 'x' is not of type 'integer'"], executed=True, result="TypeError",
                         is_error=True)
        res = SimpleNamespace(name="add", call="add(a='x')", content="TypeError", is_error=True)
        return SimpleNamespace(tool_results=[res], attempt=Attempt(text=msg, calls=[rec]), failed_calls=[],
                               next_user=None, revealed_tools=[], turn_done=False, episode_done=False)


def test_works_on_any_env_with_the_interface():
    w = SealObservationWrapper(ToyEnv(), state(*ALL), omega.InterfaceConfig(), {})
    first = w.reset()[0]["content"]
    assert "- add(a*: integer)" in first and "Python list" in first
    r = w.step("[add(a='x')]")
    assert "`a` must be of type integer" in r.tool_results[0].content
    assert "The call to `add` failed" in r.tool_results[0].content
    r = w.step("bad")
    assert r.next_user[0]["content"].startswith("Again." + CUE_SEPARATOR + HINT_PREFIX + PREVIOUS_TURN_PREFIX)
    w.annotate_trace()
    assert w.trace.meta["cues"]["by_family"]["error"] == 2


def test_no_closed_loop_does_not_rank_capability_reminders(tasks):
    """Without the closed loop nothing adapts to C_t: the failure rates must not reorder the reminders."""
    kinds = ("act_with_tools", "ask_or_abstain")
    fixed = omega.InterfaceConfig(triggers=dict(ACT.triggers), fixed_all_on=True)
    texts = []
    for prevalence in ({}, {"spurious_tool_call": 0.9, "missing_tool_call": 0.0},
                       {"spurious_tool_call": 0.0, "missing_tool_call": 0.9}):
        w = SealObservationWrapper(BFCLEnv(tasks[BASE]), state(*kinds), fixed, prevalence)
        assert w.prevalence == {}
        texts.append(cue_text.capability_cue(w.prevalence, set(kinds) & w.kinds, trigger_of=fixed.trigger_of()))
    assert texts[0] == texts[1] == texts[2]
    # with the closed loop the same rates do reorder them
    a = SealObservationWrapper(BFCLEnv(tasks[BASE]), state(*kinds), ACT, {"spurious_tool_call": 0.9})
    b = SealObservationWrapper(BFCLEnv(tasks[BASE]), state(*kinds), ACT, {"missing_tool_call": 0.9})
    assert cue_text.capability_cue(a.prevalence, set(kinds), trigger_of=ACT.trigger_of()) != \
        cue_text.capability_cue(b.prevalence, set(kinds), trigger_of=ACT.trigger_of())


# ----------------------------------------------------------------------------------------------------------
# reactive cues only (proactive_cues false): nothing before the agent acts, feedback after a failed call
# ----------------------------------------------------------------------------------------------------------

REACTIVE = omega.InterfaceConfig(proactive_cues=False, max_cue_chars=5000).validate()


@pytest.mark.parametrize("name", sorted(all_cases()))
def test_reactive_only_inserts_error_feedback_and_nothing_else(tasks, name):
    """Every kind on, no proactive cues: each cue is error feedback on a failed call (appended to a tool result
    or carried to the next user message), the first message is the bare one, and a rollout whose calls all
    execute observes exactly what the bare environment returns."""
    tid, turns = all_cases()[name]
    bare_env = BFCLEnv(tasks[tid])
    bare = drive(bare_env, turns)
    w = SealObservationWrapper(BFCLEnv(tasks[tid]), state(*ALL), REACTIVE, {"missing_tool_call": 0.3})
    wrapped = drive(w, turns)
    assert wrapped[0] == bare[0]
    assert w.trace.to_json() == bare_env.trace.to_json()
    assert w.cue_stats["by_family"]["schema"] == w.cue_stats["by_family"]["capability"] == 0
    assert w.cue_stats["count"] == w.cue_stats["by_family"]["error"] == len(w.inserted_cues)
    failed = any(c.parse_status != "ok" or not c.available or c.schema_errors or c.is_error
                 for turn in bare_env.trace.turns for a in turn.attempts for c in a.calls)
    if not failed:
        assert w.inserted_cues == [] and json.dumps(wrapped, sort_keys=True) == json.dumps(bare, sort_keys=True)
    stripped = json.dumps(wrapped)
    for cue in sorted(set(w.inserted_cues), key=len, reverse=True):
        stripped = stripped.replace(json.dumps(cue)[1:-1], "")
    assert stripped == json.dumps(bare)


def test_reactive_only_has_no_reveal_cue_but_keeps_error_feedback(tasks):
    w = SealObservationWrapper(BFCLEnv(tasks[MISS_FUNC]), state(*ALL), REACTIVE, {})
    assert w.reset() == BFCLEnv(tasks[MISS_FUNC]).reset()
    for _ in range(3):
        r = w.step("ok")
    assert r.next_user == [{"role": "user", "content": REVEAL_MESSAGE}]
    r = w.step(block("cd", folder="nope") + "\n" + block("mkdir", dir_name=5, bogus=1))
    cd, mkdir = r.tool_results
    assert "[hint] The call to `cd` failed" in cd.content and "`bogus` is not a parameter of `mkdir`" in mkdir.content


def test_no_closed_loop_without_proactive_cues_keeps_only_the_kinds_with_feedback(tasks):
    cfg = omega.InterfaceConfig(fixed_all_on=True, proactive_cues=False).validate()
    w = SealObservationWrapper(BFCLEnv(tasks[BASE]), state(), cfg, {})
    assert w.kinds == frozenset(k for k in cfg.kinds() if omega.CUE_KINDS[k].family != omega.CAPABILITY)
    assert w.reset() == BFCLEnv(tasks[BASE]).reset()


# ----------------------------------------------------------------------------------------------------------
# placement: start_of_task (once) or every_observation (the paper's formula, on each observation)
# ----------------------------------------------------------------------------------------------------------

PROACTIVE = ("schema_constraints", "call_format", "ask_or_abstain", "tool_affordance")


def _placed(tasks, placement, tid=BASE):
    """Every observation of the ground-truth trajectory, as (where, [cue blocks in it])."""
    cfg = omega.InterfaceConfig(placement=placement).validate()
    w = SealObservationWrapper(BFCLEnv(tasks[tid]), state(*PROACTIVE), cfg, {})
    out = [("user", hints(w.reset()[-1]["content"]))]
    for gt in tasks[tid].ground_truth:
        for msg in [P.render_step(tasks[tid], [c], "json") for c in gt] + ["Done."]:
            r = w.step(msg)
            for t in r.tool_results:
                out.append(("tool", hints(t.content)))
            if r.next_user:
                out.append(("user", hints(r.next_user[-1]["content"])))
            if r.turn_done:
                break
    return w, out


def test_every_observation_repeats_the_schema_and_capability_cues(tasks):
    w, seen = _placed(tasks, "every_observation")
    steps_with_results = [b for where, b in seen if where == "tool" and b]
    users = [b for where, b in seen if where == "user"]
    assert len(users) == len(tasks[BASE].ground_truth)  # the first message and every later request
    for blocks in users:
        assert any(b.startswith(HINT_PREFIX + "Function parameters") for b in blocks)
        assert any(b.startswith(HINT_PREFIX + "Reminders:") for b in blocks)
    # each step with tool results carries the blocks once, after its last result
    assert steps_with_results and all(any(b.startswith(HINT_PREFIX + "Function parameters") for b in blocks)
                                      for blocks in steps_with_results)
    assert w.cue_stats["by_family"]["schema"] >= 2 * (len(users) + len(steps_with_results))


def test_start_of_task_puts_them_in_the_first_message_only(tasks):
    w, seen = _placed(tasks, "start_of_task")
    first, rest = seen[0][1], seen[1:]
    assert any(b.startswith(HINT_PREFIX + "Function parameters") for b in first)
    assert any(b.startswith(HINT_PREFIX + "Reminders:") for b in first)
    assert not any(b.startswith(HINT_PREFIX + ("Function parameters", "Reminders:", "Tool call format")[i])
                   for _, blocks in rest for b in blocks for i in range(3))
    # the affordance cue is about a request: it comes with each request that names what a tool does
    later = [blocks for where, blocks in rest if where == "user"]
    assert any(b.startswith(HINT_PREFIX + "What the offered tools can do") for blocks in later for b in blocks)
    assert all(not blocks for where, blocks in rest if where == "tool")


def test_every_observation_costs_more_and_changes_no_tool_result(tasks):
    start, _ = _placed(tasks, "start_of_task")
    every, _ = _placed(tasks, "every_observation")
    assert every.cue_stats["chars"] > 2 * start.cue_stats["chars"]
    assert every.trace.to_json() == start.trace.to_json()  # the same calls ran with the same results
