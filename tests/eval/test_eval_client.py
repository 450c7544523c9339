"""``seal-verl eval`` against a local OpenAI-compatible server that replays recorded model outputs.

The server (``tests/_replay_server.py``) answers chat-completions requests from scripts in ``bfcl generate``
form, so each test knows what the model "said" and can compare:

- every Psi label, in ``fc`` mode (``tool_calls``) and prompt mode with JSON ``<tool_call>`` blocks and with
  BFCL's Python call lists: the evaluator's labels and verdicts equal ``judge_result`` on the recorded result;
- the verdicts equal bfcl-eval's own decoders + official multi-turn checker run in a separate process on the
  result files the evaluator wrote (``tests/_official_scorer.py``), over ground truth, every perturbation
  kind, a step-limit loop and inference errors;
- the protocol (revealed tools, no interface text), retries, resume, inference errors, clear errors, Ctrl-C.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager

import pytest

from _paths import TESTS

from env_wrappers.bfcl.evaluation.config import EvalConfig, EvalError
from env_wrappers.bfcl.evaluation.result_files import result_path
from env_wrappers.bfcl.evaluation.runner import run_eval
from env_wrappers.bfcl.environment.examples import examples
from env_wrappers.bfcl.evaluation.openai_http import ChatClient, ServerError
from env_wrappers.bfcl.environment.judge import judge_result
from env_wrappers.bfcl.environment.perturb import KINDS, ground_truth_steps, perturb, to_result
from env_wrappers.bfcl.environment.tasks import CATEGORIES, load_split

sys.path.insert(0, TESTS)
from _replay_server import RawServer, ReplayServer, chat_body, http_answer, models_body  # noqa: E402
from _served import free_port  # noqa: E402

HERE = TESTS
ROOT = os.path.dirname(HERE)
SCORER = os.path.join(HERE, "_official_scorer.py")
FORMATS = ("fc", "json", "python")
ALL_LABELS = {"pass", "invalid_tool_call", "argument_mismatch", "state_mismatch", "recovery_failure",
              "missing_tool_call", "response_mismatch", "spurious_tool_call"}


def _first_user(tasks, ids):
    return {i: tasks[i].questions[0][0]["content"] for i in ids}


def _cfg(url, model, out, fmt, ids, **kw):
    return EvalConfig(base_url=url, model=model, out=str(out), ids=list(ids), mode="fc" if fmt == "fc" else "prompt",
                      call_format=None if fmt == "fc" else fmt, progress=False, backoff_s=0.01, **kw)


def _labels(out):
    with open(os.path.join(out, "labels.jsonl")) as f:
        return {r["id"]: r for r in map(json.loads, f)}


def _official(fmt, files, tmp_path):
    env = dict(os.environ, BFCL_PROJECT_ROOT=str(tmp_path / "bfcl_root_official"))
    os.makedirs(env["BFCL_PROJECT_ROOT"], exist_ok=True)
    proc = subprocess.run([sys.executable, SCORER, fmt, *files], capture_output=True, text=True, env=env,
                          cwd=str(tmp_path), timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return [json.loads(line) for line in proc.stdout.splitlines()]


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_label_replayed(fmt, tasks, tmp_path):
    ex = examples(fmt)
    scripts = {f"replay-{name}": {tid: res} for name, (tid, res) in ex.items()}
    seen = set()
    with ReplayServer(scripts, _first_user(tasks, {t for t, _ in ex.values()})) as srv:
        for name, (tid, res) in ex.items():
            out = tmp_path / name
            summary = run_eval(_cfg(srv.url, f"replay-{name}", out, fmt, [tid]))
            got = _labels(out)[tid]
            ref = judge_result(tasks[tid], res, call_format=fmt)
            assert (got["valid"], got["labels"]) == (ref.valid, ref.labels), name
            seen.update(got["labels"])
            path = result_path(str(out), f"replay-{name}", tasks[tid].category)
            assert os.path.basename(path) == f"BFCL_v4_{tasks[tid].category}_result.json"
            with open(path) as f:
                lines = [json.loads(x) for x in f]
            assert [e["id"] for e in lines] == [tid] and len(lines[0]["result"]) == tasks[tid].n_turns
            scores = json.load(open(out / "scores.json"))
            assert scores["categories"][tasks[tid].category] == {"accuracy": float(ref.valid), "n": 1,
                                                                  "n_valid": int(ref.valid)}
            assert scores["protocol"]["call_format"] == fmt and summary.n_errors == 0
        # Nothing but the task, the tools and the results reaches the model: no interface text.
        sent = json.dumps(srv.requests)
        assert "SEAL" not in sent and "Hint" not in sent
    assert seen >= ALL_LABELS, ALL_LABELS - seen


def _agreement_scripts(tasks, fmt):
    """model -> {task id -> result}: ground truth, each perturbation kind, and a step-limit loop."""
    split = load_split()["eval"]
    ids = [next(i for i in split if tasks[i].category == c) for c in CATEGORIES]
    ids += [[i for i in split if tasks[i].category == c][1] for c in CATEGORIES]
    scripts = {"gt": {i: to_result(tasks[i], ground_truth_steps(tasks[i]), fmt) for i in ids}}
    for kind in KINDS:
        got = {i: perturb(tasks[i], kind, 0) for i in ids}
        scripts[kind] = {i: to_result(tasks[i], p[0], fmt, text_turns=(p[1],) if kind == "text_only" else ())
                         for i, p in got.items() if p is not None}
    loop = {}
    for i in ids[:2]:
        first = ground_truth_steps(tasks[i])[0][0]
        res = to_result(tasks[i], ground_truth_steps(tasks[i]), fmt)
        res[0] = [to_result(tasks[i], [[first]], fmt)[0][0]] * 25  # never answers: BFCL's step limit stops it
        loop[i] = res
    scripts["steplimit"] = loop
    return scripts, ids


@pytest.mark.parametrize("fmt", FORMATS)
def test_verdicts_agree_with_official_checker(fmt, tasks, tmp_path):
    scripts, ids = _agreement_scripts(tasks, fmt)
    files, ours = [], {}
    with ReplayServer({**scripts, "broken": {ids[0]: []}}, _first_user(tasks, ids)) as srv:
        srv.always_fail.add("broken")
        for model in scripts:
            out = tmp_path / model
            run_eval(_cfg(srv.url, model, out, fmt, list(scripts[model]), concurrency=3))
            for tid, rec in _labels(out).items():
                ours[(model, tid)] = rec
            files += [result_path(str(out), model, c) for c in CATEGORIES
                      if os.path.exists(result_path(str(out), model, c))]
        out = tmp_path / "broken"
        s = run_eval(_cfg(srv.url, "broken", out, fmt, [ids[0]], retries=1))
        assert s.n_errors == 1
        ours[("broken", ids[0])] = _labels(out)[ids[0]]
        files.append(result_path(str(out), "broken", tasks[ids[0]].category))
    replies = _official(fmt, files, tmp_path)
    models = [m for m in scripts] + ["broken"]
    # The scorer prints entries file by file, in the order given; map them back to (model, id).
    keyed = []
    for f in files:
        model = next(m for m in models if os.sep + m + os.sep in f)
        with open(f) as fh:
            keyed += [(model, json.loads(x)["id"]) for x in fh]
    assert len(keyed) == len(replies) == len(ours)
    disagree = []
    n_fail = 0
    for key, rep in zip(keyed, replies):
        assert rep["id"] == key[1]
        assert rep["refused"] is None and rep["exception"] is None, rep
        mine = ours[key]
        n_fail += not rep["valid"]
        if mine["valid"] != rep["valid"] or (not rep["valid"] and mine.get("error_type") != rep["error_type"]):
            disagree.append((key, mine, rep))
    assert not disagree, disagree[:5]
    assert n_fail >= len(replies) // 3  # the set is not all passes
    assert ours[("steplimit", ids[0])]["error_type"] == "multi_turn:force_terminated"
    assert ours[("broken", ids[0])]["error_type"] == "multi_turn:inference_error"


def test_fc_reveals_functions_as_tools_and_prompt_mode_as_text(tasks, tmp_path):
    tid = "multi_turn_miss_func_0"
    task = tasks[tid]
    reveal_turn = min(task.missed_functions)
    hidden = {d["name"] for d in task.missed_functions[reveal_turn]}
    for fmt in ("fc", "python"):
        res = to_result(task, ground_truth_steps(task), fmt)
        with ReplayServer({"m": {tid: res}}, _first_user(tasks, [tid])) as srv:
            run_eval(_cfg(srv.url, "m", tmp_path / fmt, fmt, [tid]))
            assert _labels(tmp_path / fmt)[tid]["valid"] is True
            for req in srv.requests:
                n_users = sum(m["role"] == "user" for m in req["messages"])
                names = {t["function"]["name"] for t in req.get("tools") or []}
                if fmt == "fc":
                    assert (hidden <= names) == (n_users - 1 >= reveal_turn)
                    assert req["temperature"] == 0.0
                else:
                    assert not names and req["messages"][0]["role"] == "system"
                    user_text = "\n".join(m["content"] for m in req["messages"] if m["role"] == "user")
                    assert all((f"'name': '{h}'" in user_text) == (n_users - 1 >= reveal_turn) for h in hidden)


def test_retries_then_resume(tasks, tmp_path):
    ids = ["multi_turn_base_0", "multi_turn_base_1", "multi_turn_base_2"]
    scripts = {"m": {i: to_result(tasks[i], ground_truth_steps(tasks[i]), "fc") for i in ids}}
    with ReplayServer(scripts, _first_user(tasks, ids)) as srv:
        srv.fail_times["m"] = 3  # three 503s: retried with back-off, nothing lost
        s = run_eval(_cfg(srv.url, "m", tmp_path, "fc", ids, concurrency=2))
        assert s.n_errors == 0 and s.scores["categories"]["multi_turn_base"]["accuracy"] == 1.0
        n_requests = len(srv.requests)
        # A re-run skips every task already written: no chat request at all.
        s = run_eval(_cfg(srv.url, "m", tmp_path, "fc", ids))
        assert len(srv.requests) == n_requests and s.n_skipped == 3 and s.n_run == 0
        # A lost line (and a torn last line, as after a crash) is redone; the file is rewritten clean.
        path = result_path(str(tmp_path), "m", "multi_turn_base")
        lines = open(path).read().splitlines()
        with open(path, "w") as f:
            f.write("\n".join(lines[:2]) + "\n" + lines[2][:40])
        s = run_eval(_cfg(srv.url, "m", tmp_path, "fc", ids))
        assert s.n_run == 1 and s.scores["categories"]["multi_turn_base"]["n_valid"] == 3
        assert [json.loads(x)["id"] for x in open(path)] == ids
        # Another mode into the same folder is refused, naming the file and the field.
        with pytest.raises(EvalError, match="eval_config.json: field 'call_format'"):
            run_eval(_cfg(srv.url, "m", tmp_path, "python", ids))


def _cli(args, **kw):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen([sys.executable, "-m", "seal_verl.cli", "eval", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def test_clear_errors(tasks, tmp_path):
    port = free_port()
    p = _cli(["--base-url", f"http://127.0.0.1:{port}/v1", "--model", "m", "--out", str(tmp_path / "a"),
              "--retries", "0", "--ids", "multi_turn_base_0"])
    _, err = p.communicate(timeout=120)
    assert p.returncode == 2
    lines = [x for x in err.splitlines() if x.startswith("error:")]
    assert len(lines) == 1 and f"cannot reach the server at http://127.0.0.1:{port}/v1/models" in lines[0]
    with ReplayServer({"served": {}}, {}) as srv:
        with pytest.raises(EvalError, match=r"does not serve model 'other' \(it serves: served\)"):
            run_eval(_cfg(srv.url, "other", tmp_path / "b", "fc", ["multi_turn_base_0"]))
        with pytest.raises(EvalError, match="unknown --category 'bogus'"):
            run_eval(EvalConfig(base_url=srv.url, model="served", out=str(tmp_path / "c"), categories=["bogus"]))
        with pytest.raises(EvalError, match="unknown BFCL V3 multi-turn task id"):
            run_eval(_cfg(srv.url, "served", tmp_path / "d", "fc", ["multi_turn_base_9999"]))


@contextmanager
def _cli_past_its_first_result(tasks, tmp_path, n: int):
    """``seal-verl eval`` on ``n`` tasks of a slow replay server, started as a terminal starts it, once its first
    result is written; yields ``(ids, out, process, server)``."""
    ids = [f"multi_turn_base_{i}" for i in range(n)]
    scripts = {"m": {i: to_result(tasks[i], ground_truth_steps(tasks[i]), "fc") for i in ids}}
    with ReplayServer(scripts, _first_user(tasks, ids)) as srv:
        srv.delay_s = 0.3
        out = tmp_path / "run"
        # Ctrl-C as a terminal delivers it: the child gets Python's own SIGINT handling even when the test run was
        # started with SIGINT ignored (a background job of a shell without job control): an ignored signal is
        # inherited across exec, and the child then ran to the end and exited 0
        p = _cli(["--base-url", srv.url, "--model", "m", "--out", str(out), "--ids", *ids, "--concurrency", "1",
                  "--no-progress"], preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        path = result_path(str(out), "m", "multi_turn_base")
        deadline = time.time() + 120
        while time.time() < deadline and not (os.path.exists(path) and open(path).read().count("\n") >= 1):
            time.sleep(0.1)
        yield ids, out, p, srv


def _exited_130_and_a_rerun_completes(p, srv, out, ids) -> None:
    """The interrupted eval ended with exit 130 and no traceback, and the same run completes every task."""
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130, err[-2000:]
    assert "Traceback" not in err
    srv.delay_s = 0.0
    s = run_eval(_cfg(srv.url, "m", out, "fc", ids))
    assert s.scores["categories"]["multi_turn_base"]["n_valid"] == len(ids)


def test_ctrl_c_keeps_finished_tasks(tasks, tmp_path):
    with _cli_past_its_first_result(tasks, tmp_path, 6) as (ids, out, p, srv):
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
        assert p.returncode == 130, err[-2000:]
        kept = [json.loads(x)["id"] for x in open(result_path(str(out), "m", "multi_turn_base"))]
        assert 1 <= len(kept) < len(ids)
        srv.delay_s = 0.0
        s = run_eval(_cfg(srv.url, "m", out, "fc", ids))
        assert s.n_skipped == len(kept) and s.scores["categories"]["multi_turn_base"]["n_valid"] == 6


def test_a_burst_of_ctrl_c_still_exits_130_and_loses_nothing(tasks, tmp_path):
    """Ctrl-C held down (a signal every few milliseconds until the process ends): the first interrupts the run,
    every later one lands somewhere in the saving and winding down, and none may turn exit 130 into a death by
    signal or a traceback (a second Ctrl-C killed the process on a loaded machine)."""
    with _cli_past_its_first_result(tasks, tmp_path, 4) as (ids, out, p, srv):
        for _ in range(400):  # at most about 2 s of signals
            if p.poll() is not None:
                break
            p.send_signal(signal.SIGINT)
            time.sleep(0.005)
        _exited_130_and_a_rerun_completes(p, srv, out, ids)


def test_bfcl_id_file_is_read_by_bfcl_generate_loader(tmp_path):
    """`seal-verl bfcl-ids` writes the id file that `bfcl generate --run-ids` reads, with bfcl-eval's own loader."""
    from bfcl_eval.utils import load_test_entries_from_id_file

    from seal_verl.cli import main

    path = tmp_path / "test_case_ids_to_generate.json"
    assert main(["bfcl-ids", "--split", "eval", "--out", str(path)]) == 0
    categories, entries = load_test_entries_from_id_file(path)
    assert sorted(categories) == sorted(CATEGORIES)
    assert sorted(e["id"] for e in entries) == sorted(load_split()["eval"])


