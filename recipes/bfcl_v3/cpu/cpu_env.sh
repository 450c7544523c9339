# Environment of a CPU training run, sourced by run_cpu.sh and run_two_nodes.sh. Every process of the run needs
# it: main_ppo, and each Ray worker it starts. On one node Ray's workers inherit it from main_ppo; on a cluster
# started with `ray start`, they inherit it from the `ray start` of their node, so run_two_nodes.sh sources this
# before starting each node. The CPU platform patches (recipes/bfcl_v3/cpu/platform/seal_cpu_platform) apply only with SEAL_CPU_PLATFORM=1.
export SEAL_CPU_PLATFORM=1
export VERL_PLATFORM=cpu
export VERL_USE_EXTERNAL_MODULES="${VERL_USE_EXTERNAL_MODULES-seal_cpu_platform.verl_plugin}"
export VLLM_TARGET_DEVICE=cpu
export VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}"
export HF_HUB_OFFLINE=1
export TOKENIZERS_PARALLELISM=false
export RAY_DEDUP_LOGS=0
export PYTHONWARNINGS="${PYTHONWARNINGS:-ignore::UserWarning,ignore::FutureWarning,ignore::DeprecationWarning}"
