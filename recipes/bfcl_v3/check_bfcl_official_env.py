"""Check the environment built by ``make bfcl-official-env``: bfcl-eval's command line and the parts of it the
official cross-check runs import, and no torch anywhere.

Run with that environment's interpreter and ``BFCL_PROJECT_ROOT`` set to a writable folder (bfcl-eval writes
there on import). Exit status 1 with one line per problem; prints the versions on success.
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
import importlib.util
import sys

#: What `bfcl generate` / `bfcl evaluate` import on the multi-turn and memory (kv, rec_sum) paths.
MODULES = [
    "bfcl_eval.__main__",  # the CLI: imports the model registry, i.e. every handler's client library
    "bfcl_eval._llm_response_generation",
    "bfcl_eval.eval_checker.eval_runner",
    "bfcl_eval.model_handler.local_inference.qwen_fc",
    "bfcl_eval.eval_checker.multi_turn_eval.func_source_code.math_api",
    "bfcl_eval.eval_checker.multi_turn_eval.func_source_code.memory_kv",
    "bfcl_eval.eval_checker.multi_turn_eval.func_source_code.memory_rec_sum",
    "transformers",
]
#: Must be absent: the CUDA-heavy part of bfcl-eval's declared dependency set (vector memory backend only).
ABSENT = ["torch", "sentence_transformers", "faiss"]


def main() -> int:
    problems = []
    for name in MODULES:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - report every failing import, one line each
            problems.append(f"cannot import {name}: {type(exc).__name__}: {exc}")
    for name in ABSENT:
        if importlib.util.find_spec(name) is not None:
            problems.append(f"{name} is installed; this environment is meant to run without it")
    for line in problems:
        print(f"bfcl-official-env: {line}", file=sys.stderr)
    if problems:
        return 1
    versions = {p: md.version(p) for p in ("bfcl-eval", "transformers", "openai", "numpy")}
    print("bfcl-official-env ok: " + ", ".join(f"{k} {v}" for k, v in versions.items()) + "; no torch")
    return 0


if __name__ == "__main__":
    sys.exit(main())
