"""Benchmarks of seal-verl (bench/README.md). Each module is a command, run from the repository root in an
environment where seal-verl is installed (``pip install -e .``): ``python -m bench.bench_verifier`` and so on."""
