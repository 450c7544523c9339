"""``seal-verl dry-run``: the closed loop for a few steps, everything real except generation and the optimizer.

A small run (3 steps, 2 tasks x 3 rollouts, 1 validation task) checks the run folder, the state advancing,
the SEAL weights, that cues appear only in training rollouts, and that the interface reacts to the profile.
"""

from __future__ import annotations

import json
import math
import os

import pytest

from seal_verl import dry_run as D
@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("dry")
    cfg = D.DryRunConfig(out=str(out / "run"), steps=3, tasks_per_step=2, rollouts=3, val_tasks=1,
                         model=str(out / "model"), progress=False, verbose=False)
    rows = D.run_dry(cfg)
    return cfg, rows


def _jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def test_run_folder(run):
    cfg, rows = run
    files = set(os.listdir(cfg.out))
    for k in range(1, cfg.steps + 1):  # numbered by the global step, as in a training run
        assert {f"state_step_{k}.json", f"traces_step_{k}.jsonl"} <= files
    assert {"metrics.jsonl", "val_traces.jsonl", "config.json", "agent_loops.yaml"} <= files
    metrics = _jsonl(os.path.join(cfg.out, "metrics.jsonl"))
    assert [m["step"] for m in metrics] == list(range(1, cfg.steps + 1)) and len(rows) == cfg.steps
    for k in range(1, cfg.steps + 1):
        traces = _jsonl(os.path.join(cfg.out, f"traces_step_{k}.jsonl"))
        assert len(traces) == cfg.tasks_per_step * cfg.rollouts
        for t in traces:
            assert t["agent_loop"] == "seal_bfcl"
            assert len(t["labels"]) == len(t["trace"]["turns"]) == len(t["abstention"])
            assert t["plan"] is not None, "every rollout is one of the scripted plans"
            assert t["reward"] in (0.0, 1.0)


def test_states_advance_and_persist(run):
    from seal_verl.core.loop import ClosedLoopState

    cfg, rows = run
    prev = None
    for k in range(1, cfg.steps + 1):
        st = ClosedLoopState.load(os.path.join(cfg.out, f"state_step_{k}.json"))
        assert st.step == k and st.interface.step == k and len(st.history) == k
        assert st.history[-1]["active"] == rows[k - 1]["active_next"]
        if prev is not None:
            assert st.history[:-1] == prev.history
        prev = st


def test_weights_follow_labels(run):
    """w_j = clip(sum_z p_j(z) rho_t(z)) with the rho of the state the step started from; != 1 where labels differ."""
    from seal_verl.core import taxonomy as tx
    from seal_verl.core.loop import ClosedLoopState
    from seal_verl.core.profile import trajectory_profile
    from seal_verl.core.weighting import trajectory_weight

    cfg, rows = run
    n_reweighted = 0
    for k in range(1, cfg.steps + 1):
        rho = (ClosedLoopState.load(os.path.join(cfg.out, f"state_step_{k - 1}.json")).rho if k > 1
               else tx.check_rho({}))
        assert rows[k - 1]["rho_used"] == pytest.approx(rho)
        for t in _jsonl(os.path.join(cfg.out, f"traces_step_{k}.jsonl")):
            p = trajectory_profile(t["labels"], t["abstention"])
            assert math.isclose(t["w"], trajectory_weight(p, rho, 0.5, 2.0), rel_tol=1e-5)
            plain = all(lab == "pass" for lab in t["labels"]) and not any(t["abstention"])
            if plain:
                assert t["w"] == 1.0
            elif any(rho[key] != 1.0 for key, share in p.items() if share > 0):
                assert t["w"] != 1.0
                n_reweighted += 1
        # GRPO's group normalisation, scaled by w: a group with mixed rewards has non-zero advantages
    assert n_reweighted > 0
    assert any(r["w_std"] > 0 for r in rows)


def test_cues_only_in_training_rollouts(run):
    cfg, rows = run
    assert rows[0]["active_during"] == [] and rows[0]["cue_tokens_mean"] == 0.0  # Omega_0: every kind off
    train = [t for k in range(1, cfg.steps + 1) for t in _jsonl(os.path.join(cfg.out, f"traces_step_{k}.jsonl"))]
    with_cues = [t for t in train if t["cue_tokens"] > 0]
    assert with_cues, "the interface never put a cue into a training rollout"
    assert all(t["hint_in_text"] for t in with_cues)
    assert all(not t["hint_in_text"] for t in train if t["cue_tokens"] == 0)
    val = _jsonl(os.path.join(cfg.out, "val_traces.jsonl"))
    assert val and all(v["agent_loop"] == "bfcl" and v["cue_tokens"] == 0 and not v["hint_in_text"] for v in val)


def test_interface_reacts_to_the_profile(run):
    from seal_verl.core.interface import InterfaceConfig

    cfg, rows = run
    icfg = InterfaceConfig.from_dict(cfg.seal["interface"])
    on, trigger = icfg.on_threshold, icfg.trigger_of()
    reacted = [(r["step"], kind) for r in rows for kind in r["active_next"]
               if kind not in r["active_during"] and r["rate_ema"][trigger[kind]] >= on]
    assert reacted, "no cue kind turned on although its trigger label was prevalent"
    # the kinds switched on are the ones of the prevalent failures, and they are in the next step's rollouts
    step, kind = reacted[0]
    if step + 1 <= cfg.steps:
        nxt = _jsonl(os.path.join(cfg.out, f"traces_step_{step + 1}.jsonl"))
        assert all(kind in t["interface_active"] for t in nxt)
