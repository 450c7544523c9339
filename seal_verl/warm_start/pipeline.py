"""The one warm-start pipeline: render training rows through verl's agent loop, fine-tune on them, measure the result,
cache it. Every warm start (``bfcl_cpu``, the ledger's stages, its mixed stage) is these steps with its own tasks,
plans and record.

1. **Rows, rendered by the real agent loop** (:func:`render_scripted`, :func:`render_under_cue_states`). verl's own
   ``AgentLoopWorker`` runs the environment's training loop with the run's agent-loop file and lengths
   (:mod:`seal_verl.warm_start.run_config`); a scripted client (``seal_verl.dry_run.ScriptedLLM``) answers with a
   plan per task (the ground truth, or a failing plan whose turn labels are known), the environment executes the
   calls and the real observations come back. A row is the token sequence the RL run sees: prompt + response
   tokens, loss on the tokens with ``response_mask`` 1 (what the model generated), none on the prompt,
   observations or user turns. A rollout of the ground truth that does not pass (or of a failing plan whose labels
   differ from the plan's) gives no row and is reported.
2. **Fine-tuning with transformers' ``Trainer``** (:func:`fine_tune`). The rows are tokenized with their label
   masks already, so the plain ``Trainer`` fits: TRL's ``SFTTrainer`` would re-render conversations with the chat
   template and lose the agent loop's token boundaries, and verl's SFT trainer needs torchrun and an FSDP device
   mesh, more CPU plumbing than a 0.4M-parameter model is worth. A task leaves the training mix once its ground
   truth is likely enough (:func:`tasks_to_train`), so that every task ends partly right.
3. **Pass rates** (:func:`pass_rates`): the same agent loop samples rollouts from the fine-tuned model
   (:class:`HFSampler`, transformers ``generate`` at the run's temperature and top-p), the real reward function
   grades them.
4. **Cache and record** (:func:`build`): ``OUT/warm_start.json`` holds a fingerprint of every input (the rows, the
   base model's files, the settings, the code); a later call with the same inputs returns at once, any change
   rebuilds.

verl is reached through ``seal_verl.verl_glue`` (as the dry run reaches it); transformers and torch are imported
here. Nothing is downloaded.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import hashlib
import json
import math
import os
import shutil
import sys
import time
from typing import Any, Callable, Optional, Sequence

from seal_verl.warm_start.run_config import RunSettings, run_settings

INFO_FILE = "warm_start.json"
#: files of a model folder that a rebuild replaces (a stale model of other inputs must not survive a half-finished one)
REBUILT_FILES = (INFO_FILE, "config.json", "generation_config.json", "model.safetensors")
#: what the record keeps of each training row
ROW_KEYS = ("task_id", "interface", "prompt_tokens", "response_tokens", "trained_tokens")


class WarmStartError(RuntimeError):
    """The warm start cannot be built as asked (a ground-truth trajectory that does not fit, bad arguments)."""


@dataclasses.dataclass(frozen=True)
class Target:
    """What a warm start prepares a model for: a registered environment and the run (``run_config.RUNS``) that
    trains the model on it."""

    env: str
    run: str

    @property
    def settings(self) -> RunSettings:
        return run_settings(self.run)

    @property
    def loops(self) -> tuple[str, str]:
        """(training loop, evaluation loop) of the environment."""
        from seal_verl.dry_run import loop_names

        return loop_names(self.env)


# ------------------------------------------------------------------------------------------------ agent loop


def loop_config(target: Target, model: str, rollouts: int, loop: Optional[str] = None,
                overrides: Optional[list[str]] = None):
    """verl's config for the in-process agent loop: the run's lengths, agent-loop file and sampling, ``loop`` (the
    training loop unless named) as the default loop, the environment's reward function, default SEAL settings."""
    from seal_verl import dry_run as dr

    s = target.settings
    return dr.verl_config(model, agent_loop_yaml=s.agent_loops, rollouts=rollouts, prompt_length=s.prompt_length,
                          response_length=s.response_length, reward_path=dr.reward_fn_path(target.env), seal={},
                          overrides=[f"actor_rollout_ref.rollout.temperature={s.temperature}",
                                     f"actor_rollout_ref.rollout.top_p={s.top_p}",
                                     f"actor_rollout_ref.rollout.agent.default_agent_loop={loop or target.loops[0]}"]
                          + list(overrides or []))


