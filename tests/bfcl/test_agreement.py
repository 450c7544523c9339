"""Our verifier agrees with bfcl-eval's official multi-turn checker.

(a) the ground truth of all 800 tasks passes in both; (b) every applicable perturbation kind of
``perturb.KINDS`` on every task (several thousand trajectories over all four categories) gets the same
``valid`` flag and, where both fail, the same error type. The official checker runs only in a separate
process (``tests/_official_checker.py``; it uses ``eval`` and global instance caches), only on these
generated inputs, with ``BFCL_PROJECT_ROOT`` in a temporary folder and a fresh model name per check.

It also checks that ``judge_result`` on the rendered result files (python, json and fc forms) gives the same
verdict as ``verify`` on the decoded form.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import threading


from _paths import TESTS

from env_wrappers.bfcl.environment.judge import judge_result
from env_wrappers.bfcl.environment.perturb import KINDS, ground_truth_steps, perturb, to_result
from env_wrappers.bfcl.environment.tasks import CATEGORIES
from env_wrappers.bfcl.environment.verifier import verify

WORKER = os.path.join(TESTS, "_official_checker.py")
N_WORKERS = 2
FORMATS = ("python", "json", "fc")
SEEDS = (0,)
#: The label Psi must give a perturbed turn that fails, for the kinds whose label is determined by the rules.
EXPECTED_LABEL = {
    "empty_turn": "missing_tool_call",
    "text_only": "missing_tool_call",
    "unknown_function": "invalid_tool_call",
    "wrong_value": "argument_mismatch",
}  # one seeded perturbation per (task, kind): ~5,000 trajectories


def _cases(tasks):
    """(key, task, kind, decoded, perturbed turn) for the ground truth and every applicable perturbation."""
    out = []
    for task in tasks.values():
        out.append((f"{task.id}|gt", task, "gt", ground_truth_steps(task), None))
        for kind in KINDS:
            for seed in SEEDS:
                p = perturb(task, kind, seed)
                if p is not None:
                    out.append((f"{task.id}|{kind}|{seed}", task, kind, p[0], p[1]))
    return out


def _run_official(cases, tmp_path):
    """Start the official checker on all cases in N_WORKERS subprocesses (one thread each waits on one).

    Returns ``(replies, errors, threads)``: ``replies`` (key -> reply) and ``errors`` fill in once the
    threads are joined.
    """
    env = dict(os.environ)
    env["BFCL_PROJECT_ROOT"] = str(tmp_path / "bfcl_root")
    os.makedirs(env["BFCL_PROJECT_ROOT"], exist_ok=True)
    chunks = [cases[i::N_WORKERS] for i in range(N_WORKERS)]
    replies: dict = {}
    errors: list = []

    def work(chunk):
        payload = "".join(json.dumps({"key": k, "task_id": t.id, "decoded": d}) + "\n" for k, t, _, d, _ in chunk)
        proc = subprocess.run([sys.executable, WORKER], input=payload, capture_output=True, text=True, env=env,
                              cwd=str(tmp_path), timeout=600)
        if proc.returncode != 0:
            errors.append(f"worker exited {proc.returncode}: {proc.stderr[-2000:]}")
            return
        for line in proc.stdout.splitlines():
            r = json.loads(line)
            replies[r["key"]] = r

    threads = [threading.Thread(target=work, args=(c,)) for c in chunks]
    for t in threads:
        t.start()
    return replies, errors, threads


def test_verify_agrees_with_official_checker(tasks, tmp_path):
    cases = _cases(tasks)
    n_perturbed = sum(1 for c in cases if c[2] != "gt")
    assert n_perturbed >= 2000
    assert {c[1].category for c in cases if c[2] != "gt"} == set(CATEGORIES)
    assert {c[2] for c in cases} == set(KINDS) | {"gt"}

    # The official checker works in its subprocesses while this process runs our verifier.
    replies, errors, threads = _run_official(cases, tmp_path)
    ours = {key: verify(task, decoded) for key, task, _, decoded, _ in cases}
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(replies) == len(cases)

    valid_agree = err_agree = both_fail = 0
    by_kind = collections.Counter()
    disagreements = []
    for key, task, kind, _, _ in cases:
        off, our = replies[key], ours[key]
        assert off["refused"] is None and off["exception"] is None, (key, off)
        if off["valid"] == our.valid:
            valid_agree += 1
        else:
            disagreements.append((key, "valid", off["valid"], our.valid, off["error_type"], our.error_type))
            continue
        if not our.valid:
            both_fail += 1
            if off["error_type"] == our.error_type:
                err_agree += 1
            else:
                disagreements.append((key, "error_type", off["error_type"], our.error_type))
        by_kind[(kind, our.valid)] += 1

    n = len(cases)
    print(f"\nagreement: {n} trajectories ({n - n_perturbed} ground truth + {n_perturbed} perturbed); "
          f"valid agrees on {valid_agree}/{n}; error_type agrees on {err_agree}/{both_fail} failing in both")
    for (kind, valid), count in sorted(by_kind.items()):
        print(f"  {kind:>16} {'pass' if valid else 'fail'}: {count}")
    assert not disagreements, disagreements[:20]
    # Every ground truth passes in both.
    assert all(ours[f"{t}|gt"].valid and replies[f"{t}|gt"]["valid"] for t in tasks)
    # The perturbations really exercise failures of each official error type we can produce here.
    failing_types = {ours[k].error_type for k, *_ in cases if not ours[k].valid}
    assert {"multi_turn:empty_turn_model_response", "multi_turn:instance_state_mismatch",
            "multi_turn:execution_response_mismatch"} <= failing_types


#: Calls at the edges of BFCL's execution semantics, each added to a turn of otherwise correct ground truth:
#: non-finite floats (BFCL's eval fails on the bare ``nan``/``inf`` their repr produces), refused names,
#: private and dunder names, unknown names, a method of a class the task does not involve, a miss_func
#: function before it is revealed, positional arguments, schema violations and repeated calls.
EDGE_CALLS = (
    "mkdir(dir_name=nan)", "mkdir(dir_name=-inf)", "mkdir(dir_name=[inf])", "touch(file_name={'a': nan})",
    "remove(file_name='final_report.pdf')", "exit()", "kill(pid=1)", "run(cmd='ls')",
    "_load_scenario(scenario={})", "__init__()", "_private()",
    "teleport(to='x')", "get_stock_info(symbol='AAPL')", "send_message(receiver_id='U1', message='hi')",
    "sort(file_name='final_report.pdf')", "sort('final_report.pdf')",
    "mkdir('extra')", "cd('..')", "touch('note.txt')",
    "mkdir(dir_name='x', bogus=1)", "cd(folder=5)", "cd()", "mkdir(dir_name=['a', 'b'])", "mkdir(dir_name=None)",
    "ls()", "pwd()", "ls(a=True)",
)
EDGE_TASKS = ("multi_turn_base_0", "multi_turn_miss_func_0", "multi_turn_miss_param_0", "multi_turn_long_context_0")


def _edge_cases(tasks):
    out = []
    for task_id in EDGE_TASKS:
        task = tasks[task_id]
        gt_turns = [k for k, gt in enumerate(task.ground_truth) if gt]
        for i, call in enumerate(EDGE_CALLS):
            for where in ("before", "after", "alone", "next_step"):
                traj = ground_truth_steps(task)
                k = gt_turns[i % len(gt_turns)] if where != "alone" else gt_turns[(i + 1) % len(gt_turns)]
                gt = list(task.ground_truth[k])
                traj[k] = {"before": [[call] + gt], "after": [gt + [call]], "alone": [[call]],
                           "next_step": [gt, [call]]}[where]
                out.append((f"{task_id}|edge|{i}|{where}", task, "edge", traj, k))
            # The same call on the abstention / reveal turn, if the task has one.
            for k, gt in enumerate(task.ground_truth):
                if not gt:
                    traj = ground_truth_steps(task)
                    traj[k] = [[call]]
                    out.append((f"{task_id}|edge|{i}|abstain{k}", task, "edge", traj, k))
    return out


def test_edge_case_calls_agree_with_official_checker(tasks, tmp_path):
    """Hand-picked calls at the edges of BFCL's execution semantics: same valid flag and error type."""
    cases = _edge_cases(tasks)
    replies, errors, threads = _run_official(cases, tmp_path)
    ours = {key: verify(task, decoded) for key, task, _, decoded, _ in cases}
    for t in threads:
        t.join()
    assert not errors, errors
    bad = []
    for key, *_ in cases:
        off, our = replies[key], ours[key]
        assert off["refused"] is None and off["exception"] is None, (key, off)
        if off["valid"] != our.valid or (not our.valid and off["error_type"] != our.error_type):
            bad.append((key, off["valid"], off["error_type"], our.valid, our.error_type))
    n_valid = sum(ours[k].valid for k, *_ in cases)
    print(f"\nedge cases: {len(cases)} trajectories, {len(cases) - len(bad)} agree ({n_valid} pass in both)")
    assert not bad, bad[:20]
    assert 0 < n_valid < len(cases)


