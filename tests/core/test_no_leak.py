"""phi_err / phi_schema / phi_cap never reveal the answer (``seal_verl/core/cues.py``).

Over all 400 training tasks and many wrong trajectories (every perturbation kind of ``perturb.py``, schema
violations, unknown and not-yet-revealed functions, execution errors, undecodable messages, in both call
formats), the wrapped environment runs with every cue kind on. After every observation, each cue inserted
by that observation is checked against the task's ground truth: no ground-truth argument value (strings of
3+ characters, numbers other than single digits) and no ground-truth call with arguments may appear in a
cue unless the agent had already seen it in the bare user messages, the bare tool results or the offered
tool schemas. (A call without arguments, ``ls()``, is its function's name plus ``()``: the schemas show it,
and the schema cue lists such a function exactly that way.)

The agent's own messages do not count as "seen": the trajectories are built from the ground truth, so
that would make the test vacuous. The one exception is an echoed parser message, a function of the agent's
text alone (the decoder never sees the ground truth), whose positions ("column 40") would otherwise match
ground-truth numbers by chance. Words of the renderers' fixed, task-independent wording (rendered here
from dummy inputs) count as seen: a constant sentence cannot carry a task's answer ("first" is a
ground-truth value of one task and a word of the error-recovery cue).

A negative control shows the checker catches a cue renderer that echoes argument values.
"""

from __future__ import annotations

import json
import re
import time

import pytest

from env_wrappers.bfcl.environment import perturb as P
from env_wrappers.bfcl.tools.calls import canonical_call, split_call
from env_wrappers.bfcl.environment.env import BFCLEnv
from env_wrappers.bfcl.environment.tasks import load_split, load_tasks
from _leaks import answer_values
from seal_verl.core.observation import HINT_PREFIX, PREVIOUS_TURN_PREFIX, SealObservationWrapper
from seal_verl.core import cues as cue_text
from seal_verl.core import interface as omega
from seal_verl.core import trace as tr
ALL_ON = omega.InterfaceState(active={k: True for k in omega.CUE_KINDS})
CFG = omega.InterfaceConfig()
PREVALENCE = {"missing_tool_call": 0.4, "spurious_tool_call": 0.2, "invalid_tool_call": 0.1}


# ----------------------------------------------------------------------------------------------------------
# what counts as a leak
# ----------------------------------------------------------------------------------------------------------


def _forms(v) -> list[str]:
    """The textual forms a value can take in an observation (raw, JSON-escaped, repr-escaped)."""
    if isinstance(v, str):
        return list(dict.fromkeys([v, json.dumps(v)[1:-1], json.dumps(v, ensure_ascii=False)[1:-1], repr(v)[1:-1]]))
    if isinstance(v, float) and v == int(v):
        return [repr(v), str(int(v))]
    return [repr(v)]


def _pattern(form: str) -> re.Pattern:
    left = r"(?<![A-Za-z0-9_])" if form[:1].isalnum() or form[:1] == "_" else ""
    right = r"(?![A-Za-z0-9_])" if form[-1:].isalnum() or form[-1:] == "_" else ""
    if form[:1].isdigit() or form[:1] == "-":
        left = r"(?<![\d.])"
    if form[-1:].isdigit():
        right = r"(?![\d])"
    return re.compile(left + re.escape(form) + right)


class Secrets:
    """The ground truth of one task as searchable needles."""

    def __init__(self, task):
        values: set = set()
        calls: set[str] = set()
        for turn in task.ground_truth:
            for call in turn:
                name, args, kwargs = split_call(call)
                for a in args:
                    answer_values(a, values)
                for a in kwargs.values():
                    answer_values(a, values)
                if args or kwargs:
                    # a call without arguments is its function's name plus "()": the schemas show it
                    calls.add(call.strip())
                    calls.add(canonical_call(name, args, kwargs))
        self.needles = []  # (what, [(form, pattern)])
        for v in values:
            self.needles.append((f"value {v!r}", [(f, _pattern(f)) for f in _forms(v)]))
        for c in calls:
            self.needles.append((f"call {c}", [(c, _pattern(c))]))

    def found_in(self, text: str) -> list[str]:
        hits = []
        for what, forms in self.needles:
            if any(f in text and p.search(text) for f, p in forms):
                hits.append(what)
        return hits

    def seen(self, what: str, corpus: str) -> bool:
        for w, forms in self.needles:
            if w == what:
                return any(f in corpus and p.search(corpus) for f, p in forms)
        raise KeyError(what)


