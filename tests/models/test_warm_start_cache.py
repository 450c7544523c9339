"""The warm start's cache is trusted only while its files are what its record says (round 4: a ``REBUILD=1`` cache
with 16,384 zeroed weights was reused as "cached: same inputs"), the shared command line says what it is (round 4:
``python -m seal_verl.models.warm_start.pipeline --help`` printed nothing, exit 0), and the cue-effect measurement
leaves no folder in the temp directory (round 4: one ``cue-effect-XXXXXXXX`` folder per measure, even on success).
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import tempfile

import pytest

from _paths import REPO
from seal_verl.models import shipped as sm
from seal_verl.models.warm_start import pipeline as P


def _cached(tmp_path) -> str:
    """A model folder as the pipeline leaves it: its files, its record with their digests, its working files."""
    from seal_verl import dry_run as D

    out = D.tiny_model(str(tmp_path / "tiny-warm"))
    with open(os.path.join(out, "warm_start_seal_env.parquet"), "wb") as fh:
        fh.write(b"rows")
    P.write_info(out, {"fingerprint": "f00d", "files": P.model_files(out)})
    return out


def test_a_cache_whose_weights_changed_is_not_reused(tmp_path):
    out = _cached(tmp_path)
    info = P.read_info(out)
    assert "warm_start_seal_env.parquet" not in info["files"] and "model.safetensors" in info["files"]
    assert P._damage(out, info) is None
    assert sm.check_model(out) == "verified against its warm_start.json"
    data = bytearray(open(os.path.join(out, "model.safetensors"), "rb").read())
    data[-16384:] = bytes(16384)
    open(os.path.join(out, "model.safetensors"), "wb").write(bytes(data))
    assert "model.safetensors differs" in P._damage(out, info)
    with pytest.raises(sm.ShippedModelError, match="model.safetensors differs"):
        sm.check_model(out)


def test_a_file_added_to_a_cache_is_named(tmp_path):
    out = _cached(tmp_path)
    with open(os.path.join(out, "special_tokens_map.json"), "w") as fh:
        json.dump({"eos_token": "<|endoftext|>"}, fh)
    assert "special_tokens_map.json is not recorded" in P._damage(out, P.read_info(out))


def test_the_pipeline_module_says_what_it_is():
    def run(*args):
        return subprocess.run([sys.executable, "-m", "seal_verl.models.warm_start.pipeline", *args],
                              capture_output=True, text=True, timeout=120, env=dict(os.environ, PYTHONPATH=REPO))

    helped = run("--help")
    assert helped.returncode == 0 and "seal_verl.models.warm_start.ledger_stages" in helped.stdout
    for args in ((), ("OUT", "--base", "M")):
        wrong = run(*args)
        assert wrong.returncode == 2 and "not a stage" in wrong.stderr


@pytest.mark.parametrize("succeeds", [True, False])
def test_the_measurement_leaves_no_temp_folder(succeeds, tmp_path, monkeypatch):
    from seal_verl.models.warm_start import cue_reading

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    seen = []

    def measured(target, model, task_ids, samples, seed, confidence, folder, *rest):
        seen.append(folder)
        assert os.path.isdir(folder)
        if not succeeds:
            raise RuntimeError("the measurement failed")
        return {"effects": {}}

    monkeypatch.setattr(cue_reading, "_measure", measured)
    target = type("T", (), {"settings": None})()
    if succeeds:
        assert cue_reading.measure(target, "model", ["t"]) == {"effects": {}}
    else:
        with pytest.raises(RuntimeError):
            cue_reading.measure(target, "model", ["t"])
    assert seen and not os.path.exists(seen[0]) and glob.glob(str(tmp_path / "cue-effect-*")) == []
