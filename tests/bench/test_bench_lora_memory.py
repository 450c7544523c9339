"""bench/bench_lora_memory.py: its CPU mode end to end, and the numbers of docs/gpu_training.md's LoRA table
against what peft counts on each GPU backbone's real architecture (built on the meta device: no memory).

A wrong number in the doc's table (adapter parameters, fp32 base weights, adapter state, layers) fails here; so
does an architecture of the benchmark that disagrees with the backbone facts of seal_verl.models.backbones."""

from __future__ import annotations

import json
import math
import os
import re

import pytest

from _paths import REPO
from bench import bench_lora_memory as blm

DOC = os.path.join(REPO, "docs", "gpu_training.md")
PROJ = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def lora_params(arch: dict, rank: int = blm.RANK) -> int:
    """rank x (inputs + outputs), summed over the seven projections of every layer, from the sizes alone."""
    h, i = arch["hidden"], arch["intermediate"]
    head = h // arch["heads"]
    q, kv = arch["heads"] * head, arch["kv_heads"] * head
    shapes = [(h, q), (h, kv), (h, kv), (q, h), (h, i), (h, i), (i, h)]
    return arch["layers"] * sum(rank * (a + b) for a, b in shapes)


def base_params(arch: dict) -> int:
    """The model's own parameters from the sizes: embeddings (once if tied), attention (Qwen2 with q/k/v biases),
    MLP, two norms a layer and the final norm."""
    h, i, v = arch["hidden"], arch["intermediate"], arch["vocab"]
    head = h // arch["heads"]
    q, kv = arch["heads"] * head, arch["kv_heads"] * head
    attn = h * q + 2 * h * kv + q * h + ((q + 2 * kv) if arch["family"] == "qwen2" else 0)
    layer = attn + 3 * h * i + 2 * h
    return v * h * (1 if arch["tied"] else 2) + arch["layers"] * layer + h


# ------------------------------------------------------------------------------------------ the doc's table


def lora_table(text: str) -> dict[str, dict]:
    """docs/gpu_training.md's LoRA memory table: backbone -> layers, adapter parameters (M), base weights (GB),
    adapter state (GB)."""
    section = text[text.index("\n## LoRA"):]
    section = section[: section.find("\n## ", 1)]
    rows = [ln for ln in section.splitlines() if ln.startswith("|")]
    header = [c.strip() for c in rows[0].strip("|").split("|")]
    assert header[:3] == ["backbone", "layers", "adapter parameters (r = 32)"], header
    out = {}
    for ln in rows[2:]:
        cells = [c.strip() for c in ln.strip("|").split("|")]
        name = cells[0].strip("`")
        m, base, state = (re.fullmatch(p, c) for p, c in zip((r"([\d.]+)M", r"([\d.]+) GB", r"([\d.]+) GB"),
                                                               cells[2:5]))
        assert m and base and state, f"unreadable row: {ln}"
        out[name] = {"layers": int(cells[1]), "adapter_m": float(m.group(1)), "base_gb": float(base.group(1)),
                     "adapter_state_gb": float(state.group(1))}
    return out


def doc_text() -> str:
    with open(DOC, encoding="utf-8") as f:
        return f.read()


@pytest.fixture(scope="module")
def counted():
    """What peft and the model report on each real architecture, built on the meta device."""
    import torch

    out = {}
    for name in blm.ARCH:
        model = blm.build_model(blm.arch_for(name), torch.device("meta"))
        base = sum(p.numel() for p in model.parameters())
        peft_model = blm.add_adapter(model, torch.device("meta"))
        trainable, _ = peft_model.get_nb_trainable_parameters()
        out[name] = {"base": base, "trainable": trainable, "targets": blm.lora_targets(peft_model),
                     "layers": model.config.num_hidden_layers}
    return out


def disagreements(table: dict, counted: dict) -> list[str]:
    """Every number of the doc's table that is not what was counted, rounded as the doc rounds."""
    out = []
    for name, c in counted.items():
        row = table.get(name)
        if row is None:
            out.append(f"{name}: no row")
            continue
        want = {"layers": c["layers"], "adapter_m": round(c["trainable"] / 1e6, 1),
                "base_gb": round(c["base"] * 4 / 1e9, 1), "adapter_state_gb": round(c["trainable"] * 16 / 1e9, 1)}
        out += [f"{name} {k}: doc {row[k]}, counted {v}" for k, v in want.items() if not math.isclose(row[k], v)]
    return out