def _constant_wording() -> str:
    """Everything the renderers can say that does not depend on the task (dummy names, all branches)."""
    parts = [HINT_PREFIX, PREVIOUS_TURN_PREFIX, cue_text.schema_cue([{"name": "f", "parameters": {}}])]
    parts += [cue_text.call_format_cue(f) for f in cue_text.CALL_FORMATS]
    parts.append(cue_text.capability_cue({}, set(omega.CUE_KINDS), max_chars=10_000))
    kinds = set(omega.CUE_KINDS)
    recs = [tr.CallRecord(parse_status=s) for s in (tr.PARSE_BAD_SYNTAX, tr.PARSE_BAD_STRUCTURE, tr.PARSE_NON_LITERAL,
                                                    tr.PARSE_BAD_NAME, tr.PARSE_TOO_LARGE, "other")]
    recs.append(tr.CallRecord(name="f", available=False))
    recs.append(tr.CallRecord(name="f", available=True, schema_errors=["x"], is_error=True))
    parts += [cue_text.error_cue(r, None, kinds, available_names=["g"], max_chars=10_000) for r in recs]
    return "\n".join(parts)


CONSTANT = _constant_wording()


# ----------------------------------------------------------------------------------------------------------
# driving the wrapped environment and checking every new cue
# ----------------------------------------------------------------------------------------------------------


class Rollout:
    """Runs one trajectory through the wrapper, keeping the bare observations seen so far."""

    def __init__(self, task, call_format: str, secrets: Secrets, failures: list, stats: dict):
        self.env = BFCLEnv(task, call_format=call_format, call_timeout_s=None)
        self.wrapper = SealObservationWrapper(self.env, ALL_ON, CFG, PREVALENCE)
        self.task, self.secrets, self.failures, self.stats = task, secrets, failures, stats
        self.corpus = [CONSTANT]
        self.n_checked = 0
        self.parser_messages: list[str] = []  # the decoder's words about the agent's own text

    def _observe_bare(self, user_msgs, tool_results, revealed) -> None:
        for m in user_msgs or []:
            self.corpus.append(str(m.get("content", "")))
        for r in tool_results or []:
            self.corpus.append(str(r.content))
        if revealed:
            self.corpus.append(json.dumps(revealed, ensure_ascii=False))

    def _check_new_cues(self, where: str) -> None:
        new = self.wrapper.inserted_cues[self.n_checked:]
        self.n_checked = len(self.wrapper.inserted_cues)
        corpus = None
        for cue in new:
            self.stats["cues"] += 1
            assert cue.lstrip("\n").startswith(HINT_PREFIX)
            # An echoed parser message is a function of the agent's own text alone (the decoder never sees
            # the ground truth); its positions ("line 1 column 40") would otherwise match numbers by chance.
            for pm in self.parser_messages:
                cue = cue.replace(pm, "")
            for what in self.secrets.found_in(cue):
                self.stats["gt_mentions"] += 1
                if corpus is None:
                    corpus = "\n".join(self.corpus)
                if not self.secrets.seen(what, corpus):
                    self.failures.append((self.task.id, where, what, cue))

    def run(self, turns: list[list], count_unseen: bool = False) -> None:
        env, w = self.env, self.wrapper
        self.corpus.append(json.dumps(env.tools(), ensure_ascii=False))
        msgs = w.reset()
        self._observe_bare(_strip(msgs, w.inserted_cues), [], None)
        self._check_new_cues("first message")
        for k, steps in enumerate(turns):
            if env.done:
                break
            ended = False
            for step in list(steps) + ["Done."]:
                r = w.step(step)
                self.parser_messages += [c.parse_error[:157] for c in r.attempt.calls if c.parse_error]
                self._observe_bare(_strip(r.next_user, w.inserted_cues), _strip_results(r.tool_results, w.inserted_cues),
                                   r.revealed_tools)
                self._check_new_cues(f"turn {k}")
                if r.turn_done:
                    ended = True
                    break
            assert ended
        assert env.done
        self.stats["rollouts"] += 1
        if count_unseen:  # ground truth the agent never saw: what a leak would have revealed
            corpus = "\n".join(self.corpus)
            self.stats["unseen_secrets"] += sum(1 for what, _ in self.secrets.needles if not self.secrets.seen(what, corpus))


