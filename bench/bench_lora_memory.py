"""Benchmark: the GPU memory of rank-32 LoRA training, measured, beside the estimates of docs/gpu_training.md.

docs/gpu_training.md, section "LoRA", estimates from the sizes what one GPU holds when the recipe trains a rank-32
adapter (alpha 64, every linear layer: ``recipes/bfcl_v3/config/lora``) on a GPU backbone: the adapter's parameter
count, the frozen fp32 base weights, the adapter's weights + gradients + AdamW moments (16 bytes a parameter), and
what the update of one micro-batch needs on top (the logits and their gradient, 2 x tokens x vocabulary x 2 bytes,
and the checkpointed activations, layers x tokens x hidden size x 2 bytes); for ToolACE-2-8B on one 80 GB card it
says about 14 GB are left for the update at 18,432 tokens. This script measures each of these on one CUDA GPU,
for each backbone (Qwen2.5-3B, Qwen2.5-7B, ToolACE-2-Llama-3.1-8B), with ``torch.cuda.memory_allocated`` and
``torch.cuda.max_memory_allocated``, and prints them beside the estimates with their ratio (measured / estimated):

1. base weights: the model built from its architecture (random weights, made on the GPU; no download) in fp32,
   verl's FSDP default, frozen;
2. adapter: peft's ``LoraConfig(r=32, lora_alpha=64, target_modules="all-linear", lora_dropout=0)``; its trainable
   parameters counted, its weights + gradients + AdamW states measured after one optimizer step (with whatever
   that first step leaves allocated besides, such as cuBLAS's workspace);
3. the update of one micro-batch of T tokens (one packed sequence of random token ids, batch 1): gradient
   checkpointing (non-reentrant), ``torch.autocast(bf16)``, sdpa attention, the log-probability of every next
   token, a policy-gradient loss (mean of log-probability x a random advantage), backward, AdamW step. Reported:
   the peak minus the resident weights and adapter state, i.e. what the update needs beyond them, per phase.
   Two ways to take the log-probabilities (``--logprob``): ``ce``, ``F.cross_entropy(reduction="none")`` under
   autocast, which keeps an fp32 log-softmax of every token for the backward, as verl 0.9.1's
   ``logprobs_from_logits`` does without flash-attn (the recipe's setting; verl loops over rows, and its engine
   path without remove-padding also concatenates the rows into a second bf16 copy of the logits, not done here);
   ``inplace``, fp32 log-sum-exp chunk by chunk and the gradient written into the bf16 logits' own storage, which
   is what flash-attn's cross-entropy kernel does when installed.

A case that runs out of memory is recorded as OOM with the memory allocated at that point, and the run goes on.

What it is not: verl's FSDP engine. One process, no sharding, no vLLM, no reference pass, no Ray. What that
changes: FSDP keeps fp32 parameters and computes with per-unit bf16 copies of them (gathered for a layer, freed
after it); here there are none, autocast casts each frozen weight to bf16 when an operation needs it (transient,
about as large as one FSDP unit's copy). With FSDP the residual stream is bf16, because the embedding is computed
from bf16 weights; here the fp32 embedding would make it fp32 and double the checkpointed activations, so a hook
casts the embedding's output to bf16 (``--residual fp32`` leaves it off). The CUDA context, NCCL buffers and the
allocator's fragmentation are not in ``memory_allocated`` (the reserved peak is recorded beside it). GB here is
10^9 bytes, as in the doc.

    python3 -m bench.bench_lora_memory --out runs/bench_lora_memory.json    # one CUDA GPU: 3 backbones x 2 budgets
    python3 -m bench.bench_lora_memory --tokens 18432 --backbones toolace2-8b
    python3 -m bench.bench_lora_memory --device cpu --tiny                 # 2-layer models, 64 tokens, seconds

Needs torch, transformers (5.x) and peft only; imports nothing of seal-verl, and runs from the repository root.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import time

GB = 1e9
RANK, ALPHA = 32, 64                                   # recipes/bfcl_v3/config/lora/adapter.yaml
DEFAULT_TOKENS = (18432, 24576)                        # the one-GPU and 8x40gb budget; the other presets'
TINY_TOKENS = (64,)
LOGPROB_MODES = ("inplace", "ce")

# The architectures, from each checkpoint's config.json on the Hugging Face Hub (Qwen/Qwen2.5-3B-Instruct,
# Qwen/Qwen2.5-7B-Instruct, Team-ACE/ToolACE-2-Llama-3.1-8B, which is Llama-3.1-8B's architecture). The vocabulary
# sizes are those of seal_verl/models/backbones/__init__.py, the layer counts those of docs/gpu_training.md's table
# (tests/bench/test_bench_lora_memory.py checks both). Llama 3.1's rope scaling changes no memory and is left out.
ARCH = {
    "qwen2.5-3b": dict(model="Qwen/Qwen2.5-3B-Instruct", family="qwen2", hidden=2048, intermediate=11008, layers=36,
                       heads=16, kv_heads=2, vocab=151936, tied=True, rope_theta=1e6),
    "qwen2.5-7b": dict(model="Qwen/Qwen2.5-7B-Instruct", family="qwen2", hidden=3584, intermediate=18944, layers=28,
                       heads=28, kv_heads=4, vocab=152064, tied=False, rope_theta=1e6),
    "toolace2-8b": dict(model="Team-ACE/ToolACE-2-Llama-3.1-8B", family="llama", hidden=4096, intermediate=14336,
                        layers=32, heads=32, kv_heads=8, vocab=128256, tied=False, rope_theta=5e5),
}
#: --tiny: the same families at toy sizes (2 layers, hidden 64), for a CPU run in seconds
TINY = dict(hidden=64, intermediate=128, layers=2, heads=4, kv_heads=2, vocab=512)

# docs/gpu_training.md, "LoRA": the table's estimates (adapter parameters in millions, fp32 base weights in GB,
# adapter weights + gradients + Adam in GB) and the one-GPU claim (ToolACE-2-8B on one 80 GB card with a 0.4 vLLM
# share: about 14 GB left for the update at 18,432 tokens). The test checks them against the doc's text.
DOC = {
    "qwen2.5-3b": dict(adapter_m=59.9, base_gb=12.3, adapter_state_gb=1.0),
    "qwen2.5-7b": dict(adapter_m=80.7, base_gb=30.5, adapter_state_gb=1.3),
    "toolace2-8b": dict(adapter_m=83.9, base_gb=32.1, adapter_state_gb=1.3),
}
DOC_ROOM = {"toolace2-8b": dict(tokens=18432, gb=14.0)}
VLLM_SHARE = 0.4                                       # the doc's one-GPU setting (gpu_memory_utilization)


def arch_for(name: str, tiny: bool = False) -> dict:
    a = dict(ARCH[name])
    if tiny:
        a.update(TINY)
    return a


def make_config(arch: dict):
    """A transformers config of the architecture (sdpa attention)."""
    from transformers import LlamaConfig, Qwen2Config

    cls = Qwen2Config if arch["family"] == "qwen2" else LlamaConfig
    return cls(hidden_size=arch["hidden"], intermediate_size=arch["intermediate"], num_hidden_layers=arch["layers"],
               num_attention_heads=arch["heads"], num_key_value_heads=arch["kv_heads"], vocab_size=arch["vocab"],
               tie_word_embeddings=arch["tied"], rope_theta=arch["rope_theta"], attn_implementation="sdpa")


def build_model(arch: dict, device, dtype: str = "fp32"):
    """The model with random weights in ``dtype`` (fp32, verl's FSDP default, or bf16, what
    ``fsdp_config.model_dtype=bfloat16`` keeps), created directly on ``device`` (``meta`` allocates nothing)."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device(device):
        return AutoModelForCausalLM.from_config(make_config(arch), attn_implementation="sdpa",
                                                dtype=torch.bfloat16 if dtype == "bf16" else torch.float32)


