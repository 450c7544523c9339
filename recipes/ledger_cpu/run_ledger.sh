#!/usr/bin/env bash
# One run of the ledger learning benchmark through verl's own launcher (`python -m verl.trainer.main_ppo`), the
# same path as recipes/bfcl_v3/cpu/run_cpu.sh: the BFCL V3 recipe's composition and variant groups, the CPU
# overlay (+cpu=tiny), and the ledger overlay (+learn=ledger: agent loops, reward function, sizes, proactive
# cues on). The model is the ledger warm start (prepare_ledger.py: seal_verl.models.warm_start.ledger_stages), the same for
# every run.
#
#   VARIANT=grpo STEPS=20 SEED=1 OUT=runs/ledger/grpo_s1 bash recipes/ledger_cpu/run_ledger.sh [hydra overrides]
#
# Environment: VARIANT (seal | grpo | no_env_side | no_reweighting | no_closed_loop), STEPS, SEED (data order and
# sampling seed), OUT (run dir), SEAL_CPU_VENV (training venv), SEAL_CPU_MODELS (model cache), SEAL_CPU_MODEL
# (use this model folder as it is), REBUILD=1 (build the warm start here, cached in SEAL_CPU_MODELS, instead of using
# the shipped one, recipes/ledger_cpu/model), VERBOSE=1, PREPARE_ONLY=1 (stop once the model and the data are ready).
# The run dir gets data/, verl's log and SEAL's run folder (its files are listed in seal_verl/runs/folder.py).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
VENV="${SEAL_CPU_VENV:-$REPO/.venv-cpu-train}"
PY="$VENV/bin/python"
VARIANT="${VARIANT:-grpo}"
STEPS="${STEPS:-20}"
SEED="${SEED:-1}"
OUT="${OUT:-$REPO/runs/ledger/${VARIANT}_s${SEED}}"
MODELS="${SEAL_CPU_MODELS:-$REPO/runs/cpu/models}"
[ -x "$PY" ] || { echo "run-ledger: error: no training venv at $VENV (make cpu-env)" >&2; exit 2; }
[ -f "$REPO/recipes/bfcl_v3/config/variant/$VARIANT.yaml" ] || { echo "run-ledger: error: unknown VARIANT=$VARIANT" >&2; exit 2; }
[[ "$STEPS" =~ ^[0-9]+$ && "$STEPS" -ge 1 ]] || { echo "run-ledger: error: STEPS must be a positive integer" >&2; exit 2; }
[[ "$SEED" =~ ^[0-9]+$ ]] || { echo "run-ledger: error: SEED must be a non-negative integer" >&2; exit 2; }
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
# the run folder's files are named in one place (seal_verl/runs/folder.py); the script asks it for them
RUN_FOLDER=("$PY" -m seal_verl.runs.folder)
LOG="$("${RUN_FOLDER[@]}" path "$OUT" log)"
TIMING="$("${RUN_FOLDER[@]}" path "$OUT" timing)"
CKPT="$("${RUN_FOLDER[@]}" path "$OUT" checkpoints)"
PREPARED="$("${RUN_FOLDER[@]}" path "$OUT" prepare)"
# one thread per process: on a small shared machine two torch threads per process make each step several times slower
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
T0=$(date +%s)
MODEL_ARGS=(--models-dir "$MODELS")
SHIPPED="$HERE/model"
if [ -z "${SEAL_CPU_MODEL:-}" ] && [ "${REBUILD:-0}" != 1 ] && [ -f "$SHIPPED/build.json" ]; then
  # the shipped warm start: the same weights on every machine; checked, then copied into the cache (runs write there)
  mkdir -p "$MODELS"
  SEAL_CPU_MODEL="$("$PY" -m seal_verl.models.shipped use "$SHIPPED" "$MODELS/ledger-mix-shipped")" || {
    echo "run-ledger: error: the shipped warm start $SHIPPED is damaged; restore it with git or rebuild: REBUILD=1" >&2
    exit 2; }
  echo "[run-ledger] model: the shipped warm start ($SHIPPED; REBUILD=1 builds one here instead)"
