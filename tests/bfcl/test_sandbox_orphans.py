"""A rollout process that dies without stopping its tool workers (killed, or ended by ``os._exit``) leaves none
behind: a worker whose parent is gone ends by itself (``sandbox.worker.PARENT_CHECK_S``). Workers forked later hold
the parent's end of every earlier worker's pipe, so the pipe alone never tells them; orphaned workers once piled
up, one set per killed process, each holding its memory."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from _paths import REPO

CHILD = """
import os, signal
from env_wrappers.bfcl.sandbox import pool as P
pool = P.pool()
workers = [pool.acquire(None) for _ in range(3)]
print(" ".join(str(w.process.pid) for w in workers), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as fh:
            return "State:\tZ" not in fh.read()
    except FileNotFoundError:
        return False


def test_workers_of_a_killed_process_end_by_themselves(tmp_path):
    out = tmp_path / "pids"
    with open(out, "w") as fh:  # a file, not a pipe: orphaned workers would hold a pipe open
        subprocess.run([sys.executable, "-c", CHILD], stdout=fh, stderr=subprocess.STDOUT, timeout=300,
                       env=dict(os.environ, PYTHONPATH=REPO, BFCL_PROJECT_ROOT=str(tmp_path)))
    text = out.read_text()
    pids = [int(p) for p in text.split()[:3]] if text.split()[0].isdigit() else []
    assert len(pids) == 3, text[-2000:]
    deadline = time.monotonic() + 60  # each looks every 2 s; generous for a loaded machine
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = [p for p in pids if _alive(p)]
    for p in left:
        os.kill(p, 9)
    assert left == [], "tool workers outlived their killed parent"
