"""``provenance.json``: every run folder says what produced it, on every path that writes one, and ``seal-verl
check`` / ``seal-verl report`` show it.

- the format: a record missing any field (or a field's required part) fails the check, naming the field;
- the collector: from a verl config with a local model folder and data files, the model's and data's hashes are
  the files' own, the seeds and overrides are the config's and the command's, the commit is this checkout's;
- the paths: the V1 trainers (``seal`` and ``seal_colocate_async``) and the legacy trainer through their real
  checkpoint-load hooks, and ``seal-verl dry-run``; a run resumed into the same folder keeps the earlier record.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import subprocess
import types
import uuid

import pytest
from _paths import REPO

from seal_verl.runs import check as CHECK
from seal_verl.runs import provenance as P


def _complete_record(tmp_path):
    from omegaconf import OmegaConf

    from seal_verl.verl_glue import provenance

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"hidden_size": 8}')
    (model / "weights.bin").write_bytes(b"\x00\x01" * 1000)
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.parquet").write_bytes(b"train rows")
    (data / "eval.parquet").write_bytes(b"eval rows")
    cfg = OmegaConf.create({
        "actor_rollout_ref": {"model": {"path": str(model)}, "rollout": {"seed": 7}},
        "data": {"train_files": str(data / "train.parquet"), "val_files": [str(data / "eval.parquet")], "seed": 42},
        "seal": {"cue_effect": {"seed": 0}},
        "recipe": {"preset": "paper", "variant": "seal", "backbone": "qwen3-8b"},
        "trainer": {"device": "cpu", "nnodes": 1, "n_gpus_per_node": 1},
    })
    command = ("python -m verl.trainer.main_ppo --config-path=/r --config-name=bfcl_v3 backbone=qwen3-8b "
               "variant=seal +cpu=tiny 'seal.state_actor.resources={node: 0.01}' ~trainer.logger")
    return provenance.record(cfg, trainer="verl main_ppo, trainer.v1.trainer_mode=seal", command=command), model, data


def test_the_collector_fills_every_field_from_the_run(tmp_path):
    rec, model, data = _complete_record(tmp_path)
    assert P.problems(rec) == []
    # the model: every file hashed, names included
    files = {n: hashlib.sha256((model / n).read_bytes()).hexdigest() for n in ("config.json", "weights.bin")}
    assert rec["model"]["files"] == files and len(rec["model"]["sha256"]) == 64
    # the data split: each file and one hash over them
    assert [f["sha256"] for f in rec["data"]["files"]] == [
        hashlib.sha256(b"train rows").hexdigest(), hashlib.sha256(b"eval rows").hexdigest()]
    assert rec["data"]["split_sha256"] is not None
    assert rec["seeds"] == {"actor_rollout_ref.rollout.seed": 7, "data.seed": 42, "seal.cue_effect.seed": 0}
    assert rec["overrides"] == ["backbone=qwen3-8b", "variant=seal", "+cpu=tiny",
                                "seal.state_actor.resources={node: 0.01}", "~trainer.logger"]
    assert rec["recipe"]["preset"] == "paper" and rec["recipe"]["variant"] == "seal"
    # this checkout's commit, and whether it has uncommitted changes
    head = subprocess.run(["git", "-C", REPO, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert rec["seal_verl"]["commit"] == head and isinstance(rec["seal_verl"]["dirty"], bool)
    assert rec["versions"]["python"] and rec["versions"]["torch"]
    assert rec["hardware"]["cpu"]["count"] == os.cpu_count()
    # a changed model file changes the identity
    from seal_verl.verl_glue.provenance import model_identity

    assert model_identity(str(model))["sha256"] == rec["model"]["sha256"]
    (model / "weights.bin").write_bytes(b"\x00\x02" * 1000)
    assert model_identity(str(model))["sha256"] != rec["model"]["sha256"]


def _folder_with(tmp_path, record):
    run = tmp_path / f"run-{uuid.uuid4().hex[:6]}"
    run.mkdir()
    (run / P.PROVENANCE).write_text(json.dumps(record))
    return run


def _provenance_item(run):
    rep = CHECK.Report()
    P.check_provenance(CHECK.Run(str(run)), rep)
    (item,) = rep.items
    return item


@pytest.mark.parametrize("field", [f"{name}.{sub}" if sub else name for name, (subs, _) in P.FIELDS.items()
                                   for sub in (subs or (None,))])
def test_a_missing_field_fails_the_check(tmp_path, field):
    rec, _, _ = _complete_record(tmp_path)
    name, ok, detail = _provenance_item(_folder_with(tmp_path, rec))
    assert ok, detail
    damaged = copy.deepcopy(rec)
    if "." in field:
        top, sub = field.split(".")
        del damaged[top][sub]
    else:
        del damaged[field]
    name, ok, detail = _provenance_item(_folder_with(tmp_path, damaged))
    assert name == "provenance" and not ok and field in detail, detail
    with pytest.raises(ValueError, match="incomplete"):
        P.write(str(tmp_path), damaged)


def test_no_provenance_fails_the_check_and_the_report_says_so(tmp_path):
    name, ok, detail = _provenance_item(tmp_path)
    assert not ok and "provenance.json" in detail
    assert "not recorded" in P.report_lines(str(tmp_path))[0]


def test_a_resumed_run_keeps_the_earlier_launch(tmp_path):
    rec, _, _ = _complete_record(tmp_path)
    P.write(str(tmp_path), rec)
    second = dict(rec, written_at="later")
    P.write(str(tmp_path), second)
    back, _ = P.read(str(tmp_path))
    assert back["written_at"] == "later" and [e["written_at"] for e in back["earlier"]] == [rec["written_at"]]
    assert any("earlier launch" in line for line in P.summary(back))


# ------------------------------------------------------------------------------------------------ the paths

def _v1_config(mode, run_dir):
    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf

    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=[
            "algorithm.adv_estimator=seal_grpo", f"trainer.v1.trainer_mode={mode}", "actor_rollout_ref.rollout.n=4",
            "actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.model.path=dummy-model",
            f"trainer.experiment_name=prov-{uuid.uuid4().hex[:6]}", "trainer.resume_mode=disable"])
    OmegaConf.set_struct(cfg, False)
    cfg.seal = {"switches": {"reweighting": True}, "run_dir": str(run_dir)}
    return cfg


@pytest.mark.parametrize("mode", ["seal", "seal_colocate_async"])
def test_the_v1_trainers_write_it_at_start(tmp_path, mode):
    """verl's ``_load_checkpoint`` runs once before the first rollout (fresh or resumed); the SEAL trainers write
    ``config.json`` and ``provenance.json`` there (no Ray here: the state is published to no one)."""
    import verl  # noqa: F401  (the seal plugin registers the trainers)
    from verl.trainer.ppo.v1 import get_trainer_cls

    cfg = _v1_config(mode, tmp_path / "run")
    trainer = get_trainer_cls(mode)(cfg)
    trainer._load_checkpoint()
    rec, damage = P.read(str(tmp_path / "run"))
    assert damage is None and rec is not None and P.problems(rec) == []
    assert rec["trainer"] == f"verl main_ppo, trainer.v1.trainer_mode={mode}"
    assert rec["model"]["path"] == "dummy-model" and rec["model"]["why"]  # not a folder here: said, not guessed
    assert rec["launch"]["command"]


def test_the_legacy_trainer_writes_it_at_start(tmp_path):
    import verl  # noqa: F401  (the seal plugin wraps the legacy trainer's hooks)
    from omegaconf import OmegaConf
    from verl.trainer.ppo import ray_trainer

    from seal_verl.verl_glue import legacy

    root = OmegaConf.create({
        "algorithm": {"adv_estimator": "seal_grpo"},
        "actor_rollout_ref": {"model": {"path": "dummy-model"}},
        "trainer": {"use_v1": False, "project_name": "p", "experiment_name": f"e{uuid.uuid4().hex[:6]}",
                    "default_local_dir": str(tmp_path / "ckpt"), "resume_mode": "disable", "nnodes": 1},
        "seal": {"run_dir": str(tmp_path / "run")},
    })
    stand_in = types.SimpleNamespace(config=root, global_steps=0)
    try:
        ray_trainer.RayPPOTrainer._load_checkpoint(stand_in)  # the wrapped hook, verl's own body underneath
    finally:
        legacy.forget(root)
    rec, _ = P.read(str(tmp_path / "run"))
    assert rec is not None and P.problems(rec) == []
    assert rec["trainer"] == "verl main_ppo, legacy RayPPOTrainer (trainer.use_v1=false)"
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["seal"]["switches"]["reweighting"] is True  # the check reads the switches from here


def test_the_dry_run_writes_it_and_check_and_report_show_it(tmp_path):
    from seal_verl import dry_run as D
    from seal_verl.runs.report import build_report

    cfg = D.DryRunConfig(out=str(tmp_path / "dry"), steps=1, tasks_per_step=1, rollouts=2, val_tasks=1,
                         model=str(tmp_path / "model"), progress=False, verbose=False)
    D.run_dry(cfg)
    rec, _ = P.read(cfg.out)
    assert rec is not None and P.problems(rec) == []
    assert rec["trainer"] == "seal-verl dry-run" and "steps=1" in rec["overrides"]
    assert rec["data"]["split_sha256"] and rec["model"]["sha256"]
    rep = CHECK.check_run(cfg.out, 1)
    item = {n: (ok, d) for n, ok, d in rep.items}["provenance"]
    assert item[0] and "seal-verl" in item[1], item
    text = build_report([cfg.out], str(tmp_path / "report")).text
    assert "Provenance of" in text and f"sha256 {rec['model']['sha256'][:12]}" in text
    page = open(os.path.join(str(tmp_path / "report"), "report.html"), encoding="utf-8").read()
    assert rec["seal_verl"]["version"] in page and "launch:" in page
