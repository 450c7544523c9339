"""``seal-verl eval --samples N --seeds ...``: repetitions and their spread, against a local server whose answers
depend on the request's seed (ground truth for even seeds, a wrong argument for odd ones), so the spread is known.

The default stays BFCL's protocol, one greedy sample per task, and says so; repetitions need a temperature above 0
(greedy decoding ignores the seed) and say that they are not the official protocol.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from _paths import REPO
from _replay_server import ReplayServer

from env_wrappers.bfcl.environment.judge import judge_result
from env_wrappers.bfcl.environment.perturb import ground_truth_steps, perturb, to_result
from env_wrappers.bfcl.environment.tasks import load_tasks
from env_wrappers.bfcl.evaluation.config import EvalError
from env_wrappers.bfcl.evaluation.repeats import repetitions

#: tasks of one category: tasks of different categories can open with the same question, and the server finds the
#: task by its first question
IDS = ["multi_turn_base_0", "multi_turn_base_1", "multi_turn_base_2"]


class SeededServer(ReplayServer):
    """Answers from ``scripts[parity of the request's seed]`` (no seed: the even script)."""

    def __init__(self, by_parity: dict, first_user: dict):
        super().__init__({"m": by_parity[0]}, first_user)
        self.by_parity = by_parity

    def answer(self, req):
        self.scripts = {"m": self.by_parity[int(req.get("seed") or 0) % 2]}
        return super().answer(req)


@pytest.fixture(scope="module")
def served():
    tasks = load_tasks(IDS)
    good = {t: to_result(tasks[t], ground_truth_steps(tasks[t]), "json") for t in IDS}
    bad = {t: to_result(tasks[t], perturb(tasks[t], "wrong_value")[0], "json") for t in IDS}
    assert all(judge_result(tasks[t], good[t], call_format="json").valid for t in IDS)
    assert not any(judge_result(tasks[t], bad[t], call_format="json").valid for t in IDS)
    first = {t: tasks[t].questions[0][0]["content"] for t in IDS}
    with SeededServer({0: good, 1: bad}, first) as srv:
        yield srv


def _eval(srv, out, *args):
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "seal_verl.cli", "eval", "--base-url", srv.url, "--model", "m",
                           "--out", str(out), "--mode", "prompt", "--call-format", "json", "--ids", *IDS,
                           "--no-progress", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


def test_default_is_one_greedy_sample_and_says_so(served, tmp_path):
    proc = _eval(served, tmp_path / "one")
    assert proc.returncode == 0, proc.stderr
    assert "one greedy sample per task (BFCL's official protocol)" in proc.stdout
    scores = json.load(open(tmp_path / "one" / "scores.json"))
    assert scores["protocol"]["samples"] == 1 and scores["protocol"]["seed"] is None
    assert not os.path.exists(tmp_path / "one" / "spread.json")


def test_seeds_give_one_repetition_each_and_their_spread(served, tmp_path):
    served.requests.clear()
    proc = _eval(served, tmp_path / "seeds", "--seeds", "4", "7", "10", "--temperature", "0.7")
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "seeds"
    for seed, valid in ((4, True), (7, False), (10, True)):
        scores = json.load(open(out / f"rep_s{seed}_k0" / "scores.json"))
        assert scores["protocol"]["seed"] == seed and scores["protocol"]["temperature"] == 0.7
        assert {c: v["accuracy"] for c, v in scores["categories"].items()} == \
            {"multi_turn_base": float(valid)}
    assert {r.get("seed") for r in served.requests} == {4, 7, 10}
    spread = json.load(open(out / "spread.json"))
    base = spread["categories"]["multi_turn_base"]
    assert base["values"] == [1.0, 0.0, 1.0] and base["mean"] == pytest.approx(2 / 3)
    assert base["std"] == pytest.approx(3 ** -0.5) and (base["min"], base["max"]) == (0.0, 1.0)
    assert spread["average"]["n"] == 3 and spread["protocol"]["seeds"] == [4, 7, 10]
    assert "multi_turn_base" in proc.stdout and "66.67 +- 57.74" in proc.stdout
    assert "not BFCL's official protocol" in proc.stdout
    # a re-run resumes every repetition: nothing is requested again
    n = len(served.requests)
    again = _eval(served, out, "--seeds", "4", "7", "10", "--temperature", "0.7")
    assert again.returncode == 0 and len(served.requests) == n


def test_samples_without_seeds_send_no_seed(served, tmp_path):
    served.requests.clear()
    proc = _eval(served, tmp_path / "samples", "--samples", "2", "--temperature", "1.0")
    assert proc.returncode == 0, proc.stderr
    assert sorted(os.listdir(tmp_path / "samples")) == ["rep_k0", "rep_k1", "spread.json"]
    assert served.requests and all("seed" not in r for r in served.requests)
    assert json.load(open(tmp_path / "samples" / "spread.json"))["average"]["values"] == [1.0, 1.0]


def test_repetitions_at_temperature_zero_are_refused_in_one_line(served, tmp_path):
    proc = _eval(served, tmp_path / "greedy", "--samples", "3")
    assert proc.returncode == 2 and not os.path.exists(tmp_path / "greedy")
    lines = [x for x in proc.stderr.splitlines() if x.startswith("error:")]
    assert len(lines) == 1 and "--temperature 0 would repeat the same greedy answers" in lines[0]


def test_repetition_seeds_never_collide():
    reps = repetitions(3, [0, 1, 2])
    assert len({r.seed for r in reps}) == 9 and len({r.name for r in reps}) == 9
    with pytest.raises(EvalError, match="lists a seed twice"):
        repetitions(1, [5, 5])
