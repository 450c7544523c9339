"""Training rows rendered by verl's real agent loop: a scripted client answers with a plan per task (the ground
truth, or a failing plan whose turn labels are known), the environment executes the calls and the real
observations come back. A row is the token sequence the RL run sees: prompt + response tokens, loss only on the
tokens the model generated (``response_mask`` 1). A rollout of the ground truth that does not pass (or of a
failing plan whose labels differ from the plan's) gives no row and is reported."""

from __future__ import annotations

import asyncio
import json
import os
from typing import Optional, Sequence

from seal_verl.core import extras as X
from seal_verl.models.warm_start.target import Target, WarmStartError


def loop_config(target: Target, model: str, rollouts: int, loop: Optional[str] = None,
                overrides: Optional[list[str]] = None):
    """verl's config for the in-process agent loop: the run's lengths, agent-loop file and sampling, ``loop`` (the
    training loop unless named) as the default loop, the environment's reward function, default SEAL settings."""
    from seal_verl import rollouts as dr
    s = target.settings
    return dr.verl_config(model, agent_loop_yaml=s.agent_loops, rollouts=rollouts, prompt_length=s.prompt_length,
                          response_length=s.response_length, reward_path=dr.reward_fn_path(target.env), seal={},
                          overrides=[f"actor_rollout_ref.rollout.temperature={s.temperature}",
                                     f"actor_rollout_ref.rollout.top_p={s.top_p}",
                                     f"actor_rollout_ref.rollout.agent.default_agent_loop={loop or target.loops[0]}"]
                          + list(overrides or []))


def agent_loop_setup(target: Target, model: str, task_ids: list[str], llm_factory, rollouts: int, out: str,
                     loop: Optional[str] = None, overrides: Optional[list[str]] = None, state_source=None):
    """verl's ``AgentLoopWorker`` in this process over ``task_ids`` (rows of ``loop``, the training loop unless
    named), with the client ``llm_factory(tokenizer)`` and the closed-loop ``state_source`` its training loops
    read (``make_worker``). Returns ``(worker, batch, llm)``; the task rows are written to
    ``out/warm_start_<loop>.parquet``."""
    from transformers import AutoTokenizer

    from seal_verl import rollouts as dr
    loop = loop or target.loops[0]
    config = loop_config(target, model, rollouts, loop, overrides)
    tokenizer = AutoTokenizer.from_pretrained(model)
    llm = llm_factory(tokenizer)
    worker = dr.make_worker(config, llm, state_source=state_source)
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
    from seal_verl.core.interface import CUE_KINDS, InterfaceConfig, InterfaceState
    from seal_verl.core.loop import ClosedLoopState, SealSwitches
    from seal_verl.core.weighting import WeightingConfig

    base = ClosedLoopState.initial(SealSwitches(), InterfaceConfig(), WeightingConfig())
    return ClosedLoopState(step=0, interface=InterfaceState(
        active={k: k in active for k in CUE_KINDS}, streak_below={k: 0 for k in CUE_KINDS}, step=0),
        rho=dict(base.rho), base_rho=dict(base.base_rho))


def render_under_cue_states(setup, task_ids: list[str], subsets: Sequence[tuple[str, ...]],
                            expected: Optional[dict] = None) -> tuple[list[dict], list[str]]:
    """Run the scripted trajectories through the real agent loop once per cue subset (any subsets of the cue kinds)
    and keep the rows of the rollouts that pass (or, with ``expected`` = ``{task_id: labels}``, that carry exactly
    those turn labels: a scripted failure), in task order, then by cue state. ``setup(state_source)`` ->
    ``(worker, batch, scripted_llm)``, the worker's training loops reading ``state_source``. Returns
    ``(rows, rejected)``."""
    current: dict = {}

    async def go():
        worker, batch, llm = setup(lambda step: current["state"])
        gens = []
        for subset in subsets:
            current["state"] = cue_state(subset)
            llm.reset()
            gens.append((tuple(subset), await worker.generate_sequences(batch)))
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
        trace = json.loads(gen.non_tensor_batch[X.TRACE][i])
        if (float(gen.non_tensor_batch[X.SCORE][i]) != 1.0 if expected is None else
                json.loads(str(gen.non_tensor_batch[X.LABELS][i])) != expected[trace["task_id"]]):
            failed.append(f"{trace['task_id']} (labels {gen.non_tensor_batch[X.LABELS][i]}, cues {subset})")
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
    from seal_verl import rollouts as dr
    env = dr.environment(target.env)
    tasks = {t: env.load_task(t) for t in task_ids}

    def factory(tok):
        return dr.ScriptedLLM(tok, tasks, default=plan, env=target.env)

    return render_under_cue_states(lambda source: agent_loop_setup(target, model, task_ids, factory, 1, out,
                                                                   state_source=source), task_ids,
                                   subsets, expected)


def ground_truth_rows(target: Target, model: str, task_ids: list[str], out: str,
                      subsets: Sequence[tuple[str, ...]] = ((),), hint: str = "") -> list[dict]:
    """Rows of every task's ground truth under each cue subset; raises :class:`WarmStartError` (naming the run's
    budgets, then ``hint``) when a ground-truth rollout does not pass: the model could not learn it."""
    from seal_verl import rollouts as dr
    book = dr.PlanBook("json", 0, env=target.env)
    rows, failed = render_scripted(target, model, task_ids, out, lambda task: book.get(task, "pass"), subsets)
    if failed:
        s = target.settings
        raise WarmStartError(
            f"the ground-truth trajectory of these {target.env} tasks does not pass under the budgets of the "
            f"{target.run} run ({os.path.relpath(s.agent_loops)}; prompt {s.prompt_length}, response "
            f"{s.response_length} tokens), so the model cannot learn it: {'; '.join(failed[:4])}.{hint}")
    return rows
