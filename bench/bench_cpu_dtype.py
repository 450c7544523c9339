"""Benchmark: the tiny model's training step on CPU in fp32 against verl's default bf16 mixed precision.

The CPU overlay (``recipes/bfcl_v3/cpu/config/cpu/tiny.yaml``) computes in fp32 because a CPU without native bf16
(no AVX512-BF16 or AMX, common on cloud machines) emulates bf16 matrix products, and verl's FSDP engine runs its
forward and backward under ``torch.autocast(bf16)`` unless told otherwise. This script measures, side by side in
one process, what that costs on the machine at hand:

1. one 512 x 512 matrix product, fp32 and bf16 (the raw kernel);
2. forward + backward of the tiny Qwen2 (``seal_verl.models.tiny_model``) over a batch shaped like a CPU step's
   micro-batch, plain fp32 and under ``torch.autocast("cpu", torch.bfloat16)``, with and without gradient
   checkpointing (the recipe turns it on, the overlay off).

Each case runs ``--repeats`` times, alternating, and the fastest run counts. Prints the times and their ratios;
absolute times vary between machines, the ratios are the point.

    .venv/bin/python -m bench.bench_cpu_dtype                # 2 sequences of 2048 tokens
    .venv/bin/python -m bench.bench_cpu_dtype --tokens 6144  # a BFCL first prompt and its trajectory
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
import time



def _cpu_flags() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            flags = next((ln.split(":", 1)[1].split() for ln in f if ln.startswith("flags")), [])
    except OSError:
        return "unknown"
    native = [x for x in ("avx512_bf16", "amx_bf16") if x in flags]
    return ", ".join(native) if native else "no native bf16 (no avx512_bf16 / amx_bf16)"


def _best(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=2, help="sequences per micro-batch (default 2)")
    ap.add_argument("--tokens", type=int, default=2048, help="tokens per sequence (default 2048)")
    ap.add_argument("--repeats", type=int, default=3, help="runs per case; the fastest counts (default 3)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's choice)")
    args = ap.parse_args(argv)
    for name in ("batch", "tokens", "repeats"):
        if getattr(args, name) < 1:
            ap.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    if args.threads < 0:
        ap.error(f"--threads must be 0 (torch's choice) or more, got {args.threads}")

    import torch
    from transformers import AutoModelForCausalLM

    from seal_verl.models.tiny_model import make_tiny_qwen

    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"CPU: {_cpu_flags()}; torch {torch.__version__}, {torch.get_num_threads()} threads")

    a32, b32 = torch.randn(512, 512), torch.randn(512, 512)
    a16, b16 = a32.bfloat16(), b32.bfloat16()
    mm = {"fp32": _best(lambda: [a32 @ b32 for _ in range(20)], args.repeats) / 20,
          "bf16": _best(lambda: [a16 @ b16 for _ in range(20)], args.repeats) / 20}
    print(f"matmul 512x512: fp32 {mm['fp32'] * 1e3:.2f} ms, bf16 {mm['bf16'] * 1e3:.2f} ms, "
          f"bf16/fp32 = {mm['bf16'] / mm['fp32']:.1f}x")

    with tempfile.TemporaryDirectory() as tmp:
        model = AutoModelForCausalLM.from_pretrained(make_tiny_qwen(os.path.join(tmp, "m")), dtype=torch.float32)
    model.train()
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size - 64, (args.batch, args.tokens), generator=gen)

    def step(bf16: bool, ckpt: bool):
        if ckpt:
            model.gradient_checkpointing_enable()
        else:
            model.gradient_checkpointing_disable()
        ctx = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()

        def run():
            model.zero_grad(set_to_none=True)
            with ctx:
                loss = model(input_ids=ids, labels=ids, use_cache=False).loss
            loss.backward()
        return run

    cases = {(bf16, ckpt): step(bf16, ckpt) for bf16 in (False, True) for ckpt in (False, True)}
    times = {k: float("inf") for k in cases}
    for _ in range(args.repeats):  # alternate the cases, so that load from elsewhere hits all of them alike
        for k, fn in cases.items():
            times[k] = min(times[k], _best(fn, 1))
    print(f"tiny Qwen2 forward + backward, {args.batch} x {args.tokens} tokens (fastest of {args.repeats}):")
    base = times[(False, False)]
    for (bf16, ckpt), t in times.items():
        label = f"{'bf16 autocast' if bf16 else 'fp32'}, gradient checkpointing {'on ' if ckpt else 'off'}"
        print(f"  {label:42s} {t:8.2f} s   {t / base:5.1f}x the CPU overlay's (fp32, off)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
