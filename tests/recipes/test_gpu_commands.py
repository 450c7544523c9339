"""Every GPU launch command the documentation shows, run as written, reaches verl's launch with a valid config.

The commands are read from the README, the recipe README, docs/gpu_training.md and the launchers' own headers
(so the documentation and this test cannot drift apart), and run with bash from the root of a fresh tree that
holds the recipe and the data folders ``seal-verl prepare-data`` writes as documented. A stand-in ``python`` on
PATH records the command line the launcher hands to ``python -m verl.trainer.main_ppo``; that command's
config is then composed by Hydra and validated with verl's own start-up code (as ``main_ppo`` and the V1
TaskRunner do before any GPU work), and its data folder must hold the backbone's call format.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shlex
import subprocess

import pytest
from omegaconf import OmegaConf

import verl  # noqa: F401  (loads the seal plugin: seal_grpo estimator and `seal` trainer)

from _paths import REPO

RECIPE = os.path.join(REPO, "recipes", "bfcl_v3")
DOCS = ("README.md", "recipes/bfcl_v3/README.md", "docs/gpu_training.md")
LAUNCHERS = ("recipes/bfcl_v3/run_seal.sh", "recipes/bfcl_v3/run_grpo.sh", "recipes/bfcl_v3/run_ablation.sh")
LAUNCH = re.compile(r"\bbash recipes/bfcl_v3/run_\w+\.sh\b")
#: variables a user's shell might carry into a documented command; the test starts from none of them
LAUNCH_ENV = ("BACKBONE", "DATA_DIR", "HARDWARE", "PRESET", "ABLATION", "PYTHON", "RAY_ADDRESS")


def _doc_commands(rel: str) -> list[tuple[str, list[str], str]]:
    """(where, the ``export`` lines before it in its block, the command) for each launch line of a bash block."""
    out, exports, in_bash = [], [], False
    with open(os.path.join(REPO, rel), encoding="utf-8") as f:
        for no, line in enumerate(f, 1):
            stripped = line.strip()
            if stripped.startswith("```"):
                in_bash, exports = stripped == "```bash", []
                continue
            if not in_bash:
                continue
            if stripped.startswith("export "):
                exports.append(stripped)
            elif LAUNCH.search(stripped) and not stripped.startswith("#"):
                out.append((f"{rel}:{no}", list(exports), stripped))
    return out


def _header_commands(rel: str) -> list[tuple[str, list[str], str]]:
    """The usage line of a launcher's header, its ``[overrides...]`` placeholder left out."""
    out = []
    with open(os.path.join(REPO, rel), encoding="utf-8") as f:
        for no, line in enumerate(f, 1):
            if not line.startswith("#"):
                break
            text = line.lstrip("#").strip()
            if LAUNCH.search(text):
                out.append((f"{rel}:{no}", [], re.sub(r"\s*\[[^\]]*\]\s*$", "", text)))
    return out


COMMANDS = [c for rel in DOCS for c in _doc_commands(rel)] + [c for rel in LAUNCHERS for c in _header_commands(rel)]


def test_the_documentation_shows_launch_commands_everywhere():
    where = {c[0].split(":")[0] for c in COMMANDS}
    assert where == set(DOCS) | set(LAUNCHERS)
    assert len(COMMANDS) >= 25
    assert any("toolace2-8b" in c[2] for c in COMMANDS) and any("HARDWARE=" in c[2] for c in COMMANDS)


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """A fresh tree: the recipe (linked), the two data folders written as the README says, a stand-in python."""
    from env_wrappers.bfcl.environment.prepare_data import prepare_data

    root = tmp_path_factory.mktemp("clone")
    os.symlink(os.path.join(REPO, "recipes"), root / "recipes")
    split = root / "split.json"
    split.write_text(json.dumps({"train": ["multi_turn_base_0"], "eval": ["multi_turn_base_1"]}))
    prepare_data(str(root / "data" / "bfcl_v3" / "json"), call_format="json", split_file=str(split))
    prepare_data(str(root / "data" / "bfcl_v3" / "python"), call_format="python", split_file=str(split))
    bin_dir = root / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "python"
    fake.write_text('#!/bin/sh\n# records the command line it was given, one argument a line\n'
                    'for a in "$@"; do printf "%s\\n" "$a"; done > "$SEAL_RECORDED_ARGV"\n')
    fake.chmod(0o755)
    return root


def _run(tree, exports, command, record):
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_ENV}
    env.update(PATH=f"{tree / 'bin'}{os.pathsep}{env.get('PATH', '')}", SEAL_RECORDED_ARGV=str(record))
    script = "\n".join([*exports, command])
    return subprocess.run(["bash", "-c", script], cwd=tree, env=env, capture_output=True, text=True, timeout=120)


