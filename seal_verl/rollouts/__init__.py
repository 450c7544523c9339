"""In-process rollouts through verl's real agent loop: what the dry run, the warm starts and the recipe tools share.

- :mod:`.environments`: the environment by name and its agent loops' names;
- :mod:`.setup`: the tiny model, the agent-loop YAML, verl's config, workers and batches (through the glue,
  ``seal_verl.verl_glue.in_process``), dataset rows and parquet files, quiet libraries;
- :mod:`.plans` and :mod:`.scripted_llm`: the scripted assistant, planned messages per task (the ground truth or a
  failure whose labels the environment's verifier and Psi confirm) answering verl's generate calls.

Nothing here imports verl itself, and nothing here imports the dry run (``seal_verl.dry_run``), which drives it.
"""

from .environments import (ABSTAIN_TEXT, CLOSING_TEXT, DEFAULT_ENV, EVAL_LOOP, GENERIC_EVAL_LOOP, GENERIC_TRAIN_LOOP,
                           TRAIN_LOOP, environment, loop_names)
from .plans import EARLY_MIX, LATE_MIX, TARGETS, Plan, PlanBook, draw_plans, find_plan, mix_at, replay_plan
from .scripted_llm import ScriptedLLM
from .setup import (InProcessRewardWorker, dataset_rows, hint_flags, load_batch, make_worker, quiet_libraries,
                    reward_fn_path, rollout_texts, tiny_model, verl_config, write_agent_loop_yaml, write_parquet)

__all__ = [
    "ABSTAIN_TEXT", "CLOSING_TEXT", "DEFAULT_ENV", "EVAL_LOOP", "GENERIC_EVAL_LOOP", "GENERIC_TRAIN_LOOP", "TRAIN_LOOP",
    "EARLY_MIX", "LATE_MIX", "TARGETS", "InProcessRewardWorker", "Plan", "PlanBook", "ScriptedLLM", "dataset_rows",
    "draw_plans", "environment", "find_plan", "hint_flags", "load_batch", "loop_names", "make_worker", "mix_at",
    "quiet_libraries", "replay_plan", "reward_fn_path", "rollout_texts", "tiny_model", "verl_config",
    "write_agent_loop_yaml", "write_parquet",
]
