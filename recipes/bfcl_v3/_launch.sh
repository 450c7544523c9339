# Shared by run_seal.sh, run_grpo.sh and run_ablation.sh (sourced, not executed).
#
# Environment:
#   BACKBONE   qwen2.5-7b (default) | qwen2.5-3b | toolace2-8b
#   DATA_DIR   folder with train.parquet and eval.parquet from `seal-verl prepare-data`
#              (default: <repo>/data/bfcl_v3/json, or .../python for toolace2-8b)
#   PYTHON     interpreter with verl[vllm]==0.9.1 and seal-verl installed (default: python)
#   PRESET     default (the project's defaults) | paper (the SEAL paper's settings; docs/paper_settings.md)
# Extra command-line arguments are appended as Hydra overrides (e.g. trainer.total_epochs=3,
# trainer.logger=[console,wandb], +ray_kwargs.ray_init.num_cpus=64).
RECIPE_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(cd "$RECIPE_DIR/../.." && pwd)"

seal_launch() {
  local variant="$1"; shift
  local backbone="${BACKBONE:-qwen2.5-7b}"
  # each call format has its own data folder (prepare-data --out data/bfcl_v3/<json|python>)
  local call_format=json
  case "$backbone" in toolace2*) call_format=python ;; esac
  local data_dir="${DATA_DIR:-$REPO_DIR/data/bfcl_v3/$call_format}"
  local python="${PYTHON:-python}"
  local preset="${PRESET:-default}"
  if [ ! -f "$RECIPE_DIR/config/backbone/$backbone.yaml" ]; then
    echo "unknown BACKBONE=$backbone; one of: $(cd "$RECIPE_DIR/config/backbone" && ls | sed 's/\.yaml$//' | tr '\n' ' ')" >&2
    exit 2
  fi
  if [ ! -f "$RECIPE_DIR/config/variant/$variant.yaml" ]; then
    echo "unknown variant $variant; one of: $(cd "$RECIPE_DIR/config/variant" && ls | sed 's/\.yaml$//' | tr '\n' ' ')" >&2
    exit 2
  fi
  if [ ! -f "$RECIPE_DIR/config/preset/$preset.yaml" ]; then
    echo "unknown PRESET=$preset; one of: $(cd "$RECIPE_DIR/config/preset" && ls | sed 's/\.yaml$//' | tr '\n' ' ')" >&2
    exit 2
  fi
  for f in train.parquet eval.parquet; do
    if [ ! -f "$data_dir/$f" ]; then
      echo "missing $data_dir/$f: write the data first with \`seal-verl prepare-data\` (see $RECIPE_DIR/README.md) or set DATA_DIR" >&2
      exit 2
    fi
  done
  data_dir="$(cd "$data_dir" && pwd)"
  cd "$REPO_DIR"
  set -x
  exec $python -m verl.trainer.main_ppo \
    --config-path="$RECIPE_DIR/config" --config-name=bfcl_v3 \
    backbone="$backbone" variant="$variant" preset="$preset" \
    recipe.dir="$RECIPE_DIR" recipe.data_dir="$data_dir" \
    "$@"
}
