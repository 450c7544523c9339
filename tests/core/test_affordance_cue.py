"""The tool-affordance cue names what the offered tools can do for the pending request and leaks no answer.

``seal_verl.core.cues.affordance_cue`` reads the tool schemas and the user's request; it never sees the ground truth.
What is checked here:

- on every BFCL training task and every ledger task, at every user turn, the cue contains no ground-truth argument
  value (strings of 3+ characters, numbers other than single digits) and no ground-truth call with arguments,
  unless the tool schemas themselves show it; and every line of it is a tool's name and a sentence of that tool's
  own description (nothing else, so no word of the request and no value is repeated);
- on the ledger, whose requests carry the answer's values (account names, amounts), no such value appears, while the
  cue names the function the ground truth calls on most turns (it is about the request, not a fixed sentence);
- through the observation wrapper, the cues are the same whatever the task's ground truth says;
- a negative control: a renderer that repeats the request is caught by the same checks.
"""

from __future__ import annotations

import json
import re

import pytest

from _leaks import answer_values
from seal_verl.core import cues as cue_text
AFFORDANCE_HEADER = "What the offered tools can do for this request:"


def _found(needle, text: str) -> bool:
    form = needle if isinstance(needle, str) else repr(needle)
    left = r"(?<![A-Za-z0-9_.])" if form[:1].isalnum() else ""
    right = r"(?![A-Za-z0-9_])" if form[-1:].isalnum() else ""
    return re.search(left + re.escape(form) + right, text) is not None


def _lines_are_tool_text(cue: str, tools: list[dict]) -> list[str]:
    """The lines of ``cue`` that are not a tool's name followed by text of that tool's own description."""
    docs = {}
    for t in tools:
        fn = t.get("function", t)
        docs[fn["name"]] = str(fn.get("description") or "")
    bad = []
    lines = cue.split("\n")
    if lines[0] != AFFORDANCE_HEADER:
        return [lines[0]]
    for line in lines[1:]:
        m = re.fullmatch(r"- (\S+?)(?:: (.*))?", line)
        if m is None or m.group(1) not in docs:
            bad.append(line)
            continue
        text = " ".join((m.group(2) or "").removesuffix("...").split())
        if text and text not in " ".join(docs[m.group(1)].split()):
            bad.append(line)
    return bad


def _check(cue: str, tools: list[dict], gt_values: set, gt_calls: set, where: str, failures: list) -> None:
    if not cue:
        return
    schemas = json.dumps(tools, ensure_ascii=False)
    for line in _lines_are_tool_text(cue, tools):
        failures.append((where, "not tool text", line))
    for v in gt_values:
        if _found(v, cue) and not _found(v, schemas) and not (isinstance(v, str) and v in schemas):
            failures.append((where, f"value {v!r}", cue))
    for c in gt_calls:
        if c in cue:
            failures.append((where, f"call {c}", cue))


# ---------------------------------------------------------------------------------------------------------- BFCL


@pytest.fixture(scope="module")
def bfcl_tasks():
    from env_wrappers.bfcl.environment.tasks import load_split, load_tasks

    tasks = load_tasks(load_split()["train"])
    assert len(tasks) == 400
    return tasks


def _bfcl_secrets(task) -> tuple[set, set]:
    from env_wrappers.bfcl.tools.calls import canonical_call, split_call

    values, calls = set(), set()
    for turn in task.ground_truth:
        for call in turn:
            name, args, kwargs = split_call(call)
            for a in list(args) + list(kwargs.values()):
                answer_values(a, values)
            if args or kwargs:
                calls.add(call.strip())
                calls.add(canonical_call(name, args, kwargs))
    return values, calls


def _bfcl_requests(task):
    """(turn, the request's text, the tools offered at that turn) for every user turn, miss_func reveals included."""
    from env_wrappers.bfcl.environment.env import BFCLEnv

    env = BFCLEnv(task, call_format="json", call_timeout_s=None)
    msgs = env.reset()
    out = [(0, "\n".join(str(m.get("content", "")) for m in msgs), list(env.tools()))]
    for k in range(1, task.n_turns):
        r = env.end_turn("text")
        if not r.next_user:
            break
        out.append((k, "\n".join(str(m.get("content", "")) for m in r.next_user), list(env.tools())))
    return out


