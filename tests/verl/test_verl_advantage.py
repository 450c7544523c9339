"""SEAL's weighted GRPO advantage through verl's real code paths.

- legacy trainer: ``verl.trainer.ppo.ray_trainer.compute_advantage`` (the plugin's wrapper around verl's own
  function) on a real ``DataProto``, and ``compute_data_metrics`` picking up the ``seal/...`` metrics;
- V1 trainer: ``SealPPOTrainer._compute_advantage`` against verl's real TransferQueue store, which then runs
  verl's own ``PPOTrainer._compute_advantage``.
"""

from __future__ import annotations

import json
import uuid

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

import verl  # noqa: F401  (loads the seal plugin through the verl.plugins entry point)
from verl import DataProto
from verl.trainer.ppo import core_algos, ray_trainer

from seal_verl.core import taxonomy as tx
from seal_verl.core.profile import trajectory_profile
from seal_verl.verl_glue import legacy
from seal_verl.verl_glue.advantage import SealWiringError, seal_grpo_advantage
from seal_verl.verl_glue.config import SealConfigError
from seal_verl.core.weighting import trajectory_weight

T = 6  # response length

# Labels per rollout: two groups of four. Group "a" has mixed rewards and different failure profiles; group
# "b" has identical rewards (all fail), so GRPO gives zero advantages there whatever the weights.
ROLLOUTS = [
    # (group, reward, labels, abstention)
    ("a", 1.0, ["pass", "pass", "pass"], [False, False, False]),
    ("a", 0.0, ["missing_tool_call", "pass", "pass"], [False, False, False]),
    ("a", 0.0, ["spurious_tool_call", "pass", "state_mismatch"], [True, False, False]),
    ("a", 1.0, ["pass", "pass", "pass"], [True, False, False]),
    ("b", 0.0, ["invalid_tool_call", "argument_mismatch", "pass"], [False, False, False]),
    ("b", 0.0, ["response_mismatch", "pass", "pass"], [False, False, False]),
    ("b", 0.0, ["recovery_failure", "recovery_failure", "pass"], [False, False, False]),
    ("b", 0.0, ["state_mismatch", "state_mismatch", "state_mismatch"], [False, False, False]),
]
RESP_LEN = [6, 4, 5, 3, 6, 2, 6, 5]


def _extras(reward, labels, abstention, category="multi_turn_base"):
    p = trajectory_profile(labels, abstention)
    out = {
        "score": float(reward),
        "acc": float(reward),
        "seal_labels": json.dumps(labels),
        "seal_abstention": json.dumps(abstention),
        "seal_category": category,
    }
    out.update({f"seal_p_{k}": float(v) for k, v in p.items()})
    return out


def _root_config(adv="seal_grpo", seal=None, **trainer):
    seal = {"switches": {"env_side": True, "reweighting": adv == "seal_grpo", "closed_loop": True},
            "weighting": {"w_min": 0.5, "w_max": 2.0}} if seal is None else seal
    cfg = {
        "algorithm": {"adv_estimator": adv, "norm_adv_by_std_in_grpo": True, "gamma": 1.0, "lam": 1.0},
        "trainer": {"use_v1": False, "project_name": "p", "experiment_name": f"e{uuid.uuid4().hex[:6]}",
                    "default_local_dir": "ckpt", "resume_mode": "disable", **trainer},
        "seal": seal,
    }
    return OmegaConf.create(cfg)


def _data_proto(with_extras=True):
    bs = len(ROLLOUTS)
    mask = torch.zeros(bs, T, dtype=torch.int64)
    rewards = torch.zeros(bs, T)
    for i, (_, r, _, _) in enumerate(ROLLOUTS):
        mask[i, : RESP_LEN[i]] = 1
        rewards[i, RESP_LEN[i] - 1] = r
    prompts = torch.ones(bs, 3, dtype=torch.int64)
    attention = torch.cat([torch.ones(bs, 3, dtype=torch.int64), mask], dim=1)
    uid_of = {"a": str(uuid.uuid4()), "b": str(uuid.uuid4())}
    non_tensor = {"uid": np.array([uid_of[g] for g, *_ in ROLLOUTS], dtype=object)}
    if with_extras:
        rows = [_extras(r, lab, ab) for _, r, lab, ab in ROLLOUTS]
        for key in rows[0]:
            non_tensor[key] = np.array([row[key] for row in rows])
    batch = {
        "prompts": prompts,
        "responses": torch.ones(bs, T, dtype=torch.int64),
        "attention_mask": attention,
        "response_mask": mask,
        "token_level_scores": rewards.clone(),
        "token_level_rewards": rewards,
    }
    return DataProto.from_dict(tensors=batch, non_tensors=non_tensor)


