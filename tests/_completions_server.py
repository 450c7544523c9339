"""A scripted OpenAI completions server on 127.0.0.1 that answers every prompt with one fixed text (not a test
module; ``tests/eval/test_official_pipeline.py`` starts it).

bfcl-eval's local handlers render the prompt themselves and call ``/v1/completions``. With this server in place
of vLLM, what "the model" says is chosen by the test, so a case that a sampled model produces only by chance is
produced every time: the default answer is a tool call whose ``name`` is an object, which bfcl's Qwen handler
cannot decode and then cannot render into the next prompt, so ``bfcl generate`` records the task as
``"Error during inference: ..."`` (seen from a warm-started tiny model in a fresh CI run).
"""

from __future__ import annotations

from _replay_server import ReplayServer

#: A tool call bfcl's QwenFCHandler cannot format: ``formatted_prompt += tool_call["name"]`` raises on a dict.
OBJECT_NAME_CALL = '<tool_call>\n{"name": {"function": "ls"}, "arguments": {}}\n</tool_call>'


class CompletionsServer(ReplayServer):
    """The replay server's HTTP plumbing (``/v1/models``, request log) on the completions route, one answer."""

    POST_PATH = "/v1/completions"

    def __init__(self, model: str, text: str = OBJECT_NAME_CALL):
        super().__init__({model: {}}, {})
        self.model, self.text = model, text
        self.port = self.httpd.server_address[1]

    def answer(self, req: dict) -> tuple[int, dict]:
        with self._lock:
            self.requests.append(req)
        if req.get("model") != self.model:
            return 404, {"error": {"message": f"The model `{req.get('model')}` does not exist."}}
        return 200, {"id": "scripted", "object": "text_completion", "model": self.model,
                     "choices": [{"index": 0, "text": self.text, "finish_reason": "stop", "logprobs": None}],
                     "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
