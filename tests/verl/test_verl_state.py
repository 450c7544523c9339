"""Closed-loop state sharing and persistence.

- the Ray named actor: found from another process and another namespace, survives its creator when
  detached, per-step cache on the reader side;
- kill-and-resume: a process runs SEAL steps and saves the state into verl's ``global_step_N`` folder through
  the SEAL trainer's ``_save_checkpoint``, then dies with its Ray cluster; a new process restores it through
  ``_load_checkpoint``, publishes it to a new actor, and continues exactly where the first one stopped;
- the same two hooks of the legacy trainer wrappers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest
from omegaconf import OmegaConf

import verl  # noqa: F401  (loads the seal plugin)

from seal_verl.verl_glue import legacy, state_actor
from seal_verl.verl_glue.driver import STATE_FILE, SealDriver, SealResumeError

ray = pytest.importorskip("ray")

# A deterministic script of records: step k gets these trajectories (labels, abstention, reward).
STEP_SCRIPT = r"""
def records_for(step):
    from seal_verl.core.profile import TrajectoryRecord
    base = [
        (["missing_tool_call", "pass"], [False, False], 0.0, "multi_turn_base"),
        (["spurious_tool_call", "pass"], [True, False], 0.0, "multi_turn_miss_param"),
        (["argument_mismatch", "state_mismatch"], [False, False], 0.0, "multi_turn_base"),
        (["pass", "pass"], [False, False], 1.0, "multi_turn_long_context"),
    ]
    out = []
    for i, (lab, ab, r, cat) in enumerate(base):
        if (i + step) % 3 == 0:
            lab = ["pass", "pass"]; r = 1.0
        out.append(TrajectoryRecord(category=cat, labels=lab, abstention=ab, reward=r))
    return out
"""

WRITER = STEP_SCRIPT + r"""
import json, os, sys
from unittest import mock
import ray
import verl  # loads the plugin
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf
from verl.trainer.ppo.v1.trainer_base import PPOTrainer
from verl.trainer.ppo.v1 import get_trainer_cls

ckpt_dir, experiment, out_path = sys.argv[1], sys.argv[2], sys.argv[3]
ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
with initialize_config_module(config_module="verl.trainer.config", version_base=None):
    cfg = compose(config_name="ppo_trainer", overrides=[
        "algorithm.adv_estimator=seal_grpo", "trainer.v1.trainer_mode=seal", "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.model.path=dummy", f"trainer.default_local_dir={ckpt_dir}",
        f"trainer.experiment_name={experiment}", "trainer.resume_mode=auto"])
OmegaConf.set_struct(cfg, False)
cfg.seal = {"weighting": {"dynamic": True}, "interface": {"patience": 1}}

