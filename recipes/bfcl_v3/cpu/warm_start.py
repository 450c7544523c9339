"""Warm start of the CPU learning run: the tiny local Qwen2, fine-tuned on ground-truth BFCL trajectories until it
is partly right, so that GRPO groups have reward variance and SEAL's weights multiply non-zero advantages.

    python recipes/bfcl_v3/cpu/warm_start.py OUT_DIR --base MODEL_DIR [--split-file F] [--epochs N] [--lr X]
                                             [--samples K] [--force]

1. **Data, rendered by the real agent loop.** verl's own ``AgentLoopWorker`` runs the ``seal_bfcl`` loop (initial
   interface state: no cue is on yet, as at the first RL step) on every training task of the split, with the CPU
   overlay's agent-loop settings and lengths (``agent_loops/json.yaml``, ``config/cpu/tiny.yaml``). A scripted
   client stands in for the server and answers with the ground-truth calls of each turn followed by a short
   closing text (``seal_verl.dry_run.PlanBook``'s ``pass`` plans); the BFCL environment executes them and the
   real observations come back. Each row is exactly the token sequence the RL run sees: prompt + response
   tokens, loss on the tokens with ``response_mask`` 1 (what the model generated), none on the prompt,
   observations or user turns. Every scripted rollout must score 1 (a ground-truth trajectory that the budgets
   would cut fails here, before anything trains).
2. **Fine-tuning with transformers' ``Trainer``.** The rows are already tokenized with their label masks, so the
   plain ``Trainer`` fits: TRL's ``SFTTrainer`` would re-render conversations with the chat template and lose the
   agent loop's token boundaries, and verl's SFT trainer needs torchrun and an FSDP device mesh, i.e. more CPU
   plumbing for a 0.4M-parameter model. Up to ``--epochs`` epochs (70 by default), each task leaving the mix once
   its ground truth is likely enough (``fine_tune``'s stopping rule), leave the model partly right: it has seen
   each call once per epoch and samples them with some error at temperature 1.
3. **Pass rate before RL.** The same agent loop samples ``--samples`` rollouts per task from the fine-tuned model
   (transformers ``generate``, the recipe's rollout temperature and top-p), the real reward function grades
   them, and the per-task pass rate is printed and written to ``warm_start.json``.

The result is cached: ``OUT_DIR/warm_start.json`` records a fingerprint of every input (the rendered token rows,
the base model's weights, the hyperparameters and this file). A later call with the same inputs returns at
once; any change rebuilds. Nothing is downloaded.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import os
import shutil
import sys
import time
from typing import Any, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_SPLIT = os.path.join(HERE, "split_cpu.json")
AGENT_LOOPS = os.path.join(HERE, "agent_loops", "json.yaml")
INFO_FILE = "warm_start.json"
#: the CPU overlay's lengths (config/cpu/tiny.yaml): data.max_prompt_length, data.max_response_length
PROMPT_LENGTH = 7168
RESPONSE_LENGTH = 1024
#: the recipe's sampling (recipes/bfcl_v3/config/bfcl_v3.yaml, actor_rollout_ref.rollout)
TEMPERATURE = 1.0
TOP_P = 1.0
DEFAULTS = {"epochs": 70, "lr": 5e-3, "samples": 4, "seed": 0, "target": 0.5}


class WarmStartError(RuntimeError):
    """The warm start cannot be built as asked (a ground-truth trajectory that does not fit, bad arguments)."""


# ------------------------------------------------------------------------------------------------ agent loop


def _agent_loop_setup(model: str, task_ids: list[str], llm_factory, rollouts: int, out: str, seal: Optional[dict] = None):
    """verl's AgentLoopWorker in this process over ``task_ids`` (``seal_bfcl`` rows) with the client ``llm``."""
    from seal_verl import dry_run as dr

    config = dr.verl_config(model, agent_loop_yaml=AGENT_LOOPS, rollouts=rollouts, prompt_length=PROMPT_LENGTH,
                            response_length=RESPONSE_LENGTH, seal=dict(seal or {}),
                            overrides=[f"actor_rollout_ref.rollout.temperature={TEMPERATURE}",
                                       f"actor_rollout_ref.rollout.top_p={TOP_P}"])
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model)
    llm = llm_factory(tokenizer)
    worker = dr.make_worker(config, llm)
    parquet = dr.write_parquet(dr.dataset_rows(task_ids, dr.TRAIN_LOOP, "train", "json"),
                               os.path.join(out, "warm_start_tasks.parquet"))
    batch = dr.load_batch(parquet, config, tokenizer, rollouts, uid_prefix="warm-")
    return worker, batch, tokenizer, llm


