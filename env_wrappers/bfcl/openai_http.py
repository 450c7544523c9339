"""A small client for OpenAI-compatible chat-completions servers (vLLM's among them), standard library only.

Why not the ``openai`` package: the lean install does not carry it, and the evaluator needs exactly two
requests (``GET /models``, ``POST /chat/completions``) with its own retry policy:

- connection errors, timeouts, HTTP 429 and 5xx are retried with exponential back-off (plus jitter);
- other 4xx answers (a prompt longer than the server's context, a bad request) are not retried;
- every error is one line that names the URL, so a user sees at once what is wrong.

Thread-safe: each request opens its own connection.
"""

from __future__ import annotations

import json
import random
import socket
import threading
import time
import urllib.error
import urllib.request
from typing import Any, Callable


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


class ChatClient:
    """``models()`` and ``chat(payload)`` against ``base_url`` (ending in ``/v1``, or without it)."""

    def __init__(self, base_url: str, api_key: str | None = None, timeout_s: float = 600.0, retries: int = 4,
                 backoff_s: float = 1.0, max_backoff_s: float = 30.0,
                 sleep: Callable[[float], None] = time.sleep):
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"--base-url must start with http:// or https://, got {base_url!r}")
        base = base_url.rstrip("/")
        self.base_url = base if base.endswith("/v1") else base + "/v1"
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
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
        except (KeyError, IndexError, TypeError):
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
        for attempt in range(self.retries + 1):
            if attempt:
                self.stats["retries"] += 1
                self._sleep(self._backoff(attempt - 1))
            self.stats["requests"] += 1
            req = urllib.request.Request(url, data=data, headers=headers, method=method)
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                    body = resp.read()
            except urllib.error.HTTPError as exc:
                connected_once = True
                detail = _error_detail(exc.read() or b"")
                last = f"{method} {url}: HTTP {exc.code}: {detail}"
                if exc.code == 429 or exc.code >= 500:
                    continue
                raise RequestRejected(exc.code, last) from None
            except urllib.error.URLError as exc:
                reason = exc.reason
                last = f"cannot reach the server at {url} ({getattr(reason, 'strerror', None) or reason})"
                if isinstance(reason, (socket.timeout, TimeoutError)):
                    connected_once = True
                    last = f"{method} {url}: no answer within {self.timeout_s:g} s"
                continue
            except (socket.timeout, TimeoutError):
                connected_once = True
                last = f"{method} {url}: no answer within {self.timeout_s:g} s"
                continue
            except (ConnectionError, OSError) as exc:  # reset mid-answer, broken pipe
                connected_once = True
                last = f"{method} {url}: connection lost ({exc.strerror or exc})"
                continue
            try:
                return json.loads(body.decode("utf-8"))
            except (UnicodeDecodeError, ValueError):
                raise ServerError(f"{method} {url}: answer is not JSON: {body[:120]!r}") from None
        if not connected_once:
            raise ServerUnreachable(f"{last} after {self.retries + 1} attempt(s)")
        raise ServerError(f"{last} (gave up after {self.retries + 1} attempt(s))")
