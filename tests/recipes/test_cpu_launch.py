"""The one launcher of both CPU run scripts (``recipes/bfcl_v3/cpu/launch.py``, run by ``run_cpu.sh`` and
``run_ledger.sh``): every refusal is one line and exit 2 before any work, the run folder is never emptied (an earlier
run is refused, or moved aside with ``FORCE=1`` and said where), a folder another run writes is refused, a model is
verified before it is used, and ``timing.json`` has the same keys for both recipes.

The scripts run in the lean venv (``SEAL_CPU_VENV``): everything here stops before verl's launcher
(``PREPARE_ONLY=1``, or a refusal), or replaces main_ppo in-process.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from _paths import REPO
from _scripts import load_script
from seal_verl.runs import folder as RF

SCRIPTS = {"bfcl": "recipes/bfcl_v3/cpu/run_cpu.sh", "ledger": "recipes/ledger_cpu/run_ledger.sh"}


@pytest.fixture(scope="module")
def launch():
    """The launcher as a module (loaded by the tests that call it, so the file collects without it)."""
    return load_script("recipes/bfcl_v3/cpu/launch.py", "seal_cpu_launch")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from seal_verl import dry_run as D

    return D.tiny_model(str(tmp_path_factory.mktemp("tiny") / "model"))


def _script(recipe: str, tmp_path, **env) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k not in ("FORCE", "REBUILD", "PREPARE_ONLY", "SEAL_CPU_MODEL")}
    full.update({"SEAL_CPU_VENV": sys.prefix, "SEAL_CPU_MODELS": str(tmp_path / "models"), **env})
    return subprocess.run(["bash", os.path.join(REPO, SCRIPTS[recipe])], env=full, cwd=REPO, capture_output=True,
                          text=True, timeout=600)


def _finished_run(path) -> list:
    folder = RF.RunFolder(str(path))
    folder.write_config({"variant": "seal"})
    for k in (1, 2, 3):
        folder.append_metrics({"step": k, "global_step": k})
        folder.write_traces(k, [])
    RF.write_timing(str(path), {"exit_code": 0, "steps": 3})
    return sorted(os.listdir(path))


@pytest.mark.parametrize("recipe", sorted(SCRIPTS))
def test_a_second_run_with_the_same_seed_refuses_then_says_where_the_first_went(recipe, tiny, tmp_path):
    """Round 4: ``make run`` cleaned its output folder before any check (a finished 20-step run lost 60 files)."""
    out = tmp_path / "seal_s1"
    before = _finished_run(out)
    proc = _script(recipe, tmp_path, OUT=str(out), PREPARE_ONLY="1", SEAL_CPU_MODEL=tiny)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stderr.strip().count("\n") == 0 and "holds the results of an earlier run" in proc.stderr
    assert "FORCE=1 moves them aside to seal_s1.earlier-" in proc.stderr
    assert sorted(os.listdir(out)) == before
    proc = _script(recipe, tmp_path, OUT=str(out), PREPARE_ONLY="1", SEAL_CPU_MODEL=tiny, FORCE="1")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    aside = [p for p in os.listdir(tmp_path) if p.startswith("seal_s1.earlier-")]
    assert len(aside) == 1 and sorted(os.listdir(tmp_path / aside[0])) == before
    assert f"moved the earlier contents of {out} to {tmp_path / aside[0]}" in proc.stdout
    assert RF.METRICS not in os.listdir(out) and RF.PREPARE in os.listdir(out)


def test_a_run_resumed_in_its_own_folder_continues_it_and_another_folder_is_claimed(tiny, tmp_path):
    """RESUME_FROM inside OUT continues that run's results (nothing refused, nothing moved); resumed into another
    folder, that folder is claimed like any other (an earlier run there was appended to before)."""
    out = tmp_path / "seal"
    before = _finished_run(out)
    ckpt = out / RF.CHECKPOINTS / "global_step_3"
    ckpt.mkdir(parents=True)
    proc = _script("bfcl", tmp_path, OUT=str(out), PREPARE_ONLY="1", SEAL_CPU_MODEL=tiny, RESUME_FROM=str(ckpt))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert set(before) <= set(os.listdir(out))
    other = tmp_path / "other"
    other_before = _finished_run(other)
    proc = _script("bfcl", tmp_path, OUT=str(other), PREPARE_ONLY="1", SEAL_CPU_MODEL=tiny, RESUME_FROM=str(ckpt))
    assert proc.returncode == 2 and "holds the results of an earlier run" in proc.stderr
    assert sorted(os.listdir(other)) == other_before


def test_out_pointed_at_a_model_folder_keeps_the_model(tiny, tmp_path):
    """Round 4: ``OUT=`` pointed at a model folder removed its config.json and checkpoints/."""
    model = tmp_path / "someone"
    shutil.copytree(tiny, model)
    (model / RF.CHECKPOINTS).mkdir()
    before = sorted(os.listdir(model))
    proc = _script("ledger", tmp_path, OUT=str(model), PREPARE_ONLY="1")
    assert proc.returncode == 2 and "holds a model" in proc.stderr, proc.stderr
    assert sorted(os.listdir(model)) == before
    # the model the run itself uses: never, whatever FORCE says
    proc = _script("ledger", tmp_path, OUT=str(model), PREPARE_ONLY="1", SEAL_CPU_MODEL=str(model), FORCE="1")
    assert proc.returncode == 2 and "an output is never an input" in proc.stderr
    assert sorted(os.listdir(model)) == before


def test_a_folder_another_run_writes_is_refused(tiny, tmp_path):
    """The lock: a second run into a folder a live run writes stops at once (round 4: two runs into one folder
    both exited 0 and left steps [1,2,3,2,3,4,4])."""
    out = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from seal_verl import outputs; "
                               "outputs.claim(sys.argv[1], 'run-ledger (variant seal, seed 1)'); "
                               "print('held', flush=True); time.sleep(600)", str(out)],
                              stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=REPO))
    try:
        assert holder.stdout.readline().strip() == "held"
        proc = _script("ledger", tmp_path, OUT=str(out), PREPARE_ONLY="1", SEAL_CPU_MODEL=tiny, FORCE="1")
        assert proc.returncode == 2 and "is being written by run-ledger (variant seal, seed 1)" in proc.stderr
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("recipe", sorted(SCRIPTS))
@pytest.mark.parametrize("model, says", [("/nonexistent/model", "not a folder"), ("/etc", "no config.json")])
def test_a_nonsense_model_is_one_line_before_any_work(recipe, model, says, tmp_path):
    """Round 4: a nonsense LEDGER_MODEL / SEAL_CPU_MODEL passed preparation ("model ... and data ready") and failed
    inside main_ppo after about 75 s with a 40-line Hydra traceback."""
    proc = _script(recipe, tmp_path, OUT=str(tmp_path / "run"), SEAL_CPU_MODEL=model, PREPARE_ONLY="1")
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0, proc.stderr
    assert f"SEAL_CPU_MODEL={model}: " in proc.stderr and says in proc.stderr
    assert not (tmp_path / "run").exists()


def test_a_given_model_whose_files_do_not_match_its_record_is_refused(tmp_path):
    """Round 4: LEDGER_MODEL / SEAL_CPU_MODEL folders whose weights did not match their build.json were used."""
    model = tmp_path / "ledger-model"
    shutil.copytree(os.path.join(REPO, "recipes", "ledger_cpu", "model"), model)
    data = bytearray((model / "model.safetensors").read_bytes())
    data[-16384:] = bytes(16384)
    (model / "model.safetensors").write_bytes(bytes(data))
    proc = _script("ledger", tmp_path, OUT=str(tmp_path / "run"), SEAL_CPU_MODEL=str(model), PREPARE_ONLY="1")
    assert proc.returncode == 2 and "model.safetensors differs from the model as built" in proc.stderr


@pytest.mark.parametrize("cache", ["file", "/dev/null/x"])
def test_a_model_cache_that_is_not_a_folder_is_one_line(cache, tmp_path):
    """Round 4: ``REBUILD=1`` with ``SEAL_CPU_MODELS`` a file, ``/dev/null/x`` or ``/proc/seal`` printed a 30-line
    traceback tail."""
    if cache == "file":
        cache = str(tmp_path / "a-file")
        open(cache, "w").close()
    proc = _script("ledger", tmp_path, OUT=str(tmp_path / "run"), REBUILD="1", PREPARE_ONLY="1",
                   SEAL_CPU_MODELS=cache)
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0, proc.stderr
    assert "(SEAL_CPU_MODELS)" in proc.stderr and "Traceback" not in proc.stderr


def test_a_shipped_model_without_its_record_is_one_line_not_a_rebuild(tmp_path, launch):
    """Round 4: with build.json missing, ``make run`` silently rebuilt the warm start (about 17 minutes)."""
    shipped = tmp_path / "model"
    shutil.copytree(os.path.join(REPO, "recipes", "ledger_cpu", "model"), shipped)
    (shipped / "build.json").unlink()
    recipe = launch.RECIPES["ledger"]
    recipe = type(recipe)(**{**recipe.__dict__, "shipped": str(shipped)})
    s = launch.read_settings(recipe, {"OUT": str(tmp_path / "run"), "SEAL_CPU_MODELS": str(tmp_path / "models")})
    with pytest.raises(launch.Refused, match="has no build.json, so it cannot be verified: restore it .*REBUILD=1"):
        launch.choose_model(recipe, s, print)
    assert not (tmp_path / "models" / recipe.cached).exists()


@pytest.mark.parametrize("setting, says", [({"STEPS": "0"}, "STEPS must be a positive integer"),
                                           ({"VARIANT": "sael"}, "unknown VARIANT"),
                                           ({"FORCE": "yes"}, "FORCE must be 0 or 1"),
                                           ({"RESUME_FROM": "/tmp"}, "not a setting of the ledger run")])
def test_settings_are_checked_before_any_work(setting, says, tmp_path):
    proc = _script("ledger", tmp_path, OUT=str(tmp_path / "run"), **setting)
    assert proc.returncode == 2 and says in proc.stderr and not (tmp_path / "run").exists()


@pytest.mark.parametrize("recipe", ["bfcl", "ledger"])
def test_timing_has_the_same_keys_for_both_recipes_and_the_lock_is_given_back(recipe, tiny, tmp_path, monkeypatch,
                                                                             capsys, launch):
    """timing.json was written by each script with printf and different keys; now the launcher writes it through
    the run folder module. main_ppo is replaced (this test is about the launcher, not verl)."""
    from seal_verl import outputs

    def prepared(recipe_, s, model, env):
        os.makedirs(os.path.join(s.out, RF.DATA), exist_ok=True)
        RF.write_prepare(s.out, {"model": model, "model_check": "test"})
        return 0

    monkeypatch.setattr(launch, "prepare", prepared)
    monkeypatch.setattr(launch, "run_main_ppo", lambda recipe_, s, model, extra, env: 0)
    out = tmp_path / "run"
    env = {"OUT": str(out), "SEAL_CPU_MODEL": tiny, "SEAL_CPU_MODELS": str(tmp_path / "models"), "STEPS": "2"}
    assert launch.launch(launch.RECIPES[recipe], [], venv_seconds=3, env=env) == 0
    timing = json.load(open(out / RF.TIMING))
    assert set(timing) == set(RF.Timing.__annotations__) and timing["recipe"] == recipe and timing["exit_code"] == 0
    assert timing["venv_s"] == 3 and timing[RF.FAULT_SETTINGS] == {} and timing["steps"] == 2
    assert outputs.read_lock(str(out)) is None
    text = capsys.readouterr().out
    assert f"seal-verl check {out} --steps 2" in text and f"seal-verl report {out} --out {out}/report" in text


def test_the_run_scripts_are_thin(tmp_path):
    """Both scripts hand everything after the venv to the one launcher; neither launches main_ppo nor writes a
    run-folder file itself."""
    for rel in SCRIPTS.values():
        text = open(os.path.join(REPO, rel), encoding="utf-8").read()
        assert "launch.py" in text and "verl.trainer.main_ppo \\" not in text and "printf" not in text
        assert "runs.folder clean" not in text
