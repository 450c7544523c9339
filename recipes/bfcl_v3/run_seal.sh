#!/usr/bin/env bash
# SEAL on BFCL V3 multi-turn (environment side + reweighting + closed loop).
#   BACKBONE=qwen2.5-7b DATA_DIR=data/bfcl_v3 bash recipes/bfcl_v3/run_seal.sh [hydra overrides...]
# DATA_DIR is the folder prepare-data wrote or its parent (json/ for Qwen2.5, python/ for toolace2-8b); see _launch.sh.
set -euo pipefail
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/_launch.sh"
seal_launch seal "$@"
