"""The prompts bfcl-eval's own model handlers render for a BFCL multi-turn task: the reference that the agent
loop's prompts are compared with (tests, ``seal-verl preflight``).

bfcl-eval serves every local model through ``OSSHandler.inference_multi_turn_prompting``: the handler's
``_pre_query_processing_prompting`` sets up the conversation (QwenFCHandler: no system message, the raw docs
as tools; LlamaHandler: BFCL's default prompt-mode system prompt), user turns are appended as they come (a
miss_func reveal turn becomes ``DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_PROMPTING`` with the held-out
docs), and ``_format_prompt`` turns the messages into the raw completion prompt. This module runs exactly
those handler methods; only the HTTP call to a model server is left out (an assistant answer is given as
text and parsed by the handler's own ``_parse_query_response_prompting``).

Importing the handlers needs bfcl-eval's light runtime dependencies that the ``--no-deps`` install leaves
out (``openai``, ``overrides``, ``tenacity``, ``tree_sitter`` with its Java/JavaScript grammars):
``make backbone-sources`` installs them.
"""

from __future__ import annotations

import copy
import functools
from types import SimpleNamespace
from typing import Optional

#: backbone -> (bfcl-eval handler class path, model name, registry name, is_fc_model). The entries of ToolACE-2-8B
#: and Qwen3-8B are read from bfcl-eval's model_config.py by :func:`registered_handler` (a test checks them).
HANDLERS = {
    "qwen2.5": ("bfcl_eval.model_handler.local_inference.qwen_fc:QwenFCHandler", "Qwen/Qwen2.5-7B-Instruct",
                "Qwen/Qwen2.5-7B-Instruct-FC", True),
    "qwen3": ("bfcl_eval.model_handler.local_inference.qwen_fc:QwenFCHandler", "Qwen/Qwen3-8B",
              "Qwen/Qwen3-8B-FC", True),
    "toolace2": ("bfcl_eval.model_handler.local_inference.llama:LlamaHandler", "Team-ACE/ToolACE-2-8B",
                 "Team-ACE/ToolACE-2-8B", False),
}


def handler_of_toolace() -> str:
    """The handler class name bfcl-eval's model config maps ``Team-ACE/ToolACE-2-8B`` to."""
    return registered_handler("Team-ACE/ToolACE-2-8B")


def registered_handler(registry_name: str) -> str:
    """The handler class name bfcl-eval's model config maps ``registry_name`` to (read from the source text:
    importing model_config pulls every API vendor's SDK)."""
    import ast
    import importlib.util
    import os

    spec = importlib.util.find_spec("bfcl_eval")
    path = os.path.join(list(spec.submodule_search_locations)[0], "constants", "model_config.py")
    tree = ast.parse(open(path, encoding="utf-8").read())
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values):
                if isinstance(k, ast.Constant) and k.value == registry_name and isinstance(v, ast.Call):
                    for kw in v.keywords:
                        if kw.arg == "model_handler" and isinstance(kw.value, ast.Name):
                            return kw.value.id
    raise LookupError(f"{path}: no model_handler entry for {registry_name}")


@functools.lru_cache(maxsize=4)
def _handler(backbone: str):
    import importlib

    target, model, registry, is_fc = HANDLERS[backbone]
    mod, cls = target.split(":")
    return getattr(importlib.import_module(mod), cls)(model, 0.001, registry, is_fc)


@functools.lru_cache(maxsize=8)
def _entries(category: str) -> dict:
    from bfcl_eval.utils import load_dataset_entry

    return {e["id"]: e for e in load_dataset_entry(category)}


def _answer(text: str):
    """An answer object shaped like the completions response the handler parses."""
    return SimpleNamespace(choices=[SimpleNamespace(text=text)],
                           usage=SimpleNamespace(prompt_tokens=0, completion_tokens=0))


def handler_prompt(backbone: str, task_id: str, upto_turn: int = 0, answer: str = "Done.") -> str:
    """The raw prompt bfcl-eval's handler for ``backbone`` sends at the first step of turn ``upto_turn``, when
    every earlier turn was answered with the text ``answer`` (no tool call, so each such turn ends there)."""
    from .tasks import category_of

    handler = _handler(backbone)
    entry = copy.deepcopy(_entries(category_of(task_id))[task_id])
    from bfcl_eval.constants.default_prompts import DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_PROMPTING

    holdout: dict = entry.get("missed_function", {})
    data = handler._pre_query_processing_prompting(entry)
    for turn, msgs in enumerate(entry["question"][: upto_turn + 1]):
        if str(turn) in holdout:
            msgs = [{"role": "user", "content": DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_PROMPTING.format(
                functions=holdout[str(turn)])}]
        if turn == 0:
            data = handler.add_first_turn_message_prompting(data, msgs)
        else:
            data = handler._add_next_turn_user_message_prompting(data, msgs)
        if turn < upto_turn:
            parsed = handler._parse_query_response_prompting(_answer(answer))
            data = handler._add_assistant_message_prompting(data, parsed)
    return handler._format_prompt(data["message"], data["function"])


def reveal_turn(task) -> Optional[int]:
    """The first turn of ``task`` at which held-out functions are revealed (None for other categories)."""
    return min(task.missed_functions) if task.missed_functions else None
