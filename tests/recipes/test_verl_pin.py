"""The recipe's verl pin (``recipes/bfcl_v3/REQUIRED_VERL.txt``): one version, the same everywhere the project names
verl's version, and ``seal-verl preflight`` says in one line when the installed verl is another."""

from __future__ import annotations

import os
import re

from _paths import REPO

from env_wrappers.bfcl.environment import preflight as P
from seal_verl.verl_glue import compat

PIN = os.path.join(REPO, "recipes", "bfcl_v3", "REQUIRED_VERL.txt")


def _pins_in(rel: str, pattern: str) -> set:
    with open(os.path.join(REPO, rel), encoding="utf-8") as f:
        return set(re.findall(pattern, f.read()))


def test_every_place_that_names_the_verl_version_agrees_with_the_pin():
    pinned = P.required_verl()
    assert pinned == P.required_verl(PIN) == compat.CHECKED_VERL
    assert _pins_in("recipes/bfcl_v3/requirements.txt", r"verl\[vllm\]==([\w.]+)") == {pinned}
    assert _pins_in("setup.py", r'"verl==([\w.]+)"') == {pinned}
    assert _pins_in("recipes/bfcl_v3/cpu/requirements-cpu-train.txt", r"(?m)^verl==([\w.]+)$") == {pinned}


def test_installed_verl_passes_and_another_fails_in_one_line():
    ok = P.check_verl_pin(compat.installed_verl())
    assert ok.status == "ok", ok.detail
    for installed, said in (("0.8.0", "verl 0.8.0 is installed"), (None, "verl is not installed")):
        bad = P.check_verl_pin(installed)
        assert bad.status == "fail" and "\n" not in bad.detail
        assert f"requires verl {P.required_verl()}" in bad.detail and said in bad.detail
        assert f"verl[vllm]=={P.required_verl()}" in bad.fix
    versions = P.check_versions()
    assert versions.status == "ok" or "verl pin" not in versions.detail


def test_preflight_reads_the_pin_file_not_a_copy(tmp_path):
    moved = tmp_path / "REQUIRED_VERL.txt"
    moved.write_text("# comment lines are allowed\n0.10.0\n")
    bad = P.check_verl_pin(compat.installed_verl(), str(moved))
    assert bad.status == "fail" and "requires verl 0.10.0" in bad.detail


def test_a_damaged_pin_file_is_named(tmp_path):
    for text in ("", "0.9.1\n0.9.2\n", "verl>=0.9\n"):
        damaged = tmp_path / "REQUIRED_VERL.txt"
        damaged.write_text(text)
        bad = P.check_verl_pin("0.9.1", str(damaged))
        assert bad.status == "fail" and str(damaged) in bad.detail and "one line with the verl version" in bad.detail
    missing = P.check_verl_pin("0.9.1", str(tmp_path / "absent.txt"))
    assert missing.status == "fail" and "absent.txt" in missing.detail
