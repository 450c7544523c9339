"""Hostile and malformed tool calls never run code, never crash the environment, and get the right label.

More than 10,000 calls, generated deterministically (seeded), in all three call formats (Qwen JSON
``<tool_call>`` blocks, BFCL's Python call list, function-calling dict lists): code in names and arguments,
dunder and private names, attribute chains, huge payloads, deep nesting, invalid UTF-8, surrogates, control
characters, binary garbage, broken JSON and JSON of the wrong shape, functions of classes the task does not
involve, miss_func functions before they are revealed, and schema violations of available functions.

Every payload that would do something if evaluated writes a sentinel file, sets an environment variable or
sets a global; none of them may exist afterwards. Each turn of each episode gets messages of one group only,
goes through (a) ``BFCLEnv.step`` on a real task and (b) ``judge_result`` on the same messages as a result
file, and must get the label Psi's rules give:

- ``invalid``: unparseable, unknown, unavailable, private or dunder names, non-literal arguments, wrong
  structure -> ``invalid_tool_call``;
- ``schema``: parses to an available function but violates its schema -> ``argument_mismatch``;
- ``text``: not a call at all (garbage prose) -> ``missing_tool_call``;
- ``neutral``: well-formed calls whose *string values* carry code -> a failure label, never
  ``invalid_tool_call`` (they are valid calls);
- on an abstention turn any attempt is ``spurious_tool_call`` and plain text is ``pass``.
"""

from __future__ import annotations

import builtins
import json
import os
import random
import re
import sys
import tempfile
import time

import pytest

from env_wrappers.bfcl.tools import backends as backends_mod
from env_wrappers.bfcl.tools import calls as calls_mod
from env_wrappers.bfcl.tools.backends import Backends
from env_wrappers.bfcl.environment.env import BFCLEnv
from env_wrappers.bfcl.environment.judge import judge_result, judge_trace
from env_wrappers.bfcl.environment.tasks import load_tasks
from seal_verl.core import taxonomy as T
SEED = 20260323
N_CALLS_MIN = 10_000
FORMATS = ("json", "python", "fc")
TASK_IDS = ("multi_turn_base_0", "multi_turn_miss_func_0", "multi_turn_miss_param_0", "multi_turn_base_100",
            "multi_turn_base_56", "multi_turn_long_context_100")
ALL_CLASSES = ("GorillaFileSystem", "MathAPI", "MessageAPI", "TwitterAPI", "TicketAPI", "TradingBot", "TravelAPI",
               "VehicleControlAPI")

SENTINEL_PATH = os.path.join(tempfile.gettempdir(), f"seal_fuzz_sentinel_{os.getpid()}")
SENTINEL_ENV = "SEAL_FUZZ_SENTINEL"
SENTINEL_GLOBAL = "SEAL_FUZZ_PWNED"
P, E, G = SENTINEL_PATH, SENTINEL_ENV, SENTINEL_GLOBAL

#: Python expressions that leave a sentinel behind if anything ever evaluates them.
CODE = (
    f"__import__('os').system('touch {P}')",
    f"open('{P}', 'w').write('x')",
    f"__import__('pathlib').Path('{P}').touch()",
    f"__import__('os').environ.__setitem__('{E}', '1')",
    f"globals().__setitem__('{G}', 1)",
    f"setattr(__import__('builtins'), '{G}', 1)",
    f"exec(\"open('{P}', 'w')\")",
    f"eval(\"__import__('os').system('touch {P}')\")",
    f"(lambda: open('{P}', 'w'))()",
    f"[open('{P}', 'w') for _ in range(1)]",
    f"{{open('{P}', 'w') for _ in range(1)}}",
    f"f'{{open(\"{P}\", \"w\")}}'",
    f"getattr(__import__('os'), 'system')('touch {P}')",
    f"().__class__.__base__.__subclasses__()[0].__init__.__globals__['__builtins__']['open']('{P}', 'w')",
    f"__import__('subprocess').run(['touch', '{P}'])",
    f"(x := open('{P}', 'w'))",
    f"open('{P}', 'w') if True else 0",
    f"not open('{P}', 'w')",
    f"1 + len(open('{P}', 'w').name)",
    f"-open('{P}', 'w').fileno()",
    f"print(open('{P}', 'w'))",
    f"compile(\"open('{P}','w')\", 'x', 'exec')",
    f"__builtins__['open']('{P}', 'w')",
    f"type('X', (), {{'__del__': lambda s: open('{P}', 'w')}})()",
    f"vars(__import__('os'))['system']('touch {P}')",
)
#: Names that must never dispatch: dunder, private, dotted, builtins, refused, odd characters.
BAD_NAMES = (
    "__class__", "__init__", "__del__", "__getattribute__", "__subclasses__", "__globals__", "__import__",
    "_load_scenario", "_private", "_", "os.system", "self._load_scenario", "builtins.open",
    "GorillaFileSystem.cd", "cd.__globals__", "__builtins__",
)
UNKNOWN_NAMES = ("getattr", "eval", "exec", "open", "compile", "globals", "breakpoint", "exit", "quit", "kill",
                 "remove", "unlink", "popen", "Popen", "run", "system", "teleport", "x" * 300, "Cd", "CD",
                 "mkdirs", "ls_", "a1")
