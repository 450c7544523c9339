"""Pass rates of a model: rollouts sampled with transformers on CPU (:class:`HFSampler` in place of verl's server
client) through the same agent loop, graded by the real reward function."""

from __future__ import annotations

import json
from typing import Any, Optional

from seal_verl.core import extras as X
from seal_verl.models.warm_start.render import agent_loop_setup, run_loop
from seal_verl.models.warm_start.target import Target


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
        result[tid]["scores"].append(float(gen.non_tensor_batch[X.SCORE][i]))
        result[tid]["labels"].append(json.loads(str(gen.non_tensor_batch[X.LABELS][i])))
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
