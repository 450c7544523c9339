"""verl run in this process, for the dry run and the tests: config, batches, agent-loop and reward workers.

Everything here is verl's own code path (Hydra composition of ``ppo_trainer``, ``RLHFDataset`` + ``collate_fn``,
``AgentLoopWorker``, ``RewardLoopWorker``, the legacy trainer's ``compute_advantage``), set up to run in this
process on CPU. It is glue so that the dry run, which drives it, imports no verl itself.
"""

from __future__ import annotations

import os
from typing import Any, Optional

from seal_verl.verl_glue.rollout_cues import STATE_SOURCE_ATTR
from seal_verl.verl_glue.step import StepResult, seal_step, zero_excluded_rows


def compose_config(model_path: str, *, default_agent_loop: str, reward_path: str,
                   agent_loop_yaml: Optional[str] = None, rollouts: int = 4, prompt_length: int = 16384,
                   response_length: int = 8192, seal: Optional[dict] = None, overrides: Optional[list[str]] = None,
                   reward_kwargs: Optional[dict] = None):
    """verl's own ``ppo_trainer`` config (Hydra compose) with what the dry run and the tests need: the legacy
    trainer layout, CPU, one in-process agent-loop worker and reward worker, ``seal_grpo``."""
    import verl
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf, open_dict

    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    ov = [
        f"actor_rollout_ref.model.path={model_path}",
        "actor_rollout_ref.rollout.name=vllm",
        f"actor_rollout_ref.rollout.n={rollouts}",
        "actor_rollout_ref.rollout.agent.num_workers=1",
        f"actor_rollout_ref.rollout.agent.default_agent_loop={default_agent_loop}",
        f"data.max_prompt_length={prompt_length}",
        f"data.max_response_length={response_length}",
        "data.dataloader_num_workers=0",
        "reward.num_workers=1",
        f"reward.custom_reward_function.path={reward_path}",
        "reward.custom_reward_function.name=compute_score",
        "algorithm.adv_estimator=seal_grpo",
        "trainer.use_v1=false",
        "trainer.project_name=seal_dry_run",
        "trainer.experiment_name=dry",
        "trainer.device=cpu",
    ]
    if agent_loop_yaml:
        ov.append(f"actor_rollout_ref.rollout.agent.agent_loop_config_path={agent_loop_yaml}")
    ov += list(overrides or [])
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=ov)
    with open_dict(cfg):
        cfg.seal = OmegaConf.create(seal if seal is not None else {})
        if reward_kwargs:
            cfg.reward.custom_reward_function.reward_kwargs = OmegaConf.create(dict(reward_kwargs))
    return cfg


def load_batch(parquet: str, config, tokenizer, n: int, uid_prefix: str = ""):
    """Rows of ``parquet`` through verl's RLHFDataset + collate_fn into a DataProto repeated ``n`` times."""
    import numpy as np
    from verl import DataProto
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):  # RLHFDataset prints its class and length
        ds = RLHFDataset(data_files=[parquet], tokenizer=tokenizer, config=config.data, processor=None)
    batch = DataProto.from_single_dict(collate_fn([ds[i] for i in range(len(ds))]))
    batch.non_tensor_batch["uid"] = np.array([f"{uid_prefix}{i}" for i in range(len(batch))], dtype=object)
    return batch.repeat(repeat_times=n, interleave=True)


class _RemoteMethod:
    def __init__(self, fn):
        self._fn = fn

    def remote(self, *args, **kwargs):
        return self._fn(*args, **kwargs)


class InProcessRewardWorker:
    """verl's real ``RewardLoopWorker`` in this process, shaped like its Ray handle (``.compute_score.remote``).

    Each call gets a pickled copy of the data, as a Ray call would. This matters: verl's ``NaiveRewardManager``
    updates the row's ``extra_info`` dict in place with the rollout's ``extra_fields``, and the ``rollout.n``
    copies of a row share one dict object; without the copy, concurrent rollouts of one prompt would grade
    each other's traces.
    """

    def __init__(self, config):
        from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

        self.worker = RewardLoopWorker(config, None)
        self.compute_score = _RemoteMethod(self._compute_score)

    async def _compute_score(self, data):
        import pickle

        return await self.worker.compute_score(pickle.loads(pickle.dumps(data)))


class InProcessServer:
    """The server client of an in-process agent-loop worker: the caller's LLM stand-in (every attribute read and
    written is the LLM's), carrying the closed-loop state source its training loops read (``rollout_cues``)."""

    def __init__(self, llm: Any, state_source: Any):
        object.__setattr__(self, "_llm", llm)
        object.__setattr__(self, STATE_SOURCE_ATTR, state_source)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._llm, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._llm, name, value)


def make_worker(config, llm, reward: bool = True, state_source: Any = None):
    """verl's real ``AgentLoopWorker`` in this process, with ``llm`` as its server client. Call with the
    event loop the rollouts will run on set as current (verl's loops capture it).

    Args:
        reward: give the worker verl's reward loop (in-process) so rollouts come back scored.
        state_source: the closed-loop state the training loops read, in place of the state actor: a
            ``ClosedLoopState``, a payload dict (``{"state": ..., "global_step": ...}``), or a callable
            ``(global_step or None) -> either`` (read at the start of every rollout); None: the state actor when
            Ray runs, else the initial state of the config's ``seal`` section.
    """
    import verl  # noqa: F401 - loads the seal plugin (registers the agent loops)
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

    from seal_verl.verl_glue import agent_loop  # noqa: F401 - registration also without the entry point

    import contextlib
    import io

    handles = [InProcessRewardWorker(config)] if reward else None
    server = llm if state_source is None else InProcessServer(llm, state_source)
    with contextlib.redirect_stdout(io.StringIO()):  # verl prints the dataset class it picked
        return AgentLoopWorker(config, server, None, handles)


def token_output(ids: list, log_probs: Optional[list], global_steps: int):
    """verl's ``TokenOutput`` of one scripted generation (the server reply an agent loop reads)."""
    from verl.workers.rollout.replica import TokenOutput

    return TokenOutput(token_ids=ids, log_probs=log_probs, stop_reason="completed", num_preempted=0,
                       extra_fields={"global_steps": global_steps, "min_global_steps": global_steps,
                                     "max_global_steps": global_steps})


def train_step(driver: Any, gen: Any, uids: Any, config: Any, tokenizer: Any, step: int) -> StepResult:
    """One SEAL step on an agent-loop output ``gen`` in the legacy trainer's layout (extras in
    ``non_tensor_batch``), through verl's own ``compute_advantage``; the step is closed as training step
    ``step + 1`` (its record in the result)."""
    from verl.trainer.ppo import ray_trainer

    from seal_verl.verl_glue.batch_read import data_proto_advantages, read_data_proto

    gen.batch["token_level_rewards"] = gen.batch["rm_scores"]
    gen.non_tensor_batch["uid"] = uids
    read = read_data_proto(gen, tokenizer)

    def advantage():
        return ray_trainer.compute_advantage(gen, adv_estimator=config.algorithm.adv_estimator,
                                             norm_adv_by_std_in_grpo=True, config=config.algorithm)

    return seal_step(driver, read, advantage, step0=step, adv_estimator=config.algorithm.adv_estimator,
                     exclude=zero_excluded_rows, advantages=data_proto_advantages, close_at=step + 1)
