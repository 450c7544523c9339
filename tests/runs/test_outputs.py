"""Output folders are never emptied without consent, never shared by two commands and never an input
(``seal_verl/outputs.py``), on the commands round 4 found destroying data: every test leaves the earlier files in
place (refused) or moved whole into a dated sibling folder (with consent).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from _paths import REPO
from seal_verl.runs import folder as RF


def _files(path) -> dict:
    """Every file under ``path`` (relative name -> bytes)."""
    out = {}
    for root, _dirs, names in os.walk(path):
        for name in names:
            full = os.path.join(root, name)
            with open(full, "rb") as fh:
                out[os.path.relpath(full, path)] = fh.read()
    return out


def _a_finished_run(path) -> dict:
    os.makedirs(os.path.join(path, RF.CHECKPOINTS, "global_step_20"), exist_ok=True)
    for k in range(1, 4):
        for name in (RF.traces_name(k), RF.state_name(k), RF.probe_name(k)):
            with open(os.path.join(path, name), "w") as fh:
                fh.write("{}\n")
    for name in (RF.CONFIG, RF.TIMING):
        with open(os.path.join(path, name), "w") as fh:
            fh.write("{}")
    with open(os.path.join(path, RF.METRICS), "w") as fh:
        fh.write('{"step": 1, "global_step": 1}\n')
    with open(os.path.join(path, RF.CHECKPOINTS, "global_step_20", RF.CHECKPOINT_STATE), "w") as fh:
        fh.write("{}")
    return _files(path)


def test_claim_refuses_results_and_moves_them_aside_only_with_consent(tmp_path):
    from seal_verl import outputs

    run = tmp_path / "seal_s1"
    before = _a_finished_run(run)
    with pytest.raises(outputs.OutputRefused, match=r"holds the results of an earlier run .*FORCE=1 moves them aside "
                                                    r"to seal_s1\.earlier-\d{8}-\d{6}"):
        outputs.claim(str(run), "test", force_hint="FORCE=1")
    assert _files(run) == before and outputs.read_lock(str(run)) is None
    with outputs.claim(str(run), "test", force=True) as claim:
        assert os.path.basename(claim.moved_to).startswith("seal_s1.earlier-")
        assert _files(claim.moved_to) == before and os.listdir(run) == [outputs.LOCK]
        assert any(claim.moved_to in note for note in claim.notes)
    assert os.listdir(run) == []


def test_what_a_command_may_reuse_is_kept_and_anything_else_is_named(tmp_path):
    from seal_verl import outputs

    folder = tmp_path / "prepared"
    (folder / "data").mkdir(parents=True)
    (folder / "prepare.json").write_text("{}")
    with outputs.claim(str(folder), "test", reusable=lambda n: n in ("data", "prepare.json")):
        pass
    (folder / "notes.txt").write_text("mine")
    with pytest.raises(outputs.OutputRefused, match=r"files this command did not write \(notes.txt\)"):
        outputs.claim(str(folder), "test", reusable=lambda n: n in ("data", "prepare.json"))
    (folder / "notes.txt").unlink()
    (folder / "model.safetensors").write_bytes(b"w")
    (folder / "config.json").write_text("{}")
    with pytest.raises(outputs.OutputRefused, match=r"holds a model \(config.json, model.safetensors\)"):
        outputs.claim(str(folder), "test", reusable=lambda n: n in ("data", "prepare.json"))


@pytest.mark.parametrize("where", ["same", "inside", "around"])
def test_an_output_is_never_an_input_whatever_force_says(tmp_path, where):
    from seal_verl import outputs

    model = tmp_path / "models" / "warm"
    model.mkdir(parents=True)
    (model / "model.safetensors").write_bytes(b"w")
    out = {"same": model, "inside": model / "run", "around": tmp_path / "models"}[where]
    with pytest.raises(outputs.OutputRefused, match="an output is never an input"):
        outputs.claim(str(out), "test", force=True, inputs=[str(model)])
    assert (model / "model.safetensors").read_bytes() == b"w"


def test_a_live_holder_keeps_the_folder_and_a_dead_one_is_taken_over(tmp_path):
    from seal_verl import outputs

    folder = str(tmp_path / "run")
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from seal_verl import outputs; "
                               "outputs.claim(sys.argv[1], 'the first run'); print('held', flush=True); "
                               "time.sleep(600)", folder], stdout=subprocess.PIPE, text=True,
                              env=dict(os.environ, PYTHONPATH=REPO))
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(outputs.OutputRefused, match=r"is being written by the first run \(pid \d+"):
            outputs.claim(folder, "a second run")
    finally:
        holder.kill()
        holder.wait()
    with outputs.claim(folder, "a second run") as claim:  # its holder has ended: taken over, and said
        assert "took over the lock of the first run" in claim.notes[0]
        assert outputs.read_lock(folder)["pid"] == os.getpid()


def test_a_lock_of_a_reused_pid_is_not_the_holders(tmp_path):
    """A lock names its holder's start time too: a later process with the same pid does not hold it."""
    from seal_verl import outputs

    folder = tmp_path / "run"
    folder.mkdir()
    with open(folder / outputs.LOCK, "w") as fh:
        json.dump({"pid": os.getpid(), "host": "elsewhere-never", "start": 1}, fh)
    with pytest.raises(outputs.OutputRefused, match="being written"):  # another host: it cannot be asked
        outputs.claim(str(folder), "test")
    import socket

    with open(folder / outputs.LOCK, "w") as fh:
        json.dump({"pid": os.getppid(), "host": socket.gethostname(), "start": -1, "command": "old"}, fh)
    with outputs.claim(str(folder), "test") as claim:
        assert "took over the lock of old" in claim.notes[0]