def _expected(data, weights):
    adv, _ = core_algos.compute_grpo_outcome_advantage(
        token_level_rewards=data.batch["token_level_rewards"],
        response_mask=data.batch["response_mask"],
        index=data.non_tensor_batch["uid"],
    )
    return adv * weights.unsqueeze(-1)


def _weights(rho=None):
    rho = tx.check_rho(rho or {})
    return torch.tensor(
        [trajectory_weight(trajectory_profile(lab, ab), rho, 0.5, 2.0) for _, _, lab, ab in ROLLOUTS]
    )


def test_plugin_wrapped_legacy_hooks():
    assert legacy.installed()
    assert getattr(core_algos.get_adv_estimator_fn("seal_grpo"), "__seal_estimator__", False)


def test_legacy_compute_advantage_weights_grpo_advantages():
    root = _root_config()
    data = _data_proto()
    weights = _weights()
    assert not torch.allclose(weights, torch.ones_like(weights)), "the labels must give weights other than 1"

    out = ray_trainer.compute_advantage(
        data, adv_estimator="seal_grpo", num_repeat=4, norm_adv_by_std_in_grpo=True, config=root.algorithm
    )
    adv = out.batch["advantages"]
    torch.testing.assert_close(adv, _expected(data, weights))
    torch.testing.assert_close(out.batch["returns"], adv)
    # group "a": informative, the weights changed the advantages
    plain = _expected(data, torch.ones(len(ROLLOUTS)))
    assert not torch.allclose(adv[:4], plain[:4])
    # group "b": identical rewards -> zero advantage, still exactly zero after weighting
    assert torch.count_nonzero(adv[4:]) == 0
    assert torch.count_nonzero(adv * (1 - data.batch["response_mask"])) == 0

    # closed loop ran once on the driver, metrics are handed to verl's compute_data_metrics
    driver = legacy.driver_for(root, create=False)
    assert driver.global_step == 1 and driver.state.step == 1
    metrics = ray_trainer.compute_data_metrics(batch=out, use_critic=False)
    assert "critic/advantages/mean" in metrics
    for key in ("seal/weight/mean", "seal/weight/std", "seal/prevalence/missing_tool_call", "seal/rho/pass",
                "seal/success_rate"):
        assert key in metrics, key
    assert metrics["seal/weight/mean"] == pytest.approx(float(weights.mean()), abs=1e-6)
    assert metrics["seal/n_trajectories"] == len(ROLLOUTS)
    assert any(k.startswith("seal/cue_active/") for k in metrics)
    assert legacy.METRICS_KEY not in out.meta_info  # consumed
    legacy.forget(root)


def test_legacy_second_step_uses_updated_state_and_warmup():
    root = _root_config(seal={"switches": {"env_side": False}, "weighting": {"warmup_steps": 1, "dynamic": True}})
    data = _data_proto()
    out = ray_trainer.compute_advantage(data, adv_estimator="seal_grpo", config=root.algorithm)
    # step 0 is inside the warm-up: plain GRPO
    torch.testing.assert_close(out.batch["advantages"], _expected(data, torch.ones(len(ROLLOUTS))))
    assert out.meta_info[legacy.METRICS_KEY]["seal/weight/warmup"] == 1.0
    driver = legacy.driver_for(root, create=False)
    rho_after_1 = dict(driver.state.rho)
    data2 = _data_proto()
    out2 = ray_trainer.compute_advantage(data2, adv_estimator="seal_grpo", config=root.algorithm)
    torch.testing.assert_close(out2.batch["advantages"], _expected(data2, _weights(rho_after_1)))
    assert driver.global_step == 2
    legacy.forget(root)


def test_legacy_grpo_without_seal_section_is_untouched():
    root = OmegaConf.create({"algorithm": {"adv_estimator": "grpo"}, "trainer": {"use_v1": False}})
    data = _data_proto(with_extras=False)
    out = ray_trainer.compute_advantage(data, adv_estimator="grpo", config=root.algorithm)
    torch.testing.assert_close(out.batch["advantages"], _expected(data, torch.ones(len(ROLLOUTS))))
    assert legacy.METRICS_KEY not in out.meta_info