ODD_NAMES = ("cd\x00", "c\ud800d", "ls\n", " cd", "cd;rm", "\uff43\uff44", "cd\u200b", "c d", "cd()", "1cd", "",
             "\x7f", "cd\r\n", "\udcff\udcfe")
ARG_CODE_EXTRA = ("os.environ", "1+1", "b'x'", "{1, 2}", "...", "-'x'", "not 1", "a if b else c", "x[0]",
                  "(1).__class__", "None.__class__", "cd()", "*[1]")
ODD_NAMES_PY = ("cd\x00", "c\ud800d", "cd;rm", "cd\u200b", "c d", "cd()", "1cd", "\x7f", "\udcff\udcfe", "c-d",
                "cd$", "c\\d")
CLOSE = "Done."
KINDS_USED: set = set()
_STARTS_LIKE_CALL = re.compile(r"^[A-Za-z_][\w.]*\(")


def _garbage(rng: random.Random, n: int) -> str:
    """Binary garbage as text: random bytes read as invalid UTF-8 (lone surrogates) or as Latin-1."""
    raw = bytes(rng.randrange(256) for _ in range(n))
    return raw.decode("utf-8", "surrogateescape") if rng.random() < 0.5 else raw.decode("latin-1")


def _sentinel_state() -> dict:
    mods = [sys.modules[__name__], calls_mod, backends_mod]
    utils = sys.modules.get("bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils")
    if utils is not None:
        mods.append(utils)
    return {
        "file": os.path.exists(SENTINEL_PATH),
        "env": SENTINEL_ENV in os.environ,
        "builtins": hasattr(builtins, SENTINEL_GLOBAL),
        "globals": [m.__name__ for m in mods if hasattr(m, SENTINEL_GLOBAL)],
    }


CLEAN = {"file": False, "env": False, "builtins": False, "globals": []}


# ----------------------------------------------------------------------------------------------------------
# generators: each returns (message, number of calls in it)