def lora_config():
    from peft import LoraConfig

    return LoraConfig(r=RANK, lora_alpha=ALPHA, target_modules="all-linear", lora_dropout=0.0)


def add_adapter(model, device):
    import torch
    from peft import get_peft_model

    with torch.device(device):
        return get_peft_model(model, lora_config())


def lora_targets(peft_model) -> list[str]:
    """The distinct last names of the modules peft put an adapter on."""
    return sorted({n.rsplit(".", 1)[-1] for n, m in peft_model.named_modules() if hasattr(m, "lora_A")})


def estimate_update(arch: dict, tokens: int) -> dict:
    """The doc's arithmetic for one micro-batch: logits and their gradient, and the checkpointed activations."""
    logits = 2 * tokens * arch["vocab"] * 2 / GB
    checkpoints = arch["layers"] * tokens * arch["hidden"] * 2 / GB
    return {"logits_gb": logits, "checkpoints_gb": checkpoints, "total_gb": logits + checkpoints}


class Meter:
    """The CUDA allocator's counters; on CPU there are none and every reading is None."""

    def __init__(self, device):
        import torch

        self.torch, self.cuda = torch, device.type == "cuda"

    def allocated(self):
        if not self.cuda:
            return None
        self.torch.cuda.synchronize()
        return self.torch.cuda.memory_allocated()

    def peak(self):
        if not self.cuda:
            return None
        self.torch.cuda.synchronize()
        return self.torch.cuda.max_memory_allocated()

    def reserved_peak(self):
        return self.torch.cuda.max_memory_reserved() if self.cuda else None

    def reset_peak(self):
        if self.cuda:
            self.torch.cuda.synchronize()
            self.torch.cuda.reset_peak_memory_stats()

    def free(self):
        gc.collect()
        if self.cuda:
            self.torch.cuda.empty_cache()


