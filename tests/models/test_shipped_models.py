"""The warm-started models that ship with the project: intact, loadable, and named with what rebuilds them."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from _paths import REPO

from seal_verl.models import shipped as sm
SHIPPED = [os.path.join(REPO, "recipes", "bfcl_v3", "cpu", "model"), os.path.join(REPO, "recipes", "ledger_cpu", "model")]
PRESENT = [p for p in SHIPPED if os.path.isdir(p)]


def test_the_bfcl_warm_start_ships():
    assert os.path.isfile(os.path.join(SHIPPED[0], sm.BUILD_FILE))


@pytest.mark.parametrize("folder", PRESENT, ids=[os.path.relpath(p, REPO) for p in PRESENT])
def test_shipped_model_is_intact_and_loads(folder):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    build = sm.verify(folder)
    assert build["command"] == "make ship-warm-starts"
    with open(os.path.join(REPO, "Makefile"), encoding="utf-8") as fh:
        assert "\nship-warm-starts:" in fh.read()
    assert build["built_by"]["commit"] and build["built_by"]["torch"]
    assert build["warm_start"]["fingerprint"]
    for name in os.listdir(folder):  # no path of the machine that built it
        with open(os.path.join(folder, name), "rb") as fh:
            data = fh.read()
        assert b"/work/" not in data and b"/tmp/" not in data and b"/root/" not in data, name
    model = AutoModelForCausalLM.from_pretrained(folder)
    tok = AutoTokenizer.from_pretrained(folder)
    ids = tok.apply_chat_template([{"role": "user", "content": "hello"}], add_generation_prompt=True)
    ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
    out = model(input_ids=__import__("torch").tensor([list(ids)]))
    assert out.logits.shape[-1] == model.config.vocab_size
    assert sum(p.numel() for p in model.parameters()) < 2_000_000  # the tiny model, a few MB on disk


def test_verify_names_a_changed_or_missing_file(tmp_path):
    src = PRESENT[0]
    copy = tmp_path / "model"
    shutil.copytree(src, copy)
    data = bytearray((copy / "model.safetensors").read_bytes())
    data[-1] ^= 0xFF
    (copy / "model.safetensors").write_bytes(bytes(data))
    # restoring the file is the fix (round 4: the message sent readers to a long rebuild replacing the shipped copy)
    with pytest.raises(sm.ShippedModelError, match=r"model.safetensors differs .*git checkout -- .*REBUILD=1") as info:
        sm.verify(str(copy))
    assert "ship-warm-starts" not in str(info.value)
    (copy / "model.safetensors").unlink()
    with pytest.raises(sm.ShippedModelError, match="missing"):
        sm.verify(str(copy))
    with pytest.raises(sm.ShippedModelError, match="not a shipped model"):
        sm.verify(str(tmp_path))
    r = subprocess.run([sys.executable, "-m", "seal_verl.models.shipped", "verify", str(copy)], capture_output=True,
                       text=True)
    assert r.returncode == 1 and r.stderr.startswith("error: ") and "Traceback" not in r.stderr


def test_use_copies_once_and_never_writes_the_shipped_folder(tmp_path):
    src = PRESENT[0]
    before = {n: os.path.getmtime(os.path.join(src, n)) for n in os.listdir(src)}
    dest = str(tmp_path / "cache" / "warm")
    os.makedirs(os.path.dirname(dest))
    assert sm.use(src, dest) == os.path.abspath(dest)
    stamp = os.path.getmtime(os.path.join(dest, "model.safetensors"))
    sm.use(src, dest)  # the same files: nothing copied again
    assert os.path.getmtime(os.path.join(dest, "model.safetensors")) == stamp
    with open(os.path.join(dest, "config.json"), "a") as fh:  # a changed copy is replaced
        fh.write(" ")
    sm.use(src, dest)
    sm.verify(dest)
    assert before == {n: os.path.getmtime(os.path.join(src, n)) for n in os.listdir(src)}


def _git(repo, *args) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args],
                          check=True, capture_output=True, text=True).stdout.strip()


def _checkout(tmp_path):
    """A git checkout with two committed files; returns (its folder, its commit)."""
    repo = tmp_path / "checkout"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "build.py").write_text("print('build')\n")
    (repo / "old.py").write_text("x = 1\n")
    _git(repo, "add", "build.py", "old.py")
    _git(repo, "commit", "-q", "-m", "code")
    return repo, _git(repo, "rev-parse", "HEAD")


def _built(tmp_path):
    src = tmp_path / "built"
    shutil.copytree(PRESENT[0], src)
    return src


def test_ship_records_identity_without_machine_paths(tmp_path):
    src = _built(tmp_path)
    repo, commit = _checkout(tmp_path)
    record = json.loads((src / "warm_start.json").read_text())
    record["out"] = str(tmp_path / "somewhere" / "tiny-warm")
    (src / "warm_start.json").write_text(json.dumps(record))
    build = sm.ship(str(src), str(tmp_path / "shipped"), "make ship-warm-starts", repo=str(repo))
    assert set(build["files"]) >= {"model.safetensors", "config.json", "warm_start.json"}
    assert build["built_by"]["commit"] == commit and "uncommitted" not in build["built_by"]
    assert json.loads((tmp_path / "shipped" / "warm_start.json").read_text())["out"] == "tiny-warm"
    assert sm.verify(str(tmp_path / "shipped")) == build


def test_a_file_the_record_does_not_name_fails_verify(tmp_path):
    """Round 4: a ``special_tokens_map.json`` not in build.json passed ``verify`` and changed the tokenizer's end of
    sequence token; every file of the folder is the model as built, or verification fails."""
    copy = tmp_path / "model"
    shutil.copytree(PRESENT[0], copy)
    (copy / "special_tokens_map.json").write_text(json.dumps({"eos_token": "<|endoftext|>"}))
    with pytest.raises(sm.ShippedModelError, match="special_tokens_map.json is not recorded in build.json"):
        sm.verify(str(copy))
    (copy / "special_tokens_map.json").unlink()
    (copy / "extra").mkdir()
    with pytest.raises(sm.ShippedModelError, match="extra is not recorded"):
        sm.verify(str(copy))


def test_a_deeply_nested_build_record_is_one_line(tmp_path):
    """Round 4: a deeply nested build.json ended ``verify`` in a RecursionError traceback."""
    copy = tmp_path / "model"
    shutil.copytree(PRESENT[0], copy)
    (copy / sm.BUILD_FILE).write_text("[" * 100_000 + "]" * 100_000)
    r = subprocess.run([sys.executable, "-m", "seal_verl.models.shipped", "verify", str(copy)], capture_output=True,
                       text=True, env=dict(os.environ, PYTHONPATH=REPO))
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "is not valid JSON" in r.stderr, r.stderr[-500:]


@pytest.mark.parametrize("kind", ["link", "file"])
def test_a_cache_that_cannot_take_the_copy_is_named_as_the_cache(kind, tmp_path):
    """Round 4: a symlinked cache destination raised NotADirectoryError, and the run script then called the shipped
    warm start damaged; the error names the cache, and the shipped folder stays as it is."""
    dest = tmp_path / "cache" / "warm"
    dest.parent.mkdir()
    if kind == "link":
        (tmp_path / "elsewhere").write_text("x")
        dest.symlink_to(tmp_path / "elsewhere")
    else:
        dest.write_text("x")
    with pytest.raises(sm.CacheError, match="the model cache .* SEAL_CPU_MODELS"):
        sm.use(PRESENT[0], str(dest))
    sm.verify(PRESENT[0])


@pytest.mark.parametrize("given, says", [("/nonexistent/model", "not a folder"),
                                         ("/etc", "not a model folder (no config.json)")])
def test_check_model_refuses_what_is_not_a_model(given, says):
    """Round 4: a nonsense LEDGER_MODEL / SEAL_CPU_MODEL passed preparation and failed inside main_ppo 75 s later
    with a 40-line Hydra traceback."""
    with pytest.raises(sm.ShippedModelError, match=f"SEAL_CPU_MODEL={given}: {re.escape(says)}"):
        sm.check_model(given, "SEAL_CPU_MODEL")


def test_check_model_verifies_what_has_a_record_and_says_what_has_none(tmp_path):
    copy = tmp_path / "model"
    shutil.copytree(PRESENT[0], copy)
    assert sm.check_model(str(copy)) == "verified against its build.json"
    data = bytearray((copy / "model.safetensors").read_bytes())
    data[-100:] = bytes(100)  # zeroed weights
    (copy / "model.safetensors").write_bytes(bytes(data))
    with pytest.raises(sm.ShippedModelError, match="model.safetensors differs"):
        sm.check_model(str(copy))
    (copy / sm.BUILD_FILE).unlink()
    (copy / sm.WARM_START_RECORD).unlink()
    assert sm.check_model(str(copy)) == "not verified: it has no build.json"


def test_ship_refuses_a_checkout_with_uncommitted_changes(tmp_path):
    """A commit names the code that built a model only when the checkout holds nothing else."""
    src = _built(tmp_path)
    repo, _ = _checkout(tmp_path)
    (repo / "build.py").write_text("print('changed')\n")
    (repo / "new.py").write_text("y = 2\n")
    with pytest.raises(sm.ShippedModelError, match=r"uncommitted changes \(build.py, new.py\).*--allow-dirty"):
        sm.ship(str(src), str(tmp_path / "shipped"), "make ship-warm-starts", repo=str(repo))
    assert not (tmp_path / "shipped").exists()
    r = subprocess.run([sys.executable, "-m", "seal_verl.models.shipped", "clean-tree"], cwd=repo, capture_output=True,
                       text=True, env=dict(os.environ, PYTHONPATH=REPO))
    assert r.returncode == 1 and "build.py, new.py" in r.stderr and "Traceback" not in r.stderr


def test_ship_with_allow_dirty_records_each_changed_file(tmp_path):
    """The record says exactly what differed from the commit: each changed, new or removed file, with the SHA-256
    of the bytes that built the model."""
    src = _built(tmp_path)
    repo, commit = _checkout(tmp_path)
    (repo / "build.py").write_text("print('changed')\n")
    (repo / "new.py").write_text("y = 2\n")
    (repo / "old.py").unlink()
    build = sm.ship(str(src), str(tmp_path / "shipped"), "make ship-warm-starts", repo=str(repo), allow_dirty=True)
    assert build["built_by"]["commit"] == commit
    assert build["built_by"]["uncommitted"] == {"build.py": sm.file_sha256(str(repo / "build.py")),
                                                "new.py": sm.file_sha256(str(repo / "new.py")), "old.py": "deleted"}
    assert sm.verify(str(tmp_path / "shipped")) == build