class Gen:
    """Hostile messages for one task, one format, one turn (what is available depends on the turn)."""

    def __init__(self, task, fmt: str, rng: random.Random, foreign: list, all_methods: set):
        self.task, self.fmt, self.rng = task, fmt, rng
        self.foreign = foreign  # methods of classes the task does not involve
        own = Backends(task.involved_classes, task.initial_config, task.long_context, None)
        self.known = set(own.methods)
        self.initial = [d for d in task.functions if d["name"] in self.known]
        self.hidden = {d["name"]: k for k, docs in task.missed_functions.items() for d in docs}
        self.all_methods = all_methods
        self.with_string = [d for d in self.initial if _string_params(d)]  # calls that can carry a code string
        self.hidden_now: list = []
        self.bulk = 0  # calls generated by inv_many (many copies of one unknown call)

    # -- building blocks in the three formats --------------------------------------------------------------
    def py_call(self, name: str, args: dict) -> str:
        return f"{name}(" + ", ".join(f"{k}={v!r}" for k, v in args.items()) + ")"

    def render(self, calls: list) -> object:
        """calls: list of (name, arguments-dict) with JSON-able values -> one message in self.fmt."""
        if self.fmt == "python":
            return "[" + ", ".join(self.py_call(n, a) for n, a in calls) + "]"
        if self.fmt == "json":
            return "\n".join("<tool_call>\n" + json.dumps({"name": n, "arguments": a}) + "\n</tool_call>" for n, a in calls)
        return [{n: json.dumps(a)} for n, a in calls]

    def pick(self, seq):
        return seq[self.rng.randrange(len(seq))]

    # -- invalid_tool_call ---------------------------------------------------------------------------------
    def invalid(self, turn: int) -> tuple[object, int]:
        kinds = ["inv_code_name", "inv_bad_name", "inv_unknown", "inv_foreign", "inv_structure", "inv_structure",
                 "inv_huge", "inv_deep", "inv_many", "inv_garbage", "inv_odd_name"]
        if self.fmt == "python":
            kinds += ["inv_code_arg", "inv_code_arg", "inv_nonliteral"]
        self.hidden_now = [n for n, k in self.hidden.items() if turn < k]
        if self.hidden_now:
            kinds += ["inv_hidden"] * 3
        kind = self.pick(kinds)
        msg, n = getattr(self, kind)()
        KINDS_USED.add((self.fmt, kind))
        if kind == "inv_many":
            self.bulk += n
        return msg, n

    def inv_code_name(self):
        code = self.pick(CODE)
        if self.fmt == "python":
            if _STARTS_LIKE_CALL.match(code):
                return f"[{code}]", 1
            # An expression that does not start like a call is prose to BFCL's decoder; after a call it is
            # a list element that is not a call, which makes the message undecodable.
            return f"[cd(folder='x'), {code}]", 2
        if self.fmt == "json":
            return "<tool_call>\n" + json.dumps({"name": code, "arguments": {}}) + "\n</tool_call>", 1
        return [{code: "{}"}], 1

    def inv_code_arg(self):  # python only: an expression as an argument value
        code = self.pick(CODE)
        name = self.pick(self.initial)["name"]
        form = self.rng.randrange(4)
        if form == 0:
            return f"[{name}(folder={code})]", 1
        if form == 1:
            return f"[{name}({code})]", 1
        if form == 2:
            return f"[{name}(**{{'a': {code}}})]", 1
        return f"[{name}(x=[1, {{'k': {code}}}])]", 1

    def inv_nonliteral(self):  # python only
        name = self.pick(self.initial)["name"]
        return f"[{name}(value={self.pick(ARG_CODE_EXTRA)})]", 1

    def inv_bad_name(self):
        name = self.pick(BAD_NAMES)
        if self.fmt == "python":
            return f"[{name}(scenario={{}})]", 1
        return self.render([(name, {"scenario": {}})]), 1

    def inv_unknown(self):
        n = self.rng.randrange(1, 6)
        calls = [(self.pick(UNKNOWN_NAMES), {"cmd": self.pick(CODE)}) for _ in range(n)]
        return self.render(calls), n

    def inv_foreign(self):
        n = self.rng.randrange(1, 6)
        calls = [(self.pick(self.foreign), {"symbol": "AAPL"}) for _ in range(n)]
        return self.render(calls), n

    def inv_hidden(self):
        calls = [(self.pick(self.hidden_now), {"file_name": "final_report.pdf"})]
        return self.render(calls), 1

    def inv_odd_name(self):
        if self.fmt == "python":
            # Python's own tokenizer reads some odd names as plain ones (NFKC: fullwidth letters; whitespace
            # around a name), as BFCL's ast-based decoder does; only names Python rejects are used here.
            return f"[{self.pick(ODD_NAMES_PY)}(folder='x')]", 1
        name = self.pick(ODD_NAMES)
        return self.render([(name, {"folder": "x"})]), 1

    def inv_garbage(self):
        g = _garbage(self.rng, self.rng.randrange(1, 400))
        if self.fmt == "python":
            return "[cd(folder=" + g.replace("(", "?").replace(")", "?") + "]", 1  # the call is never closed
        if self.fmt == "json":
            return "<tool_call>\n" + g + "\n</tool_call>", 1
        return [{"cd": g}], 1

    def inv_structure(self):
        name = self.pick(self.initial)["name"]
        if self.fmt == "python":
            bad = [f"[{name}(folder='x'", f"{name}(folder='x'))", f"[{name}(folder='x') {name}()]",
                   f"[{name}(folder=='x')]", f"[{name}(1=2)]", f"[{name}(folder='x'),, ]",
                   f"[{name}(folder='x'), 5]", f"[{name}(folder='x'), 'text']", f"[{name}(folder='\x00')]",
                   f"[{name}(folder='x')]\x00", f"[{name}(folder=\"\"\"x)]"]
            return self.pick(bad), 1
        if self.fmt == "json":
            bad = ['{"name": "%s", "arguments": {' % name, "{'name': '%s', 'arguments': {}}" % name,
                   '{"name": "%s", "arguments": {},}' % name, '{"name": "%s"}' % name, '{"arguments": {}}',
                   '["%s", {}]' % name, '"%s"' % name, "42", "null", '{"name": "%s", "arguments": [1, 2]}' % name,
                   '{"name": "%s", "arguments": "rm -rf /"}' % name,
                   '{"name": "%s", "arguments": "{\\"folder\\": "}' % name,
                   '{"name": "%s", "arguments": {"folder name": "x"}}' % name,
                   '{"name": "%s", "arguments": {"1x": "x"}}' % name,
                   '{"name": ["%s"], "arguments": {}}' % name, '{"name": null, "arguments": {}}',
                   '{"name": {"__class__": 1}, "arguments": {}}', '{"name": 7, "arguments": {}}']
            body = self.pick(bad)
            wrap = self.rng.randrange(4)
            if wrap == 0:
                return "<tool_call>\n" + body + "\n</tool_call>", 1
            if wrap == 1:
                return "<tool_call>" + body + "</tool_call>", 1  # no newlines: not BFCL's block form
            if wrap == 2:
                return "<tool_call>\n" + body, 1  # unclosed
            return "<tool_call>\n<tool_call>\n" + body + "\n</tool_call>\n</tool_call>", 1
        bad = [5, None, "text", {}, {name: "not json"}, {name: "[1, 2]"}, {name: 5}, {name: None},
               {name: ["x"]}, {name: {1: "x"}}, {name: {"folder name": "x"}}, {name: b"{}"}, {name: {"folder": b"x"}},
               {name: {"folder": {1, 2}}}, {name: {"folder": object}}, {(1, 2): {}}, {None: {}}]
        item = bad[self.rng.randrange(len(bad))]
        if self.rng.random() < 0.2:  # a step that is not a list at all
            return self.pick([5, None, b"\x00\xff", 3.5, True]), 1
        if isinstance(item, str):  # a text item inside a call list is structure, not a text answer
            return [item, {name: "{}"}], 2
        return [item], 1

    def inv_huge(self):
        name = self.pick(self.initial)["name"]
        kind = self.rng.randrange(3)
        if kind == 0:  # a long string
            value = "A" * self.rng.choice([70_000, 200_000])
            if self.fmt == "python":
                return f"[{name}(folder='{value}')]", 1
            return self.render([(name, {"folder": value})]), 1
        if kind == 1:  # an integer literal beyond Python's int-to-str limit
            digits = "9" * self.rng.choice([5_000, 20_000])
            if self.fmt == "python":
                return f"[{name}(folder={digits})]", 1
            if self.fmt == "json":
                return "<tool_call>\n" + '{"name": "%s", "arguments": {"folder": %s}}' % (name, digits) + "\n</tool_call>", 1
            return [{name: {"folder": 10 ** 5000}}], 1
        # a huge argument string inside the arguments string
        blob = json.dumps({"folder": "B" * 80_000})
        if self.fmt == "python":
            return f"[{name}(folder={blob!r}, " + "x=1, " * 20_000 + ")]", 1
        if self.fmt == "json":
            return "<tool_call>\n" + json.dumps({"name": name, "arguments": blob}) + "\n</tool_call>", 1
        return [{name: blob}], 1

    def inv_deep(self):
        name = self.pick(self.initial)["name"]
        depth = self.rng.choice([40, 200, 3000])
        if self.fmt == "python":
            return f"[{name}(folder=" + "[" * depth + "]" * depth + ")]", 1
        if self.fmt == "json":
            if self.rng.random() < 0.5:
                return "<tool_call>\n" + '{"name": "%s", "arguments": {"folder": %s}}' % (name, "[" * depth + "]" * depth) + "\n</tool_call>", 1
            nested = '{"a": ' * depth + "1" + "}" * depth
            return "<tool_call>\n" + json.dumps({"name": name, "arguments": nested}) + "\n</tool_call>", 1
        value: list = []
        for _ in range(depth):
            value = [value]
        if self.rng.random() < 0.5:
            return [{name: {"folder": value}}], 1
        return [{name: "[" * depth + "]" * depth}], 1

    def inv_many(self):
        n = self.rng.choice([65, 70, 80])
        calls = [(self.pick(UNKNOWN_NAMES[:17]), {"i": i}) for i in range(n)]
        return self.render(calls), n

    # -- argument_mismatch ---------------------------------------------------------------------------------
    def schema(self, turn: int) -> tuple[object, int]:
        n = self.rng.randrange(1, 5)
        return self.render([self.schema_call() for _ in range(n)]), n

    def schema_call(self) -> tuple[str, dict]:
        doc = self.pick(self.initial)
        props = doc.get("parameters", {}).get("properties", {})
        required = doc.get("parameters", {}).get("required", [])
        args = {k: _sample_value(v, self.rng) for k, v in props.items() if k in required}
        kind = self.rng.randrange(5)
        typed = [k for k, v in props.items() if v.get("type") in ("string", "integer", "float", "boolean", "dict", "array")]
        if kind == 0 or not (typed or required):  # an unknown parameter carrying code or garbage
            key = self.pick(["evil", "__class__", "__init__", "_load_scenario", "self", "kwargs", "exec"])
            value = self.pick([self.pick(CODE), _garbage(self.rng, 50), "\ud800\udfff\x00\x1b[2J", 10 ** 40])
            args[key] = value
        elif kind == 1 and required:  # a required parameter missing
            args.pop(self.pick(required))
        else:  # a value of the wrong type (code strings in places that expect a number, and the reverse)
            key = self.pick(typed) if typed else self.pick(required)
            args[key] = _wrong_type(props[key].get("type"), self.rng, self.fmt)
        return doc["name"], args  # in Python text, repr() writes surrogates and control characters as escapes

    # -- neutral: valid calls whose string values are code -------------------------------------------------
    def neutral(self, turn: int) -> tuple[object, int]:
        calls = []
        for _ in range(self.rng.randrange(1, 4)):
            doc = self.pick(self.with_string)
            props = doc["parameters"]["properties"]
            required = doc["parameters"].get("required", [])
            args = {k: _sample_value(v, self.rng) for k, v in props.items() if k in required}
            for k in _string_params(doc):
                args[k] = self.pick(CODE)
            calls.append((doc["name"], args))
        return self.render(calls), len(calls)

    # -- text: not a call at all ---------------------------------------------------------------------------
    def text(self, turn: int) -> tuple[object, int]:
        g = _garbage(self.rng, self.rng.randrange(0, 300)).replace("<", "(")
        return "Note: " + self.pick([g, self.pick(CODE), "[(lambda: 1)()]", "I will not call anything."]), 0


