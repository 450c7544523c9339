"""Where each actor of a run ran, read from Ray's state API after the run (dead actors stay listed until the
cluster stops), written as JSON for run_two_nodes.sh.

    python recipes/bfcl_v3/cpu/placement.py OUT/placement.json [--address HOST:PORT]

The file holds the cluster's nodes (id, head or not, resources), every actor (class, name, node, pid, state,
and the SEAL-relevant kind) and a summary: for each kind, the node roles it ran on. The kinds are the actors
that must work across nodes for SEAL: the closed-loop ``state_actor`` (seal_verl.verl_glue.state_actor), verl's
``agent_loop_worker`` (where the SEAL agent loops run and read the state) and ``reward_worker`` (BFCL's verifier
and the diagnosis). A node's role is ``head``, or the custom resource it was started with (``seal_node_b``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

#: actor class name -> kind (reward workers are verl's reward-loop workers and the compute workers they start)
KINDS = {
    "SealStateHolder": "state_actor",
    "AgentLoopWorker": "agent_loop_worker",
    "RewardLoopWorker": "reward_worker",
    "RewardComputeWorker": "reward_worker",
    "TaskRunner": "task_runner",
}
SEAL_KINDS = ("state_actor", "agent_loop_worker", "reward_worker")


def kind_of(class_name: str) -> str:
    for key, kind in KINDS.items():
        if key in (class_name or ""):
            return kind
    return "other"


def node_role(node: dict) -> str:
    if node.get("is_head_node"):
        return "head"
    labels = sorted(k for k in (node.get("resources_total") or {}) if k.startswith("seal_node_"))
    return labels[0] if labels else node["node_id"][:8]


def summarize(actors: list[dict], nodes: list[dict]) -> dict:
    roles = {n["node_id"]: node_role(n) for n in nodes}
    rows = []
    for a in actors:
        rows.append({"kind": kind_of(a.get("class_name")), "class_name": a.get("class_name"), "name": a.get("name"),
                     "node_id": a.get("node_id"), "node_role": roles.get(a.get("node_id"), "unknown"),
                     "pid": a.get("pid"), "state": a.get("state")})
    rows.sort(key=lambda r: (r["kind"], r["class_name"] or "", r["name"] or ""))
    by_kind: dict[str, dict[str, int]] = {}
    for r in rows:
        counts = by_kind.setdefault(r["kind"], {})
        counts[r["node_role"]] = counts.get(r["node_role"], 0) + 1
    return {
        "nodes": [{"node_id": n["node_id"], "role": roles[n["node_id"]], "is_head_node": bool(n.get("is_head_node")),
                   "resources_total": n.get("resources_total")} for n in nodes],
        "by_kind": by_kind,
        "seal_kinds_by_node": {role: sorted({r["kind"] for r in rows if r["node_role"] == role and r["kind"] in SEAL_KINDS})
                               for role in sorted(set(roles.values()))},
        "actors": rows,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="the JSON file to write")
    ap.add_argument("--address", default=os.environ.get("RAY_ADDRESS"), help="the cluster (default: RAY_ADDRESS)")
    args = ap.parse_args(argv)
    if not args.address:
        print("placement: error: no cluster address (--address or RAY_ADDRESS)", file=sys.stderr)
        return 2
    from ray.util.state import list_actors, list_nodes

    def plain(row):
        return dataclasses.asdict(row) if dataclasses.is_dataclass(row) else dict(row)

    actors = [plain(a) for a in list_actors(address=args.address, limit=10000)]
    nodes = [plain(n) for n in list_nodes(address=args.address, limit=1000)]
    summary = summarize(actors, nodes)
    with open(args.out, "w") as f:
        json.dump(summary, f, indent=1)
    for role, kinds in summary["seal_kinds_by_node"].items():
        print(f"[placement] {role}: {', '.join(kinds) or '-'}")
    for kind in SEAL_KINDS:
        print(f"[placement] {kind}: {summary['by_kind'].get(kind, {})}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
