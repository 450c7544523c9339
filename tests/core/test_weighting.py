"""rho, the trajectory weight and its application to advantages (``seal_verl/core/weighting.py``)."""

import math

import pytest
import torch

from seal_verl.core import taxonomy as tx
from seal_verl.core.profile import TrajectoryRecord, aggregate, trajectory_profile
from seal_verl.core.weighting import (
    WeightingConfig,
    apply_weights,
    trajectory_weight,
    update_rho,
    weights_for_batch,
)

RHO = dict(tx.DEFAULT_RHO)


def test_weight_is_profile_weighted_sum_of_rho():
    prof = trajectory_profile([tx.PASS, tx.MISSING_TOOL_CALL, tx.STATE_MISMATCH, tx.PASS], [False, False, False, True])
    expected = 0.25 * RHO[tx.PASS] + 0.25 * RHO[tx.MISSING_TOOL_CALL] + 0.25 * RHO[tx.STATE_MISMATCH] + 0.25 * RHO[
        tx.CORRECT_ABSTENTION
    ]
    assert trajectory_weight(prof, RHO, 0.5, 2.0) == pytest.approx(expected)


@pytest.mark.parametrize(
    "rho_value,w_min,w_max,expected",
    [(3.0, 0.5, 2.0, 2.0), (0.1, 0.5, 2.0, 0.5), (1.7, 0.5, 2.0, 1.7), (1.7, 0.5, 1.5, 1.5), (0.0, 0.8, 1.2, 0.8)],
)
def test_weight_clip_bounds(rho_value, w_min, w_max, expected):
    rho = dict(RHO, state_mismatch=rho_value)
    prof = trajectory_profile([tx.STATE_MISMATCH], [False])
    assert trajectory_weight(prof, rho, w_min, w_max) == pytest.approx(expected)


@pytest.mark.parametrize("w_min,w_max", [(0.5, 2.0), (1.2, 3.0), (0.1, 0.9)])
def test_empty_profile_is_neutral(w_min, w_max):
    assert trajectory_weight(trajectory_profile([tx.CHECKER_ERROR], [False]), RHO, w_min, w_max) == 1.0
    assert trajectory_weight({}, RHO, w_min, w_max) == 1.0


@pytest.mark.parametrize(
    "profile,rho,match",
    [
        ({"bogus": 1.0}, RHO, "unknown profile key"),
        ({tx.PASS: 1.5}, RHO, r"in \[0, 1\]"),
        ({tx.PASS: -0.1}, RHO, r"in \[0, 1\]"),
        ({tx.PASS: math.nan}, RHO, r"in \[0, 1\]"),
        ({tx.PASS: 1.0}, {tx.STATE_MISMATCH: 1.0}, "no utility"),
    ],
)
def test_weight_rejects_bad_input(profile, rho, match):
    with pytest.raises(ValueError, match=match):
        trajectory_weight(profile, rho, 0.5, 2.0)


def test_weight_rejects_bad_bounds():
    with pytest.raises(ValueError, match="w_min"):
        trajectory_weight({tx.PASS: 1.0}, RHO, 2.0, 1.0)


# ------------------------------------------------------------------ config


def test_default_config_valid_and_rho_is_a_copy():
    cfg = WeightingConfig().validate()
    assert cfg.rho == tx.DEFAULT_RHO
    cfg.rho[tx.PASS] = 9.0
    assert tx.DEFAULT_RHO[tx.PASS] == 1.0
    assert WeightingConfig().rho[tx.PASS] == 1.0


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"rho": {"typo_label": 1.0}}, "unknown key 'typo_label' in rho"),
        ({"rho": {tx.PASS: 11.0}}, "outside the allowed range"),
        ({"rho": {tx.PASS: -1.0}}, "outside the allowed range"),
        ({"rho": {tx.PASS: "high"}}, "must be a number"),
        ({"w_min": 0.0}, "w_min must be > 0"),
        ({"w_min": -1.0}, "w_min must be > 0"),
        ({"w_min": 2.5, "w_max": 2.0}, "must not exceed w_max"),
        ({"w_max": math.inf}, "finite"),
        ({"apply_to": "both"}, "apply_to must be one of all, positive, negative"),
        ({"warmup_steps": -1}, "warmup_steps must be >= 0"),
        ({"warmup_steps": 1.5}, "warmup_steps must be an integer"),
        ({"beta": 0.0}, r"beta must be in \(0, 1\]"),
        ({"beta": 1.2}, r"beta must be in \(0, 1\]"),
        ({"alpha": -0.5}, "alpha must be >= 0"),
        ({"n_conf": 0}, "n_conf must be >= 1"),
        ({"rho_clip": (2.0, 1.0)}, "rho_clip"),
        ({"rho_clip": (0.1, 50.0)}, "rho_clip"),
        ({"rho_clip": 3.0}, "pair"),
    ],
)
def test_config_validation_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        WeightingConfig(**kwargs).validate()