def _string_params(doc: dict) -> list:
    props = doc.get("parameters", {}).get("properties", {})
    return [k for k in doc.get("parameters", {}).get("required", [])
            if props.get(k, {}).get("type") == "string" and "enum" not in props[k]]


def _sample_value(schema: dict, rng: random.Random):
    if "enum" in schema:
        return schema["enum"][0]
    t = schema.get("type")
    return {"string": "x", "integer": 1, "float": 1.0, "boolean": True, "array": [], "dict": {}}.get(t, "x")


def _wrong_type(t: str | None, rng: random.Random, fmt: str):
    if t == "string":
        # NaN: JSON decoders accept it; BFCL's eval then fails on the bare ``nan`` (a Python ``nan`` literal
        # in call text is a bare name, i.e. the string 'nan', so it is no type error there).
        extra = [float("nan"), float("-inf")] if fmt != "python" else []
        return rng.choice([123, [CODE[0]], {"__class__": CODE[1]}, True, None, 10 ** 4000] + extra)
    if t in ("integer", "float"):
        return rng.choice([CODE[2], "1", [1], {"a": 1}])
    if t == "boolean":
        return rng.choice(["true", CODE[3], 2])
    if t in ("array", "dict"):
        return rng.choice([CODE[4], 5])
    return None