def test_bfcl_id_file_for_given_ids(tmp_path):
    """`seal-verl bfcl-ids --ids` restricts bfcl's id file to exactly those tasks (read back with bfcl's loader);
    an unknown id is one error line and exit status 2."""
    from bfcl_eval.utils import load_test_entries_from_id_file

    from seal_verl.cli import main

    ids = ["multi_turn_base_100", "multi_turn_miss_func_132", "multi_turn_miss_param_100"]
    path = tmp_path / "test_case_ids_to_generate.json"
    assert main(["bfcl-ids", "--ids", *ids, "--out", str(path)]) == 0
    categories, entries = load_test_entries_from_id_file(path)
    assert sorted(categories) == ["multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param"]
    assert sorted(e["id"] for e in entries) == sorted(ids)
    assert main(["bfcl-ids", "--ids", "multi_turn_base_100000", "--out", str(tmp_path / "x.json")]) == 2


# ------------------------------------------------------------------------------------------ hostile servers

def _trickle(body: bytes, every_s: float = 0.5):
    """A behaviour that sends the headers at once, then the body one byte per ``every_s`` (until stopped)."""
    def run(send, path):
        send(http_answer(body)[:-len(body)])
        for i in range(len(body)):
            send(body[i:i + 1])
            time.sleep(every_s)
    return run


