"""A warm start of SmolLM2-135M-Instruct on the ledger that teaches the task, not the cues: a short LoRA fine-tune.

Zero-shot SmolLM2 makes no well-formed tool call (it answers in prose or writes Python), so a GRPO step from it has
no learning signal; a long fine-tune makes it right on most tasks (a 5-minute one reached 0.75 held out), which
leaves GRPO groups without reward variance as well. This warm start stops early: ``steps`` optimizer steps of a
rank-8 LoRA adapter over the ground-truth trajectories of the ledger's training tasks, rendered by verl's real agent
loop with the ledger run's budgets and **no cue text** (every row is the bare environment's observations), so
whatever the model does with a cue later comes from reading it.

    python -m seal_verl.models.smollm2_warm build OUT --base SMOLLM2 [--steps 32] [--lr 3e-4] [--samples 4]

``OUT`` gets ``adapter/`` (the peft adapter, a few MB: what ships), ``merged/`` (base + adapter in one checkpoint,
what vLLM samples from and verl trains a fresh adapter on) and ``warm_start.json`` (the settings, a fingerprint of
every input, the loss per step, the pass rates measured through the agent loop with vLLM: training tasks sampled at
the run's temperature, held-out tasks greedy). The same inputs reuse the build; any change rebuilds.
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import os
import random
import shutil
import sys
import time
from typing import Optional
from seal_verl.core import extras as EXTRAS

INFO_FILE = "warm_start.json"
ADAPTER_DIR = "adapter"
MERGED_DIR = "merged"
#: the adapter: rank 8 on every linear layer (q, k, v, o, gate, up, down) of the 30 layers, 4.9M parameters
LORA = {"r": 8, "lora_alpha": 16, "target_modules": "all-linear", "lora_dropout": 0.0}
DEFAULTS = {"steps": 32, "lr": 3e-4, "seed": 0, "samples": 4}


def _digest(*parts: str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode())
    return h.hexdigest()


def read_info(out: str) -> Optional[dict]:
    try:
        with open(os.path.join(out, INFO_FILE), encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def training_rows(base: str, task_ids: list[str], out: str) -> list[dict]:
    """The ground truth of every task, rendered by the ledger's training agent loop with no cue kind on."""
    from seal_verl.models.warm_start import ledger as L
    from seal_verl.models.warm_start import render as R

    return R.ground_truth_rows(L.TARGET, base, task_ids, out)