def test_legacy_no_reweighting_ablation_keeps_grpo_and_runs_loop():
    root = _root_config(adv="grpo", seal={"switches": {"env_side": False, "reweighting": False}})
    data = _data_proto()
    out = ray_trainer.compute_advantage(data, adv_estimator="grpo", config=root.algorithm)
    torch.testing.assert_close(out.batch["advantages"], _expected(data, torch.ones(len(ROLLOUTS))))
    assert out.meta_info[legacy.METRICS_KEY]["seal/weight/mean"] == 1.0
    assert legacy.driver_for(root, create=False).state.step == 1
    legacy.forget(root)


def test_missing_extras_is_a_clear_error():
    root = _root_config()
    with pytest.raises(SealWiringError, match="seal_p_invalid_tool_call"):
        ray_trainer.compute_advantage(_data_proto(with_extras=False), adv_estimator="seal_grpo", config=root.algorithm)
    legacy.forget(root)


def test_estimator_without_labels_is_a_clear_error():
    data = _data_proto()
    # called by verl without the SEAL trainer side (e.g. V1 with trainer_mode=sync): no weight plan
    with pytest.raises(SealWiringError, match="trainer.v1.trainer_mode=seal"):
        core_algos.get_adv_estimator_fn("seal_grpo")(
            token_level_rewards=data.batch["token_level_rewards"],
            response_mask=data.batch["response_mask"],
            index=data.non_tensor_batch["uid"],
            config=None,
        )
    # legacy compute_advantage with a config that is not part of a trainer config
    from verl.trainer.config import AlgoConfig

    with pytest.raises(SealWiringError):
        ray_trainer.compute_advantage(data, adv_estimator="seal_grpo", config=AlgoConfig(adv_estimator="seal_grpo"))
    assert seal_grpo_advantage.__seal_estimator__


def test_inconsistent_seal_config_is_rejected():
    root = _root_config(adv="seal_grpo", seal={"switches": {"reweighting": False}})
    with pytest.raises(SealConfigError, match="reweighting=false"):
        ray_trainer.compute_advantage(_data_proto(), adv_estimator="seal_grpo", config=root.algorithm)
    legacy.forget(root)
    root = _root_config(adv="grpo", seal={"switches": {"reweighting": True}})
    with pytest.raises(SealConfigError, match="adv_estimator=seal_grpo"):
        ray_trainer.compute_advantage(_data_proto(), adv_estimator="grpo", config=root.algorithm)
    legacy.forget(root)


# ------------------------------------------------------------------------------------------- V1 + TQ


@pytest.fixture(scope="module")
def tq_store():
    ray = pytest.importorskip("ray")
    tq = pytest.importorskip("transfer_queue")
    started = False
    if not ray.is_initialized():
        ray.init(num_cpus=16, include_dashboard=False, log_to_driver=False, namespace="seal_test_v1")
        started = True
    cfg = OmegaConf.load(
        __import__("os").path.join(
            __import__("os").path.dirname(verl.__file__), "trainer", "config", "transfer_queue", "transfer_queue.yaml"
        )
    )
    cfg.backend.SimpleStorage.num_data_storage_units = 1
    cfg.backend.SimpleStorage.total_storage_size = 1000
    tq.init(cfg)
    try:
        yield tq
    finally:
        tq.close()
        if started:
            ray.shutdown()


def _v1_config(adv="seal_grpo", mode="seal", seal=None, extra=()):
    from hydra import compose, initialize_config_module

    overrides = [*extra,
        f"algorithm.adv_estimator={adv}",
        f"trainer.v1.trainer_mode={mode}",
        "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.model.path=dummy-model",
        f"trainer.experiment_name=v1test-{uuid.uuid4().hex[:6]}",
        "trainer.resume_mode=disable",
    ]
    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=overrides)
    OmegaConf.set_struct(cfg, False)
    cfg.seal = seal if seal is not None else {"switches": {"reweighting": adv == "seal_grpo"}}
    return cfg


