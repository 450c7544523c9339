"""``python -m seal_verl.models.warm_start.probe_cues``: the ground truth under every subset of the chosen start-of-task cue
kinds, rendered by the real ``seal_bfcl`` agent loop and scored token by token by a real (tiny, random) model."""

from __future__ import annotations

import json
import math

import pytest

from seal_verl import dry_run as D
from seal_verl.models.warm_start import probe_cues as P

TASK = "multi_turn_base_100"
KINDS = ["call_format", "ask_or_abstain"]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return D.tiny_model(str(tmp_path_factory.mktemp("tiny") / "model"))


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    path = tmp_path_factory.mktemp("split") / "split.json"
    path.write_text(json.dumps({"train": [TASK], "eval": ["multi_turn_base_101"]}))
    return str(path)


@pytest.fixture(scope="module")
def states(model, tmp_path_factory):
    return P.probe(model, [TASK], KINDS, str(tmp_path_factory.mktemp("probe")))


def test_every_subset_is_rendered_with_its_cue_text(states):
    assert set(states) == {"none", "call_format", "ask_or_abstain", "call_format,ask_or_abstain"}
    prompt = {s: st["tasks"][TASK]["prompt_tokens"] for s, st in states.items()}
    assert prompt["none"] < prompt["call_format"] < prompt["call_format,ask_or_abstain"]
    assert prompt["none"] < prompt["ask_or_abstain"] < prompt["call_format,ask_or_abstain"]


def test_the_same_ground_truth_is_scored_under_every_state(states):
    ids = {s: [t for t, _ in st["tasks"][TASK]["tokens"]] for s, st in states.items()}
    assert len(ids["none"]) > 10 and all(v == ids["none"] for v in ids.values())
    for st in states.values():
        t = st["tasks"][TASK]
        assert math.isfinite(t["nll"]) and t["nll"] > 0
        assert t["nll"] == pytest.approx(sum(x for _, x in t["tokens"]))
        assert st["mean_predicted_pass"] == pytest.approx(math.exp(-t["nll"]))


def test_costliest_tokens_come_from_the_worst_state(states):
    worst, task, pairs = P.costliest_tokens(states, 3)
    assert task == TASK and worst == min(states, key=lambda s: states[s]["mean_predicted_pass"])
    rises = [b - a for _, a, b in pairs]
    assert len(pairs) == 3 and rises == sorted(rises, reverse=True)


def test_cli_prints_the_table_and_refuses_kinds_not_shown_at_the_start(model, split, capsys, tmp_path):
    out = tmp_path / "probe.json"
    assert P.main([model, "--split-file", split, "--kinds", "tool_affordance", "--top", "2", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "mean exp(-NLL)" in text and "tool_affordance" in text and "costliest tokens under" in text
    assert set(json.loads(out.read_text())) == {"none", "tool_affordance"}
    with pytest.raises(SystemExit) as e:
        P.main([model, "--split-file", split, "--kinds", "error_recovery"])
    assert e.value.code == 2
    assert "not shown at the start of a task" in capsys.readouterr().err
