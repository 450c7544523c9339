#!/usr/bin/env bash
# The paper's ablations of SEAL.
#   ABLATION=no_env_side BACKBONE=qwen2.5-7b DATA_DIR=data/bfcl_v3 bash recipes/bfcl_v3/run_ablation.sh [overrides...]
# ABLATION is one of no_env_side, no_reweighting, no_closed_loop; DATA_DIR as for run_seal.sh (see _launch.sh).
set -euo pipefail
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/_launch.sh"
case "${ABLATION:-}" in
  no_env_side|no_reweighting|no_closed_loop) ;;
  *) echo "set ABLATION to no_env_side, no_reweighting or no_closed_loop (got '${ABLATION:-}')" >&2; exit 2 ;;
esac
seal_launch "$ABLATION" "$@"
