"""The Qwen3 backbone (Qwen3-4B, Qwen3-8B): tokenizer, chat template, tool-call format and model facts, each checked
against a source that can be named.

- the chat template is the one bfcl-eval's ``QwenFCHandler`` quotes (read from the installed handler's source,
  byte for byte) and renders by hand (its ``_format_prompt``, on conversations with tool calls, grouped tool
  results, reasoning and several user turns);
- the BPE ranks are Qwen2's (``dashscope``), the same as Qwen2.5's: every BFCL text encodes as with Qwen2.5's
  tokenizer; the added tokens are Qwen2.5-Instruct's and four more whose ids torchtune's Qwen3 tokenizer lists
  (``QWEN3_SPECIAL_TOKENS`` in torchtune's ``torchtune/models/qwen3/_tokenizer.py``: Qwen2.5's plus
  ``<tool_response>`` 151665, ``</tool_response>`` 151666, ``<think>`` 151667, ``</think>`` 151668);
- bfcl-eval's model config maps ``Qwen/Qwen3-8B-FC`` to that handler; the recipe renders in non-thinking mode;
- ``seal-verl preflight`` compares all of it with a downloaded checkpoint, and fails on a model that differs.
"""

from __future__ import annotations

import inspect
import json
import os
import shutil
import textwrap

import pytest
from _backbones import require_handlers, tiny_model_dir, tokenizer
from _paths import REPO

from seal_verl.models import backbones as B
from seal_verl.models.backbones.templates import QWEN3_TEMPLATE

#: torchtune's QWEN3_SPECIAL_TOKENS beyond Qwen2.5's (restated here: torchtune is not installed in this project)
TORCHTUNE_QWEN3_EXTRA = {"<tool_response>": 151665, "</tool_response>": 151666, "<think>": 151667, "</think>": 151668}

TOOLS = [{"name": "cd", "description": "Change dir", "parameters": {"type": "dict", "properties": {
    "folder": {"type": "string"}}, "required": ["folder"]}}, {"name": "ls", "parameters": {"type": "dict"}}]
