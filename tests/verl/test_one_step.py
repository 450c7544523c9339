"""The SEAL step is written once: one ``WeightPlan`` construction, one run-folder writer, the same rows everywhere.

The V1 trainer, the legacy trainer and the dry run each used to carry a copy of the step (profiles -> weights ->
plan -> GRPO -> exclusion -> records -> rows). These tests read the installed source for the construction sites
and check that a dry run writes the very rows a training run writes.
"""

from __future__ import annotations

import ast
import json
import os

import pytest

import seal_verl

PACKAGE = os.path.dirname(os.path.abspath(seal_verl.__file__))


def _calls(name: str) -> list[str]:
    """``file:line`` of every call whose callee is named ``name`` (``name(...)`` or ``x.name(...)``)."""
    out = []
    for root, _dirs, files in os.walk(PACKAGE):
        for f in files:
            if not f.endswith(".py"):
                continue
            path = os.path.join(root, f)
            tree = ast.parse(open(path, encoding="utf-8").read(), path)
            for node in ast.walk(tree):
                if isinstance(node, ast.Call):
                    fn = node.func
                    callee = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else None
                    if callee == name:
                        out.append(f"{os.path.relpath(path, PACKAGE)}:{node.lineno}")
    return out


def test_one_weight_plan_construction_site():
    sites = _calls("WeightPlan")
    assert len(sites) == 1 and sites[0].startswith(os.path.join("verl_glue", "step.py")), sites


@pytest.mark.parametrize("method", ["append_metrics", "write_traces"])
def test_one_run_folder_writer(method):
    """The per-step run-folder files are written by ``step.StepWriter`` only (the paths hand it their rows)."""
    direct = []  # a RunFolder written directly (``...folder.<method>(``), bypassing the writer
    for s in _calls(method):
        path, line = s.rsplit(":", 1)
        src = open(os.path.join(PACKAGE, path), encoding="utf-8").read().splitlines()[int(line) - 1]
        if "folder." in src and not path.startswith(os.path.join("verl_glue", "step.py")):
            direct.append(s)
    assert direct == [], direct
    assert _calls("StepWriter"), "the paths use StepWriter"


def test_dry_run_rows_are_the_training_rows(tmp_path):
    """A dry run's trace rows carry exactly the keys of a training run's rows (``runs.rows.trace_row``), and its
    metrics rows exactly the keys of ``runs.rows.step_row``, with the step's full ``seal/...`` metrics."""
    from _step_rows import record, trained

    from seal_verl import dry_run as D
    from seal_verl.runs.rows import step_row, trace_row

    cfg = D.DryRunConfig(out=str(tmp_path / "run"), steps=1, tasks_per_step=2, rollouts=2, val_tasks=0,
                         model=str(tmp_path / "model"), progress=False, verbose=False)
    D.run_dry(cfg)
    with open(os.path.join(cfg.out, "traces_step_1.jsonl")) as f:
        traces = [json.loads(line) for line in f]
    with open(os.path.join(cfg.out, "metrics.jsonl")) as f:
        metrics = [json.loads(line) for line in f]
    want = set(trace_row(1, trained(key="0", uid="u", extras={"seal_labels": "[]", "seal_abstention": "[]",
                                                              "score": 0.0, "seal_category": "c"},
                                     fields={}, w=1.0, advantage=0.0)))
    assert traces and all(set(t) == want for t in traces), sorted(set(traces[0]) ^ want)
    assert all(t["plan"] is not None and t["tokens"]["llm"] > 0 for t in traces)

    class _State:
        history: list = []
        rho: dict = {}

        class interface:
            active: dict = {}

    assert set(metrics[0]) == set(step_row(record(1, [], _State, _State), seconds=None, metrics={}))
    for name in ("seal/weight/mean", "seal/weight/warmup", "seal/excluded/checker_error", "seal/n_trajectories"):
        assert name in metrics[0]["metrics"], name