def test_the_affordance_cue_leaks_no_answer_on_any_bfcl_training_task(bfcl_tasks):
    failures: list = []
    rendered = named_gt = turns_with_gt = 0
    for task in bfcl_tasks.values():
        values, calls = _bfcl_secrets(task)
        for k, request, tools in _bfcl_requests(task):
            cue = cue_text.affordance_cue(tools, request)
            _check(cue, tools, values, calls, f"{task.id} turn {k}", failures)
            rendered += bool(cue)
            gt = task.ground_truth[k] if k < len(task.ground_truth) else []
            if gt:
                turns_with_gt += 1
                named_gt += any(f"- {c.split('(')[0]}:" in cue or cue.endswith(f"- {c.split('(')[0]}") for c in gt)
    assert not failures, failures[:5]
    # the checks had something to check: a cue on most turns, naming a function the ground truth calls on many
    assert rendered > 1000, rendered
    assert named_gt > turns_with_gt / 3, (named_gt, turns_with_gt)


# -------------------------------------------------------------------------------------------------------- ledger


def _ledger():
    from env_wrappers.ledger.backend import openai_tools
    from env_wrappers.ledger.tasks import ACCOUNTS, all_tasks

    tasks = [t for split in all_tasks().values() for t in split.values()]
    return tasks, openai_tools(), ACCOUNTS


def _ledger_check(render) -> tuple[list, int, int]:
    tasks, tools, accounts = _ledger()
    failures: list = []
    named = with_gt = 0
    for task in tasks:
        values: set = set(accounts)
        for turn in task.ground_truth:
            for call in turn:
                values |= {v for v in call["arguments"].values()}
        for k, request in enumerate(task.turns):
            cue = render(tools, request)
            _check(cue, tools, set(), set(), f"{task.id} turn {k}", failures)
            # the answer's values are in the request; none of them may come back in the cue
            for v in values:
                if _found(v if isinstance(v, str) else str(v), cue.split("\n", 1)[-1]):
                    failures.append((f"{task.id} turn {k}", f"value {v!r}", cue))
            if task.ground_truth[k]:
                with_gt += 1
                named += f"- {task.ground_truth[k][-1]['name']}:" in cue
    return failures, named, with_gt


def test_the_affordance_cue_repeats_no_value_of_a_ledger_request_and_names_the_right_tool():
    failures, named, with_gt = _ledger_check(cue_text.affordance_cue)
    assert not failures, failures[:5]
    assert named >= 0.6 * with_gt, (named, with_gt)


def test_a_renderer_that_repeats_the_request_is_caught():
    def echo(tools, request):
        return cue_text.affordance_cue(tools, request) + f"\n- deposit: {request}"

    failures, _, _ = _ledger_check(echo)
    assert failures and any(what.startswith("value") for _, what, _ in failures)


# ------------------------------------------------------------------------------------------------- the wrapper


def test_the_wrappers_affordance_cues_do_not_depend_on_the_ground_truth(bfcl_tasks):
    """The same task with another task's ground truth gets the same affordance cues, turn by turn."""
    import dataclasses

    from env_wrappers.bfcl.environment.env import BFCLEnv
    from seal_verl.core.observation import SealObservationWrapper
    from seal_verl.core import interface as omega
    state = omega.InterfaceState(active={"tool_affordance": True})
    cfg = omega.InterfaceConfig().validate()
    ids = sorted(bfcl_tasks)[:30]
    for a, b in zip(ids, ids[1:] + ids[:1]):
        task = bfcl_tasks[a]
        other = dataclasses.replace(task, ground_truth=bfcl_tasks[b].ground_truth[: len(task.ground_truth)]
                                    + [[]] * max(0, len(task.ground_truth) - len(bfcl_tasks[b].ground_truth)))
        cues = []
        for t in (task, other):
            w = SealObservationWrapper(BFCLEnv(t, call_format="json", call_timeout_s=None), state, cfg, {})
            w.reset()
            for _ in range(task.n_turns):
                r = w.end_turn("text")
                if r.episode_done:
                    break
            cues.append(list(w.inserted_cues))
        assert cues[0] == cues[1] and all(AFFORDANCE_HEADER in c for c in cues[0]), a