def _run_loop(coro_factory):
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        return loop.run_until_complete(coro_factory())
    finally:
        loop.close()
        asyncio.set_event_loop(None)


def render_rows(model: str, task_ids: list[str], out: str) -> list[dict]:
    """Per task: ``input_ids`` (prompt + response tokens) and ``labels`` (-100 except generated tokens), rendered by
    the real ``seal_bfcl`` agent loop replaying the ground truth under the initial interface (no cue is on before
    the first RL step); raises if a ground-truth rollout does not pass.

    Only that interface: rows under every subset of the cue kinds (tried, so that cue text would not knock the model
    off its calls) did not reach a partly right model within the warm start's few minutes."""
    return _render_rows(model, task_ids, out, [()])


def cue_state(active: tuple):
    """The closed-loop state of step 0 with exactly the cue kinds in ``active`` switched on."""
    from seal_verl.interface import CUE_KINDS, InterfaceConfig, InterfaceState
    from seal_verl.loop import ClosedLoopState, SealSwitches
    from seal_verl.weighting import WeightingConfig

    base = ClosedLoopState.initial(SealSwitches(), InterfaceConfig(), WeightingConfig())
    return ClosedLoopState(step=0, interface=InterfaceState(
        active={k: k in active for k in CUE_KINDS}, streak_below={k: 0 for k in CUE_KINDS}, step=0),
        rho=dict(base.rho), base_rho=dict(base.base_rho))


def render_under_cue_states(setup, task_ids: list[str], subsets: list[tuple[str, ...]],
                            expected: Optional[dict] = None) -> tuple[list[dict], list[str]]:
    """Run the scripted trajectories through the real agent loop once per cue subset and keep the rows of the
    rollouts that pass (or, with ``expected`` = ``{task_id: labels}``, that carry exactly those turn labels: a
    scripted failure), in task order, then by cue state. ``setup()`` -> ``(worker, batch, scripted_llm)``.
    Returns ``(rows, rejected)``."""
    from seal_verl.verl_glue.agent_loop import set_state_source

    async def go():
        worker, batch, llm = setup()
        gens = []
        try:
            for subset in subsets:
                set_state_source(cue_state(subset))
                llm.reset()
                gens.append((subset, await worker.generate_sequences(batch)))
        finally:
            set_state_source(None)
        return gens

    rows, failed = [], []
    for subset, gen in _run_loop(go):
        rows.extend(_rows_of(gen, subset, failed, expected))
    rows.sort(key=lambda r: (task_ids.index(r["task_id"]), len(r["interface"]), r["interface"]))
    return rows, failed


def _render_rows(model: str, task_ids: list[str], out: str, subsets: list[tuple[str, ...]]) -> list[dict]:
    from env_wrappers.bfcl.tasks import load_tasks
    from seal_verl import dry_run as dr

    tasks = load_tasks(task_ids)
    book = dr.PlanBook("json", 0)

    def factory(tok):
        return dr.ScriptedLLM(tok, tasks, default=lambda t: book.get(t, "pass"))

    def setup():
        worker, batch, _tok, llm = _agent_loop_setup(model, task_ids, factory, 1, out)
        return worker, batch, llm

    rows, failed = render_under_cue_states(setup, task_ids, subsets)
    if failed:
        raise WarmStartError(
            "the ground-truth trajectory of these tasks does not pass under the CPU budgets "
            f"({os.path.relpath(AGENT_LOOPS)}; prompt {PROMPT_LENGTH}, response {RESPONSE_LENGTH} tokens), so the "
            f"model cannot learn it: {'; '.join(failed[:4])}. Choose other tasks in the split file.")
    return rows


