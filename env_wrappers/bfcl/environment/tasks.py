"""BFCL V3 multi-turn tasks (800: base, miss_func, miss_param, long_context) and the SEAL 400/400 split.

Tasks, ground truth and tool docs come from the installed ``bfcl-eval`` package through its own loaders, so
what we train and evaluate on is exactly what ``bfcl generate`` / ``bfcl evaluate`` use (including the
language hint BFCL appends to every function description).

The split file ``env_wrappers/bfcl/data/bfcl_v3_seal_split.json`` is the train/eval partition released with
the SEAL configuration (100 tasks per category in each half).
"""

from __future__ import annotations

import functools
import json
import threading
from dataclasses import dataclass, field
from importlib import resources

from .schema import to_openai_tool

CATEGORIES: tuple[str, ...] = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param",
                               "multi_turn_long_context")

BFCL_EVAL_VERSION = "2026.3.23"


@dataclass
class BFCLTask:
    """One BFCL multi-turn task.

    ``questions[k]`` holds the user messages of turn k (empty for a miss_func reveal turn).
    ``functions`` are the BFCL docs offered from the start; ``missed_functions[k]`` the docs revealed at
    turn k. ``ground_truth[k]`` lists the ground-truth call strings of turn k (empty = abstention turn).
    """

    id: str
    category: str
    questions: list
    initial_config: dict
    involved_classes: list
    functions: list
    missed_functions: dict = field(default_factory=dict)  # int -> list[doc]
    ground_truth: list = field(default_factory=list)

    @property
    def long_context(self) -> bool:
        return "long_context" in self.category or "composite" in self.category

    @property
    def n_turns(self) -> int:
        return len(self.ground_truth)

    def abstention_turns(self) -> list[bool]:
        return [len(gt) == 0 for gt in self.ground_truth]

    def tools(self, upto_turn: int | None = None) -> list[dict]:
        """OpenAI-style tools offered at turn ``upto_turn`` (all revealed so far; None = start of task)."""
        docs = list(self.functions)
        if upto_turn is not None:
            for k in sorted(self.missed_functions):
                if k <= upto_turn:
                    docs.extend(self.missed_functions[k])
        return [to_openai_tool(d) for d in docs]

    def all_docs(self) -> list[dict]:
        docs = list(self.functions)
        for k in sorted(self.missed_functions):
            docs.extend(self.missed_functions[k])
        return docs


def category_of(task_id: str) -> str:
    """``multi_turn_miss_func_12`` -> ``multi_turn_miss_func`` (BFCL's own rule)."""
    return task_id.rsplit("_", 1)[0]


_LOCK = threading.Lock()


@functools.lru_cache(maxsize=1)
def _load_all() -> dict[str, BFCLTask]:
    from .. import __name__ as _pkg  # noqa: F401 - ensures BFCL_PROJECT_ROOT is set before bfcl_eval loads
    from bfcl_eval.utils import load_dataset_entry, load_ground_truth_entry

    tasks: dict[str, BFCLTask] = {}
    for cat in CATEGORIES:
        entries = load_dataset_entry(cat)
        truths = {g["id"]: g["ground_truth"] for g in load_ground_truth_entry(cat)}
        for e in entries:
            missed = {int(k): list(v) for k, v in (e.get("missed_function") or {}).items()}
            tasks[e["id"]] = BFCLTask(
                id=e["id"],
                category=cat,
                questions=e["question"],
                initial_config=e.get("initial_config", {}),
                involved_classes=list(e["involved_classes"]),
                functions=list(e["function"]),
                missed_functions=missed,
                ground_truth=truths[e["id"]],
            )
    return tasks


def load_tasks(ids: list[str] | None = None) -> dict[str, BFCLTask]:
    """All 800 tasks by id, or just ``ids`` (unknown ids raise ``KeyError`` naming them)."""
    with _LOCK:
        tasks = _load_all()
    if ids is None:
        return dict(tasks)
    missing = [i for i in ids if i not in tasks]
    if missing:
        raise KeyError(f"unknown BFCL V3 multi-turn task id(s): {', '.join(missing[:10])}"
                       + (f" and {len(missing) - 10} more" if len(missing) > 10 else ""))
    return {i: tasks[i] for i in ids}


def load_split() -> dict[str, list[str]]:
    """The SEAL train/eval partition: ``{"train": [...400 ids], "eval": [...400 ids], "description": str}``."""
    text = resources.files("env_wrappers.bfcl").joinpath("data/bfcl_v3_seal_split.json").read_text()
    return json.loads(text)