def _validated(argv: list[str]):
    """What main_ppo and the V1 TaskRunner run on the recorded command before any worker starts."""
    from hydra import compose, initialize_config_dir
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.trainer.ppo.v1 import get_trainer_cls
    from verl.utils.config import omega_conf_to_dataclass, validate_config
    from verl.utils.device import auto_set_device

    assert argv[:2] == ["-m", "verl.trainer.main_ppo"], argv
    opts = dict(a[2:].split("=", 1) for a in argv[2:] if a.startswith("--"))
    overrides = [a for a in argv[2:] if not a.startswith("--")]
    with initialize_config_dir(config_dir=opts["config-path"], version_base=None):
        cfg = compose(config_name=opts["config-name"], overrides=overrides)
    auto_set_device(cfg)
    validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    resolved = copy.deepcopy(cfg)
    OmegaConf.resolve(resolved)
    omega_conf_to_dataclass(resolved.actor_rollout_ref.rollout)
    get_trainer_cls(resolved.trainer.v1.trainer_mode)(config=resolved)
    return resolved


@pytest.mark.parametrize("where,exports,command", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_documented_command_reaches_verls_launch(tree, tmp_path, where, exports, command):
    record = tmp_path / "argv"
    proc = _run(tree, exports, command, record)
    assert proc.returncode == 0, f"{where}: {command}\n{proc.stderr}"
    argv = record.read_text().splitlines()
    cfg = _validated(argv)

    words = dict(w.split("=", 1) for w in shlex.split(command) if re.fullmatch(r"[A-Z_]+=.*", w))
    backbone = words.get("BACKBONE", "qwen2.5-7b")
    assert cfg.recipe.backbone == backbone
    if "HARDWARE" in words:
        assert cfg.recipe.hardware == words["HARDWARE"]
    loops = list(OmegaConf.load(cfg.actor_rollout_ref.rollout.agent.agent_loop_config_path))
    data_dir = cfg.recipe.data_dir
    assert os.path.realpath(data_dir).startswith(os.path.realpath(tree))  # the documented folder, not elsewhere
    with open(os.path.join(data_dir, "call_format.txt")) as f:
        recorded = f.read().strip()
    assert {entry.call_format for entry in loops} == {recorded}, f"{where}: {data_dir} holds {recorded} data"
    assert os.path.basename(data_dir) == recorded
    assert cfg.data.train_files == os.path.join(data_dir, "train.parquet")


def test_a_folder_of_the_other_call_format_stops_before_python(tree, tmp_path):
    record = tmp_path / "argv"
    proc = _run(tree, [f"export DATA_DIR={tree}/data/bfcl_v3/json"],
                "BACKBONE=toolace2-8b bash recipes/bfcl_v3/run_seal.sh", record)
    assert proc.returncode == 2 and not record.exists()
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "holds call_format=json data but BACKBONE=toolace2-8b writes python calls" in lines[0]


def test_a_folder_without_its_recorded_format_stops_before_python(tree, tmp_path):
    """Data written before prepare-data recorded the format: the launcher cannot tell, so it says how to fix it."""
    old = tmp_path / "old"
    old.mkdir()
    for name in ("train.parquet", "eval.parquet"):
        os.symlink(tree / "data" / "bfcl_v3" / "json" / name, old / name)
    record = tmp_path / "argv"
    proc = _run(tree, [f"export DATA_DIR={old}"], "bash recipes/bfcl_v3/run_grpo.sh", record)
    assert proc.returncode == 2 and not record.exists()
    assert "no call_format.txt" in proc.stderr and "--call-format json" in proc.stderr


def test_a_shape_of_several_nodes_needs_a_shared_checkpoint_folder(tree, tmp_path):
    record = tmp_path / "argv"
    proc = _run(tree, [], "HARDWARE=2x8x80gb bash recipes/bfcl_v3/run_seal.sh", record)
    assert proc.returncode == 2 and not record.exists()
    assert proc.stderr.count("\n") == 1 and "trainer.default_local_dir=<absolute folder every node mounts>" in proc.stderr
    proc = _run(tree, [], "HARDWARE=2x8x80gb bash recipes/bfcl_v3/run_seal.sh trainer.default_local_dir=ckpt", record)
    assert proc.returncode == 2 and not record.exists()


def test_an_unknown_shape_is_named_with_the_choices(tree, tmp_path):
    proc = _run(tree, [], "HARDWARE=3x80gb bash recipes/bfcl_v3/run_seal.sh", tmp_path / "argv")
    assert proc.returncode == 2 and "unknown HARDWARE=3x80gb; one of: 2x8x80gb 4x80gb 8x40gb 8x80gb" in proc.stderr

