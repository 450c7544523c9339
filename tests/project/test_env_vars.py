"""The registry of the project's environment variables (``seal_verl/env_vars.py``): every ``SEAL_`` variable the code
reads is registered, a bad value or an unknown name is one line naming it before any work, and a fault hook is
refused outside the test suite (or, with its consent, announced on every start).

Findings this answers (round 4): a typo in a sandbox setting (``SEAL_BFCL_IDLE_POOL_MB=abc``,
``SEAL_BFCL_MAX_TOOL_WORKERS=0``) turned every judgement into a checker error while ``diagnose`` printed 0.00 and
exited 0; a leftover ``SEAL_BFCL_FAULTS`` changed results with nothing said; ``SEAL_BFCL_RAISE_NOFILE=false`` still
raised the limit; malformed fault specs were ignored without a word.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from _paths import REPO

#: where the project reads its variables (the test suite's own knobs are registered too, marked ``test``)
SOURCES = ("seal_verl", "env_wrappers", "reward_fns", "recipes", "bench", "Makefile", ".ci", "tests/conftest.py",
           "tests/_served.py", "tests/_loopback_only", "tests/cpu_training", "tests/eval")


@pytest.fixture
def env_vars():
    """The registry module (imported by the tests, so that the file collects where the module is missing)."""
    from seal_verl import env_vars as module

    return module


def _read_names() -> dict[str, str]:
    """Every ``SEAL_`` name the code reads as an environment variable: a Python string that is the name, read from
    the environment, set in it or bound to a constant, a keyword of an environment built for a subprocess, or a
    shell/Makefile expansion or assignment of it; name -> one place."""
    found: dict[str, str] = {}
    py = re.compile(r"""(?:environ\.get\(|environ\[|setdefault\(|getenv\(|setenv\(|delenv\(|value\(|=\s*)"""
                    r"""["'](SEAL_[A-Z0-9_]+)["']|(?<![\w.])(SEAL_[A-Z0-9_]+)=(?!=)""")
    sh = re.compile(r"\$\{?(SEAL_[A-Z0-9_]+)|\b(SEAL_[A-Z0-9_]+)=")
    for source in SOURCES:
        top = os.path.join(REPO, source)
        files = [top] if os.path.isfile(top) else [os.path.join(d, f) for d, _, fs in os.walk(top) for f in fs]
        for path in files:
            if not path.endswith((".py", ".sh", "Makefile", "run")) or ".venv" in path or path.endswith("env_vars.py"):
                continue
            text = open(path, encoding="utf-8", errors="replace").read()
            pattern = py if path.endswith(".py") else sh
            for m in pattern.finditer(text):
                name = next(g for g in m.groups() if g)
                found.setdefault(name, os.path.relpath(path, REPO))
    return found


def test_every_variable_the_code_reads_is_registered(env_vars):
    names = _read_names()
    assert "SEAL_BFCL_FAULTS" in names and "SEAL_CPU_MODEL" in names, "the scan found too little"
    missing = {n: where for n, where in names.items() if n not in env_vars.VARIABLES}
    assert missing == {}


@pytest.mark.parametrize("name, raw, says", [
    ("SEAL_BFCL_IDLE_POOL_MB", "abc", "positive whole number"),
    ("SEAL_BFCL_MAX_TOOL_WORKERS", "0", "positive whole number"),
    ("SEAL_BFCL_RAISE_NOFILE", "maybe", "boolean"),
    ("SEAL_CPU_ENV_MODE", "fast", "one of locked, resolve"),
    ("SEAL_BFCL_FAULTS", "tool=explode@reply", "not a fault a worker knows"),
    ("SEAL_BFCL_FAULTS", "judge_call", "not a fault a worker knows"),
    ("SEAL_BFCL_MAX_TOOL_WORKER", "4", "did you mean SEAL_BFCL_MAX_TOOL_WORKERS"),
    ("SEAL_NOT_A_SETTING", "1", "not a setting of this project"),
])
def test_a_bad_value_or_an_unknown_name_is_one_line_naming_it(name, raw, says, env_vars):
    with pytest.raises(env_vars.SettingError) as info:
        env_vars.check({name: raw, env_vars.ALLOW_FAULTS: "1"})
    text = str(info.value)
    assert name in text and says in text and "\n" not in text


def test_values_and_defaults(env_vars):
    env = {"SEAL_BFCL_RAISE_NOFILE": "false", "SEAL_BFCL_IDLE_POOL_MB": " 512 ", "SEAL_CPU_TRAINING": "1"}
    assert env_vars.check(env) == {"SEAL_BFCL_RAISE_NOFILE": False, "SEAL_BFCL_IDLE_POOL_MB": 512,
                                   "SEAL_CPU_TRAINING": True}
    assert env_vars.value("SEAL_BFCL_RAISE_NOFILE", {}) is True
    assert env_vars.value("SEAL_BFCL_MAX_TOOL_WORKERS", {"SEAL_BFCL_MAX_TOOL_WORKERS": ""}) is None


def test_raise_nofile_false_leaves_the_limit_alone(monkeypatch):
    """``SEAL_BFCL_RAISE_NOFILE=false`` once still raised the limit (only "0" switched it off)."""
    from env_wrappers.bfcl.sandbox import limits

    monkeypatch.setattr(limits, "raise_open_files_limit", lambda: pytest.fail("the limit was raised"))
    for raw in ("false", "no", "off", "0"):
        monkeypatch.setenv("SEAL_BFCL_RAISE_NOFILE", raw)
        assert limits.bounds(max_workers=4).open_files == (None, None)


def test_a_fault_variable_is_refused_without_consent_and_recorded_with_it(env_vars):
    spec = "judge=exit@finish#multi_turn_base_0"
    with pytest.raises(env_vars.SettingError, match="SEAL_BFCL_FAULTS.*only in the test suite"):
        env_vars.check({"SEAL_BFCL_FAULTS": spec})
    allowed = {"SEAL_BFCL_FAULTS": spec, env_vars.ALLOW_FAULTS: "1"}
    assert env_vars.check(allowed)["SEAL_BFCL_FAULTS"] == [("judge", "exit", "finish", "multi_turn_base_0")]
    assert env_vars.faults(allowed) == {"SEAL_BFCL_FAULTS": spec}
    assert env_vars.faults({}) == {}
    assert "fault injection on: SEAL_BFCL_FAULTS=" in env_vars.announcements(allowed)[0]


def _env(**more) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEAL_")}
    env.update(PYTHONPATH=REPO, **more)
    return env


@pytest.mark.parametrize("setting", [{"SEAL_BFCL_IDLE_POOL_MB": "abc"}, {"SEAL_BFCL_MAX_TOOL_WORKERS": "0"},
                                     {"SEAL_BFCL_FAULTS": "judge_call=overrun"}])
def test_diagnose_refuses_a_bad_setting_before_any_work(setting, tmp_path):
    """Before: every judgement a checker error, ``diagnose`` 0.00 and exit 0 (a bad sandbox setting), or every
    verdict changed with nothing said (a leftover fault variable)."""
    from env_wrappers.bfcl.evaluation.demo import write_demo_results

    results = tmp_path / "results.jsonl"
    write_demo_results(str(results))
    out = tmp_path / "labels.jsonl"
    proc = subprocess.run([sys.executable, "-m", "seal_verl.cli", "diagnose", str(results), "--out", str(out)],
                          env=_env(**setting), capture_output=True, text=True, timeout=300)
    name = next(iter(setting))
    assert proc.returncode == 2, proc.stdout[-1000:] + proc.stderr[-1000:]
    assert proc.stderr.count("\n") == 1 and name in proc.stderr, proc.stderr
    assert not out.exists()


def test_an_allowed_fault_is_announced_on_start(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "seal_verl.env_vars", "seal-verl"],
                          env=_env(SEAL_BFCL_FAULTS="tool=hold@reset", SEAL_ALLOW_FAULTS="1"),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "fault injection on: SEAL_BFCL_FAULTS=tool=hold@reset" in proc.stderr


def test_the_reward_function_refuses_a_bad_setting_when_verl_loads_it():
    """verl's reward worker loads the reward function by path: a bad setting stops it there, naming the variable."""
    path = os.path.join(REPO, "reward_fns", "seal_reward.py")
    code = ("import importlib.util, sys; spec = importlib.util.spec_from_file_location('r', sys.argv[1]); "
            "spec.loader.exec_module(importlib.util.module_from_spec(spec))")
    proc = subprocess.run([sys.executable, "-c", code, path], env=_env(SEAL_BFCL_TOOL_THREADS="many"),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines()[-1].startswith("seal_verl.env_vars.SettingError: SEAL_BFCL_TOOL_THREADS=")
