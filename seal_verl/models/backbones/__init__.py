"""The GPU backbones' exact tokenizers and chat templates, built offline from vocabularies that installable
packages carry.

- ``qwen2.5`` (Qwen2.5-3B/7B-Instruct): the BPE ranks in ``dashscope`` (``dashscope/resources/qwen.tiktoken``),
  Qwen2's split pattern and NFC normalisation, the 22 added tokens from id 151643 of Qwen2.5-Instruct's
  tokenizer (``<tool_call>`` 151657 and ``</tool_call>`` 151658 among them, not special), the released chat
  template.
- ``qwen3`` (Qwen3-4B, Qwen3-8B: the hybrid thinking models): Qwen2's BPE ranks as above (the same
  ``dashscope`` file), Qwen2.5-Instruct's 22 added tokens and four more at 151665-151668 (``<tool_response>``,
  ``</tool_response>``, ``<think>``, ``</think>``, not special), as torchtune lists them for Qwen3
  (``torchtune/models/qwen3/_tokenizer.py``, ``QWEN3_SPECIAL_TOKENS`` = Qwen2.5's + these four); the chat template
  bfcl-eval's ``QwenFCHandler`` quotes (:data:`~.templates.QWEN3_TEMPLATE`). Model facts (vocabulary, tied
  embeddings, layers) from torchtune's ``qwen3_4b_instruct`` / ``qwen3_8b_instruct`` builders
  (``torchtune/models/qwen3/_model_builders.py``). No installable package carries Qwen3's own tokenizer files, so
  ``seal-verl preflight --backbone qwen3-*`` compares this tokenizer, template and these facts with the downloaded
  checkpoint on the user's machine (:func:`backbone_facts_check` in the BFCL preflight).
- ``toolace2`` (ToolACE-2-Llama-3.1-8B): Llama 3's BPE ranks in ``llama-models``
  (``llama_models/llama3/tokenizer.model``), Llama 3's split pattern (digits in runs of up to three), Llama
  3.1's 256 special tokens from id 128000, and the Llama 3 layout bfcl-eval renders for this model.

Install the sources once (files are read, nothing is imported from them):
``pip install --no-deps dashscope==2.0.2 llama-models==0.3.0`` (``make backbone-sources``).

Not part of the SEAL core: only the tiny-model maker, the preflight and the tests use it.
"""

from __future__ import annotations

import importlib.util
import json
import os
from dataclasses import dataclass, field
from typing import Optional

from .templates import QWEN3_TEMPLATE, QWEN25_TEMPLATE, TOOLACE2_TEMPLATE

QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

#: Qwen2.5-Instruct's added tokens: (id, text, special).
QWEN25_ADDED = tuple(
    (151643 + i, t, s)
    for i, (t, s) in enumerate([
        ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
        ("<|object_ref_start|>", True), ("<|object_ref_end|>", True), ("<|box_start|>", True), ("<|box_end|>", True),
        ("<|quad_start|>", True), ("<|quad_end|>", True), ("<|vision_start|>", True), ("<|vision_end|>", True),
        ("<|vision_pad|>", True), ("<|image_pad|>", True), ("<|video_pad|>", True),
        ("<tool_call>", False), ("</tool_call>", False),
        ("<|fim_prefix|>", False), ("<|fim_middle|>", False), ("<|fim_suffix|>", False), ("<|fim_pad|>", False),
        ("<|repo_name|>", False), ("<|file_sep|>", False),
    ])
)

#: Qwen3's added tokens: Qwen2.5-Instruct's, then the tool-response and thinking tags (not special: they survive
#: ``skip_special_tokens``, as ``<tool_call>`` does).
QWEN3_ADDED = QWEN25_ADDED + (
    (151665, "<tool_response>", False), (151666, "</tool_response>", False),
    (151667, "<think>", False), (151668, "</think>", False),
)