# ----------------------------------------------------------------------------------------------------------


def _expected(group: str, abstention: bool) -> set:
    if abstention:
        return {T.PASS} if group == "text" else {T.SPURIOUS_TOOL_CALL}
    if group == "invalid":
        return {T.INVALID_TOOL_CALL}
    if group == "schema":
        return {T.ARGUMENT_MISMATCH}
    if group == "text":
        return {T.MISSING_TOOL_CALL}
    return set(T.FAILURE_LABELS) - {T.INVALID_TOOL_CALL, T.SPURIOUS_TOOL_CALL}


def test_payloads_are_live_code_and_the_sentinel_is_watched():
    """The payloads would run if anything evaluated them (they are valid Python expressions), and a planted
    sentinel is seen; so a clean sentinel after the fuzz run means nothing ran them."""
    import ast

    for code in CODE:
        ast.parse(code, mode="eval")
    assert _sentinel_state() == CLEAN
    open(SENTINEL_PATH, "w").close()
    os.environ[SENTINEL_ENV] = "1"
    setattr(builtins, SENTINEL_GLOBAL, 1)
    try:
        state = _sentinel_state()
        assert state["file"] and state["env"] and state["builtins"]
    finally:
        os.remove(SENTINEL_PATH)
        del os.environ[SENTINEL_ENV]
        delattr(builtins, SENTINEL_GLOBAL)
    assert _sentinel_state() == CLEAN