def _gb(x):
    return None if x is None else x / GB


def _ratio(measured, estimate):
    return None if measured is None or not estimate else measured / estimate


def _tensor_bytes(tensors) -> int:
    seen, total = set(), 0
    for t in tensors:
        if t is not None and id(t) not in seen:
            seen.add(id(t))
            total += t.numel() * t.element_size()
    return total


def _make_inplace_logprob():
    import torch

    class InplaceLogprob(torch.autograd.Function):
        """log p(label) of each row of bf16 logits as flash-attn's cross-entropy kernel computes it: the
        log-sum-exp in fp32 chunk by chunk, and the backward writes the gradient into the logits' storage."""

        @staticmethod
        def forward(ctx, logits, labels, chunk):
            lse = torch.empty(logits.shape[0], dtype=torch.float32, device=logits.device)
            for s in range(0, logits.shape[0], chunk):
                lse[s:s + chunk] = torch.logsumexp(logits[s:s + chunk].float(), dim=-1)
            picked = logits.gather(1, labels[:, None]).squeeze(1).float()
            ctx.save_for_backward(logits, labels, lse)
            ctx.chunk = chunk
            return picked - lse

        @staticmethod
        def backward(ctx, grad):
            logits, labels, lse = ctx.saved_tensors
            for s in range(0, logits.shape[0], ctx.chunk):
                e = s + ctx.chunk
                g = grad[s:e, None].float()
                x = logits[s:e].float().sub_(lse[s:e, None]).exp_().mul_(-g)   # -softmax x grad
                x.scatter_add_(1, labels[s:e, None], g)                        # + one-hot x grad
                logits[s:e] = x
            return logits, None, None

    return InplaceLogprob


def next_token_logprobs(logits, labels, mode: str, chunk: int):
    import torch.nn.functional as F

    if mode == "ce":
        return -F.cross_entropy(logits, labels, reduction="none")
    return _make_inplace_logprob().apply(logits, labels, chunk)