def _put_batch(tq, with_extras=True, drop_row=None, padding=0, second_output_of_row=None, state_steps=None):
    """Rollouts of ROLLOUTS as verl's agent-loop workers store them (key {uid}_{session}_{index}), plus
    ``padding`` synthetic rows as verl's upsample_batch_to_divisible_size adds them (copies of row 0, zero
    response mask, tag is_padding). ``state_steps``: per rollout, the global step of the closed-loop state the
    agent loop says it ran under (its ``seal_state_step`` field)."""
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    uid_of = {"a": str(uuid.uuid4()), "b": str(uuid.uuid4())}
    keys, fields, tags = [], [], []
    session = {"a": 0, "b": 0}
    for i, (g, r, lab, ab) in enumerate(ROLLOUTS):
        n = RESP_LEN[i]
        rm = torch.zeros(n)
        rm[-1] = r
        extra = {"reward_extra_info": _extras(r, lab, ab)} if with_extras and i != drop_row else {"other": 1}
        if state_steps is not None:
            extra["seal_state_step"] = int(state_steps[i])
        index = 1 if i == second_output_of_row else 0
        if index:
            session[g] -= 1  # same session as the previous row: a second output of one rollout
        keys.append(f"{uid_of[g]}_{session[g]}_{index}")
        session[g] += 1
        fields.append(
            {
                "uid": uid_of[g],
                "prompts": torch.ones(3, dtype=torch.int64),
                "responses": torch.ones(n, dtype=torch.int64),
                "response_mask": torch.ones(n, dtype=torch.int64),
                "rm_scores": rm,
                "old_log_probs": torch.zeros(n),
                "extra_fields": extra,
            }
        )
        tags.append({"status": "success", "seq_len": 3 + n, "global_steps": 1})
    pad_uid = f"pad{uuid.uuid4().hex}"
    for j in range(padding):
        pad = dict(fields[0], uid=pad_uid, responses=torch.ones(1, dtype=torch.int64),
                   response_mask=torch.zeros(1, dtype=torch.int64), rm_scores=torch.zeros(1),
                   old_log_probs=torch.zeros(1))
        keys.append(f"{pad_uid}_{j}_0")
        fields.append(pad)
        tags.append({"status": "success", "seq_len": 4, "global_steps": 1, "is_padding": True})
    meta = tq.kv_batch_put(keys=keys, partition_id="train", fields=list_of_dict_to_tensordict(fields), tags=tags)
    return meta


def _v1_trainer(cfg):
    from verl.trainer.ppo.v1 import get_trainer_cls

    cls = get_trainer_cls(cfg.trainer.v1.trainer_mode)
    trainer = cls(cfg)
    trainer.global_steps = 1
    return trainer


def test_v1_seal_trainer_weights_advantages_in_transfer_queue(tq_store):
    tq = tq_store
    cfg = _v1_config()
    trainer = _v1_trainer(cfg)
    assert trainer.trainer_mode == "sync"  # verl's sync code paths, not the async ones
    meta = _put_batch(tq)
    metrics = {}
    out_meta = trainer._compute_advantage(meta, metrics=metrics)
    got = tq.kv_batch_get(keys=out_meta.keys, partition_id="train", select_fields=["advantages"])
    adv = got["advantages"].to_padded_tensor(padding=0.0)

    data = _data_proto()
    expected = _expected(data, _weights())[:, : adv.shape[1]]
    torch.testing.assert_close(adv, expected)
    assert torch.count_nonzero(adv[4:]) == 0
    assert metrics["seal/weight/mean"] == pytest.approx(float(_weights().mean()), abs=1e-6)

    # closed loop at the end of the step, published to the state actor the rollout workers read
    step_metrics = trainer.seal.end_step(1)
    assert step_metrics["seal/n_trajectories"] == len(ROLLOUTS)
    from seal_verl.verl_glue import state_actor

    client = state_actor.client_for(cfg)
    payload = client.get(2)
    assert payload["global_step"] == 1 and payload["state"]["step"] == 1
    assert payload["state"] == trainer.seal.state.to_dict()
    tq.kv_clear(keys=out_meta.keys, partition_id="train")


def test_v1_padding_rows_are_neutral_and_not_profiled(tq_store):
    tq = tq_store
    trainer = _v1_trainer(_v1_config())
    meta = _put_batch(tq, padding=2)
    metrics = {}
    out_meta = trainer._compute_advantage(meta, metrics=metrics)
    got = tq.kv_batch_get(keys=out_meta.keys, partition_id="train", select_fields=["advantages"])
    adv = got["advantages"].to_padded_tensor(padding=0.0)
    torch.testing.assert_close(adv[: len(ROLLOUTS)], _expected(_data_proto(), _weights())[:, : adv.shape[1]])
    assert torch.count_nonzero(adv[len(ROLLOUTS):]) == 0
    # weight statistics and C_t come from the real rollouts only
    assert metrics["seal/weight/mean"] == pytest.approx(float(_weights().mean()), abs=1e-6)
    assert trainer.seal.end_step(1)["seal/n_trajectories"] == len(ROLLOUTS)
    tq.kv_clear(keys=out_meta.keys, partition_id="train")


