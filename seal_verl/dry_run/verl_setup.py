"""verl plumbing of the dry run and the tests: the tiny model, verl's config, dataset rows, in-process workers.

Everything here is verl's own code path (Hydra composition of ``ppo_trainer``, ``RLHFDataset`` + ``collate_fn``,
``AgentLoopWorker``, ``RewardLoopWorker``), set up to run in this process on CPU.
"""

from __future__ import annotations

import os
from typing import Any, Optional

from .environments import DEFAULT_ENV, TRAIN_LOOP, environment, loop_names


def tiny_model(path: str) -> str:
    """The tiny random Qwen2 at ``path`` (made there once)."""
    from seal_verl.tiny_model import make_tiny_qwen

    if os.path.exists(os.path.join(path, "config.json")) and os.path.exists(os.path.join(path, "tokenizer.json")):
        return os.path.abspath(path)
    return make_tiny_qwen(path)


def reward_fn_path(env: Optional[str] = None) -> str:
    """The reward function file: ``bfcl_reward.py`` for BFCL (its recipes' file), else the generic one."""
    import reward_fns

    name = "bfcl_reward.py" if (env or DEFAULT_ENV) == "bfcl" else "seal_reward.py"
    return os.path.join(os.path.dirname(os.path.abspath(reward_fns.__file__)), name)


def write_agent_loop_yaml(path: str, call_format: str = "json", env: Optional[str] = None,
                          **loop_kwargs: Any) -> str:
    """The agent-loop YAML listing the training and evaluation loops of ``env`` with the given init kwargs.

    The generic loops also get ``env`` as the default of rows that name none (and check the call format against
    it at start-up)."""
    import yaml

    entries = []
    bfcl = (env or DEFAULT_ENV) == "bfcl"
    classes = ("SealBFCLAgentLoop", "BFCLAgentLoop") if bfcl else ("SealEnvAgentLoop", "EnvAgentLoop")
    for name, cls in zip(loop_names(env), classes):
        entry = {"name": name, "_target_": f"seal_verl.verl_glue.agent_loop.{cls}", "call_format": call_format}
        if not bfcl:
            entry["env"] = env
        entry.update({k: v for k, v in loop_kwargs.items() if v is not None})
        entries.append(entry)
    with open(path, "w") as f:
        yaml.safe_dump(entries, f, sort_keys=False)
    return path


def verl_config(model_path: str, *, agent_loop_yaml: Optional[str] = None, rollouts: int = 4,
                prompt_length: int = 16384, response_length: int = 8192, reward_path: Optional[str] = None,
                seal: Optional[dict] = None, overrides: Optional[list[str]] = None,
                reward_kwargs: Optional[dict] = None):
    """verl's own ``ppo_trainer`` config (Hydra compose) with what the dry run and the tests need."""
    import verl
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf, open_dict

    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    ov = [
        f"actor_rollout_ref.model.path={model_path}",
        "actor_rollout_ref.rollout.name=vllm",
        f"actor_rollout_ref.rollout.n={rollouts}",
        "actor_rollout_ref.rollout.agent.num_workers=1",
        f"actor_rollout_ref.rollout.agent.default_agent_loop={TRAIN_LOOP}",
        f"data.max_prompt_length={prompt_length}",
        f"data.max_response_length={response_length}",
        "data.dataloader_num_workers=0",
        "reward.num_workers=1",
        f"reward.custom_reward_function.path={reward_path or reward_fn_path()}",
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


def dataset_rows(task_ids: list[str], agent_name: str, split: str, call_format: str = "json",
                 env: Optional[str] = None) -> list[dict]:
    """Parquet rows for ``task_ids``, built by the environment's row builder (BFCL: ``seal-verl prepare-data``'s),
    with ``agent_name`` set as asked."""
    rows = environment(env).dataset_rows(list(task_ids), split, call_format)
    for row in rows:
        row["agent_name"] = agent_name
    return rows


def write_parquet(rows: list[dict], path: str) -> str:
    import pandas as pd

    pd.DataFrame(rows).to_parquet(path)
    return path


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


def make_worker(config, llm, reward: bool = True):
    """verl's real ``AgentLoopWorker`` in this process, with ``llm`` as its server client. Call with the
    event loop the rollouts will run on set as current (verl's loops capture it)."""
    import verl  # noqa: F401 - loads the seal plugin (registers the agent loops)
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

    from seal_verl.verl_glue import agent_loop  # noqa: F401 - registration also without the entry point

    import contextlib
    import io

    handles = [InProcessRewardWorker(config)] if reward else None
    with contextlib.redirect_stdout(io.StringIO()):  # verl prints the dataset class it picked
        return AgentLoopWorker(config, llm, None, handles)


def rollout_texts(gen, tokenizer, i: int) -> tuple[str, str, str]:
    """(prompt, model part, observation part) of row ``i`` of an agent-loop output, decoded with special tokens."""
    p = gen.batch["prompts"][i]
    n = p.shape[0]
    att = gen.batch["attention_mask"][i]
    r = gen.batch["responses"][i]
    valid = att[n:].bool()
    m = gen.batch["response_mask"][i].bool()
    return (tokenizer.decode(p[att[:n].bool()]), tokenizer.decode(r[valid & m]), tokenizer.decode(r[valid & ~m]))


def hint_flags(gen, tokenizer) -> list[bool]:
    """Per row: does any cue marker appear anywhere in the rendered tokens (prompt or response)?"""
    from env_wrappers.protocol import CUE_MARKER as marker

    out = []
    for i in range(len(gen)):
        prompt, model, obs = rollout_texts(gen, tokenizer, i)
        out.append(marker in prompt or marker in model or marker in obs)
    return out
