"""``PREPARE_ONLY=1`` on both CPU run scripts: the model and the data are made, then the script stops before
verl's launcher. ``make warm-starts`` builds the cached warm starts this way, so a run that starts later finds
them.

Runs in the lean venv with a given model folder (``SEAL_CPU_MODEL``: no warm start), so it takes seconds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from _paths import REPO

SCRIPTS = {
    "bfcl": os.path.join(REPO, "recipes", "bfcl_v3", "cpu", "run_cpu.sh"),
    "ledger": os.path.join(REPO, "recipes", "ledger_cpu", "run_ledger.sh"),
}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from seal_verl import dry_run as D
    return D.tiny_model(str(tmp_path_factory.mktemp("tiny") / "model"))


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_prepare_only_stops_before_the_launcher(script, tiny, tmp_path):
    out = tmp_path / "run"
    env = dict(os.environ, PREPARE_ONLY="1", OUT=str(out), SEAL_CPU_VENV=sys.prefix, SEAL_CPU_MODEL=tiny,
               SEAL_CPU_MODELS=str(tmp_path / "models"))
    # On a script without PREPARE_ONLY the launcher starts (Ray, vLLM): the time limit ends that case.
    proc = subprocess.run(["bash", SCRIPTS[script]], env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "PREPARE_ONLY=1" in proc.stdout
    prepared = json.load(open(out / "prepare.json"))
    # the given folder as it is (ledger), or a copy with room for BFCL's prompts (never the given folder, rewritten)
    assert prepared["model"] == os.path.abspath(tiny) if script == "ledger" else \
        prepared["model"].startswith(str(tmp_path / "models"))
    assert "not verified" in prepared["model_check"]
    assert (out / "data" / "train.parquet").is_file()
    assert not (out / "main_ppo.log").exists() and not (out / "timing.json").exists()
