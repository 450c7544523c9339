"""A run's checkpoint merged into a Hugging Face folder by verl's own model merger (``seal_verl.models.export``): the
checkpoint it picks, what it writes and where, what it refuses.

The checkpoints here are written in the layout verl's FSDP checkpoint manager uses (``global_step_N/actor`` with
``model_world_size_1_rank_0.pt``, ``fsdp_config.json`` and ``huggingface/``, ``latest_checkpointed_iteration.txt``
beside the steps) from a tiny model's weights, and merged by the real ``python -m verl.model_merger``; a checkpoint
written by a real ``main_ppo`` run goes through the whole chain in ``tests/models/test_export_eval.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from _paths import REPO

from seal_verl.models import export as E
from seal_verl.models.export_eval import _reusable

TASKS = ["multi_turn_base_132", "multi_turn_miss_func_132"]


def _checkpoint(actor: str, model_dir: str, scale: float) -> None:
    """``actor``: verl's FSDP checkpoint layout (world size 1) of ``model_dir``'s weights times ``scale``."""
    import shutil

    import torch
    from safetensors.torch import load_file

    os.makedirs(actor)
    state = {k: v * scale for k, v in load_file(os.path.join(model_dir, "model.safetensors")).items()}
    torch.save(state, os.path.join(actor, "model_world_size_1_rank_0.pt"))
    with open(os.path.join(actor, "fsdp_config.json"), "w") as f:
        json.dump({"FSDP_version": 2, "world_size": 1}, f)
    shutil.copytree(model_dir, os.path.join(actor, "huggingface"),
                    ignore=shutil.ignore_patterns("model.safetensors"))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from seal_verl.models.tiny_model import make_tiny_qwen

    return make_tiny_qwen(str(tmp_path_factory.mktemp("tiny") / "model"), seed=0)


@pytest.fixture
def run(tmp_path, tiny):
    """A run folder as the CPU scripts leave it: config.json, data/, checkpoints of steps 1 and 2."""
    from env_wrappers.bfcl.environment.prepare_data import prepare_data

    run = tmp_path / "run"
    split = tmp_path / "split.json"
    split.write_text(json.dumps({"train": ["multi_turn_base_100"], "eval": TASKS}))
    prepare_data(str(run / "data"), call_format="json", split_file=str(split))
    ckpt = run / "checkpoints"
    for step in (1, 2):
        _checkpoint(str(ckpt / f"global_step_{step}" / "actor"), tiny, 1.0 + step)
    (ckpt / E.LATEST).write_text("2")
    loops = os.path.join(REPO, "recipes", "bfcl_v3", "cpu", "agent_loops", "json.yaml")
    (run / "config.json").write_text(json.dumps({"verl": {
        "trainer": {"default_local_dir": str(ckpt)}, "recipe": {"data_dir": str(run / "data"), "backbone": "tiny"},
        "actor_rollout_ref": {"rollout": {"max_model_len": 8192, "agent": {"agent_loop_config_path": loops}}}}}))
    return str(run)


def test_the_latest_checkpoint_merged_beside_the_run_not_into_it(run, tiny):
    import torch
    from safetensors.torch import load_file

    record = E.export(run)
    out = os.path.join(run, "export", "global_step_2", "model")
    assert record["model"] == out and record["step"] == 2
    merged = load_file(os.path.join(out, "model.safetensors"))
    shard = torch.load(os.path.join(run, "checkpoints", "global_step_2", "actor", "model_world_size_1_rank_0.pt"))
    assert merged.keys() <= shard.keys() and merged
    for k, v in merged.items():
        assert v.dtype == torch.bfloat16 and torch.equal(v, shard[k].to(torch.bfloat16)), k
    with open(os.path.join(out, E.RECORD)) as f:
        saved = json.load(f)
    assert saved == record
    assert saved["heldout_ids"] == TASKS and saved["call_format"] == "json"
    assert saved["max_model_len"] == 8192 and saved["max_tokens_per_step"] == 64
    assert saved["merger"].startswith("python -m verl.model_merger merge --backend fsdp --local_dir ")
    assert _reusable(out, saved["checkpoint"])
    from transformers import AutoTokenizer

    assert AutoTokenizer.from_pretrained(out).chat_template == AutoTokenizer.from_pretrained(tiny).chat_template
    assert sorted(os.listdir(os.path.join(run, "checkpoints", "global_step_2", "actor"))) == \
        ["fsdp_config.json", "huggingface", "model_world_size_1_rank_0.pt"]
    assert not [n for n in os.listdir(os.path.dirname(out)) if n.startswith(".seal-export-")]


def test_step_choice_and_what_is_missing(run, tmp_path):
    assert E.find_checkpoint(run, 1).step == 1
    os.remove(os.path.join(run, "checkpoints", E.LATEST))
    assert E.find_checkpoint(run).step == 2  # without verl's marker: the highest step
    with pytest.raises(E.ExportError, match=r"no checkpoint of step 3 \(steps with one: 1, 2\)"):
        E.find_checkpoint(run, 3)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(E.ExportError, match="trainer.save_freq"):
        E.find_checkpoint(str(empty))
    os.remove(os.path.join(run, "checkpoints", "global_step_1", "actor", "model_world_size_1_rank_0.pt"))
    with pytest.raises(E.ExportError, match=r"shards of rank\(s\) 0 of 1 are missing"):
        E.find_checkpoint(run, 1)


def test_never_into_the_checkpoints_nor_over_the_run(run):
    ckpt = os.path.join(run, "checkpoints")
    for out in (os.path.join(ckpt, "global_step_2", "actor", "hf"), ckpt, run, os.path.dirname(run)):
        with pytest.raises(E.ExportError, match="checkpoint folder|holds the run"):
            E.export(run, out=out, force=True)
    assert sorted(os.listdir(ckpt)) == ["global_step_1", "global_step_2", E.LATEST]


def test_an_existing_folder_needs_force_and_force_replaces_only_an_export(run, tmp_path):
    out = tmp_path / "hf"
    first = E.export(run, out=str(out), step=1)
    before = {n: (out / n).read_bytes() for n in os.listdir(out)}
    with pytest.raises(E.ExportError, match="already exists; pass --force"):
        E.export(run, out=str(out))
    assert {n: (out / n).read_bytes() for n in os.listdir(out)} == before
    second = E.export(run, out=str(out), force=True)
    assert second["step"] == 2 and second["files"]["model.safetensors"] != first["files"]["model.safetensors"]
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    with pytest.raises(E.ExportError, match="not an earlier export"):
        E.export(run, out=str(mine), force=True)
    assert (mine / "notes.txt").read_text() == "keep me"


def test_a_failed_merge_keeps_the_earlier_export(run, tmp_path):
    out = tmp_path / "hf"
    E.export(run, out=str(out), step=1)
    kept = (out / "model.safetensors").read_bytes()
    shard = os.path.join(run, "checkpoints", "global_step_2", "actor", "model_world_size_1_rank_0.pt")
    with open(shard, "r+b") as f:
        f.truncate(100)
    with pytest.raises(E.ExportError, match="verl's model merger failed"):
        E.export(run, out=str(out), force=True)
    assert (out / "model.safetensors").read_bytes() == kept
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".seal-export-")]
    (out / "model.safetensors").write_bytes(kept[:-1] + b"\0")
    assert not _reusable(str(out), os.path.join(run, "checkpoints", "global_step_1", "actor"))


def test_command_line_errors_are_one_line(run, tmp_path):
    env = dict(os.environ, PYTHONPATH=REPO)
    proc = subprocess.run([sys.executable, "-m", "seal_verl.models.export", run, "--step", "9"],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "no checkpoint of step 9" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "seal_verl.models.export", run, "--out", str(tmp_path / "cli")],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert os.path.isfile(tmp_path / "cli" / "config.json") and "seal_export.json" in proc.stdout


def test_a_run_of_another_environment_is_exported_and_named_not_served(run, tmp_path):
    """A ledger run (make run with checkpoints): the export is written, then one line says that seal-verl eval scores
    BFCL tasks; no server is started."""
    from seal_verl import dry_run as D

    ledger = D.environment("ledger")
    rows = D.dataset_rows(ledger.task_ids("eval")[:2], "env", "eval", "json", env="ledger")
    assert all(r["extra_info"].get("env") == "ledger" for r in rows)
    D.write_parquet(rows, os.path.join(run, "data", "eval.parquet"))
    out = tmp_path / "ledger_export"
    env = dict(os.environ, PYTHONPATH=REPO)
    proc = subprocess.run([sys.executable, "-m", "seal_verl.models.export_eval", run, "--out", str(out)],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
    assert proc.returncode == 2
    errors = [x for x in proc.stderr.splitlines() if x.startswith("error:")]
    assert len(errors) == 1 and "environment 'ledger'" in errors[0] and "seal-verl eval scores BFCL V3" in errors[0]
    assert os.path.isfile(out / "model" / "config.json") and not os.path.exists(out / "server.log")


def test_the_server_renders_with_the_recipes_chat_template_arguments():
    from seal_verl.models.export_eval import server_command

    qwen3 = server_command("/m", 8000, 16384, "qwen3-8b", ("--tensor-parallel-size", "2"))
    i = qwen3.index("--default-chat-template-kwargs")
    assert json.loads(qwen3[i + 1]) == {"enable_thinking": False}
    assert qwen3[-2:] == ["--tensor-parallel-size", "2"] and qwen3[qwen3.index("--max-model-len") + 1] == "16384"
    for backbone in ("qwen2.5-7b", "toolace2-8b", "tiny-qwen2-cpu", None):
        assert "--default-chat-template-kwargs" not in server_command("/m", 8000, None, backbone)


def test_the_evaluation_renders_prompts_for_the_runs_backbone():
    from seal_verl.models.export_eval import eval_command

    qwen3 = eval_command("http://h/v1", "/o", ["multi_turn_base_0"], "prompt", "json", None, "qwen3-8b")
    assert qwen3[qwen3.index("--backbone") + 1] == "qwen3" and qwen3[qwen3.index("--call-format") + 1] == "json"
    toolace = eval_command("http://h/v1", "/o", [], "prompt", "python", 64, "toolace2-8b")
    assert toolace[toolace.index("--backbone") + 1] == "toolace2" and toolace[-2:] == ["--split", "eval"]
    assert "--backbone" not in eval_command("http://h/v1", "/o", [], "prompt", "json", None, "tiny-qwen2-cpu")
    assert "--call-format" not in eval_command("http://h/v1", "/o", [], "fc", "json", None, "qwen3-8b")
