"""The settings of a ``seal-verl eval`` run (:class:`EvalConfig`), their checks, and the tasks they select.

A mistake in them is an :class:`EvalError`: one user-facing line, raised before any request is sent.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..environment.env import MAX_STEPS_PER_TURN
from ..environment.tasks import CATEGORIES, BFCLTask, load_split, load_tasks
from .openai_http import check_base_url

MODES = ("fc", "prompt")
SPLITS = ("eval", "train", "all")
#: Backbones whose prompt-mode call format is known; anything else needs --call-format.
BACKBONE_CALL_FORMAT = {"qwen2.5": "json", "qwen": "json", "hermes": "json", "llama3.1": "python",
                        "toolace": "python", "bfcl": "python"}


class EvalError(Exception):
    """A one-line, user-facing reason why the evaluation cannot run (bad option, server, or out folder)."""


@dataclass
class EvalConfig:
    base_url: str
    model: str
    out: str
    split: str = "eval"
    categories: list = field(default_factory=list)
    ids: list = field(default_factory=list)
    mode: str = "fc"
    call_format: str | None = None  # prompt mode: json | python (default from the backbone)
    backbone: str | None = None
    concurrency: int = 4
    temperature: float = 0.0
    max_tokens: int | None = None
    api_key: str | None = None
    timeout_s: float = 600.0
    retries: int = 4
    backoff_s: float = 1.0
    max_steps_per_turn: int = MAX_STEPS_PER_TURN
    progress: bool = True
    seed: int | None = None  # sent with every request (the server's sampling seed); None: the server's own

    def resolved_call_format(self) -> str:
        """The format steps are written and judged in: ``fc``, or the prompt-mode call format."""
        if self.mode not in MODES:
            raise EvalError(f"--mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if self.mode == "fc":
            if self.call_format not in (None, "fc"):
                raise EvalError("--call-format applies to --mode prompt only")
            return "fc"
        if self.call_format:
            if self.call_format not in ("json", "python"):
                raise EvalError(f"--call-format must be json or python, got {self.call_format!r}")
            return self.call_format
        if self.backbone:
            key = self.backbone.lower()
            fmt = next((v for k, v in BACKBONE_CALL_FORMAT.items() if key.startswith(k)), None)
            if fmt is None:
                raise EvalError(f"unknown --backbone {self.backbone!r} (known: {', '.join(BACKBONE_CALL_FORMAT)}); "
                                "give --call-format json|python instead")
            return fmt
        return "json"

    def validate(self) -> None:
        problem = check_base_url(self.base_url)
        if problem:
            raise EvalError(problem)
        if not _is_number(self.timeout_s) or not math.isfinite(self.timeout_s) or self.timeout_s <= 0:
            raise EvalError(f"--timeout must be a number of seconds > 0, got {self.timeout_s!r}")
        if not _is_number(self.temperature) or not math.isfinite(self.temperature) or self.temperature < 0:
            raise EvalError(f"--temperature must be a number >= 0, got {self.temperature!r}")
        if not _is_number(self.backoff_s) or not math.isfinite(self.backoff_s) or self.backoff_s < 0:
            raise EvalError(f"back-off must be a number of seconds >= 0, got {self.backoff_s!r}")
        for name, value, low in (("--concurrency", self.concurrency, 1), ("--retries", self.retries, 0),
                                 ("max_steps_per_turn", self.max_steps_per_turn, 1)):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise EvalError(f"{name} must be an integer >= {low}, got {value!r}")
        if self.seed is not None and (not isinstance(self.seed, int) or isinstance(self.seed, bool) or self.seed < 0):
            raise EvalError(f"a seed must be an integer >= 0, got {self.seed!r}")
        if self.max_tokens is not None and (not isinstance(self.max_tokens, int) or self.max_tokens < 1):
            raise EvalError(f"--max-tokens must be an integer >= 1, got {self.max_tokens!r}")
        if self.split not in SPLITS:
            raise EvalError(f"--split must be one of {', '.join(SPLITS)}, got {self.split!r}")
        bad = [c for c in self.categories if _full_category(c) not in CATEGORIES]
        if bad:
            raise EvalError(f"unknown --category {bad[0]!r} (known: {', '.join(c[11:] for c in CATEGORIES)})")
        if not self.model:
            raise EvalError("--model must not be empty")
        self.resolved_call_format()


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _full_category(name: str) -> str:
    return name if name.startswith("multi_turn_") else f"multi_turn_{name}"


def select_tasks(cfg: EvalConfig) -> list[BFCLTask]:
    """The tasks to evaluate, in a stable order: the split (or ``--ids``), filtered by ``--category``."""
    if cfg.ids:
        try:
            tasks = load_tasks(list(cfg.ids))
        except KeyError as exc:
            raise EvalError(str(exc).strip("'\"")) from None
        chosen = list(tasks.values())
    else:
        all_tasks = load_tasks()
        if cfg.split == "all":
            ids = list(all_tasks)
        else:
            ids = load_split()[cfg.split]
        chosen = [all_tasks[i] for i in ids]
    if cfg.categories:
        wanted = {_full_category(c) for c in cfg.categories}
        chosen = [t for t in chosen if t.category in wanted]
    order = {c: i for i, c in enumerate(CATEGORIES)}
    return sorted(chosen, key=lambda t: (order[t.category], int(t.id.rsplit("_", 1)[1])))


def bfcl_id_file(split: str = "eval", categories: list | None = None, ids: list | None = None) -> dict[str, list[str]]:
    """The ``test_case_ids_to_generate.json`` content that restricts ``bfcl generate --run-ids`` to a split (or
    to the given task ids): ``{category: [ids]}`` for the four multi-turn categories (BFCL skips categories with
    an empty list)."""
    if split not in SPLITS:
        raise EvalError(f"--split must be one of {', '.join(SPLITS)}, got {split!r}")
    cfg = EvalConfig(base_url="http://unused", model="unused", out="", split=split, categories=list(categories or []),
                     ids=list(ids or []))
    cfg.validate()
    out: dict[str, list[str]] = {c: [] for c in CATEGORIES}
    for t in select_tasks(cfg):
        out[t.category].append(t.id)
    return out
