"""recipes/bfcl_v3/cpu/prepare_run.py's model folders: the BFCL run needs room for ~6k-token prompts, the ledger
warm start starts from the same shared ``tiny-random`` and keys its cache on that folder's bytes, so preparing a
BFCL run must leave ``tiny-random`` as it is (it raised the limits in place, and every ``make run`` after a ledger
warm start made the next ``make bench-learning`` rebuild its four stages)."""

from __future__ import annotations

import hashlib
import json
import os

import pytest
from _scripts import load_script

pr = load_script("recipes/bfcl_v3/cpu/prepare_run.py", "seal_prepare_run")


def _digests(folder):
    return {n: hashlib.sha256(open(os.path.join(folder, n), "rb").read()).hexdigest()
            for n in sorted(os.listdir(folder)) if os.path.isfile(os.path.join(folder, n))}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    from seal_verl.dry_run import tiny_model

    root = tmp_path_factory.mktemp("models")
    tiny_model(str(root / "tiny-random"))  # as the ledger warm start makes it
    return root


def test_bfcl_base_is_a_copy_and_the_shared_base_is_untouched(models):
    shared = str(models / "tiny-random")
    before = _digests(shared)
    assert json.load(open(os.path.join(shared, "config.json")))["max_position_embeddings"] < 8192
    out = pr.long_context_base(str(models), 8192)
    assert _digests(shared) == before
    assert os.path.basename(out) == "tiny-random-ctx8192"
    assert json.load(open(os.path.join(out, "config.json")))["max_position_embeddings"] == 8192
    assert json.load(open(os.path.join(out, "tokenizer_config.json")))["model_max_length"] == 8192
    copy = _digests(out)
    assert {n for n in copy if copy[n] == before.get(n)} == set(before) - {"config.json", "tokenizer_config.json"}
    # a second preparation writes nothing: same bytes, so the BFCL warm start's cache key stays the same
    mtimes = {n: os.stat(os.path.join(out, n)).st_mtime_ns for n in copy}
    assert pr.long_context_base(str(models), 8192) == out
    assert {n: os.stat(os.path.join(out, n)).st_mtime_ns for n in copy} == mtimes


def test_a_given_model_folder_is_never_written(models, tmp_path):
    """Round 4: ``SEAL_CPU_MODEL=... make run-bfcl`` rewrote the given model's config.json in place (2048 -> 8192),
    so the shipped ledger model then failed its own verification. A folder whose limit is too low gets a copy in
    the model cache with the limit raised; one whose limit is enough is used as it is."""
    import shutil

    given = tmp_path / "mine"
    shutil.copytree(models / "tiny-random", given)
    before = _digests(str(given))
    cache = tmp_path / "cache"
    used = pr.given_model(str(given), str(cache), 4096)
    assert _digests(str(given)) == before
    assert os.path.dirname(used) == str(cache) and os.path.basename(used).endswith("-ctx4096")
    assert json.load(open(os.path.join(used, "config.json")))["max_position_embeddings"] == 4096
    assert pr.given_model(str(given), str(cache), 4096) == used  # the same copy, not another
    assert pr.given_model(str(given), str(cache), 1024) == str(given)  # large enough: used as it is
    assert _digests(str(given)) == before


def test_preparing_with_a_given_model_leaves_it_as_it_was(models, tmp_path):
    """The whole preparation with ``--model`` (what ``SEAL_CPU_MODEL`` passes): the given folder keeps its bytes."""
    import shutil

    given = tmp_path / "mine"
    shutil.copytree(models / "tiny-random", given)
    before = _digests(str(given))
    assert pr.main([str(tmp_path / "run"), "--models-dir", str(tmp_path / "cache"), "--model", str(given)]) == 0
    assert _digests(str(given)) == before
    prepared = json.load(open(tmp_path / "run" / "prepare.json"))
    assert prepared["model"] != str(given) and prepared["model_check"] == "not verified: it has no build.json"


def test_preparing_a_bfcl_run_leaves_the_shared_base_as_it_was(models, tmp_path):
    """The whole preparation (``run_cpu.sh``'s first step; no warm start, to stay fast): the run's model is the
    copy, and ``tiny-random`` keeps its bytes."""
    shared = str(models / "tiny-random")
    before = _digests(shared)
    assert pr.main([str(tmp_path / "run"), "--models-dir", str(models), "--no-warm-start"]) == 0
    assert _digests(shared) == before
    used = json.load(open(tmp_path / "run" / "prepare.json"))["model"]
    assert os.path.basename(used) == "tiny-random-ctx8192"