def _rows_of(gen, subset: tuple, failed: list, expected: Optional[dict] = None) -> list[dict]:
    rows = []
    n = gen.batch["prompts"].shape[1]
    for i in range(len(gen)):
        trace = json.loads(gen.non_tensor_batch["seal_trace"][i])
        if (float(gen.non_tensor_batch["score"][i]) != 1.0 if expected is None else
                json.loads(str(gen.non_tensor_batch["seal_labels"][i])) != expected[trace["task_id"]]):
            failed.append(f"{trace['task_id']} (labels {gen.non_tensor_batch['seal_labels'][i]}, cues {subset})")
            continue
        att = gen.batch["attention_mask"][i].bool()
        prompt = gen.batch["prompts"][i][att[:n]].tolist()
        valid = att[n:]
        response = gen.batch["responses"][i][valid].tolist()
        mask = gen.batch["response_mask"][i][valid].tolist()
        labels = [-100] * len(prompt) + [t if m else -100 for t, m in zip(response, mask)]
        rows.append({"task_id": trace["task_id"], "interface": ",".join(subset) or "none",
                     "input_ids": prompt + response, "labels": labels, "prompt_tokens": len(prompt),
                     "response_tokens": len(response), "trained_tokens": int(sum(mask))})
    return rows


# ------------------------------------------------------------------------------------------------ sampling client


class HFSampler:
    """Stands in for verl's server client with a real model: ``generate`` samples with transformers on CPU at the
    request's temperature / top-p / top-k and ``max_tokens``, stopping at ``<|im_end|>`` as vLLM would.

    Like vLLM's prefix caching, it keeps the key/value cache of recent sequences and reuses the longest one that
    starts the new prompt: every rollout of a task shares its 4-5k-token first prompt, and each later call of a
    rollout extends the previous one, so only the new tokens are computed."""

    MAX_CACHED = 32

    def __init__(self, model, tokenizer, seed: int = 0, eos_token: str = "<|im_end|>"):
        import torch

        self.model = model
        self.tokenizer = tokenizer
        self.eos_id = tokenizer.convert_tokens_to_ids(eos_token)
        torch.manual_seed(seed)
        self.calls = 0
        self._cache: list[tuple[list[int], Any]] = []  # (token ids the cache covers, DynamicCache), newest last

    def _prefix_cache(self, ids: list[int]):
        """A copy of the cached key/values of the longest cached prefix of ``ids`` (at most ``len(ids) - 1``
        tokens, so that at least one token is computed), or None."""
        import copy

        best, best_len = None, 0
        for covered, cache in self._cache:
            n = min(len(covered), len(ids) - 1)
            k = 0
            while k < n and covered[k] == ids[k]:
                k += 1
            if k > best_len:
                best, best_len = cache, k
        if best is None or best_len < 16:
            return None
        cache = copy.deepcopy(best)
        extra = cache.get_seq_length() - best_len
        if extra > 0:
            cache.crop(-extra)  # drop the last ``extra`` positions
        return cache

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        import torch
        from verl.workers.rollout.replica import TokenOutput

        self.calls += 1
        temperature = float(sampling_params.get("temperature", 1.0) or 0.0)
        top_p = float(sampling_params.get("top_p", 1.0) or 1.0)
        top_k = int(sampling_params.get("top_k", -1) or -1)
        max_tokens = int(sampling_params.get("max_tokens") or 64)
        prompt = list(prompt_ids)
        ids = torch.tensor([prompt], dtype=torch.long)
        kw: dict[str, Any] = {"max_new_tokens": max_tokens, "eos_token_id": self.eos_id, "pad_token_id": self.eos_id,
                              "return_dict_in_generate": True, "use_cache": True}
        if temperature > 0:
            kw.update(do_sample=True, temperature=temperature, top_p=top_p, top_k=top_k if top_k > 0 else 0)
        else:
            kw.update(do_sample=False)
        cache = self._prefix_cache(prompt)
        if cache is not None:
            kw["past_key_values"] = cache
        with torch.no_grad():
            out = self.model.generate(ids, attention_mask=torch.ones_like(ids), **kw)
        seq = out.sequences[0].tolist()
        cache = out.past_key_values
        if cache is not None:
            self._cache.append((seq[: cache.get_seq_length()], cache))
            while len(self._cache) > self.MAX_CACHED:
                self._cache.pop(0)
        new = seq[len(prompt):]
        if self.eos_id in new:
            new = new[: new.index(self.eos_id) + 1]
        return TokenOutput(token_ids=new, log_probs=[0.0] * len(new) if sampling_params.get("logprobs") else None,
                           stop_reason="completed", num_preempted=0,
                           extra_fields={"global_steps": 0, "min_global_steps": 0, "max_global_steps": 0})


