"""seal-verl: SEAL for verl.

The lean CPU install (tests, diagnosis, dry run) needs bfcl-eval installed with ``--no-deps``: its full
dependency set pulls several GB of CUDA wheels for a memory backend this project never uses. The Makefile
does that; see README.md.
"""

from setuptools import find_packages, setup

setup(
    name="seal-verl",
    version="0.1.0",
    description="SEAL: verifier-grounded failure diagnosis driving the training interface and GRPO weights, for verl",
    python_requires=">=3.11",
    # env_wrappers.bfcl.data holds data only (the shipped split); listed so that setuptools ships it without warning
    packages=find_packages(include=["seal_verl", "seal_verl.*", "env_wrappers", "env_wrappers.*", "reward_fns", "reward_fns.*"])
    + ["env_wrappers.bfcl.data"],
    package_data={"env_wrappers.bfcl.data": ["*.json"]},
    include_package_data=True,
    install_requires=[
        "jsonschema>=4",
        "mpmath",
        "filelock",
        "tqdm",
        "numpy",
        "matplotlib",
    ],
    extras_require={
        # bfcl-eval itself is installed separately with --no-deps (see the Makefile).
        "test": ["pytest>=8", "pytest-timeout", "pytest-xdist", "ruff==0.17.6"],
        "train": [
            "verl==0.9.1",
            "cachetools",
            "fastapi",
            "uvicorn",
            "pyzmq",
            "msgspec",
            "TransferQueue>=0.1.10",
        ],
    },
    entry_points={
        "console_scripts": ["seal-verl=seal_verl.cli:main", "seal-verl-tiny-model=seal_verl.models.tiny_model:main"],
        # Imported by every `import verl` (driver and Ray workers): registers seal_grpo, the `seal` V1
        # trainer, the legacy-trainer wrappers and the BFCL agent loops.
        "verl.plugins": ["seal = seal_verl.verl_glue.plugin"],
        # No vLLM plugin: the CPU platform (recipes/bfcl_v3/cpu/platform) is installed by the CPU set-up only.
    },
)