@pytest.fixture(scope="module")
def tasks():
    return load_tasks(list(TASK_IDS))


def test_fuzz_hostile_calls(tasks):
    assert _sentinel_state() == CLEAN
    t0 = time.time()
    rng = random.Random(SEED)
    everything = Backends(list(ALL_CLASSES), {}, False, None)
    all_methods = set(everything.methods)
    n_calls = n_messages = n_turns = bulk = 0
    per_group = {g: 0 for g in ("invalid", "schema", "neutral", "text")}
    failures = []
    episode = 0
    rounds = 0
    while n_calls - bulk < N_CALLS_MIN:  # at least N_CALLS_MIN besides the bulk "many calls" messages
        rounds += 1
        for i, task_id in enumerate(TASK_IDS):
            task = tasks[task_id]
            fmt = FORMATS[(rounds + i) % len(FORMATS)]  # every task in every format
            episode += 1
            own = Backends(task.involved_classes, task.initial_config, task.long_context, None)
            foreign = sorted(all_methods - set(own.methods))
            gen = Gen(task, fmt, rng, foreign, all_methods)
            env = BFCLEnv(task, call_format=fmt)
            env.reset()
            result, groups = [], []
            for k in range(task.n_turns):
                group = rng.choices(["invalid", "schema", "neutral", "text"], weights=[6, 2, 1, 1])[0]
                if group == "neutral" and not gen.with_string:
                    group = "invalid"
                make = getattr(gen, group)
                turn_msgs = []
                for _ in range(rng.randrange(1, 4) if group != "text" else 1):
                    msg, n = make(k)
                    turn_msgs.append(msg)
                    n_calls += n
                    per_group[group] += n
                    r = env.step(msg)  # (a) the live environment: must not raise
                    if r.turn_done:
                        break
                if env.turn == k and not env.done:
                    env.step(CLOSE)
                    turn_msgs.append(CLOSE)
                result.append(turn_msgs)
                groups.append(group)
                n_messages += len(turn_msgs)
            assert env.done
            n_turns += task.n_turns
            bulk += gen.bulk
            json.loads(env.trace.to_json())  # the trace stays plain JSON data
            live = judge_trace(task, env.trace)  # Psi on the live trace
            replayed = judge_result(task, result, call_format=fmt)  # (b) the diagnose path on a result file
            auto = judge_result(task, result)  # the CLI's default: each step decoded by its form
            if auto.labels != replayed.labels:
                failures.append((task_id, fmt, "auto", auto.labels, replayed.labels))
            for k, group in enumerate(groups):
                want = _expected(group, not task.ground_truth[k])
                for path, j in (("env", live), ("judge_result", replayed)):
                    if j.labels[k] not in want:
                        failures.append((task_id, fmt, k, group, path, j.labels[k], j.diagnosis.reasons[k],
                                         repr(result[k])[:300]))
            assert _sentinel_state() == CLEAN, (task_id, fmt, result)
    elapsed = time.time() - t0
    print(f"\nfuzz: {n_calls} hostile calls ({n_calls - bulk} besides {bulk} in >64-call messages) in {n_messages} "
          f"messages over {n_turns} turns, {episode} episodes, {elapsed:.1f}s; calls per group {per_group}")
    for f in failures[:30]:
        print("FAIL", f)
    assert not failures, failures[:10]
    assert n_calls - bulk >= N_CALLS_MIN
    kinds = {k for _, k in KINDS_USED}
    for fmt in FORMATS:  # every generator ran in every format it applies to
        assert {k for f, k in KINDS_USED if f == fmt} >= kinds - {"inv_code_arg", "inv_nonliteral"}, fmt
    assert _sentinel_state() == CLEAN