def sampled_pass_rates(model_dir: str, task_ids: list[str], seed: int, setup) -> dict[str, dict]:
    """Per task: the rollouts of ``setup(sampler_factory)`` -> ``(worker, batch)``, whose LLM samples from the
    model in ``model_dir``, graded by the real reward function -> ``{"pass_rate", "scores", "labels"}``."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.eval()

    async def go():
        worker, batch = setup(lambda t: HFSampler(model, t, seed))
        return await worker.generate_sequences(batch)

    gen = _run_loop(go)
    result: dict[str, dict] = {t: {"scores": [], "labels": []} for t in task_ids}
    for i in range(len(gen)):
        tid = str(gen.non_tensor_batch["task_id"][i])
        result[tid]["scores"].append(float(gen.non_tensor_batch["score"][i]))
        result[tid]["labels"].append(json.loads(str(gen.non_tensor_batch["seal_labels"][i])))
    for r in result.values():
        r["pass_rate"] = sum(r["scores"]) / max(len(r["scores"]), 1)
    return result


def pass_rates(model_dir: str, task_ids: list[str], samples: int, seed: int, out: str) -> dict[str, dict]:
    """Per task: ``samples`` rollouts of the ``seal_bfcl`` loop sampled from ``model_dir`` at the recipe's
    temperature, graded by the real reward function -> ``{"pass_rate", "scores", "labels"}``."""

    def setup(factory):
        worker, batch, _tok, _llm = _agent_loop_setup(model_dir, task_ids, factory, samples, out)
        return worker, batch

    return sampled_pass_rates(model_dir, task_ids, seed, setup)


# ------------------------------------------------------------------------------------------------ fine-tuning


def trajectory_nll(model, rows: list[dict]) -> list[float]:
    """Per row: the summed negative log-likelihood of its trained tokens (teacher forcing, no gradient).

    ``exp(-nll)`` is the probability that sampling at temperature 1 reproduces the ground-truth trajectory token
    for token, a lower bound on the task's pass rate under the recipe's sampling."""
    import torch

    was_training = model.training
    model.eval()
    out = []
    with torch.no_grad():
        for r in rows:
            ids = torch.tensor([r["input_ids"]], dtype=torch.long)
            labels = torch.tensor(r["labels"][1:], dtype=torch.long)
            logits = model(input_ids=ids).logits[0, :-1].float()
            keep = labels != -100
            nll = torch.nn.functional.cross_entropy(logits[keep], labels[keep], reduction="sum")
            out.append(float(nll))
    if was_training:
        model.train()
    return out


def tasks_to_train(order: list[str], predicted: list[float], target: float) -> list[str]:
    """The tasks whose predicted pass rate is still below ``target``, in ``order``; training stops when none is.

    The rule is per task, not on the mean: a mean at the target can hide a task near 0 behind one near 1, and each
    of them gives GRPO groups of a single outcome, hence no learning signal."""
    if len(order) != len(predicted):
        raise WarmStartError(f"{len(order)} tasks but {len(predicted)} predicted pass rates")
    return [t for t, p in zip(order, predicted) if not p >= target]


def fine_tune(base: str, rows: list[dict], out_model: str, max_epochs: int, lr: float, seed: int,
              target: float) -> list[dict]:
    """transformers' ``Trainer`` on the pre-tokenized rows (batch 1, AdamW, cosine decay over ``max_epochs`` after a
    one-epoch warm-up), with a stopping rule per task: ``exp(-nll)`` of a task's ground truth is the probability of
    sampling it exactly, a lower bound on its pass rate; once it reaches ``target`` the task leaves the training
    mix, and training stops when every task has reached it. Each task thus ends partly right rather than one
    memorised and another never passed: a task the model always fails (or always passes) gives a GRPO group with
    one outcome, which carries no learning signal (a mean over tasks let one task sit at 0 while another neared 1).
    Returns the epoch log."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainerCallback, TrainingArguments

    import random

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32, attn_implementation="sdpa")
    tokenizer = AutoTokenizer.from_pretrained(base)
    by_task: dict[str, list[dict]] = {}
    for r in rows:
        by_task.setdefault(r["task_id"], []).append(r)
    order = list(by_task)
    # what the stopping rule measures: each task under the first (initial) interface it was rendered under
    probe = [rs[0] for rs in by_task.values()]

    #: the tasks still below the target (all of them at first); the rest have left the training mix
    active = list(order)

    class OneInterfacePerTask(torch.utils.data.Dataset):
        """Item i: the ground truth of the i-th task still being trained (cycling over them), under an interface
        drawn at random (seeded) each time it is read. The length stays one item per task, so an epoch is the
        same number of optimizer steps whatever is left."""

        def __init__(self):
            self.rng = random.Random(seed)

        def __len__(self):
            return len(order)

        def __getitem__(self, i):
            r = self.rng.choice(by_task[active[i % len(active)]])
            return {"input_ids": r["input_ids"], "labels": r["labels"]}

    data = OneInterfacePerTask()

    def collate(batch):
        # batch size 1: nothing to pad
        return {"input_ids": torch.tensor([b["input_ids"] for b in batch], dtype=torch.long),
                "labels": torch.tensor([b["labels"] for b in batch], dtype=torch.long)}

    log: list[dict] = []

    class StopWhenPartlyRight(TrainerCallback):
        def on_epoch_end(self, args, state, control, model=None, **kw):
            nll = trajectory_nll(model, probe)
            predicted = [math.exp(-x) for x in nll]
            mean = sum(predicted) / len(predicted)
            still = tasks_to_train(order, predicted, target)
            log.append({"epoch": int(round(state.epoch or 0)), "nll": [round(x, 3) for x in nll],
                        "predicted_pass_rate": round(mean, 4), "reached": len(order) - len(still)})
            print(f"[warm-start] epoch {int(round(state.epoch or 0)):3d}  trajectory NLL "
                  f"{min(nll):6.2f}..{max(nll):6.2f}  predicted pass rate {min(predicted):.2f}..{max(predicted):.2f} "
                  f"(target {target:.2f} per task; {len(order) - len(still)}/{len(order)} there)", flush=True)
            if still:
                active[:] = still
            else:
                control.should_training_stop = True
            return control

    args = TrainingArguments(
        output_dir=os.path.join(out_model, ".trainer"), num_train_epochs=max_epochs, per_device_train_batch_size=1,
        learning_rate=lr, lr_scheduler_type="cosine", warmup_steps=len(data), weight_decay=0.0,
        logging_strategy="no", save_strategy="no", report_to=[], use_cpu=True, seed=seed, data_seed=seed,
        dataloader_num_workers=0, disable_tqdm=True, remove_unused_columns=False,
    )
    trainer = Trainer(model=model, args=args, train_dataset=data, data_collator=collate,
                      callbacks=[StopWhenPartlyRight()])
    trainer.train()
    model.save_pretrained(out_model, safe_serialization=True)
    tokenizer.save_pretrained(out_model)
    shutil.rmtree(os.path.join(out_model, ".trainer"), ignore_errors=True)
    return log