def test_v1_several_outputs_per_rollout_are_refused(tq_store):
    tq = tq_store
    trainer = _v1_trainer(_v1_config())
    meta = _put_batch(tq, second_output_of_row=1)
    with pytest.raises(SealWiringError, match="one agent-loop output per rollout"):
        trainer._compute_advantage(meta, metrics={})
    tq.kv_clear(keys=meta.keys, partition_id="train")


def test_v1_missing_extras_is_a_clear_error(tq_store):
    tq = tq_store
    trainer = _v1_trainer(_v1_config())
    meta = _put_batch(tq, drop_row=2)
    with pytest.raises(SealWiringError, match="reward extras"):
        trainer._compute_advantage(meta, metrics={})
    tq.kv_clear(keys=meta.keys, partition_id="train")


def test_v1_seal_grpo_with_stock_trainer_fails_at_first_step(tq_store):
    """adv_estimator=seal_grpo with verl's own sync trainer: no labels reach the estimator -> error."""
    from verl.trainer.ppo.v1 import get_trainer_cls

    tq = tq_store
    cfg = _v1_config(mode="sync")
    trainer = get_trainer_cls("sync")(cfg)
    trainer.global_steps = 1
    meta = _put_batch(tq)
    with pytest.raises(SealWiringError, match="trainer_mode=seal"):
        trainer._compute_advantage(meta, metrics={})
    tq.kv_clear(keys=meta.keys, partition_id="train")
    # and the start-up check that the recipes and the SEAL trainer run says the same
    from seal_verl.verl_glue.config import check_run_config

    with pytest.raises(SealConfigError, match="trainer_mode"):
        check_run_config(cfg)


def test_cue_metrics_from_reward_extras():
    from seal_verl.verl_glue.advantage import cue_metrics

    m = cue_metrics([10.0, None, 30.0, 0.0])  # per rollout (None: a padding row)
    assert m == {"seal/cue_tokens/mean": pytest.approx(40.0 / 3), "seal/cue_tokens/max": 30.0}
    assert cue_metrics([None]) == {}


def test_v1_rows_reordered_within_a_group_are_refused(tq_store, monkeypatch):
    """The extras are read in one key order and verl fetches the advantage inputs in another: two rollouts of
    the same prompt swap places. Their group ids still match, so only a row-identity check can notice."""
    tq = tq_store
    trainer = _v1_trainer(_v1_config())
    meta = _put_batch(tq)
    real = tq.kv_batch_get

    def reordered(keys, partition_id, select_fields=None, **kwargs):
        if select_fields and "extra_fields" in select_fields:
            keys = list(keys)
            keys[0], keys[1] = keys[1], keys[0]  # rows 0 and 1: group "a", different lengths and weights
        return real(keys=keys, partition_id=partition_id, select_fields=select_fields, **kwargs)

    monkeypatch.setattr(tq, "kv_batch_get", reordered)
    try:
        with pytest.raises(SealWiringError, match="within a group"):
            trainer._compute_advantage(meta, metrics={})
    finally:
        monkeypatch.undo()
        tq.kv_clear(keys=meta.keys, partition_id="train")


def test_weight_plan_row_identities():
    from seal_verl.verl_glue.advantage import WeightPlan, row_identities

    uids = np.array(["g", "g"], dtype=object)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    plan = WeightPlan(uids=uids, weights=torch.tensor([1.0, 2.0]), rows=row_identities(uids, mask))
    plan.check_alignment(uids, mask)
    with pytest.raises(SealWiringError, match="within a group"):
        plan.check_alignment(uids, mask.flip(0))


# ------------------------------------------------------------------------------------------- one checker-error rule


def _with_checker_error(data, row: int):
    """``data`` with rollout ``row`` marked as one whose verification raised (reward 0, as the reward writes it)."""
    data.non_tensor_batch["seal_checker_error"] = np.array([float(i == row) for i in range(len(data))])
    data.batch["token_level_rewards"][row] = 0.0
    data.batch["token_level_scores"][row] = 0.0
    return data


