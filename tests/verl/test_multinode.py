"""The multi-node start-up check (``seal_verl/verl_glue/multinode.py``) on the recipe's own composed configs.

A run on two nodes with a relative checkpoint folder, or with the agent-loop file missing on a node, stops with
one line before verl starts a worker; the node probe is a real Ray task on a real (one-node, local) cluster.
"""

from __future__ import annotations

import os

import pytest

from _paths import REPO

from seal_verl.verl_glue.multinode import MultiNodeError, check_multinode, ray_nodes_missing

RECIPE = os.path.join(REPO, "recipes", "bfcl_v3")


def _compose(*overrides, recipe_dir=RECIPE):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=os.path.join(RECIPE, "config"), version_base=None):
        return compose(config_name="bfcl_v3", overrides=["backbone=qwen2.5-7b", "variant=seal",
                                                         f"recipe.dir={recipe_dir}", "recipe.data_dir=/data/json",
                                                         *overrides])


def _never(path):
    raise AssertionError(f"no node probe expected, asked about {path}")


def test_one_node_needs_nothing_shared():
    check_multinode(_compose(), missing_on=_never)  # the recipe's relative checkpoint folder is fine on one node


def test_two_nodes_with_a_relative_checkpoint_folder_stop_with_one_line():
    cfg = _compose("trainer.nnodes=2", "trainer.n_gpus_per_node=8")
    with pytest.raises(MultiNodeError) as err:
        check_multinode(cfg, missing_on=_never)
    msg = str(err.value)
    assert "\n" not in msg and "trainer.default_local_dir='checkpoints/" in msg and "absolute path" in msg


def test_one_node_run_on_a_cluster_of_several_nodes_needs_the_shared_folder_too():
    """verl spreads the TaskRunner and the agent-loop workers over every node of the cluster, whatever
    trainer.nnodes says (the CPU two-node run puts the TaskRunner on the second node)."""
    cfg = _compose()
    with pytest.raises(MultiNodeError, match=r"^a Ray cluster of 2 nodes with trainer.default_local_dir='checkpoints/"):
        check_multinode(cfg, missing_on=_never, alive_nodes=lambda: 2)


def test_the_two_node_shape_cannot_start_on_the_recipes_relative_checkpoint_folder():
    cfg = _compose("hardware=2x8x80gb")
    with pytest.raises(MultiNodeError, match="trainer.nnodes=2 with trainer.default_local_dir='checkpoints/"):
        check_multinode(cfg, missing_on=_never)


@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        yield ray
        return
    os.environ.pop("RAY_ADDRESS", None)
    ray.init(num_cpus=1, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()


def test_ray_probe_sees_each_nodes_own_files(local_ray, tmp_path):
    present = tmp_path / "there.yaml"
    present.write_text("[]\n")
    assert ray_nodes_missing(str(present)) == []
    missing = ray_nodes_missing(str(tmp_path / "absent.yaml"))
    assert len(missing) == len([n for n in local_ray.nodes() if n["Alive"]]) == 1


def test_agent_loop_file_missing_on_a_node_stops_the_run(local_ray, tmp_path):
    """recipe.dir points at a folder without the agent-loop files (a checkout at another path on that node)."""
    cfg = _compose("hardware=2x8x80gb", f"trainer.default_local_dir={tmp_path}/ckpt",
                   recipe_dir=str(tmp_path / "elsewhere"))
    with pytest.raises(MultiNodeError) as err:
        check_multinode(cfg)
    msg = str(err.value)
    assert "\n" not in msg and f"{tmp_path}/elsewhere/agent_loops/json.yaml" in msg and "missing on node(s)" in msg
    check_multinode(_compose("hardware=2x8x80gb", f"trainer.default_local_dir={tmp_path}/ckpt"))  # the real recipe