def _llama31_specials() -> tuple:
    """Llama 3.1's 256 special tokens (ids 128000-128255): 8 named ones, the rest reserved."""
    named = {0: "<|begin_of_text|>", 1: "<|end_of_text|>", 4: "<|finetune_right_pad_id|>",
             6: "<|start_header_id|>", 7: "<|end_header_id|>", 8: "<|eom_id|>", 9: "<|eot_id|>",
             10: "<|python_tag|>"}
    out, reserved = [], 0
    for i in range(256):
        if i in named:
            out.append((128000 + i, named[i], True))
        else:
            out.append((128000 + i, f"<|reserved_special_token_{reserved}|>", True))
            reserved += 1
    return tuple(out)


@dataclass(frozen=True)
class BackboneSpec:
    """What makes a backbone's tokenizer: where the ranks live and what goes on top of them."""

    name: str
    models: tuple                  # the released checkpoints this tokenizer serves
    package: str                   # distribution carrying the rank file
    package_version: str
    module: str                    # importable name of that package (located, never imported)
    rank_file: str                 # path inside the package
    n_ranks: int
    pattern: str
    nfc: bool
    ignore_merges: bool
    added: tuple                   # (id, text, special)
    bos: Optional[str]
    eos: str
    pad: Optional[str]
    stop: tuple                    # tokens that end a generation (generation_config eos ids)
    chat_template: str
    tokenizer_class: str
    call_format: str               # the agent-loop call format of the recipe's backbone group
    vocab_size: dict = field(default_factory=dict)  # model config vocab_size per released checkpoint
    #: other config.json facts per released checkpoint that a downloaded model must match (preflight checks them)
    config_facts: dict = field(default_factory=dict)
    #: chat-template arguments the recipe renders with (its data.apply_chat_template_kwargs)
    chat_template_kwargs: dict = field(default_factory=dict)


BACKBONES: dict[str, BackboneSpec] = {
    "qwen2.5": BackboneSpec(
        name="qwen2.5",
        models=("Qwen/Qwen2.5-3B-Instruct", "Qwen/Qwen2.5-7B-Instruct"),
        package="dashscope", package_version="2.0.2", module="dashscope", rank_file="resources/qwen.tiktoken",
        n_ranks=151643, pattern=QWEN2_PATTERN, nfc=True, ignore_merges=False, added=QWEN25_ADDED,
        bos=None, eos="<|im_end|>", pad="<|endoftext|>", stop=("<|im_end|>", "<|endoftext|>"),
        chat_template=QWEN25_TEMPLATE, tokenizer_class="Qwen2Tokenizer", call_format="json",
        vocab_size={"Qwen/Qwen2.5-3B-Instruct": 151936, "Qwen/Qwen2.5-7B-Instruct": 152064},
    ),
    "qwen3": BackboneSpec(
        name="qwen3",
        models=("Qwen/Qwen3-4B", "Qwen/Qwen3-8B"),
        package="dashscope", package_version="2.0.2", module="dashscope", rank_file="resources/qwen.tiktoken",
        n_ranks=151643, pattern=QWEN2_PATTERN, nfc=True, ignore_merges=False, added=QWEN3_ADDED,
        bos=None, eos="<|im_end|>", pad="<|endoftext|>", stop=("<|im_end|>", "<|endoftext|>"),
        chat_template=QWEN3_TEMPLATE, tokenizer_class="Qwen2Tokenizer", call_format="json",
        vocab_size={"Qwen/Qwen3-4B": 151936, "Qwen/Qwen3-8B": 151936},
        # torchtune's qwen3_4b_instruct / qwen3_8b_instruct builders (the 8B's tie_word_embeddings is the builder
        # default, False); head_dim 128 in both (hidden / heads)
        config_facts={
            "Qwen/Qwen3-4B": {"model_type": "qwen3", "tie_word_embeddings": True, "num_hidden_layers": 36,
                              "hidden_size": 2560, "intermediate_size": 9728, "num_attention_heads": 32,
                              "num_key_value_heads": 8, "max_position_embeddings": 40960},
            "Qwen/Qwen3-8B": {"model_type": "qwen3", "tie_word_embeddings": False, "num_hidden_layers": 36,
                              "hidden_size": 4096, "intermediate_size": 12288, "num_attention_heads": 32,
                              "num_key_value_heads": 8, "max_position_embeddings": 40960},
        },
        chat_template_kwargs={"enable_thinking": False},
    ),
    "toolace2": BackboneSpec(
        name="toolace2",
        models=("Team-ACE/ToolACE-2-Llama-3.1-8B",),
        package="llama-models", package_version="0.3.0", module="llama_models", rank_file="llama3/tokenizer.model",
        n_ranks=128000, pattern=LLAMA3_PATTERN, nfc=False, ignore_merges=True, added=_llama31_specials(),
        bos="<|begin_of_text|>", eos="<|eot_id|>", pad=None, stop=("<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"),
        chat_template=TOOLACE2_TEMPLATE, tokenizer_class="PreTrainedTokenizerFast", call_format="python",
        vocab_size={"Team-ACE/ToolACE-2-Llama-3.1-8B": 128256},
    ),
}