def update_step(model, opt, meter, device, vocab: int, tokens: int, mode: str, chunk: int) -> dict:
    """One micro-batch of ``tokens`` tokens through forward, backward and the optimizer step; the peak of each
    phase (allocator bytes; None on CPU)."""
    import torch

    ids = torch.randint(vocab, (1, tokens), device=device)
    labels = torch.roll(ids[0], -1)                   # next tokens, as verl rolls input_ids
    advantage = torch.randn((), device=device)
    peaks = {}
    meter.reset_peak()
    with torch.autocast(device.type, dtype=torch.bfloat16):
        # squeeze, not [0]: the backward of a view reshapes the gradient, that of a select copies it
        logits = model(input_ids=ids, use_cache=False).logits.squeeze(0)  # (tokens, vocab), bf16
        logits_dtype = str(logits.dtype).replace("torch.", "")
        logp = next_token_logprobs(logits, labels, mode, chunk)
        del logits                                    # only what backward saved stays
        loss = -(logp * advantage).mean()
    peaks["forward"] = meter.peak()
    meter.reset_peak()
    loss.backward()
    peaks["backward"] = meter.peak()
    meter.reset_peak()
    opt.step()
    opt.zero_grad(set_to_none=False)                  # the gradients stay allocated, as between micro-batches
    peaks["step"] = meter.peak()
    return {"peaks": peaks, "loss": float(loss.detach()), "logits_dtype": logits_dtype}


def _cast_to_bf16(_module, _inputs, output):
    import torch

    return output.to(torch.bfloat16)


def measure_backbone(name: str, args, device, meter) -> dict:
    import torch

    arch = arch_for(name, args.tiny)
    rec = {"arch": arch}
    meter.free()
    start = meter.allocated()

    # 1. base weights, fp32, frozen
    t0 = time.perf_counter()
    model = build_model(arch, device, args.base_dtype)
    model.requires_grad_(False)
    base_params = sum(p.numel() for p in model.parameters())
    counted = _tensor_bytes(list(model.parameters()) + list(model.buffers()))
    after_base = meter.allocated()
    per_param = 2 if args.base_dtype == "bf16" else 4
    est_base = DOC[name]["base_gb"] * per_param / 4 if not args.tiny else base_params * per_param / GB
    measured = _gb(None if after_base is None else after_base - start)
    rec["base"] = {"params": base_params, "counted_gb": counted / GB, "measured_gb": measured,
                   "estimate_gb": est_base, "ratio": _ratio(measured, est_base),
                   "build_s": time.perf_counter() - t0}

    # 2. adapter: count, then weights + gradients + AdamW moments after one short step
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.enable_input_require_grads()
    if args.residual == "bf16":
        model.get_input_embeddings().register_forward_hook(_cast_to_bf16)
    seen = {}

    def first_layer_input(_module, args_, kwargs):   # what the checkpoints hold: each layer's input
        seen.setdefault("layer_input", str((args_[0] if args_ else kwargs["hidden_states"]).dtype))

    model.model.layers[0].register_forward_pre_hook(first_layer_input, with_kwargs=True)
    rec["checkpointing"] = bool(model.is_gradient_checkpointing)
    model = add_adapter(model, device)
    model.train()
    after_adapter = meter.allocated()
    trainable = [p for p in model.parameters() if p.requires_grad]
    n_train = sum(p.numel() for p in trainable)
    opt = torch.optim.AdamW(trainable, lr=1e-5)
    update_step(model, opt, meter, device, arch["vocab"], 16, "ce", args.chunk)
    after_state = meter.allocated()
    state_counted = _tensor_bytes(trainable + [p.grad for p in trainable]
                                  + [v for st in opt.state.values() for k, v in st.items() if k != "step"])
    est_state = DOC[name]["adapter_state_gb"] if not args.tiny else n_train * 16 / GB
    measured = _gb(None if after_state is None else after_state - after_base)
    est_m = DOC[name]["adapter_m"] if not args.tiny else None
    rec["adapter"] = {"trainable_params": n_train, "estimate_m": est_m,
                      "ratio_params": _ratio(n_train / 1e6, est_m), "targets": lora_targets(model),
                      "weights_gb": n_train * 4 / GB,
                      "weights_measured_gb": _gb(None if after_adapter is None else after_adapter - after_base),
                      "state_counted_gb": state_counted / GB, "measured_gb": measured,
                      "estimate_gb": est_state, "ratio": _ratio(measured, est_state)}
    resident = after_state
    rec["resident_gb"] = _gb(None if resident is None else resident - start)
    rec["layer_input_dtype"] = seen.get("layer_input", "").replace("torch.", "")

    # 3. the update of one micro-batch, per token budget and log-probability mode
    rec["updates"] = []
    for tokens in args.tokens:
        for mode in args.logprob:
            rec["updates"].append(_one_update(name, arch, tokens, mode, model, opt, meter, device, resident,
                                              start, args))
    del model, opt, trainable
    meter.free()
    after = meter.allocated()
    rec["left_allocated_gb"] = _gb(None if after is None else after - start)
    return rec


