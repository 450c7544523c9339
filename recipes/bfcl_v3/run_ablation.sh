#!/usr/bin/env bash
# The paper's ablations of SEAL.
#   ABLATION=no_env_side|no_reweighting|no_closed_loop BACKBONE=qwen2.5-7b bash recipes/bfcl_v3/run_ablation.sh [overrides...]
set -euo pipefail
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/_launch.sh"
case "${ABLATION:-}" in
  no_env_side|no_reweighting|no_closed_loop) ;;
  *) echo "set ABLATION to no_env_side, no_reweighting or no_closed_loop (got '${ABLATION:-}')" >&2; exit 2 ;;
esac
seal_launch "$ABLATION" "$@"