def test_the_docs_lora_table_is_what_peft_counts(counted):
    assert disagreements(lora_table(doc_text()), counted) == []


def test_a_wrong_number_in_the_table_is_found(counted):
    text = doc_text().replace("| 83.9M |", "| 83.8M |").replace("| 12.3 GB |", "| 12.4 GB |")
    assert disagreements(lora_table(text), counted) == [
        "qwen2.5-3b base_gb: doc 12.4, counted 12.3", "toolace2-8b adapter_m: doc 83.8, counted 83.9"]


def test_peft_adapts_the_seven_projections_and_the_count_follows_from_the_sizes(counted):
    for name, c in counted.items():
        assert c["targets"] == sorted(PROJ), name
        assert c["trainable"] == lora_params(blm.ARCH[name]), name
        assert c["base"] == base_params(blm.ARCH[name]), name


def test_the_benchmarks_estimates_are_the_docs():
    table = lora_table(doc_text())
    assert {n: {k: v for k, v in row.items() if k != "layers"} for n, row in table.items()} == blm.DOC
    assert {n: row["layers"] for n, row in table.items()} == {n: a["layers"] for n, a in blm.ARCH.items()}
    flat = " ".join(doc_text().split())
    room = blm.DOC_ROOM["toolace2-8b"]
    assert f"leaves about {room['gb']:.0f} GB for the update's activations" in flat
    assert f"ppo_max_token_len_per_gpu={room['tokens']}" in flat
    assert f"gpu_memory_utilization={blm.VLLM_SHARE}" in flat


def test_the_architectures_agree_with_the_backbone_facts():
    from seal_verl.models.backbones import BACKBONES

    vocab = {m: n for spec in BACKBONES.values() for m, n in spec.vocab_size.items()}
    for name, arch in blm.ARCH.items():
        assert arch["model"] in vocab, name
        assert arch["vocab"] == vocab[arch["model"]], name


def test_the_update_estimate_is_the_docs_arithmetic():
    # "2 x 24,576 x 152,064 x 2 bytes = 15 GB ... 11 GB at 18,432" and "28 layers x tokens x hidden size x 2 bytes
    # (5 GB at 24,576 tokens for Qwen2.5-7B)" (docs/gpu_training.md, "Node shapes")
    seven = blm.ARCH["qwen2.5-7b"]
    assert round(blm.estimate_update(seven, 24576)["logits_gb"]) == 15
    assert round(blm.estimate_update(seven, 18432)["logits_gb"]) == 11
    assert round(blm.estimate_update(seven, 24576)["checkpoints_gb"]) == 5


# ------------------------------------------------------------------------------------------ the CPU mode


def test_the_inplace_logprobs_and_their_gradient_are_cross_entropys():
    import torch

    torch.manual_seed(0)
    logits = torch.randn(7, 11)
    labels = torch.randint(11, (7,))
    weight = torch.randn(7)
    grads = []
    for mode in ("ce", "inplace"):
        x = logits.clone().requires_grad_(True)
        y = x * 1.0                                   # the function writes its gradient into its input's storage
        logp = blm.next_token_logprobs(y, labels, mode, chunk=3)
        (logp * weight).sum().backward()
        grads.append((logp.detach(), x.grad))
    assert torch.allclose(grads[0][0], grads[1][0], atol=1e-6)
    assert torch.allclose(grads[0][1], grads[1][1], atol=1e-6)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("lora_memory") / "tiny.json"
    assert blm.main(["--device", "cpu", "--tiny", "--out", str(out)]) == 0
    with open(out, encoding="utf-8") as f:
        return json.load(f)