def _one_update(name, arch, tokens, mode, model, opt, meter, device, resident, start, args) -> dict:
    import torch

    est = estimate_update(arch, tokens)
    row = {"tokens": tokens, "logprob": mode, "estimate": est, "status": "ok"}
    t0 = time.perf_counter()
    oom = None
    try:
        out = update_step(model, opt, meter, device, arch["vocab"], tokens, mode, args.chunk)
    except torch.cuda.OutOfMemoryError as exc:
        oom = {"allocated_gb": _gb(meter.allocated()), "peak_gb": _gb(meter.peak()), "error": str(exc)[:300]}
    row["seconds"] = time.perf_counter() - t0
    if oom is not None:
        meter.free()
        opt.zero_grad(set_to_none=False)
        row.update(status="oom", oom=oom)
        row["oom"]["need_at_oom_gb"] = None if resident is None else oom["allocated_gb"] - resident / GB
        return row
    row.update(loss=out["loss"], logits_dtype=out["logits_dtype"])
    if resident is not None:
        peaks = out["peaks"]
        need = max(peaks.values()) - resident
        row.update(need_gb=need / GB, phases_gb={k: (v - resident) / GB for k, v in peaks.items()},
                   reserved_peak_gb=_gb(meter.reserved_peak()), ratio=_ratio(need / GB, est["total_gb"]))
        total = torch.cuda.get_device_properties(device).total_memory
        # one card beside a 0.4 vLLM share: what is left once the resident state and the update's need are in
        row["one_gpu_left_gb"] = (total * (1 - VLLM_SHARE) - (resident - start) - need) / GB
        room = DOC_ROOM.get(name)
        if room and room["tokens"] == tokens and not args.tiny:
            row["doc_room_gb"] = room["gb"]
            row["ratio_doc_room"] = need / GB / room["gb"]
    meter.free()
    return row


def _fmt(x, spec=".4g"):
    return "-" if x is None else format(x, spec)


def print_table(result: dict) -> None:
    print(f"{result['gpu']}; torch {result['torch']}, transformers {result['transformers']}, peft {result['peft']}; "
          f"GB = 1e9 bytes; residual stream {result['residual']}")
    head = f"{'backbone':<12} {'quantity':<46} {'estimate':>9} {'counted':>9} {'measured':>9} {'ratio':>6}"
    print(head)
    print("-" * len(head))
    for name, rec in result["backbones"].items():
        if "error" in rec:
            print(f"{name:<12} failed: {rec['error']}")
            continue
        a, b = rec["adapter"], rec["base"]
        n_m = a["trainable_params"] / 1e6
        rows = [("adapter parameters (M)", a["estimate_m"], n_m, None, a["ratio_params"]),
                (f"base weights, {result.get('base_dtype', 'fp32')} (GB)", b["estimate_gb"], b["counted_gb"], b["measured_gb"], b["ratio"]),
                ("adapter weights + grads + AdamW (GB)", a["estimate_gb"], a["state_counted_gb"], a["measured_gb"],
                 a["ratio"])]
        for u in rec["updates"]:
            label = f"update T={u['tokens']} {u['logprob']}, beyond resident (GB)"
            if u["status"] == "oom":
                rows.append((label, u["estimate"]["total_gb"], None, None, None))
                rows.append((f"  OOM at {_fmt(u['oom']['allocated_gb'])} GB allocated", None, None, None, None))
                continue
            rows.append((label, u["estimate"]["total_gb"], None, u.get("need_gb"), u.get("ratio")))
            if "doc_room_gb" in u:
                rows.append(("  against the doc's 'about 14 GB left'", u["doc_room_gb"], None, u["need_gb"],
                             u["ratio_doc_room"]))
            if "one_gpu_left_gb" in u:
                rows.append((f"  left on this card beside a {VLLM_SHARE} vLLM share", None, None,
                             u["one_gpu_left_gb"], None))
        for i, (q, e, c, m, r) in enumerate(rows):
            print(f"{name if i == 0 else '':<12} {q:<46} {_fmt(e):>9} {_fmt(c):>9} {_fmt(m):>9} {_fmt(r, '.2f'):>6}")
    print("estimate of an update: logits and their gradient (2 x T x vocab x 2 bytes) + checkpointed activations "
          "(layers x T x hidden x 2 bytes); counted: bytes of the tensors themselves; measured: CUDA allocator")


