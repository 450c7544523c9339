"""BFCL V3 multi-turn behind the environment protocol (registered as ``bfcl``).

Thin: tasks come from :mod:`.tasks`, episodes are :class:`.env.BFCLEnv`, prompts from :mod:`.prompts`, and the
verdict with its per-turn checks from :func:`.judge.verify_trace` (BFCL's checker semantics on safe
execution). Row consistency checks live here because only BFCL knows its categories and ground truth. Its own
subcommands of the command line are this room's (:mod:`.commands`: preparing a run); the registry's ``bfcl``
(:mod:`env_wrappers.bfcl.registered`) adds the evaluation's, which this room cannot import (the evaluation
builds on it).
"""

from __future__ import annotations

import json
from typing import Any, Optional

from env_wrappers.protocol import Environment, Verification
from seal_verl.core.trace import Trace

from . import prompts
from .env import MAX_STEPS_PER_TURN, BFCLEnv
from .tasks import CATEGORIES, BFCLTask, load_split, load_tasks


class BFCLEnvironment(Environment):
    """The BFCL V3 multi-turn environment (800 tasks; the SEAL 400/400 split)."""

    name = "bfcl"
    call_formats = prompts.CALL_FORMATS
    max_steps_per_turn = MAX_STEPS_PER_TURN
    categories = CATEGORIES

    def load_task(self, task_id: str) -> BFCLTask:
        return load_tasks([task_id])[task_id]

    def task_ids(self, split: str) -> list[str]:
        ids = load_split().get(split)
        if not isinstance(ids, list):
            raise KeyError(f"the BFCL SEAL split has no {split!r} half (train, eval)")
        return list(ids)

    def category(self, task: BFCLTask) -> str:
        return task.category

    def start(self, task: BFCLTask, *, call_format: str, max_steps_per_turn: Optional[int] = None,
              call_timeout_s: Optional[float] = 10.0) -> BFCLEnv:
        return BFCLEnv(task, call_format=call_format,
                       max_steps_per_turn=MAX_STEPS_PER_TURN if max_steps_per_turn is None else max_steps_per_turn,
                       call_timeout_s=call_timeout_s)

    def initial_messages(self, task: BFCLTask, messages: list[dict], call_format: str):
        return prompts.initial_messages(task, messages, call_format)

    def reveal_messages(self, task: BFCLTask, turn: int, messages: list[dict], revealed_tools: list[dict],
                        call_format: str) -> list[dict]:
        return prompts.reveal_messages(task, turn, messages, revealed_tools, call_format)

    def n_turns(self, task: BFCLTask) -> int:
        return task.n_turns

    def check_row(self, task: BFCLTask, trace: Trace, *, data_source: Any = None, ground_truth: Any = None) -> None:
        if isinstance(data_source, str) and data_source in CATEGORIES and data_source != task.category:
            raise ValueError(f"data_source {data_source!r} does not match task {task.id} ({task.category})")
        _check_ground_truth(task, ground_truth)
        super().check_row(task, trace, data_source=data_source, ground_truth=ground_truth)

    def verify(self, task: BFCLTask, trace: Trace, *, strict_abstention: bool = True,
               call_timeout_s: Optional[float] = 10.0) -> Verification:
        from .judge import verify_trace

        valid, error_type, reward_valid, checks = verify_trace(task, trace, strict_abstention=strict_abstention,
                                                               call_timeout_s=call_timeout_s)
        return Verification(task_id=task.id, category=task.category, valid=valid, reward_valid=reward_valid,
                            checks=checks, error_type=error_type)

    def commands(self) -> dict:
        """This room's subcommands: ``prepare-data`` and ``preflight``."""
        from .commands import COMMANDS

        return dict(COMMANDS)

    # ---------------------------------------------------------------------------------------- data, scripting
    def dataset_rows(self, task_ids: list[str], split: str, call_format: str) -> list[dict]:
        """``seal-verl prepare-data``'s own rows (they name no environment: BFCL is the default of its loops)."""
        from .prepare_data import build_rows

        return build_rows(list(task_ids), split, call_format)

    def reference_turns(self, task: BFCLTask, call_format: str) -> list[list[str]]:
        from .scripted import reference_turns

        return reference_turns(task, call_format)

    def failure_turns(self, task: BFCLTask, target: str, call_format: str, seed: int):
        from .scripted import failure_turns

        return failure_turns(task, target, call_format, seed)

    def user_turn_texts(self, task: BFCLTask) -> list[str]:
        """Each turn's first non-empty user text; a reveal turn without a question shows BFCL's reveal text."""
        from .env import REVEAL_MESSAGE

        out = []
        for msgs in task.questions:
            texts = [m.get("content") or "" for m in msgs] or [REVEAL_MESSAGE]
            out.append(next((t for t in texts if t), REVEAL_MESSAGE))
        return out


def _check_ground_truth(task: BFCLTask, ground_truth: Any) -> None:
    """If the row carries the ground truth (``prepare-data`` writes it as JSON), it must match the task's."""
    if not isinstance(ground_truth, str):
        return
    try:
        gt = json.loads(ground_truth)
    except ValueError:
        return
    if isinstance(gt, list) and gt != task.ground_truth:
        raise ValueError(
            f"the row's reward_model.ground_truth differs from the installed BFCL data for {task.id}; "
            "the parquet was written from another bfcl-eval version: rerun `seal-verl prepare-data`"
        )

