# seal-verl: set-up and the two main commands.
#   make test   - build the lean CPU environment (.venv) and run the test suite
#   make run    - build it and run the main job (see README)
PYTHON ?= python3.11
VENV   ?= .venv
PY      = $(VENV)/bin/python
PIP     = $(PY) -m pip
BFCL_EVAL_VERSION = 2026.3.23

.PHONY: venv test run clean

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

run: venv
	mkdir -p runs/demo
	$(VENV)/bin/seal-verl demo-results runs/demo/results.jsonl
	$(VENV)/bin/seal-verl diagnose runs/demo/results.jsonl --out runs/demo/labels.jsonl --plot runs/demo/labels.png

clean:
	rm -rf $(VENV) runs
