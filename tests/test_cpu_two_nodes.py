"""Nothing in SEAL assumes one node: one real SEAL training step (``python -m verl.trainer.main_ppo``, CPU) on a
Ray cluster of two nodes started on this machine by ``recipes/bfcl_v3/cpu/run_two_nodes.sh``.

The script starts a head node (the one logical GPU: trainer, vLLM) and a CPU-only second node, runs 2 agent-loop
workers and 2 reward workers (verl spreads them round-robin over the nodes) and pins SEAL's closed-loop state
actor to the second node, so the trainer publishes the state to, and the agent loops on the head read it from,
another node. The test reads where each actor ran (``placement.json``, from Ray's state API) and runs the same
run checks (``check_run.py``) with the same arguments as the one-node SEAL step of tests/test_cpu_training.py.

Opt-in, about 4.5 minutes on 2 cores (256 s measured) once the warm-started model is cached (``SEAL_CPU_MODELS``; the first run
makes it, a few minutes more):

    SEAL_CPU_TRAINING=1 pytest -q tests/test_cpu_two_nodes.py         # or: make test-cpu-two-nodes

``SEAL_CPU_TRAINING_OUT=DIR`` keeps the run folder there (default: a pytest temporary folder).
"""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest
from _cpu_venv import cpu_train_venv

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CPU_DIR = os.path.join(REPO, "recipes", "bfcl_v3", "cpu")
VENV = cpu_train_venv()
STEPS = 1
#: the one-node SEAL step's check arguments (tests/test_cpu_training.py: SPECS["seal"]); no least share of non-zero
#: advantages: whether one step's groups have reward variance is up to what the model samples
MIN_NONZERO = 0.0
SEAL_KINDS = ("state_actor", "agent_loop_worker", "reward_worker")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(VENV is None, reason="a real two-node CPU training run takes ~4.5 min: set SEAL_CPU_TRAINING=1 "
                       "(uses/builds <repo>/.venv-cpu-train) or SEAL_CPU_TRAIN_VENV=<venv>"),
]


def _check_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("seal_cpu_check_run", os.path.join(CPU_DIR, "check_run.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = os.environ.get("SEAL_CPU_TRAINING_OUT") or str(tmp_path_factory.mktemp("cpu_two_nodes"))
    os.makedirs(root, exist_ok=True)
    out = os.path.join(root, "two_nodes")
    env = dict(os.environ, VARIANT="seal", STEPS=str(STEPS), OUT=out, SEAL_CPU_VENV=VENV, FORCE="1")
    env.pop("RAY_ADDRESS", None)  # the script starts its own cluster
    t0 = time.time()
    with open(os.path.join(root, "two_nodes.out"), "w") as log:
        proc = subprocess.run(["bash", os.path.join(CPU_DIR, "run_two_nodes.sh")], env=env, cwd=REPO,
                              stdout=log, stderr=subprocess.STDOUT, timeout=3600)
    seconds = round(time.time() - t0, 1)
    print(f"\ntwo-node CPU run: exit {proc.returncode}, {seconds} s, run dir {out}")
    placement = None
    if os.path.exists(os.path.join(out, "placement.json")):
        with open(os.path.join(out, "placement.json")) as f:
            placement = json.load(f)
        print("placement:", json.dumps(placement["seal_kinds_by_node"]), json.dumps(placement["by_kind"]))
    return {"dir": out, "rc": proc.returncode, "seconds": seconds, "placement": placement,
            "log": os.path.join(root, "two_nodes.out")}


def test_run_exits_0(run):
    assert run["rc"] == 0, f"run_two_nodes.sh exit {run['rc']}; console {run['log']}, verl {run['dir']}/main_ppo.log"


def test_cluster_had_two_nodes(run):
    p = run["placement"]
    assert p is not None, f"no placement.json in {run['dir']}"
    ids = [n["node_id"] for n in p["nodes"]]
    assert len(set(ids)) == 2 and sorted(n["role"] for n in p["nodes"]) == ["head", "seal_node_b"], p["nodes"]


def test_seal_actors_spread_over_both_nodes(run):
    p = run["placement"]
    assert p is not None, f"no placement.json in {run['dir']}"
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
    # every node ran at least one SEAL kind, and the two nodes are distinct ids
    assert set().union(*nodes_of.values()) == node_ids and len(node_ids) == 2


def test_run_checks_pass_as_on_one_node(run):
    check = _check_module()
    rep = check.check_run(run["dir"], STEPS, None, True, MIN_NONZERO)
    print(rep.text())
    failed = [(n, d) for n, ok, d in rep.items if not ok]
    assert rep.items and not failed, rep.text()