CONVERSATIONS = [
    [{"role": "user", "content": "go to docs"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "go"},
     {"role": "assistant", "content": "", "tool_calls": [
         {"type": "function", "function": {"name": "cd", "arguments": {"folder": "docs"}}},
         {"type": "function", "function": {"name": "ls", "arguments": "{}"}}]},
     {"role": "tool", "content": "{\"current_working_directory\": \"docs\"}"}, {"role": "tool", "content": "[]"}],
    [{"role": "user", "content": "first"}, {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nDone."},
     {"role": "user", "content": "second"}, {"role": "assistant", "content": "ok", "reasoning_content": "plan",
                                             "tool_calls": [{"name": "ls", "arguments": {}}]},
     {"role": "tool", "content": "a.txt"}],
    [{"role": "user", "content": "one"}, {"role": "assistant", "content": "Done."}, {"role": "user", "content": "two"}],
]


def _quoted_template() -> str:
    """The chat template QwenFCHandler's docstring quotes, as written in its source (escapes unprocessed)."""
    require_handlers()
    from bfcl_eval.model_handler.local_inference.qwen_fc import QwenFCHandler

    src = inspect.getsource(QwenFCHandler._format_prompt)
    return textwrap.dedent(src.split('"chat_template":', 1)[1].split('"""', 1)[0]).strip()


def test_template_is_the_one_bfcl_eval_quotes():
    assert QWEN3_TEMPLATE == _quoted_template()
    assert tokenizer("qwen3").chat_template == QWEN3_TEMPLATE


def test_template_renders_what_the_bfcl_handler_writes():
    require_handlers()
    from bfcl_eval.model_handler.local_inference.qwen_fc import QwenFCHandler

    handler = QwenFCHandler("Qwen/Qwen3-8B", 0.001, "Qwen/Qwen3-8B-FC", True)
    tok = tokenizer("qwen3")
    for messages in CONVERSATIONS:
        for tools in (TOOLS, []):
            ours = tok.apply_chat_template(messages, tools=tools or None, add_generation_prompt=True, tokenize=False)
            assert ours == handler._format_prompt([dict(m) for m in messages], tools), messages


def test_non_thinking_mode_ends_the_generation_prompt_with_an_empty_think_block():
    tok = tokenizer("qwen3")
    messages = CONVERSATIONS[0]
    thinking = tok.apply_chat_template(messages, tools=TOOLS, add_generation_prompt=True, tokenize=False)
    plain = tok.apply_chat_template(messages, tools=TOOLS, add_generation_prompt=True, tokenize=False,
                                    **B.spec("qwen3").chat_template_kwargs)
    assert thinking.endswith("<|im_start|>assistant\n")
    assert plain == thinking + "<think>\n\n</think>\n\n"
    assert tok.encode("<think>\n\n</think>\n\n", add_special_tokens=False)[::2] == [151667, 151668]


@pytest.mark.parametrize("group", ["qwen3-4b", "qwen3-8b"])
def test_recipe_group_renders_as_the_spec_says(group):
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(os.path.join(REPO, "recipes", "bfcl_v3", "config", "backbone", f"{group}.yaml"))
    spec = B.spec(group)
    assert spec.name == "qwen3" and spec.call_format == "json"
    assert OmegaConf.to_container(cfg.data.apply_chat_template_kwargs) == spec.chat_template_kwargs
    assert cfg.actor_rollout_ref.model.path in spec.models
    loops = OmegaConf.to_container(cfg.actor_rollout_ref.rollout.agent)["agent_loop_config_path"]
    assert loops == "${recipe.dir}/agent_loops/json.yaml"


def test_added_tokens_are_qwen25s_and_torchtunes_four():
    tok = tokenizer("qwen3")
    assert B.QWEN3_ADDED[:len(B.QWEN25_ADDED)] == B.QWEN25_ADDED
    extra = {text: tid for tid, text, _ in B.QWEN3_ADDED[len(B.QWEN25_ADDED):]}
    assert extra == TORCHTUNE_QWEN3_EXTRA
    assert len(tok) == 151643 + 26 <= B.spec("qwen3").vocab_size["Qwen/Qwen3-8B"]
    for text, tid in extra.items():
        assert tok.encode(text, add_special_tokens=False) == [tid]
    # not special: a decoded answer keeps its thinking and tool tags, as it keeps <tool_call>
    assert tok.decode([151667, 151668, 151665, 151657, 151645], skip_special_tokens=True) == \
        "<think></think><tool_response><tool_call>"


def test_every_tag_bfcl_eval_writes_is_one_token():
    tok = tokenizer("qwen3")
    for tag in ("<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>",
                "<think>", "</think>"):
        assert tag in _quoted_template()
        assert len(tok.encode(tag, add_special_tokens=False)) == 1, tag


def test_texts_encode_as_with_qwen25():
    """The same BPE ranks and split pattern: every BFCL text (docs, user turns, calls) gets Qwen2.5's ids."""
    from env_wrappers.bfcl.environment.tasks import load_tasks

    qwen25, qwen3 = tokenizer("qwen2.5"), tokenizer("qwen3")
    texts = set()
    for task in load_tasks().values():
        texts.add(json.dumps(task.all_docs()))
        texts.update(m["content"] for turn in task.questions for m in turn)
        texts.update("[" + ", ".join(calls) + "]" for calls in task.ground_truth)
    texts = sorted(texts)
    assert len(texts) > 1500
    assert [qwen3.encode(t, add_special_tokens=False) for t in texts] == \
        [qwen25.encode(t, add_special_tokens=False) for t in texts]


def test_bfcl_eval_maps_qwen3_8b_to_the_reference_handler():
    from env_wrappers.bfcl.environment.handler_prompts import HANDLERS, registered_handler

    target, model, registry, is_fc = HANDLERS["qwen3"]
    assert registered_handler(registry) == target.rsplit(":", 1)[1] == "QwenFCHandler"
    assert model == "Qwen/Qwen3-8B" and is_fc


# ------------------------------------------------------------------------------------------- user-side check

def _released_copy(tmp_path, name: str, model: str = "Qwen/Qwen3-8B") -> str:
    """The tiny Qwen3 model's folder with config.json claiming the released model's facts."""
    out = tmp_path / name
    shutil.copytree(tiny_model_dir("qwen3"), out)
    with open(out / "config.json") as f:
        config = json.load(f)
    spec = B.spec("qwen3")
    config.update(spec.config_facts[model], vocab_size=spec.vocab_size[model])
    config.pop("layer_types", None)  # one per layer: transformers derives it again for the claimed depth
    (out / "config.json").write_text(json.dumps(config))
    return str(out)


def test_preflight_passes_a_checkpoint_with_the_released_facts(tmp_path):
    from transformers import AutoTokenizer

    from env_wrappers.bfcl.environment.preflight import check_backbone_facts

    model = _released_copy(tmp_path, "good")
    c = check_backbone_facts(AutoTokenizer.from_pretrained(model), model, "qwen3-8b", reference=tokenizer("qwen3"))
    assert c.status == "ok", c.detail


def test_preflight_fails_on_other_facts_template_or_tokens(tmp_path):
    from transformers import AutoTokenizer

    from env_wrappers.bfcl.environment.preflight import check_backbone_facts

    tiny = tiny_model_dir("qwen3")  # the tiny model: not the released 8B's config
    c = check_backbone_facts(AutoTokenizer.from_pretrained(tiny), tiny, "qwen3-8b", reference=tokenizer("qwen3"))
    assert c.status == "fail" and "num_hidden_layers=2" in c.detail and "Qwen/Qwen3-8B" in c.fix

    model = _released_copy(tmp_path, "qwen25-template")
    tok = AutoTokenizer.from_pretrained(model)
    tok.chat_template = B.spec("qwen2.5").chat_template
    c = check_backbone_facts(tok, model, "qwen3-8b", reference=tokenizer("qwen3"))
    assert c.status == "fail" and "renders multi_turn_base_0's first prompt differently" in c.detail

    c = check_backbone_facts(tokenizer("qwen2.5"), model, "qwen3-8b", reference=tokenizer("qwen3"))
    assert c.status == "fail" and "'<think>' has id" in c.detail

    c = check_backbone_facts(tokenizer("qwen3"), _released_copy(tmp_path, "4b", "Qwen/Qwen3-4B"), "qwen3-8b",
                             reference=tokenizer("qwen3"))
    assert c.status == "fail" and "tie_word_embeddings=True" in c.detail


def test_preflight_measures_prompts_as_the_recipe_renders_them():
    """The prompt budget check renders with the recipe's chat-template arguments: Qwen3's first prompts carry the
    empty thinking block (the stored lengths were measured so, and verl's loop builds them so)."""
    from env_wrappers.bfcl.environment.preflight import prompt_lengths

    with open(os.path.join(REPO, "recipes", "bfcl_v3", "lengths", "qwen3.json")) as f:
        stored = json.load(f)
    ids = ["multi_turn_base_0", "multi_turn_long_context_0"]
    got = prompt_lengths(tokenizer("qwen3"), "qwen3-8b", ids, progress=False)
    assert got == {t: stored["tasks"][t][stored["columns"].index("prompt")] for t in ids}