def test_the_tiny_cpu_run_writes_every_number(tiny_run):
    r = tiny_run
    assert {"gpu", "device", "torch", "transformers", "peft", "tiny", "tokens", "logprob", "residual", "rank",
            "alpha", "backbones", "seconds"} <= set(r)
    assert r["device"] == "cpu" and r["tiny"] and r["tokens"] == [64] and r["residual"] == "bf16"
    assert r["logprob"] == list(blm.LOGPROB_MODES) and (r["rank"], r["alpha"]) == (32, 64)
    assert list(r["backbones"]) == list(blm.ARCH)
    for name, rec in r["backbones"].items():
        arch = rec["arch"]
        assert (arch["layers"], arch["hidden"], arch["family"]) == (2, 64, blm.ARCH[name]["family"])
        assert rec["checkpointing"] and rec["layer_input_dtype"] == "bfloat16"
        # no CUDA allocator on CPU: nothing is passed off as measured
        assert rec["base"]["measured_gb"] is None and rec["adapter"]["measured_gb"] is None
        assert rec["resident_gb"] is None
        assert len(rec["updates"]) == len(blm.LOGPROB_MODES)
        for u in rec["updates"]:
            assert u["status"] == "ok" and u["tokens"] == 64 and math.isfinite(u["loss"])
            assert u["logits_dtype"] == "bfloat16" and "need_gb" not in u
            e = u["estimate"]
            assert math.isclose(e["logits_gb"], 2 * 64 * arch["vocab"] * 2 / 1e9)
            assert math.isclose(e["checkpoints_gb"], 2 * 64 * 64 * 2 / 1e9)
            assert math.isclose(e["total_gb"], e["logits_gb"] + e["checkpoints_gb"])


def test_the_tiny_cpu_runs_counts_follow_from_the_sizes(tiny_run):
    for name, rec in tiny_run["backbones"].items():
        arch, a, b = rec["arch"], rec["adapter"], rec["base"]
        assert a["targets"] == sorted(PROJ), name
        assert a["trainable_params"] == lora_params(arch), name
        assert b["params"] == base_params(arch), name
        # the tensors themselves: fp32 base weights (plus the rotary buffers), 16 bytes an adapter parameter
        assert 0 <= b["counted_gb"] * 1e9 - b["params"] * 4 < 4096, name
        assert round(a["state_counted_gb"] * 1e9) == a["trainable_params"] * 16, name
        assert math.isclose(a["estimate_gb"], a["trainable_params"] * 16 / 1e9), name


def test_the_tiny_run_prints_a_table(capsys):
    assert blm.main(["--device", "cpu", "--tiny", "--backbones", "toolace2-8b", "--logprob", "inplace",
                     "--out", os.devnull]) == 0
    out = capsys.readouterr().out
    assert "adapter weights + grads + AdamW (GB)" in out and "update T=64 inplace" in out
    assert "qwen2.5-3b" not in out


def test_bad_arguments_are_refused():
    for argv in (["--tiny", "--backbones", "gpt2"], ["--tiny", "--logprob", "fast"], ["--tiny", "--tokens", "1"],
                 []):                                 # the real models on CPU
        with pytest.raises(SystemExit):
            blm.main(["--device", "cpu", "--out", os.devnull] + argv)


def test_the_docs_measured_update_table_is_the_shipped_measurement():
    """docs/gpu_training.md's table of the update measured on one H100 is bench/results/lora_memory_h100.json,
    rounded as the doc rounds (estimate, in-place log-probabilities, verl's fallback without flash-attn)."""
    import json
    import re

    with open(os.path.join(REPO, "bench", "results", "lora_memory_h100.json"), encoding="utf-8") as fh:
        measured = json.load(fh)
    assert measured["gpu"].startswith("NVIDIA H100")
    want = {}
    for name, b in measured["backbones"].items():
        for u in b["updates"]:
            assert u["status"] == "ok", (name, u["tokens"], u["logprob"])
            row = want.setdefault((name, u["tokens"]), {"estimate": f"{u['estimate']['total_gb']:.1f}"})
            row[u["logprob"]] = f"{u['need_gb']:.1f}"
    rows = re.findall(r"\| `([\w.-]+)` \| ([\d,]+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|", doc_text())
    found = {(n, int(t.replace(",", ""))): {"estimate": e, "inplace": i, "ce": c} for n, t, e, i, c in rows}
    assert found == want


def test_bf16_base_weights_take_two_bytes_a_parameter(tmp_path):
    """``--base-dtype bf16`` (what ``fsdp_config.model_dtype=bfloat16`` keeps) builds the frozen base in bf16 and
    halves the estimate it is measured against; the adapter state stays 16 bytes a parameter."""
    out = tmp_path / "bf16.json"
    assert blm.main(["--device", "cpu", "--tiny", "--backbones", "qwen2.5-7b", "--logprob", "inplace",
                     "--base-dtype", "bf16", "--out", str(out)]) == 0
    r = json.loads(out.read_text())
    b = r["backbones"]["qwen2.5-7b"]["base"]
    assert r["base_dtype"] == "bf16"
    assert 0 <= b["counted_gb"] * 1e9 - b["params"] * 2 < 4096
    assert math.isclose(b["estimate_gb"], b["params"] * 2 / 1e9)