# ------------------------------------------------------------------------------------------------ cache


def _file_digest(path: str) -> str:
    from seal_verl.shipped_models import file_sha256

    return file_sha256(path)


def fingerprint(base: str, rows: list[dict], params: dict) -> str:
    """Digest of every input of the warm start: the rendered token rows, the base model's files, the
    hyperparameters and this file's code."""
    h = hashlib.sha256()
    h.update(json.dumps({"params": params, "rows": [[r["input_ids"], r["labels"]] for r in rows]}).encode())
    for name in sorted(os.listdir(base)):
        p = os.path.join(base, name)
        if os.path.isfile(p) and not name.startswith("."):
            h.update(name.encode() + _file_digest(p).encode())
    h.update(_file_digest(os.path.abspath(__file__)).encode())
    return h.hexdigest()


def read_info(out: str) -> Optional[dict]:
    path = os.path.join(out, INFO_FILE)
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            info = json.load(f)
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) else None


def format_pass_table(rates: dict[str, dict]) -> str:
    lines = [f"{'task':<28} pass rate  labels of the sampled rollouts"]
    for tid, r in rates.items():
        labels = "; ".join(",".join(_short(x) for x in ls) for ls in r["labels"])
        lines.append(f"{tid:<28} {r['pass_rate']:9.2f}  {labels}")
    mean = sum(r["pass_rate"] for r in rates.values()) / max(len(rates), 1)
    mixed = sum(1 for r in rates.values() if 0 < r["pass_rate"] < 1)
    lines.append(f"{'mean':<28} {mean:9.2f}  ({mixed}/{len(rates)} tasks pass in some rollouts and fail in others)")
    return "\n".join(lines)


