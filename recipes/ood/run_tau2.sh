#!/usr/bin/env bash
# tau2-bench (retail, airline, telecom; pass^1 per domain) with tau2's own runner and scorer: the agent is the
# checkpoint behind an OpenAI-compatible server, the user simulator a second served instruct model.
#
#   AGENT_URL=http://127.0.0.1:8000/v1 AGENT_MODEL=ckpt USER_URL=http://127.0.0.1:8001/v1 USER_MODEL=user \
#   OUT=runs/tau2 bash recipes/ood/run_tau2.sh
#
# Optional: DOMAINS ("airline retail telecom"), NUM_TASKS (first N tasks of each domain; default all of the
# base split), TASK_IDS (space-separated ids, with a single domain), CONCURRENCY (4), TAU2_VENV (<repo>/.venv-tau2, built by `make tau2-env`).
# Writes OUT/tau2_<domain>_results.json (tau2's own) and OUT/tau2_summary.json: pass^1 per domain beside the
# do-nothing baseline on the same tasks and the protocol. With a local user simulator the numbers compare
# checkpoints with each other, not with published leaderboard numbers (those used gpt-4.1 as the user).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
VENV="${TAU2_VENV:-$REPO/.venv-tau2}"
: "${AGENT_URL:?set AGENT_URL (the OpenAI-compatible /v1 URL of the checkpoint)}"
: "${AGENT_MODEL:?set AGENT_MODEL (its served model name)}"
: "${USER_URL:?set USER_URL (the /v1 URL of the user simulator)}"
: "${USER_MODEL:?set USER_MODEL (the served model name of the user simulator)}"
OUT="${OUT:-runs/tau2}"
DOMAINS="${DOMAINS:-airline retail telecom}"
CONCURRENCY="${CONCURRENCY:-4}"
[ -x "$VENV/bin/tau2" ] || { echo "error: $VENV/bin/tau2 not found; run 'make tau2-env' first" >&2; exit 2; }
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
export LITELLM_LOCAL_MODEL_COST_MAP=True OPENAI_API_KEY="${OPENAI_API_KEY:-EMPTY}"
unset LLM_CACHE_ENABLED  # a cache keyed on the model name would hand one checkpoint's answers to another
extra=()
[ -n "${NUM_TASKS:-}" ] && extra+=(--num-tasks "$NUM_TASKS")
# shellcheck disable=SC2206
[ -n "${TASK_IDS:-}" ] && extra+=(--task-ids $TASK_IDS)
for d in $DOMAINS; do
  "$VENV/bin/tau2" run --domain "$d" \
    --agent llm_agent --agent-llm "openai/$AGENT_MODEL" \
    --agent-llm-args "{\"base_url\": \"$AGENT_URL\", \"temperature\": 0.0}" \
    --user user_simulator --user-llm "openai/$USER_MODEL" \
    --user-llm-args "{\"base_url\": \"$USER_URL\", \"temperature\": 0.0}" \
    --task-split-name base --num-trials 1 --max-concurrency "$CONCURRENCY" \
    --results-dir "$OUT" --save-to "tau2_$d" "${extra[@]}"
done
cd "$REPO"
PYTHONPATH="$REPO" "$VENV/bin/python" -m env_wrappers.tau2.summary "$OUT" --agent-model "$AGENT_MODEL" \
  --user-model "$USER_MODEL" --domains $DOMAINS
