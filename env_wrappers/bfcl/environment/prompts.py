"""BFCL's prompts per call format: the system prompt, the tool docs, the messages that reveal functions.

One place for how a BFCL task is shown to a model, so the training rollouts and any evaluation client render
the same bytes:

- ``json`` (Qwen-style function calling): BFCL's function docs go to the chat template's ``tools=`` argument
  (its ``<tools>`` block, as bfcl-eval's ``QwenFCHandler`` renders them), calls come back as ``<tool_call>`` JSON;
- ``python`` (BFCL's prompt mode, e.g. ToolACE-2-Llama-3.1-8B): BFCL's own default system prompt carries
  the function docs in BFCL's doc dialect (:func:`prompt_mode_system_prompt`), calls come back as a Python
  call list.

Functions revealed mid-task (``miss_func``): a token-continuous rollout cannot re-render the prompt's tool
list, so the revealed docs are written in front of the reveal turn's user message, as bfcl-eval does it for
every local model (the raw doc list, newline, BFCL's reveal text), in both call formats.
"""

from __future__ import annotations

import json
from typing import Any, Optional


from .tasks import BFCLTask

__all__ = ["CALL_FORMATS", "prompt_mode_system_prompt", "initial_docs", "initial_messages", "reveal_docs_text",
           "reveal_messages"]

#: Call formats the agent loops render prompts for.
CALL_FORMATS = ("json", "python")


def prompt_mode_system_prompt(docs: list[dict]) -> str:
    """BFCL's default prompt-mode system prompt (``DEFAULT_SYSTEM_PROMPT_FORMAT``: Python call list, no tag,
    JSON function docs, plain text, classic style) for ``docs``.

    Composed from BFCL's own template strings in ``bfcl_eval.constants.default_prompts`` the way
    ``bfcl_eval.model_handler.utils.formulate_system_prompt`` composes them; that module itself cannot be
    imported in the lean install (it needs ``tree_sitter`` for Java/JS parsers that multi-turn never uses).
    """
    from bfcl_eval.constants.default_prompts import (
        OUTPUT_FORMAT_MAPPING,
        PARAM_TYPE_MAPPING,
        PROMPT_STYLE_TEMPLATES,
        PROMPT_TEMPLATE_MAPPING,
    )

    style = PROMPT_STYLE_TEMPLATES["classic"]
    return PROMPT_TEMPLATE_MAPPING["plaintext"].format(
        persona=style["persona"],
        task=style["task"],
        tool_call_format=style["tool_call_no_tag"].format(
            output_format=OUTPUT_FORMAT_MAPPING["python"], param_types=PARAM_TYPE_MAPPING["python"]
        ),
        multiturn_behavior=style["multiturn_behavior"],
        available_tools=style["available_tools"].format(format="json", functions=json.dumps(docs, indent=4)),
    )


def initial_docs(task: BFCLTask) -> list[dict]:
    """BFCL docs offered in the prompt: the task's functions plus any revealed at turn 0."""
    return list(task.functions) + list(task.missed_functions.get(0, []))


def _check_format(call_format: str) -> None:
    if call_format not in CALL_FORMATS:
        raise ValueError(f"call_format must be one of {', '.join(CALL_FORMATS)}, got {call_format!r}")


def initial_messages(task: BFCLTask, messages: list[dict], call_format: str
                     ) -> tuple[list[dict], Optional[list[dict]]]:
    """``(messages, tools)`` of a task's prompt; ``messages`` = the first user turn (with any system message).

    ``json``: the messages unchanged and, for the chat template's ``tools=``, BFCL's own function docs of turn 0
    (its doc dialect with its language hint, as bfcl-eval's ``QwenFCHandler`` lists them in the ``<tools>``
    block), not OpenAI-converted tool objects, so the prompt is the one the benchmark renders.
    ``python``: BFCL's prompt-mode system prompt in front (an existing system message is kept after it, as
    BFCL's ``system_prompt_pre_processing_chat_model`` does) and no ``tools``.
    """
    _check_format(call_format)
    messages = [dict(m) for m in messages]
    if call_format == "json":
        return messages, initial_docs(task)
    system = prompt_mode_system_prompt(initial_docs(task))
    if messages and messages[0].get("role") == "system":
        messages[0]["content"] = system + "\n\n" + str(messages[0].get("content") or "")
    else:
        messages.insert(0, {"role": "system", "content": system})
    return messages, None


def reveal_docs_text(task: BFCLTask, turn: int, revealed_tools: list[dict], call_format: str) -> str:
    """The text of the docs revealed at ``turn``: BFCL's raw doc list, for both call formats. bfcl-eval runs every
    local model (``QwenFCHandler`` and ``LlamaHandler`` alike) through its prompting path, which formats the raw
    doc list into ``DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_PROMPTING``."""
    _check_format(call_format)
    docs: Any = task.missed_functions.get(turn, [])
    return str(docs)


def reveal_messages(task: BFCLTask, turn: int, messages: list[dict], revealed_tools: list[dict],
                    call_format: str) -> list[dict]:
    """The user messages of ``turn`` with the docs revealed there written in front of the first one."""
    if not revealed_tools or not messages:
        return messages
    out = [dict(m) for m in messages]
    first = next((i for i, m in enumerate(out) if m.get("role") == "user"), 0)
    out[first]["content"] = (reveal_docs_text(task, turn, revealed_tools, call_format) + "\n"
                             + str(out[first].get("content") or ""))
    return out
