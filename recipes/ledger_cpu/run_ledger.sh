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
# sampling seed), OUT (run dir), FORCE=1 (move an earlier run's results in OUT aside, into a dated sibling folder
# OUT.earlier-<date>-<time>; without it a run into a used OUT stops and says what it holds; nothing is deleted),
# SEAL_CPU_VENV (training venv), SEAL_CPU_MODELS (model cache), SEAL_CPU_MODEL (use this model folder: verified
# against its build.json or warm-start record when it has one, never written), REBUILD=1 (build the warm start here,
# cached in SEAL_CPU_MODELS, instead of using the shipped one, recipes/ledger_cpu/model), VERBOSE=1, PREPARE_ONLY=1
# (stop once the model and the data are ready). The run dir gets data/, verl's log and SEAL's run folder (its files
# are listed in seal_verl/runs/folder.py); it is locked while the run writes it. After the venv check, everything
# happens in recipes/bfcl_v3/cpu/launch.py, the one launcher of both CPU runs (the settings are checked there: one
# line and exit 2 on a mistake, before any work).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
VENV="${SEAL_CPU_VENV:-$REPO/.venv-cpu-train}"
PY="$VENV/bin/python"
[ -x "$PY" ] || { echo "run-ledger: error: no training venv at $VENV (make cpu-env)" >&2; exit 2; }
# shellcheck source=../bfcl_v3/cpu/cpu_env.sh
source "$REPO/recipes/bfcl_v3/cpu/cpu_env.sh"
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
exec "$PY" "$REPO/recipes/bfcl_v3/cpu/launch.py" ledger "$@"