def test_from_dict_rejects_unknown_keys_listing_allowed():
    with pytest.raises(ValueError) as err:
        WeightingConfig.from_dict({"w_mni": 0.3})
    msg = str(err.value)
    assert "w_mni" in msg and "allowed keys" in msg and "w_min" in msg and "rho_clip" in msg


def test_from_dict_fills_rho_defaults_and_round_trips():
    cfg = WeightingConfig.from_dict({"rho": {tx.SPURIOUS_TOOL_CALL: 3.0}, "rho_clip": [0.2, 4.0], "dynamic": True})
    assert cfg.rho[tx.SPURIOUS_TOOL_CALL] == 3.0
    assert cfg.rho[tx.MISSING_TOOL_CALL] == tx.DEFAULT_RHO[tx.MISSING_TOOL_CALL]
    assert cfg.rho_clip == (0.2, 4.0)
    assert WeightingConfig.from_dict(cfg.to_dict()) == cfg
    assert WeightingConfig.from_dict(None) == WeightingConfig().validate()


# ------------------------------------------------------------------ batch weights and advantages


def test_weights_for_batch_warmup():
    cfg = WeightingConfig(warmup_steps=3).validate()
    profiles = [trajectory_profile([tx.SPURIOUS_TOOL_CALL], [True]), trajectory_profile([tx.RESPONSE_MISMATCH], [False])]
    for step in (0, 2):
        assert torch.equal(weights_for_batch(profiles, cfg.rho, cfg, step), torch.ones(2))
    w = weights_for_batch(profiles, cfg.rho, cfg, 3)
    assert w.dtype == torch.float32
    assert w.tolist() == pytest.approx([2.0, 0.9])


ADV = torch.tensor([[1.0, 1.0, 1.0, 0.0], [-1.0, -1.0, 0.5, 0.0], [0.0, 0.0, 0.0, 0.0]])
MASK = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]])
W = torch.tensor([2.0, 0.5, 1.5])


@pytest.mark.parametrize(
    "apply_to,expected",
    [
        ("all", [[2.0, 2.0, 1.0, 0.0], [-0.5, -0.5, 0.25, 0.0], [0.0, 0.0, 0.0, 0.0]]),
        ("positive", [[2.0, 2.0, 1.0, 0.0], [-1.0, -1.0, 0.25, 0.0], [0.0, 0.0, 0.0, 0.0]]),
        ("negative", [[1.0, 1.0, 1.0, 0.0], [-0.5, -0.5, 0.5, 0.0], [0.0, 0.0, 0.0, 0.0]]),
    ],
)
def test_apply_weights_respects_mask_and_sign(apply_to, expected):
    adv, mask, w = ADV.clone(), MASK.clone(), W.clone()
    out = apply_weights(adv, mask, w, apply_to)
    assert torch.allclose(out, torch.tensor(expected))
    # masked position [0, 2] keeps its (non-zero) advantage untouched in every mode
    assert out[0, 2].item() == 1.0
    # pure: inputs unchanged
    assert torch.equal(adv, ADV) and torch.equal(mask, MASK) and torch.equal(w, W)
    assert out.data_ptr() != adv.data_ptr()


