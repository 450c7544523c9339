"""``seal-verl dry-run``: SEAL's whole closed loop on CPU, everything real except generation and the optimizer.

What runs, per training step ``t``:

1. a batch of training tasks of the environment (``DryRunConfig.env``, any registered one; BFCL by default:
   the SEAL split's train half) becomes parquet rows and goes through verl's real ``RLHFDataset`` and
   ``collate_fn`` into a ``DataProto``, repeated ``rollouts`` times (GRPO groups);
2. verl's real ``AgentLoopWorker`` (in-process) runs the training agent loop on every row (``seal_bfcl``;
   ``seal_env`` for other environments): a real episode of the environment under the real
   :class:`~seal_verl.core.observation.SealObservationWrapper` with Omega_t, prompts rendered by verl's
   Continuous Token builder with the tiny local model's chat template;
3. the LLM is a :class:`ScriptedLLM`: it answers verl's ``generate(request_id, prompt_ids=...,
   sampling_params=...)`` with token ids of scripted text (ground-truth calls with injected failures of every
   label, proposed by the environment's ``failure_turns`` and kept only when the real verifier and Psi
   agree), encoded by the tiny model's tokenizer. The failure mix shifts over steps: early steps carry many
   invalid calls and argument errors, later steps mostly pass;
4. verl's real reward loop (``RewardLoopWorker`` + ``NaiveRewardManager``, in-process) calls the project's
   reward function (``reward_fns/bfcl_reward.py``, or ``reward_fns/seal_reward.py`` for other environments)
   with the trace from ``extra_fields``;
5. the trainer's advantage path: the SEAL weights of the glue's :class:`~seal_verl.verl_glue.driver.SealDriver`
   from the reward extras, activated as a ``WeightPlan`` around verl's own ``compute_advantage`` with the
   ``seal_grpo`` estimator (GRPO group normalisation, then ``w_j``);
6. the closed-loop update (``SealDriver.close_step`` -> ``seal_verl.core.loop.closed_loop_step``), the state
   saved to ``state_step_{t}.json``, and handed to the rollout side for step ``t+1`` (the worker's
   ``state_source``, the in-process stand-in for the state actor: ``seal_verl.verl_glue.in_process.make_worker``).

At the end a small validation pass runs the evaluation loop on held-out tasks: no cue, ever.

Run folder: ``state_step_{k}.json`` (ClosedLoopState after step k), ``traces_step_{k}.jsonl`` (per rollout:
trace, labels, reward, w, cue tokens, the scripted plan), ``metrics.jsonl`` (one row per step),
``val_traces.jsonl``, ``config.json``; the tiny model under ``model/`` unless ``--model`` points elsewhere.

The dry run drives the in-process rollout toolbox of :mod:`seal_verl.rollouts` (rows, verl's config and workers,
the scripted assistant), which the warm starts and the recipe tools share; its names are re-exported here.

The scripted LLM finds the task of a request from the request id (the agent loops use
``"<task_id>/<uuid>"``) and the current user turn by locating the task's user-turn texts (the environment's
``user_turn_texts``) in the decoded prompt, so it stays in step with the environment also when a budget ends a turn early.
"""

from __future__ import annotations

from seal_verl.rollouts import (ABSTAIN_TEXT, CLOSING_TEXT, DEFAULT_ENV, EARLY_MIX, EVAL_LOOP, GENERIC_EVAL_LOOP,
                                GENERIC_TRAIN_LOOP, LATE_MIX, TARGETS, TRAIN_LOOP, InProcessRewardWorker, Plan, PlanBook,
                                ScriptedLLM, dataset_rows, draw_plans, environment, find_plan, hint_flags, load_batch,
                                loop_names, make_worker, mix_at, quiet_libraries, replay_plan, reward_fn_path,
                                rollout_texts, tiny_model, verl_config, write_agent_loop_yaml, write_parquet)

from .console import format_row, header_line
from .run import DryRun, DryRunConfig, run_dry

__all__ = [
    "ABSTAIN_TEXT", "CLOSING_TEXT", "DEFAULT_ENV", "EVAL_LOOP", "GENERIC_EVAL_LOOP", "GENERIC_TRAIN_LOOP", "TRAIN_LOOP",
    "EARLY_MIX", "LATE_MIX", "TARGETS", "DryRun", "DryRunConfig", "InProcessRewardWorker", "Plan", "PlanBook",
    "ScriptedLLM", "dataset_rows", "draw_plans", "environment", "find_plan", "format_row", "header_line",
    "hint_flags", "load_batch", "loop_names", "make_worker", "mix_at", "quiet_libraries", "replay_plan",
    "reward_fn_path", "rollout_texts", "run_dry", "tiny_model", "verl_config", "write_agent_loop_yaml",
    "write_parquet",
]
