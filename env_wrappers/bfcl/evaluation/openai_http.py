"""A small client for OpenAI-compatible chat-completions servers (vLLM's among them), standard library only.

Why not the ``openai`` package (or httpx): the lean install does not carry them, and neither bounds a whole
request in time (their timeouts apply per connect, read or write, so a server that sends one byte per second
keeps a request alive forever) nor an answer's size. The evaluator needs exactly two requests
(``GET /models``, ``POST /chat/completions``) with these guarantees and its own retry policy:

- every request ends within ``timeout_s`` seconds in total (connect, headers and body): a watchdog closes the
  connection at the deadline;
- an answer body larger than ``max_body_bytes`` is refused without reading it all;
- every transport failure (refused or lost connection, a timeout, a body cut short, a malformed status line or
  header), HTTP 429 and 5xx are retried with exponential back-off (plus jitter);
- other 4xx answers (a prompt longer than the server's context, a bad request) are not retried, and neither is
  an answer that arrived whole but is not usable JSON (not JSON, nested too deep, invalid UTF-8 or a lone
  surrogate, too large): it raises :class:`ServerError`, which the evaluator records as that task's inference
  error;
- every error is one line that names the URL, so a user sees at once what is wrong.

Thread-safe: each request opens its own connection.
"""

from __future__ import annotations

import http.client
import json
import math
import random
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Callable

#: Default cap on one answer's body: far above any chat completion (a 128k-token answer is a few MB).
MAX_BODY_BYTES = 64 * 1024 * 1024
#: What is read of an error answer's body (for its message).
MAX_ERROR_BODY_BYTES = 64 * 1024
_CHUNK = 64 * 1024


class ServerError(Exception):
    """The server answered with an error, or kept failing after all retries (one-line message)."""


class ServerUnreachable(ServerError):
    """No connection could be made at all (refused, no route, DNS): the run cannot continue."""