def _call_bounded(fn, limit_s=60.0):
    """Run ``fn()`` in a thread; returns (returned or raised, seconds) or fails the test if it is still running."""
    import threading

    box = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            box["value"] = exc

    th = threading.Thread(target=target, daemon=True)
    t0 = time.monotonic()
    th.start()
    th.join(timeout=limit_s)
    assert not th.is_alive(), f"still waiting after {limit_s} s"
    return box["value"], time.monotonic() - t0


def test_trickling_answer_hits_the_whole_request_deadline():
    """--timeout bounds the whole request, not each socket read: a body sent one byte at a time (and headers
    sent one byte at a time) end at the deadline and are retried as timeouts."""
    body = chat_body('"' + "x" * 200 + '"')
    head = http_answer(body)[:-len(body)]

    def slow_head(send, path):
        for i in range(len(head)):
            send(head[i:i + 1])
            time.sleep(0.5)

    for behaviour in (_trickle(body), slow_head):
        with RawServer([behaviour]) as srv:
            client = ChatClient(srv.url, timeout_s=2, retries=1, sleep=lambda s: None)
            got, took = _call_bounded(lambda: client.chat({"model": "m", "messages": []}), limit_s=40)
            assert isinstance(got, ServerError) and "no answer within 2 s" in str(got), got
            assert took < 30 and srv.connections == 2  # retried once, each attempt cut at its deadline