def test_identical_rewards_keep_zero_advantage():
    # GRPO: a group whose rewards are all equal normalises to zero advantage; no weight may revive it.
    rewards = torch.tensor([[1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
    mean, std = rewards.mean(dim=1, keepdim=True), rewards.std(dim=1, keepdim=True)
    scores = ((rewards - mean) / (std + 1e-6)).reshape(-1)
    adv = scores.unsqueeze(-1).expand(8, 5).clone()
    mask = torch.ones(8, 5)
    weights = torch.tensor([0.5, 2.0, 1.3, 1.7, 2.0, 0.6, 0.9, 1.1])
    for mode in ("all", "positive", "negative"):
        assert torch.count_nonzero(apply_weights(adv, mask, weights, mode)) == 0


def test_apply_weights_bool_mask_and_dtype():
    adv = ADV.to(torch.float64)
    out = apply_weights(adv, MASK.bool(), W, "all")
    assert out.dtype == torch.float64
    assert out[1, 2].item() == pytest.approx(0.25)


@pytest.mark.parametrize(
    "adv,mask,w,match",
    [
        (ADV, MASK[:, :3], W, "response_mask shape"),
        (ADV, MASK, W[:2], "weights must be"),
        (ADV[0], MASK[0], W[:1], r"\[bs, T\]"),
        (ADV, MASK, W.unsqueeze(-1), "weights must be"),
        (ADV, MASK, torch.tensor([1.0, math.nan, 1.0]), "finite"),
    ],
)
def test_apply_weights_shape_errors(adv, mask, w, match):
    with pytest.raises(ValueError, match=match):
        apply_weights(adv, mask, w, "all")


def test_apply_weights_rejects_unknown_mode():
    with pytest.raises(ValueError, match="apply_to"):
        apply_weights(ADV, MASK, W, "some")


# ------------------------------------------------------------------ dynamic rho


def _step_profile():
    recs = [
        TrajectoryRecord("base", [tx.PASS, tx.MISSING_TOOL_CALL], [False, False], 0.0),
        TrajectoryRecord("base", [tx.MISSING_TOOL_CALL, tx.MISSING_TOOL_CALL], [False, False], 1.0),
        TrajectoryRecord("base", [tx.PASS, tx.ARGUMENT_MISMATCH], [False, False], 0.0),
        TrajectoryRecord("base", [tx.PASS, tx.PASS], [False, False], 1.0),
    ]
    return aggregate(recs)


def test_static_rho_is_unchanged():
    cfg = WeightingConfig(dynamic=False).validate()
    rho = dict(cfg.rho)
    out = update_rho(rho, cfg.rho, _step_profile(), cfg)
    assert out == rho and out is not rho


def test_dynamic_rho_matches_hand_computation():
    cfg = WeightingConfig(dynamic=True, alpha=1.0, beta=0.25, n_conf=4).validate()
    base = dict(cfg.rho)
    rho = dict(base, missing_tool_call=1.4)
    out = update_rho(rho, base, _step_profile(), cfg)
    # missing_tool_call: 3 of 8 turns, carried by 2 trajectories with rewards 0 and 1
    target_mt = 1.5 * (1 + 1.0 * (3 / 8) * (1 - 0.5) * min(1, 2 / 4))
    assert out[tx.MISSING_TOOL_CALL] == pytest.approx(0.75 * 1.4 + 0.25 * target_mt)
    # argument_mismatch: 1 of 8 turns, 1 trajectory, reward 0
    target_am = 1.2 * (1 + (1 / 8) * 1.0 * (1 / 4))
    assert out[tx.ARGUMENT_MISMATCH] == pytest.approx(0.75 * 1.2 + 0.25 * target_am)
    # absent label: target = base, so rho relaxes towards base (here equal to it)
    assert out[tx.STATE_MISMATCH] == pytest.approx(1.0)
    # pass is the anchor: never adjusted, even when rho differs from base
    out2 = update_rho(dict(rho, **{tx.PASS: 1.3}), base, _step_profile(), cfg)
    assert out2[tx.PASS] == 1.3


def test_dynamic_rho_target_clipped():
    cfg = WeightingConfig(dynamic=True, alpha=100.0, beta=1.0, n_conf=1, rho_clip=(0.1, 2.5)).validate()
    out = update_rho(dict(cfg.rho), cfg.rho, _step_profile(), cfg)
    assert out[tx.MISSING_TOOL_CALL] == pytest.approx(2.5)
    cfg_low = WeightingConfig(dynamic=True, beta=1.0, rho_clip=(1.1, 5.0)).validate()
    assert update_rho(dict(cfg.rho), cfg.rho, _step_profile(), cfg_low)[tx.RESPONSE_MISMATCH] == pytest.approx(1.1)


def test_dynamic_rho_relaxes_to_base_without_evidence():
    cfg = WeightingConfig(dynamic=True, beta=0.5).validate()
    rho = dict(cfg.rho, spurious_tool_call=3.0)
    out = update_rho(rho, cfg.rho, aggregate([]), cfg)
    assert out[tx.SPURIOUS_TOOL_CALL] == pytest.approx(0.5 * 3.0 + 0.5 * 2.0)
