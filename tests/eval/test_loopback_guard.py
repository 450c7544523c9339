"""The loopback-only guard (``tests/_loopback_only/sitecustomize.py``) that the opt-in pipeline tests put on a
subprocess's PYTHONPATH: it must refuse and record any connection or name lookup outside loopback, and let
loopback traffic through. Otherwise "bfcl talked to loopback only" would be an empty claim."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading

from _paths import TESTS

HERE = TESTS

PROBE = r"""
import socket, sys
port = int(sys.argv[1])
out = []
s = socket.create_connection(("127.0.0.1", port), timeout=5); s.sendall(b"x"); s.close(); out.append("loopback ok")
for target in (("192.0.2.1", 9), ("203.0.113.7", 443)):
    try:
        socket.socket().connect(target); out.append("outside connected")
    except ConnectionRefusedError:
        out.append("outside refused")
try:
    socket.getaddrinfo("example.invalid", 443); out.append("lookup done")
except socket.gaierror:
    out.append("lookup refused")
print("|".join(out))
"""


def _listener():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)

    def accept():
        conn, _ = srv.accept()
        conn.recv(1)
        conn.close()
        srv.close()

    threading.Thread(target=accept, daemon=True).start()
    return srv.getsockname()[1]


def test_guard_refuses_and_records_outside_loopback(tmp_path):
    log = tmp_path / "net.jsonl"
    env = dict(os.environ, PYTHONPATH=os.path.join(HERE, "_loopback_only"), SEAL_NETWORK_LOG=str(log))
    p = subprocess.run([sys.executable, "-c", PROBE, str(_listener())], env=env, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "loopback ok|outside refused|outside refused|lookup refused"
    records = [json.loads(x) for x in log.read_text().splitlines()]
    assert [r["kind"] for r in records] == ["connect", "connect", "resolve"]
    assert "192.0.2.1" in records[0]["target"] and "example.invalid" in records[2]["target"]