def fine_tune(base: str, rows: list[dict], adapter_out: str, steps: int, lr: float, seed: int) -> list[float]:
    """``steps`` AdamW steps (batch 1, rows in a seeded random order, cycling) of a fresh LoRA adapter on ``base``,
    bf16 autocast over fp32 weights; saves the adapter; returns the loss of every step."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32, attn_implementation="sdpa")
    model = get_peft_model(model, LoraConfig(task_type="CAUSAL_LM", **LORA))
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    order = list(range(len(rows)))
    rng = random.Random(seed)
    losses = []
    for step in range(steps):
        if step % len(order) == 0:
            rng.shuffle(order)
        row = rows[order[step % len(order)]]
        ids = torch.tensor([row["input_ids"]], dtype=torch.long)
        labels = torch.tensor([row["labels"]], dtype=torch.long)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        for group in opt.param_groups:  # linear warm-up over the first eighth, then constant
            group["lr"] = lr * min(1.0, (step + 1) / max(1, steps // 8))
        opt.step()
        opt.zero_grad()
        losses.append(float(loss))
        print(f"[smollm2-warm] step {step + 1}/{steps} loss {losses[-1]:.3f}", flush=True)
    model.save_pretrained(adapter_out)
    return losses


def merge(base: str, adapter: str, out: str) -> str:
    """``base`` with ``adapter`` merged in, saved as an ordinary bf16 checkpoint (tokenizer and template copied)."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    merged = PeftModel.from_pretrained(model, adapter).merge_and_unload().to(torch.bfloat16)
    tmp = out.rstrip("/") + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    merged.save_pretrained(tmp, safe_serialization=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"):
        if os.path.isfile(os.path.join(base, name)):
            shutil.copyfile(os.path.join(base, name), os.path.join(tmp, name))
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    return out


def merged_model(base: str, adapter: str, cache: str) -> str:
    """The merged checkpoint of ``base`` + ``adapter`` in ``cache`` (made once per adapter and base; reused)."""
    from seal_verl.models.shipped import file_sha256

    key = _digest(file_sha256(os.path.join(adapter, "adapter_model.safetensors")),
                  file_sha256(os.path.join(base, "model.safetensors")))
    stamp = os.path.join(cache, "merged_from.json")
    try:
        with open(stamp, encoding="utf-8") as fh:
            if json.load(fh).get("key") == key and os.path.isfile(os.path.join(cache, "model.safetensors")):
                return os.path.abspath(cache)
    except (OSError, ValueError):
        pass
    merge(base, adapter, cache)
    with open(stamp, "w", encoding="utf-8") as fh:
        json.dump({"key": key, "base": os.path.basename(os.path.abspath(base)),
                   "adapter": os.path.basename(os.path.abspath(adapter))}, fh)
    return os.path.abspath(cache)


def pass_rates(model_dir: str, task_ids: list[str], samples: int, seed: int, out: str, greedy: bool) -> dict:
    """Per task ``{"scores", "labels", "pass_rate"}``: ``samples`` rollouts through the ledger's agent loop (the
    training loop at the run's temperature, or the evaluation loop greedily), sampled by vLLM, graded by the run's
    reward (the per-turn credit; ``pass_rate`` is its mean)."""
    from transformers import AutoTokenizer

    from seal_verl.models.vllm_sampler import VLLMSampler
    from seal_verl.models.warm_start import ledger as L
    from seal_verl.models.warm_start import render as R

    loop = L.TARGET.loops[1] if greedy else L.TARGET.loops[0]
    over = ["actor_rollout_ref.rollout.temperature=0"] if greedy else []
    sampler = VLLMSampler(model_dir, AutoTokenizer.from_pretrained(model_dir), seed)

    async def go():
        await sampler.start()
        try:
            worker, batch, _ = R.agent_loop_setup(L.TARGET, model_dir, task_ids, lambda t: sampler, samples, out,
                                                  loop, over)
            return await worker.generate_sequences(batch)
        finally:
            sampler.close()

    gen = R.run_loop(go)
    result: dict = {t: {"scores": [], "labels": []} for t in task_ids}
    for i in range(len(gen)):
        tid = str(gen.non_tensor_batch["task_id"][i])
        result[tid]["scores"].append(float(gen.non_tensor_batch["score"][i]))
        result[tid]["labels"].append(json.loads(str(gen.non_tensor_batch[EXTRAS.LABELS][i])))
    for r in result.values():
        r["pass_rate"] = sum(r["scores"]) / max(len(r["scores"]), 1)
    return result


def _mean(rates: dict) -> Optional[float]:
    return round(sum(r["pass_rate"] for r in rates.values()) / len(rates), 4) if rates else None


def _label_shares(rates: dict) -> dict:
    counts: dict = {}
    for r in rates.values():
        for labels in r["labels"]:
            for z in labels:
                counts[z] = counts.get(z, 0) + 1
    total = sum(counts.values()) or 1
    return {z: round(n / total, 3) for z, n in sorted(counts.items(), key=lambda kv: -kv[1])}


def _beside_adapter(out: str, record: dict) -> None:
    """The record in the adapter's folder too: it ships with the adapter (``seal_verl.models.shipped ship``)."""
    with open(os.path.join(out, ADAPTER_DIR, INFO_FILE), "w", encoding="utf-8") as fh:
        json.dump(record, fh, indent=1, sort_keys=True)


def fingerprint(base: str, rows: list[dict], params: dict) -> str:
    """Digest of what the adapter is made from: the settings, the rendered rows, the base weights and the code of
    :func:`fine_tune` (the measurement's code does not change the adapter)."""
    from seal_verl.models.shipped import file_sha256

    return _digest(json.dumps(params, sort_keys=True), json.dumps([[r["input_ids"], r["labels"]] for r in rows]),
                   file_sha256(os.path.join(base, "model.safetensors")), inspect.getsource(fine_tune))


def build(out: str, base: str, steps: int = DEFAULTS["steps"], lr: float = DEFAULTS["lr"],
          seed: int = DEFAULTS["seed"], samples: int = DEFAULTS["samples"], force: bool = False) -> dict:
    """Build (or reuse) the warm start in ``out`` from the SmolLM2 checkpoint ``base``; returns its record.

    Args:
        out: the warm start's folder (``adapter/``, ``merged/``, ``warm_start.json``).
        base: the SmolLM2 checkpoint (``python -m seal_verl.models.smollm2 build``).
        steps: optimizer steps (one row each); few on purpose, so that the model ends partly right.
        lr: AdamW's learning rate (after a linear warm-up over the first eighth of the steps).
        seed: the rows' order, the adapter's initialisation and the sampling.
        samples: rollouts per training task for the measured pass rate (0 skips the measurement).
        force: rebuild even when ``out`` holds the build of these inputs.
    """
    from seal_verl.rollouts import environment
    from seal_verl.models.shipped import file_sha256
    from seal_verl.models.warm_start import ledger as L

    if steps < 1 or lr <= 0 or samples < 0:
        raise ValueError(f"steps must be >= 1, lr > 0 and samples >= 0; got {steps}, {lr}, {samples}")
    started = time.time()
    env = environment(L.ENV)
    train_ids, eval_ids = env.task_ids("train"), env.task_ids("eval")
    os.makedirs(out, exist_ok=True)
    rows = training_rows(base, train_ids, out)
    params = {"steps": int(steps), "lr": float(lr), "seed": int(seed), "samples": int(samples), "lora": LORA}
    fp = fingerprint(base, rows, params)
    info = read_info(out)
    if not force and info and info.get("fingerprint") == fp and os.path.isdir(os.path.join(out, ADAPTER_DIR)):
        print(f"[smollm2-warm] reusing {out} (same inputs)", flush=True)
        _beside_adapter(out, info)
        return info
    t0 = time.time()
    adapter = os.path.join(out, ADAPTER_DIR)
    stamp = os.path.join(out, "adapter_of.json")  # the adapter of these inputs survives a failed measurement
    done = None
    if not force and os.path.isfile(stamp):
        with open(stamp, encoding="utf-8") as fh:
            done = json.load(fh)
    if done and done.get("fingerprint") == fp and os.path.isfile(os.path.join(adapter, "adapter_model.safetensors")):
        losses = done["losses"]
        print(f"[smollm2-warm] reusing the adapter in {adapter} (same inputs)", flush=True)
    else:
        shutil.rmtree(adapter, ignore_errors=True)
        losses = fine_tune(base, rows, adapter, steps, lr, seed)
        with open(stamp, "w", encoding="utf-8") as fh:
            json.dump({"fingerprint": fp, "losses": losses}, fh)
    t1 = time.time()
    merged = merged_model(base, adapter, os.path.join(out, MERGED_DIR))
    t2 = time.time()
    record = {"fingerprint": fp, "params": params, "base": os.path.basename(os.path.abspath(base)),
              "base_sha256": file_sha256(os.path.join(base, "model.safetensors")), "env": L.ENV,
              "merged_sha256": file_sha256(os.path.join(merged, "model.safetensors")),
              "rows": len(rows), "cue_text_in_rows": False, "losses": [round(x, 4) for x in losses],
              "trained_tokens": sum(r["trained_tokens"] for r in rows)}
    if samples:
        train = pass_rates(merged, train_ids, samples, seed, out, greedy=False)
        held = pass_rates(merged, eval_ids, 1, seed, out, greedy=True)
        record.update({"mean_pass_rate": _mean(train), "heldout_greedy": _mean(held),
                       "train_labels": _label_shares(train), "heldout_labels": _label_shares(held),
                       "groups_with_variance": round(sum(len(set(r["scores"])) > 1 for r in train.values())
                                                     / len(train), 3),
                       "pass_rates": {t: r["pass_rate"] for t, r in train.items()},
                       "heldout": {t: r["pass_rate"] for t, r in held.items()}})
    record["seconds"] = {"render": round(t0 - started, 1), "fine_tune": round(t1 - t0, 1),
                         "merge": round(t2 - t1, 1), "measure": round(time.time() - t2, 1)}
    with open(os.path.join(out, INFO_FILE), "w", encoding="utf-8") as fh:
        json.dump(record, fh, indent=1, sort_keys=True)
    _beside_adapter(out, record)
    print(f"[smollm2-warm] training reward (sampled, {samples} per task) {record.get('mean_pass_rate')}, held-out "
          f"greedy {record.get('heldout_greedy')}, groups with reward variance {record.get('groups_with_variance')}; "
          f"labels {record.get('train_labels')}", flush=True)
    return record


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m seal_verl.models.smollm2_warm", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build (or reuse) the warm start in OUT")
    b.add_argument("out")
    b.add_argument("--base", required=True, help="the SmolLM2 checkpoint (python -m seal_verl.models.smollm2 build)")
    for name, value in DEFAULTS.items():
        b.add_argument(f"--{name}", type=type(value), default=value)
    b.add_argument("--force", action="store_true")
    args = p.parse_args(argv)
    if not os.path.isfile(os.path.join(args.base, "model.safetensors")):
        p.error(f"--base {args.base}: not a model folder")
    try:
        build(args.out, args.base, args.steps, args.lr, args.seed, args.samples, args.force)
    except ValueError as exc:
        p.error(str(exc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
