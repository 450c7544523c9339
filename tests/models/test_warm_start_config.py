"""The warm starts live in the installed package and build with the settings of the run they prepare for.

- Recipes and benchmarks import what they use from installed packages: no script edits ``sys.path``, and no warm
  start library is left in a recipe folder.
- One pipeline: rendering, fine-tuning, sampling and caching are defined once, in the pipeline's modules
  (``seal_verl/models/warm_start/{render,finetune,sampling,pipeline}.py``)
  only; the BFCL warm start and every ledger stage call it.
- Lengths: the prompt and response lengths (and the agent-loop file and sampling) a warm start renders and samples
  with are the ones its run trains with. The ledger warm start once kept a copy of 1536 prompt tokens while the
  ledger run trained with 1280.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest
import yaml

from _paths import REPO

from seal_verl.models.warm_start import bfcl_cpu, finetune, ledger, ledger_mix, pipeline, render, run_config, sampling

PACKAGE = os.path.dirname(os.path.abspath(pipeline.__file__))
TINY = os.path.join(REPO, "recipes", "bfcl_v3", "cpu", "config", "cpu", "tiny.yaml")
LEDGER = os.path.join(REPO, "recipes", "ledger_cpu", "config", "learn", "ledger.yaml")


def _py_files(*tops):
    for top in tops:
        for folder, _dirs, files in os.walk(os.path.join(REPO, top)):
            for name in files:
                if name.endswith(".py"):
                    yield os.path.join(folder, name)


def _touches_sys_path(path: str) -> list[int]:
    """Lines of ``path`` that read or change ``sys.path`` (``sys.path.insert``, ``sys.path.append``, ...)."""
    with open(path, encoding="utf-8") as fh:
        tree = ast.parse(fh.read(), path)
    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and node.attr == "path"
            and isinstance(node.value, ast.Name) and node.value.id == "sys"]


def test_no_recipe_or_benchmark_edits_sys_path():
    found = [f"{os.path.relpath(p, REPO)}:{line}" for p in _py_files("recipes", "bench") for line in _touches_sys_path(p)]
    assert found == [], f"sys.path edited (import from the installed package instead): {found}"


@pytest.mark.parametrize("old", ["recipes/bfcl_v3/cpu/warm_start.py", "recipes/bfcl_v3/cpu/probe_cues.py",
                                 "recipes/ledger_cpu/ledger_warm_start.py", "recipes/ledger_cpu/ledger_mix.py"])
def test_the_warm_start_library_lives_in_the_package(old):
    assert not os.path.exists(os.path.join(REPO, old))


#: the pipeline's modules: one job each (render rows, fine-tune, sample pass rates, cache and orchestrate)
PIPELINE_MODULES = {m.__file__ for m in (pipeline, render, finetune, sampling)}
#: what only the pipeline defines: a second copy of any of these in a warm start is a second pipeline
PIPELINE_ONLY = {"HFSampler", "fine_tune", "trajectory_nll", "tasks_to_train", "render_under_cue_states", "rows_of",
                 "cue_state", "agent_loop_setup", "loop_config", "sampled_pass_rates", "fingerprint", "read_info",
                 "write_info", "format_pass_table", "build", "cli", "run_loop"}


def test_one_pipeline_defines_rendering_fine_tuning_and_caching():
    copies = []
    for path in _py_files(os.path.relpath(PACKAGE, REPO), "recipes"):
        if path in PIPELINE_MODULES:
            continue
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read(), path)
        copies += [f"{os.path.relpath(path, REPO)}:{n.lineno} {n.name}" for n in ast.walk(tree)
                   if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name in PIPELINE_ONLY]
        # no module reaches into another's private helpers
        copies += [f"{os.path.relpath(path, REPO)}:{n.lineno} {n.attr}" for n in ast.walk(tree)
                   if isinstance(n, ast.Attribute) and n.attr.startswith("_") and not n.attr.startswith("__")
                   and isinstance(n.value, ast.Name) and n.value.id in ("P", "R", "S", "F", "T", "L", "pipeline", "ledger",
                                                                       "bfcl_cpu")]
    assert copies == [], copies
    for module in (bfcl_cpu, ledger):
        with open(module.__file__, encoding="utf-8") as fh:
            assert "P.build(" in fh.read(), module.__name__
    # the mixed stage is a ledger stage with more rows: it builds through ledger.warm_start
    with open(ledger_mix.__file__, encoding="utf-8") as fh:
        assert "L.warm_start(" in fh.read()


def _data(path: str) -> dict:
    with open(path, encoding="utf-8") as fh:
        return yaml.safe_load(fh)["data"]


@pytest.mark.parametrize("module, overlays", [(bfcl_cpu, [TINY]), (ledger, [TINY, LEDGER])],
                         ids=["bfcl_cpu", "ledger"])
def test_the_warm_start_renders_with_the_lengths_of_the_config_it_trains_for(module, overlays):
    # the overlays in the order the run composes them; the last one that sets a length is the run's
    expected = {}
    for path in overlays:
        expected.update({k: v for k, v in _data(path).items() if k in ("max_prompt_length", "max_response_length")})
    s = module.TARGET.settings
    assert (s.prompt_length, s.response_length) == (expected["max_prompt_length"], expected["max_response_length"])
    # ... and the verl config the warm start's agent loop runs under carries them, with the run's agent-loop file
    cfg = render.loop_config(module.TARGET, "/unused/model", 1)
    assert cfg.data.max_prompt_length == expected["max_prompt_length"]
    assert cfg.data.max_response_length == expected["max_response_length"]
    assert cfg.actor_rollout_ref.rollout.prompt_length == expected["max_prompt_length"]
    assert cfg.actor_rollout_ref.rollout.response_length == expected["max_response_length"]
    run = run_config.compose(module.TARGET.run)
    assert os.path.abspath(cfg.actor_rollout_ref.rollout.agent.agent_loop_config_path) == os.path.abspath(
        str(run.actor_rollout_ref.rollout.agent.agent_loop_config_path)) == s.agent_loops
    assert os.path.isfile(s.agent_loops)
    assert cfg.actor_rollout_ref.rollout.temperature == run.actor_rollout_ref.rollout.temperature == s.temperature
    assert cfg.actor_rollout_ref.rollout.top_p == run.actor_rollout_ref.rollout.top_p == s.top_p


@pytest.mark.parametrize("run, script, recipe", [("bfcl_cpu", "recipes/bfcl_v3/cpu/run_cpu.sh", "bfcl"),
                                                 ("ledger", "recipes/ledger_cpu/run_ledger.sh", "ledger")])
def test_the_composed_run_is_the_one_its_script_launches(run, script, recipe):
    """The script hands its run to the one launcher of both CPU runs, whose main_ppo arguments for that recipe
    hold the overrides the warm start composes."""
    from _scripts import load_script

    with open(os.path.join(REPO, script), encoding="utf-8") as fh:
        assert f'launch.py" {recipe}' in fh.read()
    launch = load_script("recipes/bfcl_v3/cpu/launch.py", "seal_cpu_launch_for_config")
    r = launch.RECIPES[recipe]
    settings = launch.read_settings(r, {"OUT": "/tmp/run", "SEAL_CPU_MODELS": "/tmp/models"})
    args = r.overrides(settings, "/tmp/model", "/tmp/run/checkpoints")
    for override in run_config.RUNS[run]["overrides"]:
        if override.startswith(("backbone=", "+")):
            assert override in args, (recipe, override)
    for folder in run_config.RUNS[run]["search"]:
        assert os.path.isdir(folder)


@pytest.mark.parametrize("module", ["bfcl_cpu", "ledger", "ledger_mix", "ledger_stages", "probe_cues"])
def test_each_warm_start_command_runs_as_a_module(module):
    r = subprocess.run([sys.executable, "-m", f"seal_verl.models.warm_start.{module}", "--help"], cwd=REPO,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert f"python -m seal_verl.models.warm_start.{module}" in r.stdout