fi
if [ -n "${SEAL_CPU_MODEL:-}" ]; then MODEL_ARGS=(--model "$SEAL_CPU_MODEL"); fi
(cd "$REPO" && "$PY" "$HERE/prepare_ledger.py" "$OUT" "${MODEL_ARGS[@]}") > "$OUT/prepare.log" 2>&1 || {
  tail -30 "$OUT/prepare.log" >&2; echo "run-ledger: error: preparing the model and data failed ($OUT/prepare.log)" >&2; exit 1; }
grep '^\[warm-start\]\|^model:' "$OUT/prepare.log" || true
MODEL="$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["model"])' "$PREPARED")"
if [ "${PREPARE_ONLY:-0}" = 1 ]; then echo "[run-ledger] PREPARE_ONLY=1: model $MODEL and data ready; no main_ppo run"; exit 0; fi
# shellcheck source=../bfcl_v3/cpu/cpu_env.sh
source "$REPO/recipes/bfcl_v3/cpu/cpu_env.sh"
"${RUN_FOLDER[@]}" clean "$OUT"
if [ -n "${SEAL_FAULT:-}" ]; then echo "[run-ledger] FAULT PLANTED: SEAL_FAULT=$SEAL_FAULT (this run is broken on purpose; seal-verl check must fail it)" >&2; fi
cd "$REPO"
T1=$(date +%s)
echo "[run-ledger] main_ppo: variant $VARIANT, $STEPS steps, seed $SEED; verl's output: $LOG"
set +e
"$PY" -m verl.trainer.main_ppo \
  --config-path="$REPO/recipes/bfcl_v3/config" --config-name=bfcl_v3 \
  "hydra.searchpath=[pkg://verl.trainer.config,file://$REPO/recipes/bfcl_v3/cpu/config,file://$HERE/config]" \
  backbone=qwen2.5-3b variant="$VARIANT" +cpu=tiny +learn=ledger \
  recipe.dir="$REPO/recipes/bfcl_v3" recipe.ledger_dir="$HERE" recipe.data_dir="$OUT/data" \
  actor_rollout_ref.model.path="$MODEL" \
  data.seed="$SEED" actor_rollout_ref.rollout.seed="$SEED" \
  trainer.total_training_steps="$STEPS" trainer.test_freq="$STEPS" \
  trainer.default_local_dir="$CKPT" seal.run_dir="$OUT" hydra.run.dir="$OUT/hydra" \
  trainer.resume_mode=disable \
  "$@" > "$LOG" 2>&1 &
PID=$!
trap 'kill -INT $PID 2>/dev/null; wait $PID 2>/dev/null; exit 130' INT TERM
if [ "${VERBOSE:-0}" = 1 ]; then tail -n +1 -f "$LOG" --pid=$PID; else
  "$PY" -m seal_verl.runs.watch "$OUT" --log "$LOG" --steps "$STEPS" --pid $PID; fi
wait $PID
RC=$?
set -e
T2=$(date +%s)
printf '{"variant": "%s", "seed": %s, "steps": %s, "exit_code": %s, "prepare_s": %s, "main_ppo_s": %s}\n' \
  "$VARIANT" "$SEED" "$STEPS" "$RC" "$((T1 - T0))" "$((T2 - T1))" > "$TIMING"
[ "$RC" = 0 ] || grep -v -E 'Warning|warn\(' "$LOG" | tail -40 >&2
echo "[run-ledger] exit $RC; prepare $((T1 - T0)) s, main_ppo $((T2 - T1)) s; run dir $OUT"
if [ "$RC" = 0 ]; then
  echo "[run-ledger] check it:  $VENV/bin/seal-verl check $OUT --steps $STEPS"
  echo "[run-ledger] report:    $VENV/bin/seal-verl report $OUT --out $OUT/report   (then open $OUT/report/report.html)"
fi
exit "$RC"