def agent_loop_setup(target: Target, model: str, task_ids: list[str], llm_factory, rollouts: int, out: str,
                     loop: Optional[str] = None, overrides: Optional[list[str]] = None):
    """verl's ``AgentLoopWorker`` in this process over ``task_ids`` (rows of ``loop``, the training loop unless
    named), with the client ``llm_factory(tokenizer)``. Returns ``(worker, batch, llm)``; the task rows are
    written to ``out/warm_start_<loop>.parquet``."""
    from transformers import AutoTokenizer

    from seal_verl import dry_run as dr

    loop = loop or target.loops[0]
    config = loop_config(target, model, rollouts, loop, overrides)
    tokenizer = AutoTokenizer.from_pretrained(model)
    llm = llm_factory(tokenizer)
    worker = dr.make_worker(config, llm)
    parquet = dr.write_parquet(dr.dataset_rows(task_ids, loop, "train", "json", env=target.env),
                               os.path.join(out, f"warm_start_{loop}.parquet"))
    batch = dr.load_batch(parquet, config, tokenizer, rollouts, uid_prefix="warm-")
    return worker, batch, llm


def run_loop(coro_factory):
    """Run ``coro_factory()`` on a fresh event loop (verl's agent loops capture the current one)."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        return loop.run_until_complete(coro_factory())
    finally:
        loop.close()
        asyncio.set_event_loop(None)


def cue_state(active: Sequence[str]):
    """The closed-loop state of step 0 with exactly the cue kinds in ``active`` switched on."""
    from seal_verl.interface import CUE_KINDS, InterfaceConfig, InterfaceState
    from seal_verl.loop import ClosedLoopState, SealSwitches
    from seal_verl.weighting import WeightingConfig

    base = ClosedLoopState.initial(SealSwitches(), InterfaceConfig(), WeightingConfig())
    return ClosedLoopState(step=0, interface=InterfaceState(
        active={k: k in active for k in CUE_KINDS}, streak_below={k: 0 for k in CUE_KINDS}, step=0),
        rho=dict(base.rho), base_rho=dict(base.base_rho))


def render_under_cue_states(setup, task_ids: list[str], subsets: Sequence[tuple[str, ...]],
                            expected: Optional[dict] = None) -> tuple[list[dict], list[str]]:
    """Run the scripted trajectories through the real agent loop once per cue subset (any subsets of the cue kinds)
    and keep the rows of the rollouts that pass (or, with ``expected`` = ``{task_id: labels}``, that carry exactly
    those turn labels: a scripted failure), in task order, then by cue state. ``setup()`` ->
    ``(worker, batch, scripted_llm)``. Returns ``(rows, rejected)``."""
    from seal_verl.verl_glue.agent_loop import set_state_source

    async def go():
        worker, batch, llm = setup()
        gens = []
        try:
            for subset in subsets:
                set_state_source(cue_state(subset))
                llm.reset()
                gens.append((tuple(subset), await worker.generate_sequences(batch)))
        finally:
            set_state_source(None)
        return gens

    rows, failed = [], []
    for subset, gen in run_loop(go):
        rows.extend(rows_of(gen, subset, failed, expected))
    rows.sort(key=lambda r: (task_ids.index(r["task_id"]), len(r["interface"]), r["interface"]))
    return rows, failed


def rows_of(gen, subset: tuple, failed: list, expected: Optional[dict] = None) -> list[dict]:
    """The training rows of an agent-loop output ``gen`` rendered under the cue kinds ``subset``: per rollout that
    passes (or carries ``expected[task_id]``'s labels) ``input_ids``, ``labels`` (-100 except generated tokens)
    and token counts; the others are described in ``failed``."""
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


def render_scripted(target: Target, model: str, task_ids: list[str], out: str, plan,
                    subsets: Sequence[tuple[str, ...]] = ((),), expected: Optional[dict] = None
                    ) -> tuple[list[dict], list[str]]:
    """Rows of the scripted rollouts ``plan(task)`` -> ``Plan`` of every task, played through the training loop
    under each cue subset in ``subsets``; kept when the rollout passes or, with ``expected``
    (``{task_id: labels}``), when it carries exactly those labels. Returns ``(rows, rejected)``."""
    from seal_verl import dry_run as dr

    env = dr.environment(target.env)
    tasks = {t: env.load_task(t) for t in task_ids}

    def factory(tok):
        return dr.ScriptedLLM(tok, tasks, default=plan, env=target.env)

    return render_under_cue_states(lambda: agent_loop_setup(target, model, task_ids, factory, 1, out), task_ids,
                                   subsets, expected)


def ground_truth_rows(target: Target, model: str, task_ids: list[str], out: str,
                      subsets: Sequence[tuple[str, ...]] = ((),), hint: str = "") -> list[dict]:
    """Rows of every task's ground truth under each cue subset; raises :class:`WarmStartError` (naming the run's
    budgets, then ``hint``) when a ground-truth rollout does not pass: the model could not learn it."""
    from seal_verl import dry_run as dr

    book = dr.PlanBook("json", 0, env=target.env)
    rows, failed = render_scripted(target, model, task_ids, out, lambda task: book.get(task, "pass"), subsets)
    if failed:
        s = target.settings
        raise WarmStartError(
            f"the ground-truth trajectory of these {target.env} tasks does not pass under the budgets of the "
            f"{target.run} run ({os.path.relpath(s.agent_loops)}; prompt {s.prompt_length}, response "
            f"{s.response_length} tokens), so the model cannot learn it: {'; '.join(failed[:4])}.{hint}")
    return rows


# ------------------------------------------------------------------------------------------------ sampling client


class HFSampler:
    """Stands in for verl's server client with a real model: ``generate`` samples with transformers on CPU at the
    request's temperature / top-p / top-k and ``max_tokens``, stopping at ``<|im_end|>`` as vLLM would.

    Like vLLM's prefix caching, it keeps the key/value cache of recent sequences and reuses the longest one that
    starts the new prompt: every rollout of a task shares its first prompt, and each later call of a rollout
    extends the previous one, so only the new tokens are computed."""

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

        from seal_verl.verl_glue.in_process import token_output

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
        return token_output(new, [0.0] * len(new) if sampling_params.get("logprobs") else None, 0)


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

    gen = run_loop(go)
    result: dict[str, dict] = {t: {"scores": [], "labels": []} for t in task_ids}
    for i in range(len(gen)):
        tid = str(gen.non_tensor_batch["task_id"][i])
        result[tid]["scores"].append(float(gen.non_tensor_batch["score"][i]))
        result[tid]["labels"].append(json.loads(str(gen.non_tensor_batch["seal_labels"][i])))
    for r in result.values():
        r["pass_rate"] = sum(r["scores"]) / max(len(r["scores"]), 1)
    return result


def pass_rates(target: Target, model_dir: str, task_ids: list[str], samples: int, seed: int, out: str,
               greedy: bool = False) -> dict[str, dict]:
    """Per task: ``samples`` rollouts sampled from ``model_dir`` (the training loop at the run's temperature, or
    the evaluation loop greedily), graded by the real reward function -> ``{"pass_rate", "scores", "labels"}``."""
    loop = target.loops[1] if greedy else target.loops[0]
    over = ["actor_rollout_ref.rollout.temperature=0"] if greedy else []

    def setup(factory):
        worker, batch, _ = agent_loop_setup(target, model_dir, task_ids, factory, samples, out, loop, over)
        return worker, batch

    return sampled_pass_rates(model_dir, task_ids, seed, setup)


def mean_pass_rate(rates: dict) -> Optional[float]:
    return sum(r["pass_rate"] for r in rates.values()) / len(rates) if rates else None


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
    The first row of each task is what the rule measures (the ground truth under the first interface rendered).
    Returns the epoch log."""
    import random

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainerCallback, TrainingArguments

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
        """Item i: a row of the i-th task still being trained (cycling over them), drawn at random (seeded) among
        the task's rows each time it is read. The length stays one item per task, so an epoch is the same number of
        optimizer steps whatever is left."""

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


