"""tau2-bench without a language model, through tau2's own environment, evaluator and runner.

Opt-in (about 3 min on 2 cores): ``make test-tau2`` (``SEAL_TAU2=1``; builds ``<repo>/.venv-tau2``) or
``SEAL_TAU2_VENV=/path/to/venv``. With the switch on, a missing environment is a failure, not a skip.

- gold actions replayed through each domain's environment score 1.0 with tau2's evaluator (harness intact);
- the do-nothing policy fails tasks that need a write (the evaluator can fail);
- tau2's own runner (``recipes/ood/run_tau2.sh``), with agent and user simulator behind a local server that
  ends every conversation at once, scores exactly the do-nothing baseline that ``env_wrappers.tau2.summary``
  computes in library mode for the same tasks (one passing and one failing do-nothing task of airline).
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from _paths import REPO

_EXPLICIT = os.environ.get("SEAL_TAU2_VENV")
VENV = os.path.abspath(_EXPLICIT) if _EXPLICIT else os.path.join(REPO, ".venv-tau2")
REQUIRED = bool(_EXPLICIT) or os.environ.get("SEAL_TAU2", "").strip().lower() in ("1", "true", "yes")
HAVE = os.path.exists(os.path.join(VENV, "bin", "tau2"))
pytestmark = pytest.mark.skipif(not REQUIRED, reason="tau2-bench checks are opt-in: `make test-tau2` (SEAL_TAU2=1)")
#: Airline base tasks: 2 needs a write (do-nothing fails), 4 only reads and has no communicate check (passes).
AIRLINE_IDS = ["2", "4"]


def _tau2_python(code: str) -> dict:
    assert HAVE, f"{VENV}/bin/tau2 missing: run `make tau2-env`"
    env = dict(os.environ, PYTHONPATH=REPO, LITELLM_LOCAL_MODEL_COST_MAP="True")
    proc = subprocess.run([os.path.join(VENV, "bin", "python"), "-c", code], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_gold_actions_pass_and_doing_nothing_fails():
    code = ("import json; from env_wrappers.tau2.replay import run, _setup_logging; _setup_logging(); "
            "print(json.dumps({d: {p: run(d, p, limit=3)['rewards'] for p in ('gold', 'nothing')} "
            "for d in ('airline', 'retail', 'telecom')}))")
    got = _tau2_python(code)
    for domain, by_policy in got.items():
        assert len(by_policy["gold"]) == 3
        assert all(r == 1.0 for r in by_policy["gold"].values()), (domain, by_policy["gold"])
    # Retail's first tasks all change the database: doing nothing fails them.
    assert all(r == 0.0 for r in got["retail"]["nothing"].values()), got["retail"]["nothing"]


class _StopServer:
    """Every chat completion answers ``###STOP###``: the user simulator ends the conversation at once."""

    def __init__(self):
        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, obj):
                body = json.dumps(obj).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                self._send({"object": "list", "data": [{"id": "stop", "object": "model"}]})

            def do_POST(self):
                req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                self._send({"id": "stop", "object": "chat.completion", "created": 0, "model": req.get("model"),
                            "choices": [{"index": 0, "finish_reason": "stop",
                                         "message": {"role": "assistant", "content": "###STOP###"}}],
                            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_runner_scores_the_do_nothing_baseline(tmp_path):
    assert HAVE, f"{VENV}/bin/tau2 missing: run `make tau2-env`"
    srv = _StopServer()
    try:
        env = dict(os.environ, AGENT_URL=srv.url, AGENT_MODEL="stop", USER_URL=srv.url, USER_MODEL="stop",
                   OUT=str(tmp_path / "tau2"), DOMAINS="airline", TASK_IDS=" ".join(AIRLINE_IDS), CONCURRENCY="2",
                   TAU2_VENV=VENV)
        proc = subprocess.run(["bash", os.path.join(REPO, "recipes", "ood", "run_tau2.sh")], env=env, cwd=REPO,
                              capture_output=True, text=True, timeout=900)
    finally:
        srv.close()
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-3000:])
    summary = json.load(open(tmp_path / "tau2" / "tau2_summary.json"))
    row = summary["domains"]["airline"]
    assert row["n_tasks"] == 2
    assert row["pass^1"] == row["do_nothing_pass^1"] == 0.5
    sims = json.load(open(tmp_path / "tau2" / "tau2_airline.json"))["simulations"]
    rewards = {s["task_id"]: s["reward_info"]["reward"] for s in sims}
    assert rewards == {"2": 0.0, "4": 1.0}
