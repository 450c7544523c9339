"""A scripted OpenAI completions server on 127.0.0.1 that answers every prompt with one fixed text (not a test
module; ``tests/test_official_pipeline.py`` starts it).

bfcl-eval's local handlers render the prompt themselves and call ``/v1/completions``. With this server in place
of vLLM, what "the model" says is chosen by the test, so a case that a sampled model produces only by chance is
produced every time: the default answer is a tool call whose ``name`` is an object, which bfcl's Qwen handler
cannot decode and then cannot render into the next prompt, so ``bfcl generate`` records the task as
``"Error during inference: ..."`` (seen from a warm-started tiny model in a fresh CI run).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

#: A tool call bfcl's QwenFCHandler cannot format: ``formatted_prompt += tool_call["name"]`` raises on a dict.
OBJECT_NAME_CALL = '<tool_call>\n{"name": {"function": "ls"}, "arguments": {}}\n</tool_call>'


class CompletionsServer:
    def __init__(self, model: str, answer: str = OBJECT_NAME_CALL):
        self.model = model
        self.answer = answer
        self.requests = 0
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
                    self._send(200, {"object": "list", "data": [{"id": outer.model, "object": "model"}]})
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self):
                req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                if self.path.rstrip("/") != "/v1/completions":
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                if req.get("model") != outer.model:
                    self._send(404, {"error": {"message": f"The model `{req.get('model')}` does not exist."}})
                    return
                with outer._lock:
                    outer.requests += 1
                self._send(200, {"id": "scripted", "object": "text_completion", "model": outer.model,
                                 "choices": [{"index": 0, "text": outer.answer, "finish_reason": "stop",
                                              "logprobs": None}],
                                 "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