def test_answer_over_the_size_limit_is_an_error():
    big = chat_body('"' + "x" * 300_000 + '"')
    for length in (None, 10**12):  # an honest Content-Length, and one that announces too much
        with RawServer([lambda send, path, b=big, n=length: send(http_answer(b, length=n))]) as srv:
            client = ChatClient(srv.url, timeout_s=20, retries=0, max_body_bytes=100_000)
            got, _ = _call_bounded(lambda: client.chat({"model": "m", "messages": []}))
            assert isinstance(got, ServerError) and "larger than" in str(got), got
        small = ChatClient("http://127.0.0.1:1/v1", max_body_bytes=100_000)
        assert small.max_body_bytes == 100_000


def test_every_transport_error_is_retried():
    """A body cut short (IncompleteRead), a bad status line, a connection closed without an answer and a reset
    are all retried; the fifth attempt's answer is returned."""
    good = chat_body('"fine"')

    def cut(send, path):
        send(http_answer(good, length=len(good) + 50)[:-5])

    def bad_status(send, path):
        send(b"HTTP/1.1 abc nonsense\r\n\r\n")

    def silent(send, path):
        pass

    def garbage(send, path):
        send(b"\x00\xff" * 100)

    with RawServer([cut, bad_status, silent, garbage, lambda send, path: send(http_answer(good))]) as srv:
        client = ChatClient(srv.url, timeout_s=20, retries=4, sleep=lambda s: None)
        got, _ = _call_bounded(lambda: client.chat({"model": "m", "messages": []}))
        assert isinstance(got, dict) and got["content"] == "fine", got
        assert client.stats["retries"] == 4 and srv.connections == 5
    with RawServer([cut]) as srv:  # keeps failing: one line, after every retry
        client = ChatClient(srv.url, timeout_s=20, retries=2, sleep=lambda s: None)
        got, _ = _call_bounded(lambda: client.chat({"model": "m", "messages": []}))
        assert isinstance(got, ServerError) and "gave up after 3 attempt(s)" in str(got) and srv.connections == 3