class RequestRejected(ServerError):
    """A 4xx answer other than 429: retrying the same request cannot help."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def _error_detail(body: bytes) -> str:
    """The server's own error text (OpenAI form ``{"error": {"message": ...}}`` or vLLM's ``{"message"}``)."""
    text = body.decode("utf-8", "replace")
    try:
        obj = json.loads(text)
    except ValueError:
        return " ".join(text.split())[:300]
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict) and err.get("message"):
            return " ".join(str(err["message"]).split())[:300]
        if isinstance(err, str):
            return err[:300]
    return " ".join(text.split())[:300]


def check_base_url(base_url: str) -> str | None:
    """Why ``base_url`` cannot be used (one line), or None: http(s), a host, a valid port."""
    if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
        return f"--base-url must start with http:// or https://, got {base_url!r}"
    try:
        parts = urllib.parse.urlsplit(base_url)
        port = parts.port
    except ValueError as exc:
        return f"--base-url {base_url!r} is not a valid URL ({exc})"
    if not parts.hostname:
        return f"--base-url {base_url!r} names no host"
    if port == 0:
        return f"--base-url {base_url!r}: port 0 is not a valid port"
    if parts.query or parts.fragment or any(c.isspace() for c in base_url):
        return f"--base-url {base_url!r}: give the server's base URL only (no query, fragment or spaces)"
    return None


class _Watchdog:
    """Closes the connection of one request at its deadline, so that no read or write outlives it."""

    def __init__(self, timeout_s: float):
        self.expired = False
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._timer = threading.Timer(timeout_s, self._fire)
        self._timer.daemon = True  # never keeps the process alive (Ctrl-C, the end of a run)
        self._timer.start()

    def attach(self, sock: socket.socket) -> None:
        with self._lock:
            self._sock = sock
            if self.expired:
                self._shutdown()

    def _fire(self) -> None:
        with self._lock:
            self.expired = True
            self._shutdown()

    def _shutdown(self) -> None:
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cancel(self) -> None:
        self._timer.cancel()


def _watched_opener(watch: _Watchdog) -> urllib.request.OpenerDirector:
    """An opener (proxies, redirects as ``urlopen``) whose connections report their socket to ``watch``."""

    def watched(base):
        class Conn(base):
            def connect(self):
                super().connect()
                watch.attach(self.sock)
        return Conn

    class HTTP(urllib.request.HTTPHandler):
        def http_open(self, req):
            return self.do_open(watched(http.client.HTTPConnection), req)

    class HTTPS(urllib.request.HTTPSHandler):
        def https_open(self, req):
            return self.do_open(watched(http.client.HTTPSConnection), req, context=self._context)

    return urllib.request.build_opener(HTTP, HTTPS)


class _TooLarge(Exception):
    pass


def _read_limited(resp, limit: int) -> bytes:
    """The whole body, or :class:`_TooLarge` as soon as it (or its announced length) passes ``limit``."""
    headers = getattr(resp, "headers", None)
    try:
        announced = int(headers.get("Content-Length")) if headers is not None else None
    except (TypeError, ValueError):
        announced = None
    if announced is not None and announced > limit:
        raise _TooLarge(announced)
    parts, n = [], 0
    while True:
        chunk = resp.read(min(_CHUNK, limit + 1 - n))
        if not chunk:
            if announced is not None and n < announced:  # read(amt) returns short at a premature close
                raise http.client.IncompleteRead(b"".join(parts), announced - n)
            return b"".join(parts)
        parts.append(chunk)
        n += len(chunk)
        if n > limit:
            raise _TooLarge(n)


def _parse_json(body: bytes) -> Any:
    """The decoded answer; ValueError when it is not usable JSON (not UTF-8, not JSON, too deep, a lone
    surrogate that could not be written back as UTF-8)."""
    try:
        obj = json.loads(body.decode("utf-8"))
    except UnicodeDecodeError:
        raise ValueError("not valid UTF-8") from None
    except RecursionError:
        raise ValueError("nested too deep") from None
    except ValueError as exc:
        raise ValueError(f"not JSON ({exc})") from None
    try:
        json.dumps(obj, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("text with a lone surrogate (invalid Unicode)") from None
    except RecursionError:
        raise ValueError("nested too deep") from None
    return obj


class ChatClient:
    """``models()`` and ``chat(payload)`` against ``base_url`` (ending in ``/v1``, or without it)."""

    def __init__(self, base_url: str, api_key: str | None = None, timeout_s: float = 600.0, retries: int = 4,
                 backoff_s: float = 1.0, max_backoff_s: float = 30.0,
                 sleep: Callable[[float], None] = time.sleep, max_body_bytes: int = MAX_BODY_BYTES):
        problem = check_base_url(base_url)
        if problem:
            raise ValueError(problem)
        if not (isinstance(timeout_s, (int, float)) and math.isfinite(timeout_s) and timeout_s > 0):
            raise ValueError(f"--timeout must be a number of seconds > 0, got {timeout_s!r}")
        base = base_url.rstrip("/")
        self.base_url = base if base.endswith("/v1") else base + "/v1"
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.max_body_bytes = int(max_body_bytes)
        self._sleep = sleep
        self._rng = random.Random()
        self._rng_lock = threading.Lock()
        self.stats = {"requests": 0, "retries": 0}

    # ------------------------------------------------------------------------------------------------------
    def models(self) -> list[str]:
        """Ids of the models the server serves (``GET /models``)."""
        obj = self._request("GET", "/models", None)
        data = obj.get("data") if isinstance(obj, dict) else None
        if not isinstance(data, list):
            raise ServerError(f"{self.base_url}/models: unexpected answer (no 'data' list)")
        return [str(m.get("id")) for m in data if isinstance(m, dict)]

    def chat(self, payload: dict) -> dict:
        """``POST /chat/completions``; returns the first choice's ``message`` plus ``finish_reason``."""
        obj = self._request("POST", "/chat/completions", payload)
        try:
            choice = obj["choices"][0]
            message = dict(choice["message"])
        except (KeyError, IndexError, TypeError, ValueError, AttributeError):
            raise ServerError(f"{self.base_url}/chat/completions: answer has no choices[0].message") from None
        message["finish_reason"] = choice.get("finish_reason")
        return message

    # ------------------------------------------------------------------------------------------------------
    def _backoff(self, attempt: int) -> float:
        with self._rng_lock:
            jitter = self._rng.uniform(0.5, 1.0)
        return min(self.max_backoff_s, self.backoff_s * (2 ** attempt)) * jitter

    def _request(self, method: str, path: str, payload: Any) -> Any:
        url = self.base_url + path
        data = None if payload is None else json.dumps(payload).encode("utf-8")
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        last = ""
        connected_once = False
        timed_out = f"{method} {url}: no answer within {self.timeout_s:g} s"
        for attempt in range(self.retries + 1):
            if attempt:
                self.stats["retries"] += 1
                self._sleep(self._backoff(attempt - 1))
            self.stats["requests"] += 1
            req = urllib.request.Request(url, data=data, headers=headers, method=method)
            watch = _Watchdog(self.timeout_s)
            status = None
            try:
                try:
                    with _watched_opener(watch).open(req, timeout=self.timeout_s) as resp:
                        body = _read_limited(resp, self.max_body_bytes)
                except urllib.error.HTTPError as exc:
                    status = exc.code
                    try:
                        body = _read_limited(exc, MAX_ERROR_BODY_BYTES)
                    except _TooLarge:
                        body = b"(error text too large)"
                    finally:
                        exc.close()
            except _TooLarge as exc:
                if watch.expired:
                    connected_once, last = True, timed_out
                    continue
                raise ServerError(f"{method} {url}: answer larger than {self.max_body_bytes} bytes "
                                  f"({exc.args[0]} or more)") from None
            except urllib.error.URLError as exc:
                reason = exc.reason
                if watch.expired or isinstance(reason, (socket.timeout, TimeoutError)):
                    connected_once, last = True, timed_out
                else:
                    last = f"cannot reach the server at {url} ({getattr(reason, 'strerror', None) or reason})"
                continue
            except (socket.timeout, TimeoutError):
                connected_once, last = True, timed_out
                continue
            except (http.client.HTTPException, OSError, ValueError) as exc:
                # reset or closed mid-answer, a body cut short, a malformed status line or header
                connected_once = True
                if watch.expired:
                    last = timed_out
                else:
                    why = getattr(exc, "strerror", None) or f"{type(exc).__name__}: {exc}"
                    last = f"{method} {url}: connection lost ({' '.join(str(why).split())[:200]})"
                continue
            finally:
                watch.cancel()
            if watch.expired:  # the last byte came after the deadline: not trusted to be whole
                connected_once, last = True, timed_out
                continue
            if status is not None:
                connected_once = True
                last = f"{method} {url}: HTTP {status}: {_error_detail(body)}"
                if status == 429 or status >= 500:
                    continue
                raise RequestRejected(status, last)
            try:
                return _parse_json(body)
            except ValueError as exc:
                raise ServerError(f"{method} {url}: answer is not JSON: {exc}: {body[:120]!r}") from None
        if not connected_once:
            raise ServerUnreachable(f"{last} after {self.retries + 1} attempt(s)")
        raise ServerError(f"{last} (gave up after {self.retries + 1} attempt(s))")
