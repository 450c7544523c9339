"""``make run``, the README's main command: SEAL on the ledger environment (training tasks and held-out tasks), from
the shipped warm start, with the recipe's cues and the cue-effect probe on, ending with the commands that check and
render the run in the environment the user has."""

from __future__ import annotations

import os
import subprocess


from _paths import REPO



def _dry(target: str, *args: str) -> str:
    r = subprocess.run(["make", "-n", target, *args], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_make_run_is_seal_on_the_ledger_with_held_out_tasks():
    out = _dry("run")
    assert "recipes/ledger_cpu/run_ledger.sh" in out and "VARIANT=seal" in out
    assert "VARIANT=grpo" in _dry("run-grpo")
    assert "recipes/bfcl_v3/cpu/run_cpu.sh" in _dry("run-bfcl") and "STEPS=4" in _dry("run-bfcl")
    assert "STEPS=7" in _dry("run", "STEPS=7")


def test_the_ledger_run_validates_before_and_after_without_cues_and_probes_with_cues():
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from seal_verl.verl_glue.config import check_run_config

    recipe = os.path.join(REPO, "recipes", "bfcl_v3")
    search = (f"hydra.searchpath=[pkg://verl.trainer.config,file://{recipe}/cpu/config,"
              f"file://{REPO}/recipes/ledger_cpu/config]")
    with initialize_config_dir(config_dir=os.path.join(recipe, "config"), version_base=None):
        cfg = compose(config_name="bfcl_v3", overrides=[
            search, "backbone=qwen2.5-3b", "variant=seal", "+cpu=tiny", "+learn=ledger", f"recipe.dir={recipe}",
            f"recipe.ledger_dir={REPO}/recipes/ledger_cpu", "recipe.data_dir=/data", "trainer.test_freq=20"])
    OmegaConf.resolve(cfg)
    seal = check_run_config(cfg)
    assert seal.interface.proactive_cues is True  # the recipe's cues as they are
    assert seal.cue_effect.enabled and seal.cue_effect.every <= 5
    assert cfg.trainer.val_before_train is True and cfg.data.val_files.endswith("eval.parquet")


def test_held_out_summary_line():
    from seal_verl.runs.watch import held_out_summary

    rows = [{"global_step": 0, "score": 0.25}, {"global_step": 0, "score": 0.75},
            {"global_step": 20, "score": 1.0}, {"global_step": 20, "score": 0.5}]
    assert held_out_summary(rows) == ("validation without cues (greedy, 2 rollouts): 0.50 before the first step, "
                                      "0.75 after step 20 (+0.25)")
    assert held_out_summary(rows[2:]) is None  # no validation before training: nothing to compare


def test_the_run_scripts_end_with_the_check_and_the_report():
    """Both scripts end in the one launcher, which prints the commands that check and render the run, with the
    tools of the environment the run used (where the report's imports are locked)."""
    text = open(os.path.join(REPO, "recipes", "bfcl_v3", "cpu", "launch.py"), encoding="utf-8").read()
    assert "seal-verl check {s.out} --steps {s.steps}" in text
    assert "seal-verl report {s.out} --out {s.out}/report" in text
    assert 'os.path.join(sys.prefix, "bin")' in text  # the environment the run used
    for script in ("recipes/ledger_cpu/run_ledger.sh", "recipes/bfcl_v3/cpu/run_cpu.sh"):
        assert "launch.py" in open(os.path.join(REPO, script), encoding="utf-8").read()