def _strip(msgs, cues):
    """The bare messages: the wrapper's cues removed (they are exact appended substrings)."""
    if not msgs:
        return msgs
    out = []
    for m in msgs:
        c = m.get("content", "")
        for cue in cues:
            c = c.replace(cue, "")
        out.append({**m, "content": c})
    return out


def _strip_results(results, cues):
    class R:
        def __init__(self, content):
            self.content = content

    out = []
    for r in results or []:
        c = r.content
        for cue in cues:
            c = c.replace(cue, "")
        out.append(R(c))
    return out


# ----------------------------------------------------------------------------------------------------------
# the trajectories
# ----------------------------------------------------------------------------------------------------------
#
# Building a rollout is the expensive part (backend instances, tool conversion per turn), a failing call is
# cheap, so most failures are packed into a few long "kitchen sink" rollouts: on every turn, one message
# with a malformed block beside a good call, one message with every kind of bad call derived from each
# ground-truth call of the turn, then the ground-truth step so that the state moves on as it should.


def _gt_turns(task):
    return [[list(gt)] if gt else [] for gt in task.ground_truth]


def _mutate(v):
    if isinstance(v, bool):
        return not v
    if isinstance(v, (int, float)):
        return v + 7
    if isinstance(v, str):
        return v + "_x"
    if isinstance(v, (list, tuple)):
        return list(v)[:-1] if v else ["x"]
    return "x"


def _bad_variants(call: str) -> list[str]:
    """Schema violations, execution errors and unknown names built from one ground-truth call."""
    name, args, kwargs = split_call(call)
    out = [
        canonical_call(name, args, {**kwargs, "bogus_param": 1}),  # unknown parameter
        f"{name}()",  # required parameters missing: an execution error
        canonical_call(name, tuple(0 for _ in args), {k: [0] if isinstance(v, str) else "x" for k, v in kwargs.items()}),
        canonical_call(name + "_unavailable", args, kwargs),  # unknown function
    ]
    if kwargs:  # a wrong value: usually an execution error or a wrong state
        key = sorted(kwargs)[0]
        out.append(canonical_call(name, args, {**kwargs, key: _mutate(kwargs[key])}))
    return out


def _broken_block(name: str) -> str:
    return "<tool_call>\n{\"name\": \"" + name + "\", \"arguments\": {\n</tool_call>"


def _kitchen_sink(task, fmt: str) -> list[list]:
    gts = task.ground_truth
    hidden = [d["name"] for k in sorted(task.missed_functions) for d in task.missed_functions[k]]
    turns = []
    for k, gt in enumerate(gts):
        steps = []
        if gt:
            first = gt[0]
            name = split_call(first)[0]
            if fmt == "json":
                steps.append(_broken_block(name) + "\n" + P.render_step(task, [first], "json"))
            else:
                steps.append("[" + name + "(x=os.environ)]")  # non-literal: BFCL shows an error
                steps.append("[os.system(cmd='ls')]")  # dotted name: unknown function
            bad = [v for c in gt[:3] for v in _bad_variants(c)]
            if k == 0 and hidden:
                later = next((c for t in gts for c in t if split_call(c)[0] == hidden[0]), f"{hidden[0]}()")
                bad.append(later)  # a held-out function before it is revealed
            steps.append(P.render_step(task, bad, fmt))
            steps.append(P.render_step(task, list(gt), fmt))
        else:  # abstention turn: a spurious call (the next turn's ground truth, without arguments)
            nxt = next((t for t in gts[k + 1:] if t), None)
            if nxt:
                steps.append(P.render_step(task, [nxt[0], f"{split_call(nxt[0])[0]}()"], fmt))
        turns.append(steps)
    return turns


def _undecodable(task) -> list[list]:
    """Messages with nothing decodable, which end the turn silently: at the first turn (feedback carried to
    the next user message), in a middle turn (JSON that is not a call) and at the last turn (dropped)."""
    turns = [[P.render_step(task, s, "json") for s in steps] for steps in _gt_turns(task)]
    name = split_call(next(c for t in task.ground_truth for c in t))[0]
    turns[0] = [_broken_block(name)] + turns[0]
    if task.n_turns > 2:
        mid = task.n_turns // 2
        turns[mid] = ["<tool_call>\n{\"function\": \"" + name + "\"}\n</tool_call>"] + turns[mid]
    turns[-1] = [_broken_block(name)] + turns[-1]
    return turns


