"""Scoring a ``seal-verl eval`` run: every written result judged as BFCL judges it, with Psi's labels.

Writes ``labels.jsonl`` (one line per task, as ``seal-verl diagnose``) and ``scores.json`` (per-category
accuracy under the official semantics, their unweighted mean, the label counts and the protocol).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from seal_verl.atomic import atomic_write_text

from ..environment.tasks import CATEGORIES, BFCLTask
from .config import EvalConfig
from .result_files import ResultStore


@dataclass
class EvalSummary:
    """What a run did: its scores, one ``(category, valid, labels)`` row per judged task, and the counts the
    command line reports."""

    scores: dict
    rows: list  # (category, valid, labels)
    n_run: int
    n_skipped: int
    n_errors: int
    interrupted: bool = False
    n_requested: int = 0
    missing: list = field(default_factory=list)  # requested task ids with no line in the result files

    @property
    def n_missing(self) -> int:
        return len(self.missing)

    @property
    def n_written(self) -> int:
        return self.n_requested - len(self.missing)


def score(cfg: EvalConfig, tasks: list[BFCLTask], store: ResultStore, fmt: str) -> EvalSummary:
    """Judge every selected task's written result; write ``labels.jsonl`` and ``scores.json``."""
    from seal_verl.runs.labels import summarise

    from ..environment.judge import judge_result

    categories = sorted({t.category for t in tasks}, key=CATEGORIES.index)
    written = store.load(categories)
    lines, rows = [], []
    for t in tasks:
        if t.id not in written:
            continue
        j = judge_result(t, written[t.id], call_format=fmt)
        rec = {"id": t.id, "category": t.category, "valid": j.valid, "labels": j.labels}
        if j.error_type:
            rec["error_type"] = j.error_type
        lines.append(json.dumps(rec) + "\n")
        rows.append((t.category, j.valid, j.labels))
    atomic_write_text(os.path.join(cfg.out, "labels.jsonl"), "".join(lines))
    stats = summarise(rows)
    cats = {c: {"accuracy": s.accuracy, "n": s.n_tasks, "n_valid": s.n_valid} for c, s in stats.items()}
    expected = {c: sum(1 for t in tasks if t.category == c) for c in categories}
    scores = {
        "categories": cats,
        "average": (sum(v["accuracy"] for v in cats.values()) / len(cats)) if cats else 0.0,
        "complete": all(cats.get(c, {}).get("n") == n for c, n in expected.items()),
        "label_counts": {c: dict(s.label_counts) for c, s in stats.items()},
        "protocol": {
            "benchmark": "BFCL V3 multi-turn", "split": "ids" if cfg.ids else cfg.split, "model": cfg.model,
            "mode": cfg.mode, "call_format": fmt, "temperature": cfg.temperature, "samples": 1, "seed": cfg.seed,
            "max_steps_per_turn": cfg.max_steps_per_turn, "interface": "none (evaluation)",
            "semantics": "official BFCL (abstention turns unchecked)", "bfcl_eval_version": _bfcl_version(),
        },
    }
    atomic_write_text(os.path.join(cfg.out, "scores.json"), json.dumps(scores, indent=2) + "\n")
    return EvalSummary(scores=scores, rows=rows, n_run=0, n_skipped=0, n_errors=0)


def _bfcl_version() -> str | None:
    try:
        from importlib.metadata import version
        return version("bfcl-eval")
    except Exception:  # noqa: BLE001
        return None


def format_scores(summary: EvalSummary) -> str:
    from seal_verl.runs.labels import format_table, summarise

    return format_table(summarise(summary.rows))
