"""Start-up check of a run on more than one node: what SEAL reads and writes must be the same on every node.

The closed-loop state lives in a Ray actor and, at each checkpoint, in ``global_step_N/seal_state.json`` under
``trainer.default_local_dir``, written by the process that runs verl's TaskRunner, on whichever node Ray put it.
A relative checkpoint folder resolves against that process's working directory on that node, so a resume
started elsewhere (or after Ray moved the TaskRunner) would not find the state: on more than one node
(``trainer.nnodes > 1``, or a Ray cluster of several nodes, where verl spreads the TaskRunner and the
agent-loop workers over all of them whatever ``nnodes`` says) it must be an absolute path on storage every node
mounts. The agent-loop file (``recipe.dir``) is read by path by the agent-loop workers on every node, so it
must exist on each of them. Both mistakes would otherwise surface
late: a resume that silently starts the closed loop over, or a worker that dies after the model has loaded.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Optional

from seal_verl.runs import folder as RF
#: path -> the nodes (by address) on which that file is missing
MissingOn = Callable[[str], list]


class MultiNodeError(RuntimeError):
    """A multi-node run whose shared state or recipe files are not the same on every node."""


def _get(config: Any, dotted: str, default: Any = None) -> Any:
    node = config
    for key in dotted.split("."):
        try:
            node = node.get(key) if hasattr(node, "get") else getattr(node, key)
        except Exception:  # noqa: BLE001 - a missing or unresolvable key reads as absent
            return default
        if node is None or (isinstance(node, str) and node == "???"):  # OmegaConf's mark of a value not given
            return default
    return node


def ray_alive_nodes() -> int:
    """Alive nodes of the Ray cluster this process is connected to (0 when Ray is not running)."""
    try:
        import ray
    except ImportError:
        return 0
    if not ray.is_initialized():
        return 0
    return sum(1 for n in ray.nodes() if n.get("Alive"))


def ray_nodes_missing(path: str) -> list:
    """The addresses of the alive Ray nodes on which ``path`` is not a file ([] when Ray is not running).

    One zero-CPU task per node, pinned to it, looks at its own file system: the only way to see what a worker
    on that node will see."""
    try:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    except ImportError:
        return []
    if not ray.is_initialized():
        return []

    @ray.remote(num_cpus=0)
    def _is_file(p: str) -> bool:
        return os.path.isfile(p)

    nodes = [n for n in ray.nodes() if n.get("Alive")]
    refs = [_is_file.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote(path)
            for n in nodes]
    found = ray.get(refs)
    return [n.get("NodeManagerAddress", n["NodeID"]) for n, ok in zip(nodes, found) if not ok]


def check_multinode(config: Any, missing_on: Optional[MissingOn] = None,
                    alive_nodes: Callable[[], int] = ray_alive_nodes) -> None:
    """Raise :class:`MultiNodeError` (one line) when a run on more than one node keeps its checkpoints in a
    relative folder or lacks the agent-loop file on a node; nothing on one node.

    ``missing_on`` maps a path to the nodes that lack it (default: :func:`ray_nodes_missing`);
    ``alive_nodes`` counts the cluster's nodes, asked only when ``trainer.nnodes`` is 1."""
    try:
        nnodes = int(_get(config, "trainer.nnodes", 1))
    except (TypeError, ValueError):
        return  # verl's own validation reports a non-integer node count
    where = f"trainer.nnodes={nnodes}"
    if nnodes <= 1:
        cluster = alive_nodes()
        if cluster <= 1:
            return
        where = f"a Ray cluster of {cluster} nodes"
    ckpt = _get(config, "trainer.default_local_dir")
    if ckpt is None or not os.path.isabs(str(ckpt)):
        raise MultiNodeError(
            f"{where} with trainer.default_local_dir={ckpt!r}: a relative folder resolves on "
            f"whichever node runs the TaskRunner, so checkpoints and global_step_N/{RF.CHECKPOINT_STATE} could not be "
            "found on resume; set it to an absolute path on storage every node mounts"
        )
    loops = _get(config, "actor_rollout_ref.rollout.agent.agent_loop_config_path")
    if loops:
        missing = (missing_on or ray_nodes_missing)(str(loops))
        if missing:
            raise MultiNodeError(
                f"{where}: the agent-loop file {loops} (recipe.dir) is missing on node(s) "
                f"{', '.join(map(str, missing))}; put the repository at the same path on every node or set "
                "recipe.dir to a folder every node mounts"
            )