def _error_lines(err):
    assert "Traceback" not in err, err[-3000:]
    return [x for x in err.splitlines() if x.startswith("error:")]


def test_models_answer_nested_or_cut_is_one_error_line(tmp_path):
    nested = b"[" * 10_000 + b"]" * 10_000
    cut = models_body("m")

    for name, behaviour, expected in (
            ("nested", lambda send, path: send(http_answer(nested)), "/models: answer is not JSON"),
            ("cut", lambda send, path: send(http_answer(cut, length=len(cut) + 20)), "connection lost")):
        with RawServer([behaviour]) as srv:
            p = _cli(["--base-url", srv.url, "--model", "m", "--out", str(tmp_path / name), "--retries", "1",
                      "--timeout", "20", "--ids", "multi_turn_base_0", "--no-progress"])
            _, err = p.communicate(timeout=120)
            assert p.returncode == 2, err[-2000:]
            lines = _error_lines(err)
            assert len(lines) == 1 and expected in lines[0], (name, lines)


def test_ctrl_c_while_waiting_on_models(tmp_path):
    import threading

    done = threading.Event()

    def never(send, path):
        done.wait(60)

    with RawServer([never]) as srv:
        p = _cli(["--base-url", srv.url, "--model", "m", "--out", str(tmp_path / "o"), "--ids", "multi_turn_base_0",
                  "--no-progress"], preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        deadline = time.time() + 120
        while time.time() < deadline and srv.connections == 0:
            time.sleep(0.1)
        time.sleep(0.5)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
        done.set()
    assert p.returncode == 130, err[-2000:]
    assert "Traceback" not in err and "interrupted" in err


def test_malformed_answers_are_inference_errors_of_their_task(tasks, tmp_path):
    """A cut, nested, lone-surrogate or invalid-UTF-8 answer is an inference error of that task only: every
    requested task is in the result file."""
    ids = [f"multi_turn_base_{i}" for i in range(5)]
    nested = b'{"choices": [{"message": {"role": "assistant", "content": ' + b"[" * 5000 + b"]" * 5000 + b"}}]}"
    surrogate = chat_body('"a \\ud800 b"')
    bad_utf8 = chat_body('"BAD"').replace(b"BAD", b"\xff\xfe")
    cut = chat_body('"cut"')
    answers = [lambda send, path: send(http_answer(models_body("m"))),
               lambda send, path: send(http_answer(nested)),
               lambda send, path: send(http_answer(cut, length=len(cut) + 9)),
               lambda send, path: send(http_answer(surrogate)),
               lambda send, path: send(http_answer(bad_utf8)),
               lambda send, path: send(http_answer(b"not json"))]
    with RawServer(answers) as srv:
        s = run_eval(_cfg(srv.url, "m", tmp_path, "fc", ids, retries=0, concurrency=1))
    lines = [json.loads(x) for x in open(result_path(str(tmp_path), "m", "multi_turn_base"))]
    assert [e["id"] for e in lines] == ids
    assert all(e["result"].startswith("Error during inference: ") for e in lines), lines
    causes = ["nested too deep", "connection lost", "lone surrogate", "not valid UTF-8", "not JSON"]
    assert all(c in e["result"] for c, e in zip(causes, lines)), lines  # each task failed at its own answer
    assert s.n_errors == 5 and s.n_missing == 0
    assert _labels(tmp_path)[ids[3]]["error_type"] == "multi_turn:inference_error"


def _main(args, capsys):
    from seal_verl.cli import main

    try:
        rc = main(["eval", *args])
    except SystemExit as exc:  # argparse
        rc = exc.code
    out, err = capsys.readouterr()
    return rc, out, err


def test_lone_surrogate_loses_no_task_and_the_final_line_counts(tasks, tmp_path, capsys):
    """A lone surrogate in an answer used to kill the worker thread in ResultStore.append: the command
    exited 0, said the results were written, and two of three tasks were missing."""
    ids = ["multi_turn_base_0", "multi_turn_base_1", "multi_turn_base_2"]
    scripts = {"m": {i: to_result(tasks[i], ground_truth_steps(tasks[i]), "fc") for i in ids}}
    scripts["m"][ids[0]][0] = ["bad \ud800 text"]  # the first answer of the first task
    with ReplayServer(scripts, _first_user(tasks, ids)) as srv:
        rc, out, err = _main(["--base-url", srv.url, "--model", "m", "--out", str(tmp_path), "--ids", *ids,
                              "--concurrency", "1", "--retries", "0", "--no-progress"], capsys)
    assert rc == 0, err
    lines = [json.loads(x) for x in open(result_path(str(tmp_path), "m", "multi_turn_base"))]
    assert [e["id"] for e in lines] == ids
    assert lines[0]["result"].startswith("Error during inference: ") and "surrogate" in lines[0]["result"]
    assert "results for 3 of 3 task(s)" in out.splitlines()[-1], out


def test_a_task_that_cannot_be_written_is_reported_missing(tasks, tmp_path, capsys, monkeypatch):
    """A worker-side failure drops no queued task; a task that cannot be written at all is named, the final
    line counts the tasks written, and the exit status is 3."""
    from env_wrappers.bfcl.evaluation.result_files import ResultStore

    ids = ["multi_turn_base_0", "multi_turn_base_1", "multi_turn_base_2"]
    scripts = {"m": {i: to_result(tasks[i], ground_truth_steps(tasks[i]), "fc") for i in ids}}
    real_append = ResultStore.append

    def append(self, task, result):
        if task.id == ids[0]:
            raise RuntimeError("cannot serialise (on purpose)")
        return real_append(self, task, result)

    monkeypatch.setattr(ResultStore, "append", append)
    with ReplayServer(scripts, _first_user(tasks, ids)) as srv:
        rc, out, err = _main(["--base-url", srv.url, "--model", "m", "--out", str(tmp_path), "--ids", *ids,
                              "--concurrency", "1", "--no-progress"], capsys)
    assert rc == 3, (out, err)
    assert [json.loads(x)["id"] for x in open(result_path(str(tmp_path), "m", "multi_turn_base"))] == ids[1:]
    assert "results for 2 of 3 task(s)" in out, out
    lines = _error_lines(err)
    assert len(lines) == 1 and ids[0] in lines[0] and "missing" in lines[0], err


@pytest.mark.parametrize("args, option", [
    (["--base-url", "ftp://127.0.0.1/v1"], "--base-url"),
    (["--base-url", "http:///v1"], "--base-url"),
    (["--timeout", "-1"], "--timeout"),
    (["--timeout", "nan"], "--timeout"),
    (["--timeout", "inf"], "--timeout"),
    (["--temperature", "nan"], "--temperature"),
    (["--temperature", "-0.5"], "--temperature"),
    (["--concurrency", "0"], "--concurrency"),
    (["--retries", "-1"], "--retries"),
    (["--max-tokens", "0"], "--max-tokens"),
])
def test_every_option_is_checked(args, option, tmp_path, capsys):
    base = {"--base-url": f"http://127.0.0.1:{free_port()}/v1", "--model": "m", "--out": str(tmp_path / "o"),
            "--ids": "multi_turn_base_0", "--retries": "0"}
    base.update(dict(zip(args[::2], args[1::2])))
    argv = [x for kv in base.items() for x in kv] + ["--no-progress"]
    rc, out, err = _main(argv, capsys)
    assert rc == 2, (out, err)
    lines = _error_lines(err)
    assert len(lines) == 1 and option in lines[0], err
    assert not os.path.exists(tmp_path / "o")


def test_ctrl_c_twice_still_exits_130_and_loses_nothing(tasks, tmp_path):
    """A second Ctrl-C while the first is being handled (saving, scoring) still ends with exit 130, and a
    re-run completes every task."""
    with _cli_past_its_first_result(tasks, tmp_path, 4) as (ids, out, p, srv):
        p.send_signal(signal.SIGINT)
        time.sleep(0.05)
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
        _exited_130_and_a_rerun_completes(p, srv, out, ids)
