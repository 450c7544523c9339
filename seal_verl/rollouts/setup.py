"""Set-up of in-process rollouts (the dry run, the warm starts, the recipe tools, the tests): the tiny model, the
agent-loop YAML, verl's config, dataset rows and parquet files, quiet libraries, and reading a rollout back.

The parts that touch verl (its config, dataset, agent-loop and reward workers) live in the glue
(``seal_verl.verl_glue.in_process``) and are re-exported here; this module imports no verl itself.
"""

from __future__ import annotations

import os
from typing import Any, Optional

from seal_verl.verl_glue.in_process import InProcessRewardWorker, compose_config, load_batch, make_worker

from .environments import DEFAULT_ENV, TRAIN_LOOP, environment, loop_names

__all__ = ["InProcessRewardWorker", "dataset_rows", "hint_flags", "load_batch", "make_worker", "quiet_libraries",
           "reward_fn_path", "rollout_texts", "tiny_model", "verl_config", "write_agent_loop_yaml", "write_parquet"]


def tiny_model(path: str) -> str:
    """The tiny random Qwen2 at ``path`` (made there once)."""
    from seal_verl.models.tiny_model import make_tiny_qwen

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
    """verl's own ``ppo_trainer`` config with what the dry run and the tests need (the training loop as the
    default agent loop, the BFCL reward function unless another is named)."""
    return compose_config(model_path, default_agent_loop=TRAIN_LOOP, reward_path=reward_path or reward_fn_path(),
                          agent_loop_yaml=agent_loop_yaml, rollouts=rollouts, prompt_length=prompt_length,
                          response_length=response_length, seal=seal, overrides=overrides,
                          reward_kwargs=reward_kwargs)


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
    from seal_verl.core.observation import CUE_MARKER as marker

    out = []
    for i in range(len(gen)):
        prompt, model, obs = rollout_texts(gen, tokenizer, i)
        out.append(marker in prompt or marker in model or marker in obs)
    return out


def quiet_libraries() -> None:
    """Silence per-step chatter of the libraries (dataset progress bars, tokenizer length warnings); used by the
    dry run, the warm starts and the recipe tools that drive the same libraries."""
    import logging

    try:
        import datasets

        datasets.disable_progress_bars()
        datasets.utils.logging.set_verbosity_error()
    except Exception:  # noqa: BLE001 - cosmetic only
        pass
    try:
        import transformers

        transformers.utils.logging.set_verbosity_error()
    except Exception:  # noqa: BLE001
        pass
    logging.getLogger("verl").setLevel(logging.WARNING)