# ------------------------------------------------------------------------------------------------ cache and record


def file_digest(path: str) -> str:
    """SHA-256 of a file (a source file's digest goes into the fingerprint of what it builds)."""
    from seal_verl.shipped_models import file_sha256

    return file_sha256(path)


def fingerprint(base: str, rows: list[dict], params: dict, code: Sequence[str] = ()) -> str:
    """Digest of every input of a warm start: the rendered token rows, the base model's files, the settings, this
    file's code and the files in ``code`` (the warm start's own module)."""
    h = hashlib.sha256()
    h.update(json.dumps({"params": params, "rows": [[r["input_ids"], r["labels"]] for r in rows]}).encode())
    for name in sorted(os.listdir(base)):
        p = os.path.join(base, name)
        if os.path.isfile(p) and not name.startswith("."):
            h.update(name.encode() + file_digest(p).encode())
    for path in (os.path.abspath(__file__), *code):
        h.update(file_digest(path).encode())
    return h.hexdigest()


def read_info(out: str) -> Optional[dict]:
    """The record ``out/warm_start.json``, or None when there is none (or it cannot be read)."""
    path = os.path.join(out, INFO_FILE)
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            info = json.load(f)
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) else None


def write_info(out: str, info: dict) -> None:
    tmp = os.path.join(out, INFO_FILE) + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(info, f, indent=1)
    os.replace(tmp, os.path.join(out, INFO_FILE))


