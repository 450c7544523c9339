# Shared by run_seal.sh, run_grpo.sh and run_ablation.sh (sourced, not executed).
#
# Environment:
#   BACKBONE   qwen2.5-7b (default) | qwen2.5-3b | qwen3-4b | qwen3-8b | toolace2-8b
#   DATA_DIR   the folder `seal-verl prepare-data --out` wrote (train.parquet, eval.parquet, call_format.txt), or
#              its parent holding one folder per call format (json/, python/): the backbone's is picked.
#              Default: <repo>/data/bfcl_v3, i.e. data/bfcl_v3/json for Qwen2.5, data/bfcl_v3/python for toolace2-8b
#   HARDWARE   a node shape of config/hardware (4x80gb | 8x80gb | 8x40gb | 2x8x80gb); unset: the recipe's own
#              settings (4 GPUs on one node)
#   PYTHON     interpreter with verl[vllm]==0.9.1 and seal-verl installed (default: python)
#   PRESET     default (the project's defaults) | paper (the SEAL paper's settings; docs/paper_settings.md)
#   MODE       colocate_async | separate_async: one of verl's asynchronous V1 trainers with SEAL on top
#              (config/mode; docs/add_seal_to_verl.md, "Which trainer"); unset: verl's synchronous trainer
# Extra command-line arguments are appended as Hydra overrides (e.g. trainer.total_epochs=3,
# trainer.logger=[console,wandb], +ray_kwargs.ray_init.num_cpus=64).
# Every check here runs before Python starts, so a wrong choice costs no model or vLLM load.
RECIPE_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(cd "$RECIPE_DIR/../.." && pwd)"

_seal_choices() {
  (cd "$RECIPE_DIR/config/$1" && ls | sed 's/\.yaml$//' | tr '\n' ' ')
}

seal_launch() {
  local variant="$1"; shift
  local backbone="${BACKBONE:-qwen2.5-7b}"
  local python="${PYTHON:-python}"
  local preset="${PRESET:-default}"
  local hardware="${HARDWARE:-}"
  local mode="${MODE:-}"
  if [ ! -f "$RECIPE_DIR/config/backbone/$backbone.yaml" ]; then
    echo "unknown BACKBONE=$backbone; one of: $(_seal_choices backbone)" >&2
    exit 2
  fi
  if [ ! -f "$RECIPE_DIR/config/variant/$variant.yaml" ]; then
    echo "unknown variant $variant; one of: $(_seal_choices variant)" >&2
    exit 2
  fi
  if [ ! -f "$RECIPE_DIR/config/preset/$preset.yaml" ]; then
    echo "unknown PRESET=$preset; one of: $(_seal_choices preset)" >&2
    exit 2
  fi
  local mode_override=()
  if [ -n "$mode" ]; then
    if [ ! -f "$RECIPE_DIR/config/mode/$mode.yaml" ]; then
      echo "unknown MODE=$mode; one of: $(_seal_choices mode)" >&2
      exit 2
    fi
    mode_override=("mode=$mode")
  fi
  local hardware_override=()
  if [ -n "$hardware" ]; then
    if [ ! -f "$RECIPE_DIR/config/hardware/$hardware.yaml" ]; then
      echo "unknown HARDWARE=$hardware; one of: $(_seal_choices hardware)" >&2
      exit 2
    fi
    hardware_override=("hardware=$hardware")
    # A shape of several nodes needs its checkpoint folder on shared storage (docs/gpu_training.md, "More than one
    # node"); the trainer refuses a relative one at start, this says so before anything loads.
    local nnodes
    nnodes="$(sed -n 's/^  nnodes: *\([0-9]*\).*/\1/p' "$RECIPE_DIR/config/hardware/$hardware.yaml" | head -n 1)"
    if [ "${nnodes:-1}" -gt 1 ]; then
      local arg shared=""
      for arg in "$@"; do
        case "$arg" in trainer.default_local_dir=/*) shared=1 ;; esac
      done
      if [ -z "$shared" ]; then
        echo "HARDWARE=$hardware runs on $nnodes nodes: add trainer.default_local_dir=<absolute folder every node mounts> (the checkpoints, with the SEAL closed-loop state, are written there from more than one node)" >&2
        exit 2
      fi
    fi
  fi
  # The backbone's call format is the one its agent-loop file is named after (config/backbone/*.yaml).
  local call_format
  call_format="$(sed -n 's#.*agent_loops/\([a-z]*\)\.yaml.*#\1#p' "$RECIPE_DIR/config/backbone/$backbone.yaml" | head -n 1)"
  local data_dir="${DATA_DIR:-$REPO_DIR/data/bfcl_v3}"
  if [ ! -f "$data_dir/train.parquet" ] && [ -f "$data_dir/$call_format/train.parquet" ]; then
    data_dir="$data_dir/$call_format"   # the parent of the per-format folders: take the backbone's
  fi
  for f in train.parquet eval.parquet; do
    if [ ! -f "$data_dir/$f" ]; then
      echo "missing $data_dir/$f: write it with \`seal-verl prepare-data --out $data_dir --call-format $call_format\` (see $RECIPE_DIR/README.md) or set DATA_DIR" >&2
      exit 2
    fi
  done
  local found=""
  if [ -f "$data_dir/call_format.txt" ]; then
    found="$(tr -d '[:space:]' < "$data_dir/call_format.txt")"
  fi
  if [ -z "$found" ]; then
    echo "$data_dir has no call_format.txt (prepare-data writes it beside the parquet files): rewrite the folder with \`seal-verl prepare-data --out $data_dir --call-format $call_format\`" >&2
    exit 2
  fi
  if [ "$found" != "$call_format" ]; then
    echo "$data_dir holds call_format=$found data but BACKBONE=$backbone writes $call_format calls: set DATA_DIR to its $call_format folder (\`seal-verl prepare-data --out <folder> --call-format $call_format\`)" >&2
    exit 2
  fi
  data_dir="$(cd "$data_dir" && pwd)"
  cd "$REPO_DIR"
  set -x
  exec $python -m verl.trainer.main_ppo \
    --config-path="$RECIPE_DIR/config" --config-name=bfcl_v3 \
    backbone="$backbone" variant="$variant" preset="$preset" ${hardware_override[@]+"${hardware_override[@]}"} \
    ${mode_override[@]+"${mode_override[@]}"} \
    recipe.dir="$RECIPE_DIR" recipe.data_dir="$data_dir" \
    "$@"
}
