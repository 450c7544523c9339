"""The GPU backbones' tokenizers, built offline from packaged vocabularies, checked against every fact at hand.

- ids of the special and added tokens: the ones Qwen2.5-Instruct and Llama 3.1 publish, cross-checked with the
  source packages' own tables (dashscope's ``SPECIAL_START_ID`` and order, llama-models' special-token list),
  with the token ids other code in this environment hard-codes (transformers' Llama-3-based configs), and with
  the strings bfcl-eval's handlers write into prompts (each must be one token);
- encodings: identical to tiktoken (an independent BPE implementation reading the same rank files) on every
  text of the 800 BFCL tasks and on hand-picked edge cases; well-known encodings ("hello world");
- round trips, the saved-and-reloaded tokenizer (what verl and vLLM load) and the chat templates.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import unicodedata

import pytest
from _backbones import require, require_handlers, tokenizer

from seal_verl.models import backbones as B
NAMES = ("qwen2.5", "toolace2")

EDGE_CASES = [
    "hello world", "Hello world", " leading space", "trailing space ", "  two  spaces\n\n\nthree newlines\t tab",
    "digits 1234567890 and 3.14159e-10", "1,000,000 $12.50 -42", "CamelCaseName snake_case_name kebab-case",
    "I'm you're they've we'll she'd IT'S", "ümlaut café naïve 日本語 中文字符 한국어 emoji 🙂👍🏽",
    "e\u0301 (decomposed) vs \u00e9", "<tool_call>\n{\"name\": \"cd\", \"arguments\": {\"folder\": \"docs\"}}\n</tool_call>",
    "[cd(folder='document'), mv(source='a.txt', destination='b')]", "\r\n windows\r\nline", "    indented code():\n\treturn 1",
    "", " ", "\n", "a" * 300, "!!!???...", "http://example.com/path?q=1&r=2#frag",
]


def _source(module: str, rel: str) -> str:
    spec = importlib.util.find_spec(module)
    return os.path.join(list(spec.submodule_search_locations)[0], *rel.split("/"))


def _module_constants(path: str) -> dict:
    """Top-level ``NAME = literal`` assignments of a source file (read, never imported)."""
    out = {}
    for node in ast.parse(open(path, encoding="utf-8").read()).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                out[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                pass
    return out


@pytest.mark.parametrize("name", NAMES)
def test_added_tokens_have_the_released_ids(name):
    s = B.spec(name)
    tok = tokenizer(name)
    assert len(tok) == s.n_ranks + len(s.added)
    specials = set(tok.all_special_tokens)
    for tid, text, special in s.added:
        assert tok.convert_tokens_to_ids(text) == tid, text
        assert tok.encode(text, add_special_tokens=False) == [tid], text
        assert tok.decode([tid]) == text
        if special and text not in (s.bos, s.eos, s.pad) and name == "qwen2.5":
            assert text in specials
    for checkpoint, vocab_size in s.vocab_size.items():
        assert len(tok) <= vocab_size, checkpoint  # the embedding tables are padded beyond the tokenizer
    assert tok.eos_token == s.eos and tok.pad_token == s.pad and tok.bos_token == s.bos


def test_qwen_ids_agree_with_dashscope_tables():
    require("dashscope")
    c = _module_constants(_source("dashscope", "tokenizers/qwen_tokenizer.py"))
    assert c["SPECIAL_START_ID"] == 151643 == B.QWEN25_ADDED[0][0]
    assert [t for _, t, _ in B.QWEN25_ADDED[:3]] == [c["ENDOFTEXT"], c["IMSTART"], c["IMEND"]]
    assert c["PAT_STR"] == B.QWEN2_PATTERN
    tok = tokenizer("qwen2.5")
    # Qwen2.5-Instruct: <tool_call>/</tool_call> are added tokens but not special (they survive
    # skip_special_tokens, so a decoded answer keeps its call tags); <tool_response> is plain text.
    assert tok.decode([151657, 151658, 151645], skip_special_tokens=True) == "<tool_call></tool_call>"
    assert len(tok.encode("<tool_response>", add_special_tokens=False)) > 1


def test_llama_ids_agree_with_llama_models_and_transformers():
    require("llama_models")
    path = _source("llama_models", "llama3/tokenizer.py")
    tree = ast.parse(open(path, encoding="utf-8").read())
    names = None
    pattern = reserved = None
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            if node.targets[0].id == "special_tokens" and isinstance(node.value, ast.List):
                names = ast.literal_eval(node.value)
            if node.targets[0].id == "pat_str":
                pattern = ast.literal_eval(node.value)
            if node.targets[0].id == "num_reserved_special_tokens":
                reserved = ast.literal_eval(node.value)
    assert pattern == B.LLAMA3_PATTERN and reserved == 256 and names
    ours = {t: i for i, t, _ in B.BACKBONES["toolace2"].added}
    # llama-models ships the Llama 3.2 table, which renamed two reserved slots of Llama 3.1 (128005 and
    # 128011); every other name it lists sits at the same id as in Llama 3.1.
    renamed = {"<|step_id|>": 128005, "<|image|>": 128011}
    for i, t in enumerate(names):
        if t in renamed:
            assert renamed[t] == 128000 + i
            continue
        assert ours[t] == 128000 + i, t
    assert ours["<|reserved_special_token_2|>"] == 128005 and ours["<|reserved_special_token_3|>"] == 128011
    assert ours["<|reserved_special_token_247|>"] == 128255
    # ids other code in this environment hard-codes for Llama 3 tokenizers
    from transformers.models.cwm.configuration_cwm import CwmConfig

    tok = tokenizer("toolace2")
    assert CwmConfig().eos_token_id == [tok.convert_tokens_to_ids(t) for t in B.BACKBONES["toolace2"].stop]
    assert CwmConfig().bos_token_id == tok.bos_token_id == 128000
    assert tok.encode("hi")[0] == 128000  # BOS is added on plain encodes, as Llama 3.1's tokenizer does


@pytest.mark.parametrize("name", NAMES)
def test_known_encodings(name):
    tok = tokenizer(name)
    ids = tok.encode("hello world", add_special_tokens=False)
    # Llama 3's first 100k ranks are cl100k_base's: "hello world" is [15339, 1917] there.
    assert ids == {"qwen2.5": [14990, 1879], "toolace2": [15339, 1917]}[name]


def _bfcl_texts() -> list[str]:
    from env_wrappers.bfcl.environment.tasks import load_tasks

    texts = set(EDGE_CASES)
    for task in load_tasks().values():
        texts.add(json.dumps(task.all_docs()))
        texts.add(str(task.all_docs()))
        for turn in task.questions:
            for m in turn:
                texts.add(m["content"])
        for calls in task.ground_truth:
            texts.add("[" + ", ".join(calls) + "]")
    return sorted(texts)


@pytest.mark.parametrize("name", NAMES)
def test_encodings_equal_tiktoken_on_every_bfcl_text(name):
    """Same ids as tiktoken reading the same rank file (Qwen2's tokenizer NFC-normalises first)."""
    require("tiktoken")
    import tiktoken

    from seal_verl.models.backbones.tiktoken_bpe import load_ranks

    s = B.spec(name)
    enc = tiktoken.Encoding(name, pat_str=s.pattern, mergeable_ranks=load_ranks(B.rank_file(s)),
                            special_tokens={t: i for i, t, _ in s.added})
    tok = tokenizer(name)
    texts = _bfcl_texts()
    assert len(texts) > 2000
    bad = []
    for text in texts:
        ref = enc.encode(unicodedata.normalize("NFC", text) if s.nfc else text, allowed_special="all")
        got = tok.encode(text, add_special_tokens=False)
        if got != ref:
            bad.append(text[:80])
    assert not bad, f"{len(bad)} texts encode differently, e.g. {bad[:3]}"


@pytest.mark.parametrize("name", NAMES)
def test_round_trip(name):
    tok = tokenizer(name)
    for text in EDGE_CASES + _bfcl_texts()[:300]:
        expect = unicodedata.normalize("NFC", text) if B.spec(name).nfc else text
        assert tok.decode(tok.encode(text, add_special_tokens=False)) == expect


def test_qwen_chat_template_with_tools():
    tok = tokenizer("qwen2.5")
    tools = [{"type": "function", "function": {"name": "cd", "parameters": {"type": "object"}}}]
    msgs = [{"role": "user", "content": "go"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"type": "function", "function": {"name": "cd", "arguments": {"folder": "a"}}},
                {"type": "function", "function": {"name": "ls", "arguments": {}}}]},
            {"role": "tool", "content": "{\"ok\": true}"}, {"role": "tool", "content": "[]"}]
    text = tok.apply_chat_template(msgs, tools=tools, add_generation_prompt=True, tokenize=False)
    assert text == (
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.\n\n# Tools\n\n"
        "You may call one or more functions to assist with the user query.\n\nYou are provided with function "
        "signatures within <tools></tools> XML tags:\n<tools>\n" + json.dumps(tools[0]) + "\n</tools>\n\n"
        "For each function call, return a json object with function name and arguments within "
        "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
        "<args-json-object>}\n</tool_call><|im_end|>\n<|im_start|>user\ngo<|im_end|>\n<|im_start|>assistant\n"
        "<tool_call>\n{\"name\": \"cd\", \"arguments\": {\"folder\": \"a\"}}\n</tool_call>\n<tool_call>\n"
        "{\"name\": \"ls\", \"arguments\": {}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n"
        "{\"ok\": true}\n</tool_response>\n<tool_response>\n[]\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    # without tools and without a system message: the default system turn
    plain = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
    assert plain == ("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant."
                     "<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n")


def test_toolace_chat_template_and_bfcl_handler_agree():
    """The template renders what bfcl-eval's LlamaHandler writes for the same messages (tool -> ipython)."""
    require_handlers()
    from bfcl_eval.model_handler.local_inference.llama import LlamaHandler

    tok = tokenizer("toolace2")
    msgs = [{"role": "system", "content": " sys text \n"}, {"role": "user", "content": "go "},
            {"role": "assistant", "content": "[cd(folder='a')]"}, {"role": "tool", "content": "{\"ok\": true}"}]
    text = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    handler = LlamaHandler("Team-ACE/ToolACE-2-8B", 0.001, "Team-ACE/ToolACE-2-8B", False)
    bfcl_msgs = [dict(m, role="ipython") if m["role"] == "tool" else m for m in msgs]
    assert text == handler._format_prompt(bfcl_msgs, [])
    ids = tok.encode(text, add_special_tokens=False)
    assert ids[0] == 128000 and ids.count(128000) == 1
    assert ids.count(128009) == 4 and ids.count(128006) == 5  # <|eot_id|> per message, a header per message + prompt


def test_toolace_is_served_by_the_llama_handler():
    from env_wrappers.bfcl.environment.handler_prompts import HANDLERS, handler_of_toolace

    assert handler_of_toolace() == "LlamaHandler" == HANDLERS["toolace2"][0].rsplit(":", 1)[1]


def test_missing_source_package_names_the_install_command(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match=r"pip install --no-deps dashscope==2\.0\.2"):
        B.rank_file(B.spec("qwen2.5-7b"))
    with pytest.raises(ValueError, match="unknown backbone 'gpt'"):
        B.spec("gpt")