_SHORT = {"invalid_tool_call": "inv", "argument_mismatch": "arg", "state_mismatch": "state",
          "recovery_failure": "recov", "missing_tool_call": "miss", "response_mismatch": "resp",
          "spurious_tool_call": "spur", "pass": "ok", "checker_error": "err"}


def short_label(label: str) -> str:
    return _SHORT.get(label, label)


def format_pass_table(rates: dict[str, dict]) -> str:
    """One line per task: its pass rate and the labels of its sampled rollouts; then the mean."""
    lines = [f"{'task':<28} pass rate  labels of the sampled rollouts"]
    for tid, r in rates.items():
        labels = "; ".join(",".join(short_label(x) for x in ls) for ls in r["labels"])
        lines.append(f"{tid:<28} {r['pass_rate']:9.2f}  {labels}")
    mean = sum(r["pass_rate"] for r in rates.values()) / max(len(rates), 1)
    mixed = sum(1 for r in rates.values() if 0 < r["pass_rate"] < 1)
    lines.append(f"{'mean':<28} {mean:9.2f}  ({mixed}/{len(rates)} tasks pass in some rollouts and fail in others)")
    return "\n".join(lines)


def check_arguments(epochs: Any, lr: Any, samples: Any, target: Any = None) -> None:
    """Raise :class:`WarmStartError` with one line for a setting a warm start cannot use (``target`` None: the
    stage has no stopping target of its own)."""
    for name, value, low in (("epochs", epochs, 1), ("samples", samples, 0)):
        if isinstance(value, bool) or int(value) != value or value < low:
            raise WarmStartError(f"--{name} must be an integer >= {low}, got {value!r}")
    if not (lr > 0):
        raise WarmStartError(f"--lr must be positive, got {lr!r}")
    if target is not None and not (0 < target < 1):
        raise WarmStartError(f"--target must be in (0, 1), got {target!r}")


def check_base(base: str) -> None:
    if not os.path.isfile(os.path.join(base, "config.json")):
        raise WarmStartError(f"--base {base}: not a model folder (no config.json)")


