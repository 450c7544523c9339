"""A small OpenAI-compatible chat server on 127.0.0.1 that replays recorded model outputs (not a test module).

``scripts[model][task_id]`` is a ``bfcl generate`` result ``[turn][step]``: in ``fc`` form a step is a list of
``{name: arguments_json}`` (answered as ``tool_calls``) or text; in prompt form every step is text. The server
finds the task from the conversation's first user message, the turn from the number of user messages, the
step from the assistant messages since the last user message, and answers that step ("Done." past the end).

It records every request (``requests``) so tests can check what the client sent, and can fail on purpose:
``fail_times[model] = n`` answers the next n requests for that model with HTTP 503 (a retry test);
``always_fail`` models always get HTTP 500; ``delay_s`` slows every answer down.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class ReplayServer:
    #: the route whose requests :meth:`answer` answers
    POST_PATH = "/v1/chat/completions"

    def __init__(self, scripts: dict, first_user: dict):
        """``first_user``: task id -> the content of its first user message."""
        self.scripts = scripts
        self.first_user = dict(first_user)
        self.requests: list[dict] = []
        self.fail_times: dict[str, int] = {}
        self.always_fail: set[str] = set()
        self.delay_s = 0.0  # seconds before each chat answer (a slow model)
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _send(self, code: int, obj) -> None:
                body = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                if self.path.rstrip("/") == "/v1/models":
                    self._send(200, {"object": "list", "data": [{"id": m, "object": "model"} for m in outer.scripts]})
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self):
                if self.path.rstrip("/") != outer.POST_PATH:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                code, obj = outer.answer(req)
                self._send(code, obj)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()

    def answer(self, req: dict) -> tuple[int, dict]:
        model = req.get("model")
        if self.delay_s:
            time.sleep(self.delay_s)
        with self._lock:
            self.requests.append(req)
            if model in self.always_fail:
                return 500, {"error": {"message": "internal error (on purpose)"}}
            if self.fail_times.get(model, 0) > 0:
                self.fail_times[model] -= 1
                return 503, {"error": {"message": "busy (on purpose)"}}
        if model not in self.scripts:
            return 404, {"error": {"message": f"The model `{model}` does not exist."}}
        msgs = req["messages"]
        users = [i for i, m in enumerate(msgs) if m["role"] == "user"]
        first = msgs[users[0]]["content"] if users else None
        # Tasks of different categories can open with the same question: look only among this model's tasks.
        task_id = next((t for t in self.scripts[model] if self.first_user.get(t) == first), None)
        script = self.scripts[model].get(task_id)
        if script is None:
            return 400, {"error": {"message": "unknown conversation"}}
        turn = len(users) - 1
        step = sum(1 for m in msgs[users[-1]:] if m["role"] == "assistant")
        steps = script[turn] if turn < len(script) else []
        out = steps[step] if step < len(steps) else "Done."
        if isinstance(out, list):
            message = {"role": "assistant", "content": None, "tool_calls": [
                {"id": f"chatcmpl-tool-{turn}-{step}-{i}", "type": "function",
                 "function": {"name": name, "arguments": args}}
                for i, item in enumerate(out) for name, args in item.items()]}
            finish = "tool_calls"
        else:
            message = {"role": "assistant", "content": out}
            finish = "stop"
        return 200, {"id": "replay", "object": "chat.completion", "model": model,
                     "choices": [{"index": 0, "message": message, "finish_reason": finish}]}


class RawServer:
    """A hostile HTTP server on 127.0.0.1 speaking raw bytes, for the client's failure paths (not a test module).

    ``behaviours`` is a list of callables ``(send, path) -> None``, one per connection in order (the last one
    is reused): ``send(bytes)`` writes to the client, ``path`` is the request's path. The connection is closed
    when the callable returns. ``stop`` is set on exit, so a behaviour that trickles or waits must watch it.
    Every loop here is bounded by ``stop`` and by the client closing the connection.
    """

    def __init__(self, behaviours: list):
        import socket

        self.behaviours = list(behaviours)
        self.connections = 0
        self.stop = threading.Event()
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self._sock.settimeout(0.2)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}/v1"
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self._thread.join(timeout=10)
        self._sock.close()

    def _serve(self) -> None:
        import socket

        while not self.stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except (socket.timeout, OSError):
                continue
            behaviour = self.behaviours[min(self.connections, len(self.behaviours) - 1)]
            self.connections += 1
            threading.Thread(target=self._handle, args=(conn, behaviour), daemon=True).start()

    def _handle(self, conn, behaviour) -> None:
        conn.settimeout(5.0)
        try:
            head = b""
            while b"\r\n\r\n" not in head and len(head) < 1 << 20:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                head += chunk
            header, _, rest = head.partition(b"\r\n\r\n")
            lines = header.decode("latin-1").split("\r\n")
            path = lines[0].split(" ")[1] if len(lines[0].split(" ")) > 1 else "/"
            length = next((int(x.split(":", 1)[1]) for x in lines[1:] if x.lower().startswith("content-length:")), 0)
            while len(rest) < length:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                rest += chunk
            behaviour(conn.sendall, path)
        except OSError:
            pass
        finally:
            try:
                conn.close()
            except OSError:
                pass


def http_answer(body: bytes, status: str = "200 OK", length: int | None = None) -> bytes:
    """A complete HTTP/1.1 answer (``length`` overrides the Content-Length header, to cut a body short)."""
    n = len(body) if length is None else length
    return (f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {n}\r\n"
            "Connection: close\r\n\r\n").encode() + body


def chat_body(content_json: str = '"Done."', model: str = "m") -> bytes:
    """A chat-completions answer whose message content is the raw JSON text ``content_json``."""
    return ('{"id": "x", "object": "chat.completion", "model": "%s", "choices": [{"index": 0, "message": '
            '{"role": "assistant", "content": %s}, "finish_reason": "stop"}]}' % (model, content_json)).encode()


def models_body(*models: str) -> bytes:
    return json.dumps({"object": "list", "data": [{"id": m, "object": "model"} for m in models]}).encode()