@pytest.mark.parametrize("adv", ["grpo", "seal_grpo"])
def test_a_checker_error_leaves_its_group_under_every_estimator(adv):
    """DESIGN 2.7: a rollout whose verification raised leaves the policy loss, and with it its group's GRPO
    statistics, under plain ``grpo`` (the ``grpo`` and ``no_reweighting`` variants) exactly as under ``seal_grpo``:
    the other members are normalised among themselves, the row's advantage and mask are 0."""
    row = 1  # group "a": rewards 1, [checker error], 0, 1
    rho_one = {k: 1.0 for k in tx.PROFILE_KEYS}  # w = 1 for every rollout: seal_grpo's weights change nothing
    seal = {"switches": {"env_side": True, "reweighting": adv == "seal_grpo", "closed_loop": True},
            "weighting": {"rho": rho_one}}
    root = _root_config(adv=adv, seal=seal)
    data = _with_checker_error(_data_proto(), row)
    keep = [i for i in range(len(ROLLOUTS)) if i != row]
    alone, _ = core_algos.compute_grpo_outcome_advantage(
        token_level_rewards=data.batch["token_level_rewards"][keep], response_mask=data.batch["response_mask"][keep],
        index=data.non_tensor_batch["uid"][keep])
    out = ray_trainer.compute_advantage(data, adv_estimator=adv, config=root.algorithm)
    adv_out = out.batch["advantages"]
    torch.testing.assert_close(adv_out[keep], alone)
    assert torch.count_nonzero(adv_out[row]) == 0 and torch.count_nonzero(out.batch["response_mask"][row]) == 0
    assert out.meta_info[legacy.METRICS_KEY]["seal/excluded/checker_error"] == 1.0
    legacy.forget(root)


def test_grpo_outside_a_seal_step_is_verls_own():
    """The rule acts only inside SEAL's step: verl's grpo called on its own is unchanged (and the wrapper is
    the function verl's advantage step calls)."""
    data = _data_proto()
    fn = core_algos.compute_grpo_outcome_advantage
    assert getattr(fn, "__seal_original__", None) is not None
    got, _ = fn(token_level_rewards=data.batch["token_level_rewards"], response_mask=data.batch["response_mask"],
                index=data.non_tensor_batch["uid"])
    torch.testing.assert_close(got, _expected(data, torch.ones(len(ROLLOUTS))))


def test_v1_trainer_keeps_no_rollout_of_a_step(tq_store, tmp_path):
    """The step's rollouts go to the driver (until it closes the step) and from there, with the batch, to the run
    folder: after the advantage step no attribute of the trainer holds one."""
    tq = tq_store
    cfg = _v1_config(seal={"switches": {"reweighting": True}, "run_dir": str(tmp_path / "run")})
    trainer = _v1_trainer(cfg)
    meta = _put_batch(tq)
    out_meta = trainer._compute_advantage(meta, metrics={})

    def held(value, depth=0):
        if type(value).__module__ in ("seal_verl.verl_glue.step", "seal_verl.core.step_record"):
            return True
        if depth < 2 and isinstance(value, dict):
            return any(held(v, depth + 1) for v in value.values())
        if depth < 2 and isinstance(value, (list, tuple)):
            return any(held(v, depth + 1) for v in value)
        return False

    assert [k for k, v in vars(trainer).items() if k != "seal" and held(v)] == []
    _, record = trainer.seal.close_step(1)
    assert len(record.trained) == len(ROLLOUTS) and record.step == 1
    # read once for the run folder too (token counts); timers and log-prob agreement need fields this batch does
    # not have (no agent-loop metrics, no rollout or reference log-probs)
    for i, t in enumerate(record.trained):
        assert t.rollout.tokens == {"prompt": 3, "response": RESP_LEN[i], "llm": RESP_LEN[i]}
        assert t.rollout.timing is None and t.rollout.sync is None
    tq.kv_clear(keys=out_meta.keys, partition_id="train")


def test_a_stale_rollout_is_weighted_with_the_rho_it_was_generated_under():
    """A rollout generated under the state of an earlier step (an asynchronous trainer's) takes that step's rho;
    one of a state the driver no longer keeps is an error, never the current rho; a rollout reaches the closed
    loop once."""
    from seal_verl.core.profile import TrajectoryRecord
    from seal_verl.core.step_record import Rollout, Trained, Update
    from seal_verl.core.extras import decode
    from seal_verl.verl_glue.config import parse_seal_config
    from seal_verl.verl_glue.driver import RHO_HISTORY, SealDriver

    drv = SealDriver(parse_seal_config({"switches": {"env_side": False}, "weighting": {"dynamic": True}}))
    failing = [TrajectoryRecord("multi_turn_base", ["missing_tool_call"] * 3, [False] * 3, 0.0)] * 8
    rhos = [dict(drv.state.rho)]
    for k in (1, 2):
        drv.add_records(failing)
        drv.end_step(k)
        rhos.append(dict(drv.state.rho))
    assert rhos[0]["missing_tool_call"] != rhos[2]["missing_tool_call"]
    profile = trajectory_profile(["missing_tool_call", "pass"], [False, False])
    w = drv.weights([profile] * 3, 2, [0, 2, None])
    assert float(w[0]) == pytest.approx(trajectory_weight(profile, rhos[0], 0.5, 2.0))
    assert float(w[1]) == float(w[2]) == pytest.approx(trajectory_weight(profile, rhos[2], 0.5, 2.0))
    assert float(w[0]) != float(w[1])
    for k in range(3, 3 + RHO_HISTORY):
        drv.end_step(k)
    with pytest.raises(SealWiringError, match="step 0"):
        drv.weights([profile], 2, [0])
    grade = decode(_extras(0.0, ["missing_tool_call", "pass"], [False, False]))
    one = Trained(Rollout(index=0, key="k0", uid="u", grade=grade, task_id="t"),
                  Update(w=1.0, grpo_advantage=0.0, advantage=0.0, advantage_range=None, excluded=False))
    drv.add_trained([one])
    with pytest.raises(SealWiringError, match="twice"):
        drv.add_trained([one])