def test_schema_fast_path_agrees_with_jsonschema(tasks):
    """SchemaChecker skips jsonschema for arguments its fast path proves valid; the errors it reports must
    be exactly jsonschema's, for valid and hostile arguments alike (every tool of the fuzzed tasks)."""
    import jsonschema

    from env_wrappers.bfcl.environment.env import _all_tools
    from env_wrappers.bfcl.environment.schema import SchemaChecker, _describe

    rng = random.Random(SEED + 1)
    checked = fast = 0
    for task in tasks.values():
        tools = _all_tools(task)
        checker = SchemaChecker(tools)
        for tool in tools:
            schema = tool["function"]["parameters"]
            raw = jsonschema.Draft7Validator(schema)
            props = schema.get("properties", {})
            base = {k: _sample_value({"type": {"number": "float", "object": "dict"}.get(v.get("type"), v.get("type"))}, rng)
                    for k, v in props.items()}
            variants = [base, {}, dict(list(base.items())[:1])]
            for _ in range(60):
                args = dict(base)
                for k in rng.sample(sorted(props), min(len(props), rng.randrange(0, 3))):
                    args[k] = rng.choice([1, 1.0, 1.5, True, False, None, "x", "", [], [1, "a"], {}, {"a": [1]},
                                          float("nan"), 10 ** 30, [[["deep"]]], {"k": {"k": None}}, -0.0])
                if rng.random() < 0.3:
                    args[rng.choice(["extra", "__class__", "a b"])] = rng.choice(["v", 1, None])
                if rng.random() < 0.2 and args:
                    args.pop(rng.choice(sorted(args)))
                variants.append(args)
            for args in variants:
                want = [f"{'.'.join(str(p) for p in e.path) or 'arguments'}: {_describe(e)}"
                        for e in sorted(raw.iter_errors(args), key=lambda e: list(e.path))]
                got = checker.errors(tool["function"]["name"], args)
                assert got == want, (tool["function"]["name"], args, got, want)
                checked += 1
                fast += not want
    print(f"\nschema fast path: {checked} argument sets, {fast} valid")
    assert checked > 1000 and 0 < fast < checked


# ----------------------------------------------------------------------------------------------------------
# Call limit in every format, and messages of any size decoded in linear time


def _executed(result) -> int:
    return sum(1 for r in result.tool_results if not r.content.startswith("Error during execution: message"))


@pytest.mark.parametrize("shape", ["one_object_many_keys", "many_objects"])
def test_fc_call_limit_holds_for_objects_with_many_keys(tasks, shape):
    """A function-calling step yields at most MAX_CALLS calls, however the calls are packed into objects."""
    n = 5000
    if shape == "one_object_many_keys":
        step = {f"pwd{i}" if i else "pwd": "{}" for i in range(n)}
    else:
        step = [{"pwd": "{}"} for _ in range(n)]
    env = BFCLEnv(tasks["multi_turn_base_0"], call_format="fc", call_timeout_s=None)
    env.reset()
    decoded = calls_mod.decode(step, "fc")
    assert len(decoded.calls) <= calls_mod.MAX_CALLS + 1
    assert decoded.calls[-1].parse_status == "too_large"
    assert "more than 64 calls" in decoded.calls[-1].parse_error
    result = env.step(step)
    ran = sum(1 for c in env.trace.turns[0].attempts[0].calls if c.parse_status == "ok")
    assert ran == calls_mod.MAX_CALLS
    # the calls that ran, plus one error result that tells the agent why the rest did not
    assert len(result.tool_results) == calls_mod.MAX_CALLS + 1
    assert "more than 64 calls" in result.tool_results[-1].content