def test_judge_result_on_rendered_results_matches_verify(tasks):
    """judge_result on python/json/fc result files == verify on the decoded trajectory (valid and error type).

    The ground truth in all three forms; each perturbation in one form, rotating, so every (category, kind,
    form) combination occurs.
    """
    cases = _cases(tasks)
    seen = set()
    checked = 0
    mismatches, wrong_labels = [], []
    labelled = collections.Counter()
    rot = collections.Counter()
    for key, task, kind, decoded, turn in cases:
        if kind == "gt":
            forms = FORMATS
        else:
            i = rot[(task.category, kind)]
            rot[(task.category, kind)] += 1
            forms = (FORMATS[i % len(FORMATS)],)
        expected = verify(task, decoded, call_timeout_s=None)
        text_turns = (turn,) if kind == "text_only" else ()
        for fmt in forms:
            j = judge_result(task, to_result(task, decoded, fmt, text_turns=text_turns), call_format=fmt)
            checked += 1
            seen.add((task.category, kind, fmt))
            if (j.valid, j.error_type) != (expected.valid, expected.error_type):
                mismatches.append((key, fmt, j.valid, j.error_type, expected.valid, expected.error_type))
            elif kind == "gt":
                assert set(j.labels) == {"pass"}, (key, fmt, j.labels)
            elif kind in EXPECTED_LABEL and j.labels[turn] != "pass":
                # Psi on the perturbed turn: the label the rules give for that kind of damage.
                labelled[(kind, j.labels[turn])] += 1
                if j.labels[turn] != EXPECTED_LABEL[kind]:
                    wrong_labels.append((key, fmt, j.labels, j.diagnosis.reasons[turn]))
    print(f"\njudge_result vs verify: {checked} rendered results, {len(mismatches)} mismatches")
    print("labels on failing perturbed turns:", dict(sorted(labelled.items())))
    assert not mismatches, mismatches[:20]
    assert not wrong_labels, wrong_labels[:20]
    assert len(seen) == len(CATEGORIES) * (len(KINDS) + 1) * len(FORMATS)


