#!/usr/bin/env bash
# The CPU training run of run_cpu.sh on a Ray cluster of TWO nodes started on this machine, to show that nothing
# in SEAL assumes one node. It starts a private cluster (its own temp folder and ports; a Ray instance already
# running here is left alone): a head node that holds the one logical GPU (trainer and vLLM; GPU_NODE=b moves it)
# and a second, CPU-only node labelled with the custom resource `seal_node_b`. main_ppo joins it through RAY_ADDRESS, runs
# 2 agent-loop workers and 2 reward workers (verl places them round-robin over the nodes that have CPUs) and
# pins SEAL's closed-loop state actor to the second node (seal.state_actor.resources), so the trainer publishes
# and the rollout workers read the state across nodes. After the run it writes where every actor ran to
# OUT/placement.json (Ray's state API: actor class, node id, node role) and stops the cluster, also on error or
# Ctrl-C.
#
#   bash recipes/bfcl_v3/cpu/run_two_nodes.sh                                 # VARIANT=seal, 1 step, runs/cpu/two_nodes
#   STEPS=2 OUT=runs/cpu/two_nodes_grpo VARIANT=grpo bash recipes/bfcl_v3/cpu/run_two_nodes.sh
#
# Environment: those of run_cpu.sh (VARIANT, STEPS (default 1 here), OUT (default runs/cpu/two_nodes), FORCE,
# SEAL_CPU_VENV, SEAL_CPU_MODELS, SEAL_CPU_MODEL, ...), plus
#   HEAD_CPUS / NODE_B_CPUS   logical CPUs of the two nodes (default 16 and 12). Logical: Ray counts them for
#                             placement only. Both nodes need several: TransferQueue pins its 8 storage actors
#                             round-robin over all nodes (1 CPU each), and verl's TaskRunner may land on either.
#   AGENT_WORKERS / REWARD_WORKERS   verl's agent-loop and reward workers (default 2 each: one per node)
#   STATE_ON_NODE_B=0         let Ray place the state actor (default 1: pinned to the second node)
#   GPU_NODE=b                put the logical GPU (trainer, vLLM) on the second node instead of the head. Ray keeps
#                             actors that need no GPU off GPU nodes, so verl's TaskRunner, which writes the
#                             checkpoints and SEAL's state, runs on the head then (on the second node by default):
#                             a resume with GPU_NODE=b reads a checkpoint that the other node wrote.
# Extra args are Hydra overrides, passed on to run_cpu.sh.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../../.." && pwd)"
VENV="${SEAL_CPU_VENV:-$REPO/.venv-cpu-train}"
PY="$VENV/bin/python"
export STEPS="${STEPS:-1}"
export VARIANT="${VARIANT:-seal}"
export OUT="${OUT:-$REPO/runs/cpu/two_nodes}"
HEAD_CPUS="${HEAD_CPUS:-16}"
NODE_B_CPUS="${NODE_B_CPUS:-12}"
AGENT_WORKERS="${AGENT_WORKERS:-2}"
REWARD_WORKERS="${REWARD_WORKERS:-2}"
STATE_ON_NODE_B="${STATE_ON_NODE_B:-1}"
GPU_NODE="${GPU_NODE:-head}"

die() { echo "run-two-nodes: error: $*" >&2; exit 2; }
for v in HEAD_CPUS NODE_B_CPUS AGENT_WORKERS REWARD_WORKERS; do
  [[ "${!v}" =~ ^[0-9]+$ ]] && [ "${!v}" -ge 1 ] || die "$v must be a positive integer, got '${!v}'"
done
case "$STATE_ON_NODE_B" in 0|1) ;; *) die "STATE_ON_NODE_B must be 0 or 1, got '$STATE_ON_NODE_B'" ;; esac
case "$GPU_NODE" in
  head) HEAD_GPUS=1; NODE_B_GPUS=0 ;;
  b) HEAD_GPUS=0; NODE_B_GPUS=1 ;;
  *) die "GPU_NODE must be head or b, got '$GPU_NODE'" ;;
esac
[ -x "$VENV/bin/ray" ] || die "no Ray in $VENV (build the training venv: bash $HERE/setup_cpu_train_env.sh)"
if [ -n "${RAY_ADDRESS:-}" ]; then
  echo "[two-nodes] RAY_ADDRESS=$RAY_ADDRESS is ignored: this script starts and stops its own cluster" >&2
fi

# Every Ray worker inherits the environment of its node's `ray start`: the CPU platform settings, and this
# checkout on the import path (ahead of any installed copy of seal_verl).
# shellcheck source=cpu_env.sh
source "$HERE/cpu_env.sh"
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
export RAY_USAGE_STATS_ENABLED=0
# Token authentication with a token of this cluster's own, handed to every process of it through the
# environment (a token file in the home folder may belong to another Ray instance).
export RAY_AUTH_MODE=token
RAY_AUTH_TOKEN="$("$PY" -c 'import secrets; print(secrets.token_hex(32))')"
export RAY_AUTH_TOKEN

# A private temp folder (short: Ray's socket paths must stay under about 100 characters) and free ports.
RAY_TMP="$(mktemp -d "${TMPDIR:-/tmp}/seal2n.XXXXXX")"
read -r GCS_PORT CLIENT_PORT DASH_PORT AGENT_A AGENT_B < <("$PY" - <<'EOF'
import socket
socks = [socket.socket() for _ in range(5)]
for s in socks:
    s.bind(("", 0))
print(*[s.getsockname()[1] for s in socks])
for s in socks:
    s.close()
EOF
)
export RAY_ADDRESS="127.0.0.1:$GCS_PORT"
HEAD_PID=""; NODE_B_PID=""; RUN_PID=""
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"