# ------------------------------------------------------------------------------------------- verl's async modes

def _failing_steps(driver, steps):
    """Close ``steps`` steps of the driver on failing rollouts, so that dynamic rho moves; returns rho per step
    (index 0: the initial state)."""
    from seal_verl.core.profile import TrajectoryRecord

    failing = [TrajectoryRecord("multi_turn_base", ["missing_tool_call", "spurious_tool_call", "state_mismatch"],
                                [False, True, False], 0.0)] * 8
    rhos = [dict(driver.state.rho)]
    for k in range(1, steps + 1):
        driver.add_records(failing)
        driver.end_step(k)
        rhos.append(dict(driver.state.rho))
    return rhos


@pytest.mark.parametrize("mode, base", [("seal_colocate_async", "colocate_async"),
                                        ("seal_separate_async", "separate_async")])
def test_async_seal_trainers_extend_verls_async_trainers(mode, base):
    """The registered SEAL modes are verl's async trainers underneath: verl's code sees the base mode (async replay
    buffer, TransferQueue checkpointing, parameter_sync_step), and the driver keeps the rho of as many steps as
    verl's staleness bound lets a rollout lag behind."""
    from verl.trainer.ppo.v1 import get_trainer_cls
    from verl.trainer.ppo.v1.replay_buffer import ReplayBufferAsync

    from seal_verl.verl_glue.trainer import SealTrainerMixin

    extra = ["trainer.v1.sampler.max_off_policy_threshold=12"]
    if base == "separate_async":  # what verl's separate_async asks before any worker starts
        extra += ["data.train_batch_size=32", "actor_rollout_ref.actor.ppo_mini_batch_size=16",
                  "trainer.v1.separate_async.parameter_sync_step=2", "actor_rollout_ref.rollout.nnodes=1",
                  "actor_rollout_ref.rollout.checkpoint_engine.backend=nccl"]
    cfg = _v1_config(mode=mode, extra=extra)
    cls = get_trainer_cls(mode)
    verl_cls = get_trainer_cls(base)
    assert issubclass(cls, SealTrainerMixin) and issubclass(cls, verl_cls)
    trainer = cls(cfg)
    assert trainer.trainer_mode == base and isinstance(trainer.replay_buffer, ReplayBufferAsync)
    assert trainer.parameter_sync_step == (2 if base == "separate_async" else 1)
    assert trainer.seal.history == 13  # the bound, and the current state


def test_async_seal_mode_needs_a_staleness_bound():
    from verl.trainer.ppo.v1 import get_trainer_cls

    cfg = _v1_config(mode="seal_colocate_async", extra=["trainer.v1.sampler.max_off_policy_threshold=null"])
    with pytest.raises(SealConfigError, match="max_off_policy_threshold"):
        get_trainer_cls("seal_colocate_async")(cfg)