def build(out: str, base: str, rows: list[dict], params: dict, *, tasks: list[str], what: str,
          measure: Callable[[str], dict], report: Callable[[dict], str], started: float, force: bool = False,
          code: Sequence[str] = (), record: Optional[dict] = None, row_keys: Sequence[str] = ROW_KEYS) -> dict:
    """Fine-tune ``base`` on ``rows`` into ``out`` unless ``out`` holds the model of these exact inputs already;
    returns the record written to ``out/warm_start.json``.

    ``params``: the settings (``epochs``, ``lr``, ``seed``, ``target`` drive :func:`fine_tune`; all of them go into
    the fingerprint with ``code``, the warm start's own source files); ``what``: the rows in words for the console;
    ``measure(out)`` -> the measured part of the record (``pass_rates`` and anything else; it may raise
    :class:`WarmStartError`); ``report(record)`` -> the console lines that give the measurement; ``started``: when
    the warm start began (before rendering); ``record``: further keys of the record."""
    fp = fingerprint(base, rows, params, code)
    info = read_info(out)
    if not force and info and info.get("fingerprint") == fp and os.path.isfile(os.path.join(out, "config.json")):
        print(f"[warm-start] cached: {out} (same inputs, fingerprint {fp[:12]})", flush=True)
        text = report(info)
        if text:
            print(text, flush=True)
        return dict(info, out=os.path.abspath(out))
    print(f"[warm-start] {what}: {sum(r['trained_tokens'] for r in rows)} trained tokens, "
          f"{min(len(r['input_ids']) for r in rows)}-{max(len(r['input_ids']) for r in rows)} tokens per row",
          flush=True)
    t1 = time.time()
    for name in os.listdir(out):
        if name in REBUILT_FILES:
            os.remove(os.path.join(out, name))
    log = fine_tune(base, rows, out, params["epochs"], params["lr"], params["seed"], params["target"])
    first = {}
    for r in rows:
        first.setdefault(r["task_id"], r)
    t2 = time.time()
    measured = measure(out)
    t3 = time.time()
    rates = measured.get("pass_rates") or {}
    info = {
        "fingerprint": fp, "out": os.path.abspath(out), "base": os.path.abspath(base), **(record or {}),
        "tasks": list(tasks), "params": params, "trainer": "transformers.Trainer",
        "rows": [{k: r.get(k) for k in row_keys} for r in rows],
        "epochs_run": log[-1]["epoch"], "log": log,
        # the task order of the log's NLLs is the order of the tasks' first rows
        "predicted_pass_rates": {t: round(math.exp(-x), 4) for t, x in zip(first, log[-1]["nll"])},
        **measured, "pass_rates": rates, "mean_pass_rate": mean_pass_rate(rates),
        "seconds": {"render": round(t1 - started, 1), "fine_tune": round(t2 - t1, 1), "pass_rate": round(t3 - t2, 1)},
    }
    write_info(out, info)
    text = report(info)
    if text:
        print(text, flush=True)
    print(f"[warm-start] done in {t3 - started:.0f} s (render {t1 - started:.0f} s, fine-tune {t2 - t1:.0f} s, "
          f"pass rates {t3 - t2:.0f} s): {out}", flush=True)
    return info


# ------------------------------------------------------------------------------------------------ command line


def cli(argv: Optional[list[str]], prog: str, doc: str, build_stage: Callable[[argparse.Namespace], Any],
        defaults: dict, base_help: str, target: bool = True,
        more_arguments: Optional[Callable[[argparse.ArgumentParser], None]] = None) -> int:
    """The command line of a warm start: ``OUT --base MODEL`` and its fine-tuning options (``--target`` only where
    the stage has a stopping target of its own; ``more_arguments(parser)`` adds the stage's own);
    ``build_stage(args)`` builds it. A base that is not a model folder is a usage error (exit 2); an error while
    building is one line and exit 2."""
    p = argparse.ArgumentParser(prog=prog, description=" ".join(doc.strip().split("\n\n")[0].split()))
    p.add_argument("out", help="folder of the warm-started model (reused when its inputs are unchanged)")
    p.add_argument("--base", required=True, help=base_help)
    if more_arguments:
        more_arguments(p)
    p.add_argument("--epochs", type=int, default=defaults["epochs"],
                   help="at most this many passes over the tasks (default: %(default)s)")
    if target:
        p.add_argument("--target", type=float, default=defaults["target"],
                       help="a task leaves the training mix once its predicted pass rate, exp(-NLL) of its "
                            "ground-truth trajectory, reaches this; training stops when every task has "
                            "(default: %(default)s)")
    p.add_argument("--lr", type=float, default=defaults["lr"], help="AdamW learning rate (default: %(default)s)")
    p.add_argument("--samples", type=int, default=defaults["samples"],
                   help="rollouts per task for the pass rate after fine-tuning; 0 skips it (default: %(default)s)")
    p.add_argument("--seed", type=int, default=defaults["seed"])
    p.add_argument("--force", action="store_true", help="rebuild even if the cached model has the same inputs")
    args = p.parse_args(argv)
    if not os.path.isfile(os.path.join(args.base, "config.json")):
        p.error(f"--base {args.base}: not a model folder (no config.json)")
    from seal_verl.dry_run import quiet_libraries

    quiet_libraries()
    try:
        build_stage(args)
    except (WarmStartError, ValueError, FileNotFoundError) as e:
        print(f"warm-start: error: {e}", file=sys.stderr)
        return 2
    return 0