def test_counterfactual_turns_match_a_deep_copy_of_the_ground_truth_path(tasks):
    """After the first failing turn, each turn is judged from the ground-truth state at its start
    (how Psi judges turns after a failure). Reference: the ground-truth path run here turn by turn and deep-copied at the start of
    every counterfactual turn; the verifier rebuilds that state by replay and must agree exactly (results
    of the model's calls, state differences, missing results)."""
    from env_wrappers.bfcl.tools.backends import Backends
    from env_wrappers.bfcl.environment.verifier import _compare, _missing, _public

    checked = 0
    for key, task, kind, decoded, _ in _cases(tasks):
        if kind == "gt":
            continue
        v = verify(task, decoded, call_timeout_s=None)
        if not any(ev.counterfactual for ev in v.turns):
            continue
        gt = Backends(task.involved_classes, task.initial_config, task.long_context, None)
        model = Backends(task.involved_classes, task.initial_config, task.long_context, None)
        prior: list = []  # the model's results so far on its own cumulative path
        for k, ev in enumerate(v.turns):
            start = gt.copy() if ev.counterfactual else None
            gt_results = [gt.execute(c)[0] for c in task.ground_truth[k]]
            own = [model.execute(c)[0] for c in ev.model_calls]
            if start is not None:
                results = [start.execute(c)[0] for c in ev.model_calls]
                assert results == ev.model_results, (key, k)
                assert _compare(start, _public(gt)) == ev.state_diff, (key, k)
                assert _missing(gt_results, prior + results) == ev.missing_results, (key, k)
                checked += 1
            prior.extend(own)
    print(f"\ncounterfactual turns checked against a deep copy: {checked}")
    assert checked > 1000


def test_deferred_replay_builds_the_same_trace(tasks):
    """Replays queue their calls: replay_result runs them in one batch at the end, judge_result lets the
    verifier's model path run them once and fills the trace from its outcomes. Either way the trace must be
    the one a message-by-message replay builds (results, errors, executed flags, turn ends), and
    judge_result's labels the ones judge_trace gives on that trace."""
    from env_wrappers.bfcl.environment.env import BFCLEnv
    from env_wrappers.bfcl.environment.judge import _judge_replayed, _replay, judge_trace, replay_result

    n = 0
    for i, (key, task, kind, decoded, turn) in enumerate(_cases(tasks)):
        if i % 6:  # a sixth of the cases (every kind and format still comes up hundreds of times)
            continue
        fmt = FORMATS[(i // 6) % len(FORMATS)]
        result = to_result(task, decoded, fmt, text_turns=(turn,) if kind == "text_only" else ())
        env = BFCLEnv(task, call_format=fmt)
        env.reset()
        for steps in result:
            for step in steps:
                env.feed(step)
            if not env.done:
                env.advance()
        assert replay_result(task, result, call_format=fmt).to_dict() == env.trace.to_dict(), key
        settled = _replay(task, result, fmt, 10.0)
        j = _judge_replayed(task, settled, False, 10.0)
        assert settled.trace.to_dict() == env.trace.to_dict(), key
        ref = judge_trace(task, env.trace)
        assert (j.valid, j.error_type, j.labels, j.diagnosis.reasons) == \
            (ref.valid, ref.error_type, ref.labels, ref.diagnosis.reasons), key
        n += 1
    assert n > 750
