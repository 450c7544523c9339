"""Loaded at interpreter start-up by a subprocess whose PYTHONPATH names this folder: the process may open
network connections to loopback addresses only.

Any other connect (or a name lookup of a host that is not local) is refused with ``ConnectionRefusedError`` and
written, one JSON line each, to the file named by ``SEAL_NETWORK_LOG``. The opt-in pipeline tests read that file
to show that a third-party command line talked to the local server and to nothing else.
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket

_LOG = os.environ.get("SEAL_NETWORK_LOG")
_LOCAL_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", ""}
_connect = socket.socket.connect
_connect_ex = socket.socket.connect_ex
_getaddrinfo = socket.getaddrinfo


def _record(kind: str, target) -> None:
    if _LOG:
        with open(_LOG, "a") as f:
            f.write(json.dumps({"pid": os.getpid(), "kind": kind, "target": repr(target)}) + "\n")


def _is_local_host(host) -> bool:
    if host is None:
        return True
    if isinstance(host, bytes):
        host = host.decode("ascii", "replace")
    host = str(host).strip("[]").lower()
    if host in _LOCAL_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def _allowed(sock, address) -> bool:
    if sock.family == getattr(socket, "AF_UNIX", None):
        return True  # local sockets (multiprocessing, logging)
    host = address[0] if isinstance(address, tuple) and address else address
    return _is_local_host(host)


def _guarded_connect(self, address):
    if not _allowed(self, address):
        _record("connect", address)
        raise ConnectionRefusedError(f"network access outside loopback refused in this test: {address!r}")
    return _connect(self, address)


def _guarded_connect_ex(self, address):
    if not _allowed(self, address):
        _record("connect", address)
        raise ConnectionRefusedError(f"network access outside loopback refused in this test: {address!r}")
    return _connect_ex(self, address)


def _guarded_getaddrinfo(host, *args, **kwargs):
    if not _is_local_host(host):
        _record("resolve", host)
        raise socket.gaierror(socket.EAI_NONAME, f"name lookup outside loopback refused in this test: {host!r}")
    return _getaddrinfo(host, *args, **kwargs)


socket.socket.connect = _guarded_connect
socket.socket.connect_ex = _guarded_connect_ex
socket.getaddrinfo = _guarded_getaddrinfo