stop_cluster() {
  # the run first (its own process group: run_cpu.sh, main_ppo, the progress watcher), if it is still going
  if [ -n "$RUN_PID" ] && kill -0 "$RUN_PID" 2>/dev/null; then
    kill -TERM -- "-$RUN_PID" 2>/dev/null || true
    for _ in $(seq 20); do kill -0 "$RUN_PID" 2>/dev/null || break; sleep 0.5; done
  fi
  # `ray start --block` stops the processes of its node when it gets SIGTERM; never `ray stop`, which would stop
  # every Ray instance of this user on the machine.
  local pid
  for pid in $NODE_B_PID $HEAD_PID; do
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -KILL "$pid" 2>/dev/null || true
  done
  # the nodes' logs go into the run folder once the run is over (during it the folder is the run's alone)
  cp "$RAY_TMP"/ray_head.log "$RAY_TMP"/ray_node_b.log "$OUT"/ 2>/dev/null || true
  rm -rf "$RAY_TMP"
}
trap stop_cluster EXIT
trap 'echo "[two-nodes] interrupted; stopping the cluster" >&2; exit 130' INT TERM

COMMON=(--block --disable-usage-stats --temp-dir="$RAY_TMP")
echo "[two-nodes] head node: $HEAD_CPUS CPUs, $HEAD_GPUS logical GPU, GCS at $RAY_ADDRESS, Ray logs in $OUT/ray_head.log once the run ends"
"$VENV/bin/ray" start --head --port="$GCS_PORT" --ray-client-server-port="$CLIENT_PORT" \
  --dashboard-host=127.0.0.1 --dashboard-port="$DASH_PORT" --dashboard-agent-listen-port="$AGENT_A" \
  --num-cpus="$HEAD_CPUS" --num-gpus="$HEAD_GPUS" --resources='{"seal_node_a": 1}' --object-store-memory=1500000000 \
  "${COMMON[@]}" > "$RAY_TMP/ray_head.log" 2>&1 &
HEAD_PID=$!

wait_nodes() {  # wait until $1 nodes are alive (or a node stopped, or 5 minutes passed)
  local n="$1" deadline=$(( $(date +%s) + 300 ))
  while [ "$(date +%s)" -lt "$deadline" ]; do
    kill -0 "$HEAD_PID" 2>/dev/null || die "the head node stopped; see $OUT/ray_head.log"
    if [ -n "$NODE_B_PID" ] && ! kill -0 "$NODE_B_PID" 2>/dev/null; then
      die "the second node stopped; see $OUT/ray_node_b.log"
    fi
    if "$PY" - "$n" > "$RAY_TMP/wait.log" 2>&1 <<'EOF'
import sys, ray
ray.init(logging_level="ERROR", log_to_driver=False)
alive = [n for n in ray.nodes() if n["Alive"]]
print(f"{len(alive)} node(s) alive")
sys.exit(0 if len(alive) >= int(sys.argv[1]) else 1)
EOF
    then return 0; fi
    sleep 2
  done
  tail -3 "$RAY_TMP/wait.log" >&2
  die "the cluster did not reach $n nodes in 5 minutes; see $OUT/ray_head.log and $OUT/ray_node_b.log"
}
wait_nodes 1
echo "[two-nodes] second node: $NODE_B_CPUS CPUs, $NODE_B_GPUS logical GPU, resource seal_node_b; Ray logs in $OUT/ray_node_b.log once the run ends"
"$VENV/bin/ray" start --address="$RAY_ADDRESS" --dashboard-agent-listen-port="$AGENT_B" \
  --num-cpus="$NODE_B_CPUS" --num-gpus="$NODE_B_GPUS" --resources='{"seal_node_b": 1}' --object-store-memory=500000000 \
  "${COMMON[@]}" > "$RAY_TMP/ray_node_b.log" 2>&1 &
NODE_B_PID=$!
wait_nodes 2
echo "[two-nodes] cluster up: 2 nodes"

# The run: run_cpu.sh joins the cluster (verl's main_ppo calls ray.init(), which connects to RAY_ADDRESS). A
# connecting driver may not declare resources, so the CPU overlay's ray_init.num_cpus/num_gpus are cleared.
ARGS=(ray_kwargs.ray_init.num_cpus=null ray_kwargs.ray_init.num_gpus=null
      actor_rollout_ref.rollout.agent.num_workers="$AGENT_WORKERS" reward.num_workers="$REWARD_WORKERS")
if [ "$STATE_ON_NODE_B" = 1 ]; then ARGS+=("seal.state_actor.resources={seal_node_b: 0.01}"); fi
set +e
setsid bash "$HERE/run_cpu.sh" "${ARGS[@]}" "$@" &
RUN_PID=$!
wait "$RUN_PID"
RC=$?
set -e

# Where every actor of the run ran (dead actors stay in Ray's state until the cluster stops).
if "$PY" "$HERE/placement.py" "$OUT/placement.json" --address "$RAY_ADDRESS"; then
  echo "[two-nodes] placement written to $OUT/placement.json"
else
  echo "[two-nodes] could not read the placement from Ray's state API" >&2
  [ "$RC" != 0 ] || RC=1
fi
echo "[two-nodes] run exit $RC; stopping the cluster"
exit "$RC"