def _csv(kind):
    def parse(text):
        items = [kind(x) for x in text.split(",") if x.strip()]
        if not items:
            raise argparse.ArgumentTypeError("empty list")
        return items
    return parse


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--tiny", action="store_true", help="2-layer models of the same families, 64 tokens")
    ap.add_argument("--backbones", type=_csv(str), default=list(ARCH), help="comma-separated (default: all three)")
    ap.add_argument("--tokens", type=_csv(int), default=None,
                    help="comma-separated token budgets (default 18432,24576; 64 with --tiny)")
    ap.add_argument("--logprob", type=_csv(str), default=list(LOGPROB_MODES), help="inplace, ce or both (default)")
    ap.add_argument("--residual", default="bf16", choices=("bf16", "fp32"),
                    help="dtype of the residual stream: bf16 as under FSDP's bf16 compute (default), fp32 as plain "
                         "autocast over fp32 weights gives")
    ap.add_argument("--base-dtype", default="fp32", choices=("fp32", "bf16"),
                    help="the frozen base weights' dtype: fp32 as verl's FSDP keeps them (default), bf16 as "
                         "fsdp_config.model_dtype=bfloat16 keeps them (the estimate then halves)")
    ap.add_argument("--chunk", type=int, default=1024, help="rows per chunk of the inplace log-probabilities")
    ap.add_argument("--out", default=os.path.join("runs", "bench_lora_memory.json"))
    args = ap.parse_args(argv)
    args.tokens = args.tokens or list(TINY_TOKENS if args.tiny else DEFAULT_TOKENS)
    for bad in [b for b in args.backbones if b not in ARCH] + [m for m in args.logprob if m not in LOGPROB_MODES]:
        ap.error(f"unknown backbone or --logprob mode: {bad}")
    if args.device == "cpu" and not args.tiny:
        ap.error("--device cpu runs the --tiny models only (the real ones are 12-32 GB of fp32 weights)")
    if min(args.tokens) < 2 or args.chunk < 1:
        ap.error("--tokens must be at least 2 and --chunk at least 1")

    import peft
    import torch
    import transformers

    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("no CUDA GPU visible (use --device cpu --tiny for the CPU check)")
    device = torch.device(args.device, 0) if args.device == "cuda" else torch.device("cpu")
    torch.manual_seed(0)
    meter = Meter(device)
    result = {"gpu": torch.cuda.get_device_name(device) if meter.cuda else f"cpu ({platform.machine()})",
              "gpu_total_gb": _gb(torch.cuda.get_device_properties(device).total_memory) if meter.cuda else None,
              "device": args.device, "torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(), "transformers": transformers.__version__,
              "peft": peft.__version__, "tiny": args.tiny, "tokens": args.tokens, "logprob": args.logprob,
              "residual": args.residual, "base_dtype": args.base_dtype, "rank": RANK, "alpha": ALPHA, "vllm_share": VLLM_SHARE, "backbones": {}}
    t0 = time.perf_counter()
    for name in args.backbones:
        try:
            result["backbones"][name] = measure_backbone(name, args, device, meter)
        except torch.cuda.OutOfMemoryError as exc:    # the model or its adapter state alone does not fit
            result["backbones"][name] = {"error": f"OOM: {str(exc)[:300]}", "allocated_gb": _gb(meter.allocated())}
        meter.free()
        result["seconds"] = time.perf_counter() - t0
        _write(result, args.out)                      # after every backbone: a run cut short keeps what it measured
        print(f"{name}: done at {result['seconds']:.0f} s", flush=True)
    print_table(result)
    print(f"wrote {args.out} ({result['seconds']:.0f} s)")
    return 0


def _write(result: dict, path: str) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    raise SystemExit(main())