def trajectories(task, index: int = 0) -> list[tuple[str, str, list]]:
    """``(label, call_format, turns)``; ``turns[k]`` holds the assistant messages of turn k.

    Every task gets the ground truth, both kitchen sinks and the undecodable rollout; the perturbation kinds
    of ``perturb.py`` rotate over the tasks (``index``), two per task, so each kind runs on ~115 tasks.
    """
    out = [("gt", "json", [[P.render_step(task, s, "json") for s in steps] for steps in _gt_turns(task)])]
    out.append(("kitchen_json", "json", _kitchen_sink(task, "json")))
    out.append(("kitchen_python", "python", _kitchen_sink(task, "python")))
    out.append(("undecodable", "json", _undecodable(task)))
    for kind in (P.KINDS[index % len(P.KINDS)], P.KINDS[(index + 3) % len(P.KINDS)]):
        res = P.perturb(task, kind, seed=index)
        if res is not None:
            fmt = "python" if index % 2 else "json"
            out.append((kind, fmt, [[P.render_step(task, s, fmt) for s in steps if s] for steps in res[0]]))
    return out


@pytest.fixture(scope="module")
def train_tasks():
    split = load_split()
    tasks = load_tasks(split["train"])
    assert len(tasks) == 400
    return tasks


def _new_stats():
    return {"rollouts": 0, "cues": 0, "gt_mentions": 0, "unseen_secrets": 0}


def test_no_cue_leaks_ground_truth_on_all_training_tasks(train_tasks):
    # CPU time of this process, not wall time: the bound is about the work (< 60 s on 2 slow cores), and a
    # shared machine's load must not make the test flaky
    t0 = time.process_time()
    failures: list = []
    stats = _new_stats()
    labels_seen: set[str] = set()
    family_totals = {f: 0 for f in omega.FAMILIES}
    carried = dropped = 0
    for i, task in enumerate(train_tasks.values()):
        secrets = Secrets(task)
        for label, fmt, turns in trajectories(task, i):
            labels_seen.add(label)
            ro = Rollout(task, fmt, secrets, failures, stats)
            ro.run(turns, count_unseen=label == "gt")
            for f, n in ro.wrapper.cue_stats["by_family"].items():
                family_totals[f] += n
            carried += sum(PREVIOUS_TURN_PREFIX in c for c in ro.wrapper.inserted_cues)
            dropped += ro.wrapper.cue_stats["dropped"]
    elapsed = time.process_time() - t0
    shown = "\n".join(f"{tid} [{where}] {what}: {cue[:300]!r}" for tid, where, what, cue in failures[:10])
    assert not failures, f"{len(failures)} leak(s):\n{shown}"
    # the test has teeth: every task, every perturbation kind, cues of every family at every site, ground
    # truth the agent never saw, and cues that do mention ground-truth values (ones the schemas or the user
    # had already shown)
    assert {"gt", "kitchen_json", "kitchen_python", "undecodable", *P.KINDS} <= labels_seen
    assert stats["rollouts"] >= 400 * 5, stats
    assert all(n > 1000 for n in family_totals.values()), family_totals
    assert carried >= 400 and dropped >= 400, (carried, dropped)
    assert stats["unseen_secrets"] > 1000, stats
    assert stats["gt_mentions"] > 0, stats
    print(f"no-leak: {stats}, families {family_totals}, {elapsed:.1f}s CPU")
    assert elapsed < 60, f"took {elapsed:.1f}s of CPU time"


def test_checker_catches_a_leaky_renderer(train_tasks, monkeypatch):
    """Negative control: an error cue that echoes the call's argument values is flagged."""
    real = cue_text.error_cue

    def leaky(call, tool, kind_active, available_names=None, max_chars=600):
        text = real(call, tool, kind_active, available_names, max_chars)
        if call.arguments:
            text += " Try: " + json.dumps(call.arguments)
        return text

    monkeypatch.setattr(cue_text, "error_cue", leaky)
    failures: list = []
    stats = _new_stats()
    for i, tid in enumerate(list(train_tasks)[:40]):
        task = train_tasks[tid]
        Rollout(task, "json", Secrets(task), failures, stats).run(_kitchen_sink(task, "json"))
    assert failures, "the leak checker missed values echoed into error cues"