def test_a_stale_rollout_is_weighted_from_its_own_state_in_the_async_trainer(tq_store, tmp_path):
    """Through ``seal_colocate_async``'s real advantage step on verl's TransferQueue: a group generated under the
    state of step 0 and trained at step 3 gets the weights of step 0's rho (its advantages in TransferQueue are
    w(rho_0) x GRPO, not w(rho_2) x GRPO), a group of the current state those of rho_2; the closed loop counts each
    once, in step 3; the run folder records each rollout's state and ``seal-verl check`` recomputes its weight from
    that state (and fails when the row claims the current one)."""
    from seal_verl.runs import check as CHECK
    from seal_verl.runs.rows import step_row, trace_row

    tq = tq_store
    seal = {"switches": {"reweighting": True, "env_side": False}, "weighting": {"dynamic": True},
            "run_dir": str(tmp_path / "run")}
    trainer = _v1_trainer(_v1_config(mode="seal_colocate_async", seal=seal))
    rhos = _failing_steps(trainer.seal, 2)
    trainer.global_steps = 3
    stale = [0 if g == "a" else 2 for g, *_ in ROLLOUTS]
    w0 = torch.tensor([trajectory_weight(trajectory_profile(lab, ab), rhos[0], 0.5, 2.0) for _, _, lab, ab in ROLLOUTS])
    w2 = torch.tensor([trajectory_weight(trajectory_profile(lab, ab), rhos[2], 0.5, 2.0) for _, _, lab, ab in ROLLOUTS])
    a_rows = [i for i, s in enumerate(stale) if s == 0]
    assert any(abs(float(w0[i] - w2[i])) > 1e-3 for i in a_rows), "the test needs rho to have moved"
    meta = _put_batch(tq, state_steps=stale)
    out_meta = trainer._compute_advantage(meta, metrics={})
    got = tq.kv_batch_get(keys=out_meta.keys, partition_id="train", select_fields=["advantages"])
    adv = list(got["advantages"].unbind())
    own = torch.where(torch.tensor(stale) == 0, w0, w2)
    data = _data_proto()
    grpo, _ = core_algos.compute_grpo_outcome_advantage(token_level_rewards=data.batch["token_level_rewards"],
                                                        response_mask=data.batch["response_mask"],
                                                        index=data.non_tensor_batch["uid"])
    moved = 0
    for i in range(len(ROLLOUTS)):
        a = adv[i][: RESP_LEN[i]]
        torch.testing.assert_close(a, grpo[i, : RESP_LEN[i]] * own[i])
        if abs(float(grpo[i, 0])) > 1e-6 and abs(float(w0[i] - w2[i])) > 1e-3:
            moved += 1
            assert not torch.allclose(a, grpo[i, : RESP_LEN[i]] * w2[i])  # not the current state's weight
    assert moved > 0
    tq.kv_clear(keys=out_meta.keys, partition_id="train")

    closed, record = trainer.seal.close_step(3)
    assert [t.rollout.state_step for t in record.trained] == stale
    assert [t.update.w for t in record.trained] == pytest.approx(own.tolist())
    assert closed["seal/n_trajectories"] == len(ROLLOUTS)  # each rollout once, in the step that trained it
    folder = trainer.seal.run_folder
    rows = [trace_row(3, t) for t in record.trained]
    assert [r["state_step"] for r in rows] == stale
    folder.write_traces(3, rows)
    folder.append_metrics(step_row(record, seconds=1.0, metrics=closed))
    folder.write_config({"seal": trainer.seal.cfg.to_dict()})

    def weights_check():
        rep = CHECK.Report()
        CHECK.check_weights(CHECK.Run(folder.path), rep, None)
        return rep

    assert weights_check().ok, weights_check().text()
    for r in rows:
        r["state_step"] = 2  # the row claims the current state: its weight no longer matches its labels
    folder.write_traces(3, rows)
    rep = weights_check()
    assert not rep.ok and "recomputed" in rep.text(), rep.text()


def test_the_rho_history_survives_a_resume(tmp_path):
    """verl's async checkpoint keeps finished rollouts of earlier states (restored from TransferQueue's checkpoint)
    and trains them after the resume: the driver saves the rho of the steps it keeps and reads them back."""
    from seal_verl.verl_glue.config import parse_seal_config
    from seal_verl.verl_glue.driver import SealDriver, SealResumeError

    cfg = parse_seal_config({"switches": {"env_side": False}, "weighting": {"dynamic": True}})
    drv = SealDriver(cfg, history=10)
    rhos = _failing_steps(drv, 3)
    drv.save_to(str(tmp_path))
    back = SealDriver(cfg, history=10)
    back.load_from(str(tmp_path), expected_step=3)
    profile = trajectory_profile(["missing_tool_call", "pass"], [False, False])
    for s in range(4):
        assert float(back.weights([profile], 3, [s])[0]) == pytest.approx(trajectory_weight(profile, rhos[s], 0.5, 2.0))
    env = json.loads((tmp_path / "seal_state.json").read_text())
    env["rho_history"] = {"7": rhos[0]}  # a step after the checkpoint's
    (tmp_path / "seal_state.json").write_text(json.dumps(env))
    with pytest.raises(SealResumeError, match="rho_history"):
        SealDriver(cfg).load_from(str(tmp_path), expected_step=3)