#: The recipe's backbone groups -> tokenizer.
RECIPE_BACKBONES = {"qwen2.5-3b": "qwen2.5", "qwen2.5-7b": "qwen2.5", "qwen3-4b": "qwen3", "qwen3-8b": "qwen3",
                    "toolace2-8b": "toolace2"}


def spec(name: str) -> BackboneSpec:
    name = RECIPE_BACKBONES.get(name, name)
    if name not in BACKBONES:
        raise ValueError(f"unknown backbone {name!r}; expected one of {', '.join(BACKBONES)} "
                         f"(or a recipe group: {', '.join(RECIPE_BACKBONES)})")
    return BACKBONES[name]


def rank_file(s: BackboneSpec) -> str:
    """The installed rank file of ``s``; a missing package is an error with the install command."""
    found = importlib.util.find_spec(s.module)
    roots = list(found.submodule_search_locations or []) if found else []
    for root in roots:
        path = os.path.join(root, *s.rank_file.split("/"))
        if os.path.isfile(path):
            return path
    raise FileNotFoundError(
        f"the {s.name} vocabulary ({s.module}/{s.rank_file}) is not installed; run: "
        f"pip install --no-deps {s.package}=={s.package_version}   (or: make backbone-sources)"
    )


def build_tokenizer(name: str):
    """The backbone's tokenizer as a transformers ``PreTrainedTokenizerFast`` (a few seconds: merges are
    recovered from the ranks)."""
    from transformers import PreTrainedTokenizerFast

    from .tiktoken_bpe import add_tokens, build_bpe, load_ranks

    s = spec(name)
    path = rank_file(s)
    ranks = load_ranks(path)
    if len(ranks) != s.n_ranks:
        raise ValueError(f"{path}: {len(ranks)} ranks, expected {s.n_ranks} for {s.name}")
    tok = build_bpe(ranks, s.pattern, nfc=s.nfc, ignore_merges=s.ignore_merges)
    add_tokens(tok, s.added)
    if s.bos:
        from tokenizers import processors

        bos_id = tok.token_to_id(s.bos)
        tok.post_processor = processors.TemplateProcessing(
            single=f"{s.bos} $A", pair=f"{s.bos} $A {s.bos} $B", special_tokens=[(s.bos, bos_id)])
    extra = [t for _, t, special in s.added if special and t not in (s.bos, s.eos, s.pad)]
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=s.bos, eos_token=s.eos, pad_token=s.pad, unk_token=None,
        clean_up_tokenization_spaces=False, model_max_length=131072,
        additional_special_tokens=extra if s.name.startswith("qwen") else None,
    )
    hf.chat_template = s.chat_template
    return hf


def save_tokenizer(name: str, out_dir: str) -> str:
    """Write the tokenizer (tokenizer.json, tokenizer_config.json with the chat template) to ``out_dir``."""
    s = spec(name)
    tok = build_tokenizer(s.name)
    os.makedirs(out_dir, exist_ok=True)
    tok.save_pretrained(out_dir)
    cfg_path = os.path.join(out_dir, "tokenizer_config.json")
    with open(cfg_path, encoding="utf-8") as f:
        cfg = json.load(f)
    cfg["tokenizer_class"] = s.tokenizer_class
    cfg["chat_template"] = s.chat_template
    with open(cfg_path, "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=2, ensure_ascii=False)
    return os.path.abspath(out_dir)