def _cli(*args, **env):
    return subprocess.run([sys.executable, "-m", "seal_verl.cli", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=300, env=dict(os.environ, PYTHONPATH=REPO, **env))


def test_check_json_never_overwrites_the_run(tmp_path):
    """Round 4: ``seal-verl check RUN --json RUN/metrics.jsonl`` replaced the run's metrics."""
    run = tmp_path / "run"
    before = _a_finished_run(run)
    for target in (run / RF.METRICS, run / "check.json", run / RF.CHECKPOINTS / "x.json"):
        proc = _cli("check", str(run), "--json", str(target), "--force")
        assert proc.returncode == 2 and "an output is never an input" in proc.stderr, proc.stderr
    assert _files(run) == before
    (tmp_path / "check.json").write_text("earlier")
    proc = _cli("check", str(run), "--json", str(tmp_path / "check.json"))
    assert proc.returncode == 2 and "already exists" in proc.stderr
    assert (tmp_path / "check.json").read_text() == "earlier"


def test_cue_reading_never_writes_into_the_model(tmp_path):
    """Round 4: ``cue_reading measure M --out M/model.safetensors`` replaced the weights with 302 bytes of JSON."""
    from seal_verl import dry_run as D

    model = D.tiny_model(str(tmp_path / "model"))
    before = _files(model)
    proc = subprocess.run([sys.executable, "-m", "seal_verl.models.warm_start.cue_reading", "measure", model,
                           "--out", os.path.join(model, "model.safetensors"), "--force"], capture_output=True,
                          text=True, timeout=300, env=dict(os.environ, PYTHONPATH=REPO))
    assert proc.returncode == 2 and "an output is never an input" in proc.stderr, proc.stderr[-2000:]
    assert _files(model) == before


def test_cue_effect_verifies_the_model_it_measures(tmp_path):
    """Round 4: ``make cue-effect`` never verified the model's build.json."""
    import shutil

    model = tmp_path / "model"
    shutil.copytree(os.path.join(REPO, "recipes", "ledger_cpu", "model"), model)
    data = bytearray((model / "model.safetensors").read_bytes())
    data[-16384:] = bytes(16384)
    (model / "model.safetensors").write_bytes(bytes(data))
    proc = subprocess.run([sys.executable, "-m", "seal_verl.models.warm_start.cue_reading", "measure", str(model)],
                          capture_output=True, text=True, timeout=300, env=dict(os.environ, PYTHONPATH=REPO))
    assert proc.returncode == 2 and "model.safetensors differs from the model as built" in proc.stderr, \
        proc.stderr[-2000:]


@pytest.mark.parametrize("samples", ["0", "1000000"])
def test_cue_reading_samples_are_bounded(samples, tmp_path):
    """Round 4: ``--samples 1000000`` reached 3.7 GB before a MemoryError traceback."""
    proc = subprocess.run([sys.executable, "-m", "seal_verl.models.warm_start.cue_reading", "measure",
                           str(tmp_path), "--samples", samples], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=REPO))
    assert proc.returncode == 2 and "--samples must be in 1..256" in proc.stderr and "Traceback" not in proc.stderr


def test_a_warm_start_stage_never_writes_into_its_base(tmp_path):
    """Round 4: a warm-start stage whose output folder was its ``--base`` deleted the base's weights and config."""
    from seal_verl import dry_run as D

    base = D.tiny_model(str(tmp_path / "tiny-random"))
    before = _files(base)
    for out in (base, os.path.join(base, "stage")):
        proc = subprocess.run([sys.executable, "-m", "seal_verl.models.warm_start.ledger", out, "--base", base,
                               "--force"], capture_output=True, text=True, timeout=300,
                              env=dict(os.environ, PYTHONPATH=REPO))
        assert proc.returncode == 2 and "an output is never an input" in proc.stderr, proc.stderr[-2000:]
    assert _files(base) == before


def test_a_warm_start_stage_refuses_a_folder_that_is_not_its_own_cache(tmp_path):
    """A folder holding a model the pipeline did not build (no record of its own) is refused; with --force it is
    moved aside before the stage writes anything."""
    from seal_verl import outputs

    from seal_verl.models.warm_start import pipeline as P
    from seal_verl.models.warm_start.target import WarmStartError
    from seal_verl import dry_run as D

    base = D.tiny_model(str(tmp_path / "tiny-random"))
    other = D.tiny_model(str(tmp_path / "someone-elses"))
    before = _files(other)
    with pytest.raises(WarmStartError, match="holds a model"):
        P.check_base(base, other)
    assert _files(other) == before
    P.check_base(base, other, force=True)
    aside = [p for p in os.listdir(tmp_path) if p.startswith("someone-elses.earlier-")]
    assert len(aside) == 1 and _files(tmp_path / aside[0]) == before
    outputs.unlock(other)


def test_make_dry_run_passes_force_on():
    out = subprocess.run(["make", "-n", "dry-run", "FORCE=1"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert "--force" in out.stdout
    out = subprocess.run(["make", "-n", "dry-run"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert "--force" not in out.stdout


def test_moved_aside_names_are_unique_within_a_second(tmp_path):
    from seal_verl import outputs

    path = tmp_path / "run"
    path.mkdir()
    names = set()
    for _ in range(3):
        (path / "x").write_text("1")
        names.add(outputs.move_aside(str(path)))
    assert len(names) == 3 and all(os.path.isfile(os.path.join(n, "x")) for n in names)