_SHORT = {"invalid_tool_call": "inv", "argument_mismatch": "arg", "state_mismatch": "state",
          "recovery_failure": "recov", "missing_tool_call": "miss", "response_mismatch": "resp",
          "spurious_tool_call": "spur", "pass": "ok", "checker_error": "err"}


def _short(label: str) -> str:
    return _SHORT.get(label, label)


def warm_start(out: str, base: str, split_file: str = DEFAULT_SPLIT, epochs: int = DEFAULTS["epochs"],
               lr: float = DEFAULTS["lr"], samples: int = DEFAULTS["samples"], seed: int = DEFAULTS["seed"],
               target: float = DEFAULTS["target"], force: bool = False) -> dict:
    """Build (or reuse) the warm-started model in ``out``; returns the contents of ``warm_start.json``."""
    from env_wrappers.bfcl.prepare_data import read_split_file

    for name, value, low in (("epochs", epochs, 1), ("samples", samples, 0)):
        if isinstance(value, bool) or int(value) != value or value < low:
            raise WarmStartError(f"--{name} must be an integer >= {low}, got {value!r}")
    if not (lr > 0):
        raise WarmStartError(f"--lr must be positive, got {lr!r}")
    if not (0 < target < 1):
        raise WarmStartError(f"--target must be in (0, 1), got {target!r}")
    if not os.path.isfile(os.path.join(base, "config.json")):
        raise WarmStartError(f"--base {base}: not a model folder (no config.json)")
    t0 = time.time()
    task_ids = list(read_split_file(split_file)["train"])
    os.makedirs(out, exist_ok=True)
    rows = render_rows(base, task_ids, out)
    params = {"epochs": int(epochs), "lr": float(lr), "samples": int(samples), "seed": int(seed),
              "target": float(target), "temperature": TEMPERATURE, "top_p": TOP_P}
    fp = fingerprint(base, rows, params)
    info = read_info(out)
    if not force and info and info.get("fingerprint") == fp and os.path.isfile(os.path.join(out, "config.json")):
        print(f"[warm-start] cached: {out} (same inputs, fingerprint {fp[:12]}); pass rate before RL:", flush=True)
        if info.get("pass_rates"):
            print(format_pass_table(info["pass_rates"]), flush=True)
        return dict(info, out=os.path.abspath(out))
    print(f"[warm-start] {len(rows)} ground-truth trajectories rendered by the seal_bfcl agent loop "
          f"(initial interface, no cue): "
          f"{sum(r['trained_tokens'] for r in rows)} trained tokens, "
          f"{min(len(r['input_ids']) for r in rows)}-{max(len(r['input_ids']) for r in rows)} tokens per row", flush=True)
    t1 = time.time()
    for name in os.listdir(out):  # a stale model of other inputs must not survive a half-finished rebuild
        if name in (INFO_FILE, "config.json", "generation_config.json", "model.safetensors"):
            os.remove(os.path.join(out, name))
    log = fine_tune(base, rows, out, epochs, lr, seed, target)
    probe = [next(r for r in rows if r["task_id"] == t) for t in task_ids]
    t2 = time.time()
    rates = pass_rates(out, task_ids, samples, seed, out) if samples else {}
    t3 = time.time()
    if rates and not any(r["pass_rate"] > 0 for r in rates.values()):
        raise WarmStartError(
            f"the warm-started model passed none of the {len(rates) * samples} sampled rollouts, so RL would have "
            f"no signal: raise --epochs (now {epochs}) or --lr (now {lr}); {format_pass_table(rates)}")
    info = {
        "fingerprint": fp, "out": os.path.abspath(out), "base": os.path.abspath(base), "split_file": os.path.abspath(split_file),
        "tasks": task_ids, "params": params, "trainer": "transformers.Trainer",
        "rows": [{k: r[k] for k in ("task_id", "interface", "prompt_tokens", "response_tokens", "trained_tokens")}
                 for r in rows],
        "epochs_run": log[-1]["epoch"], "log": log,
        "predicted_pass_rates": {r["task_id"]: round(math.exp(-x), 4) for r, x in zip(probe, log[-1]["nll"])},
        "pass_rates": rates,
        "mean_pass_rate": (sum(r["pass_rate"] for r in rates.values()) / len(rates)) if rates else None,
        "seconds": {"render": round(t1 - t0, 1), "fine_tune": round(t2 - t1, 1), "pass_rate": round(t3 - t2, 1)},
    }
    with open(os.path.join(out, INFO_FILE) + ".tmp", "w", encoding="utf-8") as f:
        json.dump(info, f, indent=1)
    os.replace(os.path.join(out, INFO_FILE) + ".tmp", os.path.join(out, INFO_FILE))
    if rates:
        print(f"[warm-start] pass rate before RL ({samples} rollouts per task, temperature {TEMPERATURE}):", flush=True)
        print(format_pass_table(rates), flush=True)
    print(f"[warm-start] done in {t3 - t0:.0f} s (render {t1 - t0:.0f} s, fine-tune {t2 - t1:.0f} s, "
          f"pass rate {t3 - t2:.0f} s): {out}", flush=True)
    return info


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", help="folder of the warm-started model (reused when its inputs are unchanged)")
    p.add_argument("--base", required=True, help="the tiny random model to start from (seal-verl-tiny-model OUT_DIR)")
    p.add_argument("--split-file", default=DEFAULT_SPLIT, help="its train ids are the tasks learned (default: %(default)s)")
    p.add_argument("--epochs", type=int, default=DEFAULTS["epochs"],
                   help="at most this many passes over the tasks (default: %(default)s)")
    p.add_argument("--target", type=float, default=DEFAULTS["target"],
                   help="a task leaves the training mix once its predicted pass rate, exp(-NLL of its ground-truth "
                        "trajectory), reaches this; training stops when every task has (default: %(default)s)")
    p.add_argument("--lr", type=float, default=DEFAULTS["lr"], help="AdamW learning rate (default: %(default)s)")
    p.add_argument("--samples", type=int, default=DEFAULTS["samples"],
                   help="rollouts per task for the pass rate before RL; 0 skips it (default: %(default)s)")
    p.add_argument("--seed", type=int, default=DEFAULTS["seed"])
    p.add_argument("--force", action="store_true", help="rebuild even if the cached model has the same inputs")
    args = p.parse_args(argv)
    from seal_verl.dry_run import quiet_libraries

    quiet_libraries()
    try:
        warm_start(args.out, args.base, args.split_file, args.epochs, args.lr, args.samples, args.seed, args.target,
                   args.force)
    except (WarmStartError, ValueError, FileNotFoundError) as e:
        print(f"warm-start: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
