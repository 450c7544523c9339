"""Shared set-up of the real-vocabulary tests: the backbone tokenizers, built once per test session.

Their sources (``dashscope``, ``llama-models``; ``tiktoken`` and bfcl-eval's handler dependencies for the
cross-checks) come from ``make backbone-sources``. Without them the tests skip with that command, unless
``SEAL_REQUIRE_BACKBONES=1`` (CI) turns the skip into a failure.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import tempfile

import pytest

SOURCES = {"qwen2.5": "dashscope", "qwen3": "dashscope", "toolace2": "llama_models"}


def _missing(what: str):
    msg = f"{what} is not installed: run `make backbone-sources`"
    if os.environ.get("SEAL_REQUIRE_BACKBONES") == "1":
        pytest.fail(msg)
    pytest.skip(msg)


def require(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        _missing(module)


def require_handlers() -> None:
    """bfcl-eval's model handlers import (their light dependencies are installed)."""
    try:
        import bfcl_eval.model_handler.local_inference.llama  # noqa: F401
        import bfcl_eval.model_handler.local_inference.qwen_fc  # noqa: F401
    except ImportError as exc:
        _missing(f"a dependency of bfcl-eval's model handlers ({exc.name})")


@functools.lru_cache(maxsize=None)
def _built(name: str) -> str:
    from seal_verl.models.backbones import save_tokenizer

    return save_tokenizer(name, tempfile.mkdtemp(prefix=f"seal-tok-{name}-"))


def tokenizer_dir(name: str) -> str:
    """A folder with ``name``'s tokenizer (tokenizer.json + config + chat template), built once per session."""
    require(SOURCES[name])
    return _built(name)


@functools.lru_cache(maxsize=None)
def _loaded(name: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(_built(name))


def tokenizer(name: str):
    """``name``'s tokenizer as verl and vLLM load it (AutoTokenizer on the saved folder)."""
    tokenizer_dir(name)
    return _loaded(name)


@functools.lru_cache(maxsize=None)
def tiny_model_dir(name: str) -> str:
    """A tiny random model on ``name``'s real tokenizer (``seal-verl-tiny-model --backbone``), once per session."""
    from seal_verl.models.backbones.tiny import make_tiny_backbone

    return make_tiny_backbone(tempfile.mkdtemp(prefix=f"seal-tiny-{name}-"), name, tokenizer_dir=tokenizer_dir(name))