def fake_verl_save(self):  # what verl's own _save_checkpoint leaves behind that resume relies on
    folder = os.path.join(self.config.trainer.default_local_dir, f"global_step_{self.global_steps}")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(self.config.trainer.default_local_dir, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write(str(self.global_steps))

def fake_verl_load(self):
    self.global_steps = 0

with mock.patch.object(PPOTrainer, "_save_checkpoint", fake_verl_save), \
        mock.patch.object(PPOTrainer, "_load_checkpoint", fake_verl_load):
    trainer = get_trainer_cls("seal")(cfg)
    trainer._load_checkpoint()            # fresh start: initial state published
    for step in (1, 2, 3):
        trainer.global_steps = step
        trainer.seal.add_records(records_for(step))
        trainer.seal.end_step(step)       # what SealPPOTrainer.step does after verl's step
    trainer._save_checkpoint()            # checkpoint of step 3
    saved = trainer.seal.state.to_dict()
    trainer.global_steps = 4              # the original process goes on for one more step
    trainer.seal.add_records(records_for(4))
    trainer.seal.end_step(4)
    published = state_after_4 = trainer.seal.state.to_dict()
    from seal_verl.verl_glue import state_actor
    published = state_actor.read_state(*state_actor.actor_coordinates(cfg)[:2])["state"]
json.dump({"saved": saved, "step4": state_after_4, "published": published}, open(out_path, "w"))
ray.shutdown()
os._exit(0)   # die without any clean-up beyond Ray's
"""


@pytest.fixture(scope="module")
def ray_cluster():
    if ray.is_initialized():
        pytest.skip("needs its own local Ray instance")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, namespace="seal_test_reader")
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


def _env():
    env = dict(os.environ)
    env.pop("VERL_USE_EXTERNAL_PLUGINS", None)
    env.setdefault("PYTHONWARNINGS", "ignore")
    return env


def _v1_cfg(ckpt_dir, experiment, resume_mode="auto"):
    from hydra import compose, initialize_config_module

    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        cfg = compose(
            config_name="ppo_trainer",
            overrides=[
                "algorithm.adv_estimator=seal_grpo",
                "trainer.v1.trainer_mode=seal",
                "actor_rollout_ref.rollout.name=vllm",
                "actor_rollout_ref.model.path=dummy",
                f"trainer.default_local_dir={ckpt_dir}",
                f"trainer.experiment_name={experiment}",
                f"trainer.resume_mode={resume_mode}",
            ],
        )
    OmegaConf.set_struct(cfg, False)
    cfg.seal = {"weighting": {"dynamic": True}, "interface": {"patience": 1}}
    return cfg


def test_state_actor_across_processes_namespaces_and_detached(ray_cluster, tmp_path):
    name = f"seal_state/test/{uuid.uuid4().hex[:8]}"
    writer = (
        "import sys, ray\n"
        "from seal_verl.verl_glue import state_actor\n"
        "ray.init(address=sys.argv[1], namespace='some_other_job', log_to_driver=False)\n"
        "p = state_actor.StatePublisher(sys.argv[2], namespace='seal_shared', detached=True)\n"
        "p.publish({'format': 1, 'global_step': 7, 'state': {'x': 1}})\n"
        "ray.shutdown()\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", writer, ray_cluster, name], capture_output=True, text=True, env=_env(), timeout=180
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    # the writer is gone; the detached actor lives on and is found from this job's namespace
    client = state_actor.StateClient(name, namespace="seal_shared")
    assert client.get(8)["global_step"] == 7
    assert client.get(8) is client.get(8) and client.fetches == 1  # cached per step
    client.get(9)
    assert client.fetches == 2
    with pytest.raises(state_actor.SealStateError, match="not found"):
        state_actor.StateClient(name).get(1)  # wrong (current) namespace: a clear error, not a hang
    assert state_actor.kill_state_actor(name, namespace="seal_shared")


def test_async_reader(ray_cluster):
    import asyncio

    pub = state_actor.StatePublisher(f"seal_state/test/{uuid.uuid4().hex[:8]}")
    pub.publish({"format": 1, "global_step": 3, "state": {}})
    client = state_actor.StateClient(pub.name)

    async def many():
        return await asyncio.gather(*[client.aget(4) for _ in range(8)])

    results = asyncio.run(many())
    assert all(r["global_step"] == 3 for r in results) and client.fetches == 1


def test_kill_and_resume_restores_the_same_state(ray_cluster, tmp_path):
    from unittest import mock

    from verl.trainer.ppo.v1 import get_trainer_cls
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    ckpt = str(tmp_path / "ckpt")
    experiment = f"resume-{uuid.uuid4().hex[:6]}"
    out = tmp_path / "writer.json"
    proc = subprocess.run(
        [sys.executable, "-c", WRITER, ckpt, experiment, str(out)],
        capture_output=True, text=True, env=_env(), timeout=300, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    first = json.loads(out.read_text())
    assert first["published"] == first["step4"]
    assert os.path.exists(os.path.join(ckpt, "global_step_3", STATE_FILE))

    # new process (this one), new Ray cluster, new actor: resume from the tracker like verl does
    cfg = _v1_cfg(ckpt, experiment)

    def fake_verl_load(self):
        with open(os.path.join(self.config.trainer.default_local_dir, "latest_checkpointed_iteration.txt")) as f:
            self.global_steps = int(f.read())

    with mock.patch.object(PPOTrainer, "_load_checkpoint", fake_verl_load):
        trainer = get_trainer_cls("seal")(cfg)
        trainer._load_checkpoint()
    assert trainer.global_steps == 3
    assert trainer.seal.state.to_dict() == first["saved"]
    assert state_actor.read_state(*state_actor.actor_coordinates(cfg)[:2])["state"] == first["saved"]

    # continuing gives exactly what the first process computed for step 4
    namespace = {}
    exec(STEP_SCRIPT, namespace)
    trainer.global_steps = 4
    trainer.seal.add_records(namespace["records_for"](4))
    trainer.seal.end_step(4)
    assert trainer.seal.state.to_dict() == first["step4"]
    assert state_actor.client_for(cfg).get(5)["state"] == first["step4"]


def test_resume_without_seal_state_is_an_error(tmp_path):
    from unittest import mock

    from verl.trainer.ppo.v1 import get_trainer_cls
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    ckpt = tmp_path / "ckpt"
    (ckpt / "global_step_5").mkdir(parents=True)
    cfg = _v1_cfg(str(ckpt), "noseal")
    cfg.seal.switches = {"env_side": False}

    def fake_verl_load(self):
        self.global_steps = 5

    with mock.patch.object(PPOTrainer, "_load_checkpoint", fake_verl_load):
        trainer = get_trainer_cls("seal")(cfg)
        with pytest.raises(SealResumeError, match="no seal_state.json"):
            trainer._load_checkpoint()


def test_legacy_checkpoint_hooks_save_and_restore(tmp_path):
    from seal_verl.core.profile import TrajectoryRecord

    root = OmegaConf.create(
        {
            "algorithm": {"adv_estimator": "seal_grpo"},
            "trainer": {"use_v1": False, "default_local_dir": str(tmp_path), "resume_mode": "auto",
                        "project_name": "p", "experiment_name": "legacy"},
            "seal": {"switches": {"env_side": False}, "weighting": {"dynamic": True}},
        }
    )

    class FakeLegacyTrainer:  # the attributes RayPPOTrainer's hooks use
        def __init__(self):
            self.config = root
            self.global_steps = 0

    def verl_save(self):
        os.makedirs(os.path.join(tmp_path, f"global_step_{self.global_steps}"), exist_ok=True)

    def verl_load_fresh(self):
        self.global_steps = 0

    t = FakeLegacyTrainer()
    legacy._seal_load_checkpoint(verl_load_fresh, t)
    driver = legacy.driver_for(root, create=False)
    driver.add_records([TrajectoryRecord("multi_turn_base", ["missing_tool_call"], [False], 0.0)])
    driver.end_step(1)
    t.global_steps = 1
    legacy._seal_save_checkpoint(verl_save, t)
    saved = driver.state.to_dict()
    assert os.path.exists(os.path.join(tmp_path, "global_step_1", STATE_FILE))

    def verl_load_resume(self):
        self.global_steps = 1

    t2 = FakeLegacyTrainer()
    legacy._seal_load_checkpoint(verl_load_resume, t2)  # forgets the old driver, restores into a new one
    restored = legacy.driver_for(root, create=False)
    assert restored is not driver
    assert restored.state.to_dict() == saved and restored.global_step == 1
    legacy.forget(root)


def test_state_dir_snapshots(tmp_path):
    from seal_verl.verl_glue.config import parse_seal_config

    cfg = parse_seal_config({"state_dir": str(tmp_path / "states"), "switches": {"env_side": False}})
    d = SealDriver(cfg)
    d.end_step(1)
    d.end_step(2)
    env = json.loads((tmp_path / "states" / "step_2.json").read_text())
    assert env["global_step"] == 2 and env["state"]["step"] == 2


def test_v1_step_runs_the_closed_loop_after_verls_step(tmp_path):
    """SealPPOTrainer.step = verl's step, then closed_loop_step with the step's records and seal/ metrics."""
    from unittest import mock

    from verl.trainer.ppo.v1 import get_trainer_cls
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    from seal_verl.core.profile import TrajectoryRecord

    cfg = _v1_cfg(str(tmp_path), "steptest")
    trainer = get_trainer_cls("seal")(cfg)
    trainer.global_steps = 1
    sentinel = object()

    def verl_step(self, metrics, timing_raw):  # stands in for rollout + advantage + update
        self.seal.add_records([TrajectoryRecord("multi_turn_base", ["missing_tool_call", "pass"], [False, False], 0.0)])
        metrics["actor/pg_loss"] = 0.0
        return sentinel

    metrics = {}
    with mock.patch.object(PPOTrainer, "step", verl_step):
        assert trainer.step(metrics, {}) is sentinel
    assert trainer.seal.state.step == 1 and trainer.seal.global_step == 1
    assert metrics["seal/prevalence/missing_tool_call"] == pytest.approx(0.5)
    assert "actor/pg_loss" in metrics and "seal/rho/pass" in metrics
