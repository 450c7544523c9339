"""The contract between the reward function and the trainer side (``seal_verl/core/extras.py``): what the reward
writes is exactly what the trainer reads, and the key names are spelled in that one module.

The first test reads a real reward (BFCL's reward function on a real rollout trace) back through the trainer
side's own reading path, recording every key it looks at: it fails when the reward stops writing a key the
trainer needs, writes one no reader uses, or when the trainer starts needing one the reward does not write.
"""

from __future__ import annotations

import ast
import json
import os

import pytest
from _paths import REPO
from _play import play

from env_wrappers.bfcl.environment.examples import examples
from seal_verl.core import extras as X


class _Recording(dict):
    """A dict that remembers which keys were read."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.read: set[str] = set()

    def __getitem__(self, key):
        self.read.add(key)
        return super().__getitem__(key)

    def get(self, key, default=None):
        self.read.add(key)
        return super().get(key, default)


@pytest.fixture(scope="module")
def graded(tasks):
    """The BFCL reward function's output for real rollouts, one per labelled example (json call format)."""
    import reward_fns.bfcl_reward as reward

    out = []
    for name, (tid, result) in sorted(examples("json").items()):
        trace = play(tasks[tid], result, "json")
        out.append(reward.compute_score(data_source=tasks[tid].category, solution_str="", ground_truth=None,
                                        extra_info={"task_id": tid, X.TRACE: trace.to_json()}))
    return out


def test_the_trainer_reads_exactly_what_the_reward_writes(graded):
    """Through the trainer side's reading path (``batch_read.rollout``, as the V1 and legacy trainers and the dry
    run read a rollout), every key the reward function writes is read, and nothing else."""
    from seal_verl.verl_glue.batch_read import rollout

    for i, out in enumerate(graded):
        assert tuple(out) == X.KEYS
        extras = _Recording(out)
        r = rollout(i, f"k{i}", "u", extras, {X.ROW_TASK_ID: out[X.TASK_ID]}, keep_trace=False)
        assert extras.read == set(out), sorted(extras.read ^ set(out))
        assert list(r.grade.labels) == json.loads(out[X.LABELS]) and r.grade.score == out[X.SCORE]
        assert set(X.REQUIRED) <= set(out)


def test_encode_and_decode_are_inverse(graded):
    """``decode(encode(...))`` gives back the reward's diagnosis, verdict and profile; the trainer's check of a
    missing key names it."""
    from seal_verl.core.diagnosis import Diagnosis

    for out in graded:
        g = X.decode(out)
        again = X.encode(Diagnosis(labels=list(g.labels), abstention=list(g.abstention)), score=g.score, acc=g.acc,
                         category=g.category, task_id=g.task_id, cue_tokens=g.cue_tokens)
        assert again == out
    broken = dict(graded[0])
    del broken[X.PROFILE[0]]
    with pytest.raises(X.MissingExtras, match=X.PROFILE[0]):
        X.decode(broken)


def _key_literals(path: str) -> list[str]:
    """String constants in ``path`` that name an extras key (docstrings left out)."""
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    names = set(X.KEYS + X.LOOP_FIELDS + (X.PROBE,)) - {X.SCORE, X.ACC, X.ROW_TASK_ID}
    return [f"{os.path.relpath(path, REPO)}:{node.lineno} {node.value!r}" for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
            and (node.value in names or node.value.startswith(X.PROFILE_PREFIX))]


def test_key_names_are_spelled_in_the_contract_module_only():
    contract = os.path.join(REPO, "seal_verl", "core", "extras.py")
    found = []
    for top in ("seal_verl", "reward_fns", "env_wrappers", "bench"):
        for root, _dirs, files in os.walk(os.path.join(REPO, top)):
            found += [hit for f in files if f.endswith(".py") and os.path.join(root, f) != contract
                      for hit in _key_literals(os.path.join(root, f))]
    assert found == [], found
    assert _key_literals(contract)  # the check sees the literals where they are
