"""The tiny local Qwen2 chat model: loads with transformers, Qwen2.5-style chat template, deterministic."""

import hashlib
import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from seal_verl.models.tiny_model import CHAT_TEMPLATE, DEFAULT_SYSTEM, make_tiny_qwen  # noqa: E402

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_stock_info",
            "description": "Get the details of a stock.",
            "parameters": {
                "type": "object",
                "properties": {"symbol": {"type": "string"}},
                "required": ["symbol"],
            },
        },
    }
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_tiny_qwen(str(tmp_path_factory.mktemp("tiny") / "model"), seed=0)


@pytest.fixture(scope="module")
def tok(model_dir):
    return transformers.AutoTokenizer.from_pretrained(model_dir)


def _digest(folder):
    h = {}
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name), "rb") as f:
            h[name] = hashlib.sha256(f.read()).hexdigest()
    return h


def test_model_loads_with_expected_shape(model_dir, tok):
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir)
    cfg = model.config
    assert type(model).__name__ == "Qwen2ForCausalLM"
    assert (cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.num_hidden_layers) == (128, 2, 2, 2)
    assert cfg.hidden_size // cfg.num_attention_heads == 64  # vLLM-CPU attention needs head_dim >= 32
    assert getattr(cfg, "head_dim", 64) == 64
    assert cfg.vocab_size >= len(tok) and cfg.vocab_size <= 4096
    assert sum(p.numel() for p in model.parameters()) < 1_000_000
    ids = tok("hello world", return_tensors="pt").input_ids
    with torch.no_grad():
        out = model(ids)
    assert out.logits.shape == (1, ids.shape[1], cfg.vocab_size)
    assert torch.isfinite(out.logits).all()
    assert cfg.eos_token_id == tok.convert_tokens_to_ids("<|im_end|>")


def test_special_and_tool_tokens_are_single_added_tokens(tok):
    for t in ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"):
        ids = tok.encode(t, add_special_tokens=False)
        assert len(ids) == 1, t
        assert tok.convert_ids_to_tokens(ids) == [t]
    assert tok.eos_token == "<|im_end|>"
    assert tok.pad_token == "<|endoftext|>"
    # like Qwen2.5: the chat markers are special, the tool tags are not (they survive skip_special_tokens)
    text = "<|im_start|>assistant\n<tool_call>\n{}\n</tool_call><|im_end|>"
    assert tok.decode(tok.encode(text), skip_special_tokens=True) == "assistant\n<tool_call>\n{}\n</tool_call>"


def test_tool_call_text_round_trips(tok):
    call = {"name": "get_stock_info", "arguments": {"symbol": "NVDA", "days": 30, "note": "héllo, wörld!"}}
    text = "Let me check.\n<tool_call>\n" + json.dumps(call, ensure_ascii=False) + "\n</tool_call>"
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids) == text
    assert tok.convert_tokens_to_ids("<tool_call>") in ids
    # the JSON is covered by learned merges, not spelled byte by byte
    assert len(ids) < len(text.encode("utf-8")) * 0.7


def test_chat_template_plain_conversation(tok):
    rendered = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert rendered == (
        f"<|im_start|>system\n{DEFAULT_SYSTEM}<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )
    with_system = tok.apply_chat_template(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}],
        tokenize=False,
    )
    assert with_system == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nok<|im_end|>\n"
    )


def test_chat_template_tools_calls_and_responses(tok):
    messages = [
        {"role": "system", "content": "You manage a portfolio."},
        {"role": "user", "content": "Price of NVDA and AAPL?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"type": "function", "function": {"name": "get_stock_info", "arguments": {"symbol": "NVDA"}}},
                {"type": "function", "function": {"name": "get_stock_info", "arguments": '{"symbol": "AAPL"}'}},
            ],
        },
        {"role": "tool", "content": '{"price": 227.16}'},
        {"role": "tool", "content": '{"price": 198.0}'},
        {"role": "assistant", "content": "NVDA 227.16, AAPL 198.0"},
    ]
    rendered = tok.apply_chat_template(messages, tools=TOOLS, tokenize=False, add_generation_prompt=True)
    expected_system = (
        "<|im_start|>system\nYou manage a portfolio.\n\n# Tools\n\nYou may call one or more functions to assist with "
        "the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
        + json.dumps(TOOLS[0])
        + "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
        '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n'
        "</tool_call><|im_end|>\n"
    )
    expected_rest = (
        "<|im_start|>user\nPrice of NVDA and AAPL?<|im_end|>\n"
        "<|im_start|>assistant\n"
        '<tool_call>\n{"name": "get_stock_info", "arguments": {"symbol": "NVDA"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_stock_info", "arguments": {"symbol": "AAPL"}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>\n{\"price\": 227.16}\n</tool_response>\n"
        "<tool_response>\n{\"price\": 198.0}\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\nNVDA 227.16, AAPL 198.0<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert rendered == expected_system + expected_rest
    # default system prompt when tools come without a system message
    no_sys = tok.apply_chat_template(messages[1:2], tools=TOOLS, tokenize=False)
    assert no_sys.startswith(f"<|im_start|>system\n{DEFAULT_SYSTEM}\n\n# Tools\n")
    # the whole rendering round trips through the tokenizer
    assert tok.decode(tok.encode(rendered, add_special_tokens=False)) == rendered


def test_assistant_content_with_tool_call(tok):
    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "Checking.", "tool_calls": [{"function": {"name": "ls", "arguments": {}}}]},
    ]
    rendered = tok.apply_chat_template(messages, tokenize=False)
    assert rendered.endswith(
        '<|im_start|>assistant\nChecking.\n<tool_call>\n{"name": "ls", "arguments": {}}\n</tool_call><|im_end|>\n'
    )


def test_saved_template_is_ours(model_dir, tok):
    assert tok.chat_template == CHAT_TEMPLATE


def test_deterministic_for_a_seed(tmp_path, model_dir):
    again = make_tiny_qwen(str(tmp_path / "again"), seed=0)
    assert _digest(again) == _digest(model_dir)
    other = make_tiny_qwen(str(tmp_path / "other"), seed=1)
    d0, d1 = _digest(model_dir), _digest(other)
    assert d0["tokenizer.json"] == d1["tokenizer.json"]
    assert d0["model.safetensors"] != d1["model.safetensors"]


def test_cli(tmp_path):
    out = tmp_path / "cli_model"
    proc = subprocess.run(
        [sys.executable, "-m", "seal_verl.models.tiny_model", str(out), "--seed", "3"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == str(out)
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        assert (out / name).is_file(), name