LARGE_MESSAGES = {
    # name: (message, format) -- each about 1 MB or a known quadratic case of the old decoder
    "unclosed_json_tags_288k": ("<tool_call>\n" * 24000, "json"),
    "unclosed_json_tags_250k": ("<tool_call>\n" * 21000, "json"),
    "json_block_1mb": ("<tool_call>\n" + '{"name": "ls", "arguments": {"a": "' + "x" * 1_000_000 + '"}}\n</tool_call>',
                       "json"),
    "json_many_blocks_250k": ('<tool_call>\n{"name": "pwd", "arguments": {}}\n</tool_call>' * 5000, "json"),
    "tabs_then_name_python": ("\t" * 64000 + "x", "python"),
    "tabs_then_call_python_1mb": ("\t" * 1_000_000 + "x(", "python"),
    "python_list_1mb": ("[" + "pwd()," * 170_000 + "]", "python"),
    "spaces_in_bracket_python_1mb": ("[" + " " * 1_000_000 + "x", "python"),
}


@pytest.mark.parametrize("name", sorted(LARGE_MESSAGES))
def test_large_messages_decode_fast_and_within_the_call_limit(tasks, name):
    """Decoding is linear in the message size: a message of up to 1 MB goes through ``env.step`` in well
    under a second (the old decoder took 18-40 s on some of these), and an oversized call attempt becomes a
    labelled invalid attempt that says why."""
    message, fmt = LARGE_MESSAGES[name]
    env = BFCLEnv(tasks["multi_turn_base_0"], call_format=fmt, call_timeout_s=None)
    env.reset()
    t0 = time.perf_counter()
    result = env.step(message)
    elapsed = time.perf_counter() - t0
    assert elapsed < 1.0, f"{name}: env.step took {elapsed:.1f}s"
    calls = env.trace.turns[0].attempts[0].calls
    assert sum(1 for c in calls if c.executed) <= calls_mod.MAX_CALLS
    assert len(result.tool_results) <= calls_mod.MAX_CALLS + 1
    if fmt == "json" and len(message) > calls_mod.MAX_MESSAGE_CHARS:
        assert [c.parse_status for c in calls] == ["too_large"]
        assert "exceeds the limit" in calls[0].parse_error


def test_oversized_message_is_labelled_invalid_tool_call(tasks):
    """A call attempt over the message size limit ends the turn as an invalid tool call, in the judge too."""
    task = tasks["multi_turn_base_0"]
    message = "<tool_call>\n" + '{"name": "pwd", "arguments": {"a": "' + "x" * 600_000 + '"}}\n</tool_call>'
    result = [[message]] + [[] for _ in range(task.n_turns - 1)]
    t0 = time.perf_counter()
    j = judge_result(task, result, call_format="json", call_timeout_s=None)
    assert time.perf_counter() - t0 < 2.0
    assert j.diagnosis.labels[0] == T.INVALID_TOOL_CALL


@pytest.mark.parametrize("message", ["<tool_call>\n" * 20000, "\t" * 60000 + "x(", "[" + " " * 60000 + "x("],
                         ids=["unclosed_json_tags_240k", "tabs_python", "spaces_python"])
def test_judging_a_large_step_is_fast(tasks, message):
    """``diagnose`` (judge_result) on a result with one large step within the size limits."""
    task = tasks["multi_turn_base_0"]
    result = [[message]] + [[] for _ in range(task.n_turns - 1)]
    t0 = time.perf_counter()
    j = judge_result(task, result, call_timeout_s=None)
    assert time.perf_counter() - t0 < 2.0
    assert len(j.labels) == task.n_turns
