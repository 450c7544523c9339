"""Write the SEAL BFCL split as verl RL datasets: ``train.parquet`` (400 tasks) and ``eval.parquet`` (400).

One row per task, in the row format of verl 0.9.1's ``RLHFDataset`` (``verl/utils/dataset/rl_dataset.py``)
and agent-loop dispatch:

============  ==============================================================================================
column        content
============  ==============================================================================================
prompt        the first user turn as chat messages (``[{"role": "user", "content": ...}]``); the agent loop
              renders the system prompt and the tools itself from the task, and serves the later turns
data_source   the BFCL category (``multi_turn_base``, ...), so that verl's validation reports accuracy per
              category (``val-core/<data_source>/acc/mean@1``)
ability       ``tool_use``
reward_model  ``{"style": "rule", "ground_truth": <JSON of the per-turn ground-truth call strings>}``; the
              reward function grades from the task it looks up by id and checks this copy against it
extra_info    ``{"index", "task_id", "split", "call_format"}``; ``index`` is the row's position in its file
agent_name    ``seal_bfcl`` for training rows (the loop with the SEAL observation wrapper) and ``bfcl`` for
              evaluation rows (no wrapper): verl picks each row's agent loop by this column, and the loop
              cannot otherwise tell training from validation
============  ==============================================================================================

Beside the two files, ``call_format.txt`` holds the folder's call format as one word (``json`` or ``python``):
the launchers read it to stop a run whose backbone writes the other format before any model loads, which
they cannot do from the parquet rows without Python.

The split comes from the shipped SEAL split (``data/bfcl_v3_seal_split.json``) or from a JSON file of the
same shape (``{"train": [ids], "eval": [ids]}``); unknown ids, duplicates, overlap between the halves and
empty halves are errors.

Command line: ``seal-verl prepare-data --out DIR [--call-format json|python] [--split-file PATH]``.
"""

from __future__ import annotations

import json
import os
import warnings
from collections import Counter
from typing import Any, Callable, Optional

from seal_verl.atomic import FileContentError, read_json_object

from .tasks import CATEGORIES, BFCLTask, load_split, load_tasks

__all__ = [
    "TRAIN_AGENT",
    "EVAL_AGENT",
    "ABILITY",
    "CALL_FORMATS",
    "SPLIT_FILES",
    "read_split_file",
    "build_rows",
    "prepare_data",
    "format_summary",
]

#: ``agent_name`` of training rows: the agent loop that applies the SEAL observation wrapper.
TRAIN_AGENT = "seal_bfcl"
#: ``agent_name`` of evaluation rows: the agent loop without the wrapper (not a byte of cue text).
EVAL_AGENT = "bfcl"
ABILITY = "tool_use"
#: How the model writes calls: Qwen-style ``<tool_call>`` JSON blocks or BFCL's Python call list.
CALL_FORMATS: tuple[str, ...] = ("json", "python")
#: Split name -> (file name, agent name).
SPLIT_FILES: dict[str, tuple[str, str]] = {"train": ("train.parquet", TRAIN_AGENT), "eval": ("eval.parquet", EVAL_AGENT)}


def _check_split(split: Any, source: str, known: set[str]) -> dict[str, list[str]]:
    if not isinstance(split, dict):
        raise ValueError(f"{source}: expected a JSON object with \"train\" and \"eval\" lists, got {type(split).__name__}")
    out: dict[str, list[str]] = {}
    for name in SPLIT_FILES:
        ids = split.get(name)
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise ValueError(f"{source}: {name!r} must be a list of task id strings")
        if not ids:
            raise ValueError(f"{source}: {name!r} is empty")
        dup = sorted(i for i, n in Counter(ids).items() if n > 1)
        if dup:
            raise ValueError(f"{source}: {len(dup)} duplicate id(s) in {name!r}: {', '.join(dup[:10])}")
        unknown = [i for i in ids if i not in known]
        if unknown:
            more = f" and {len(unknown) - 10} more" if len(unknown) > 10 else ""
            raise ValueError(
                f"{source}: {len(unknown)} unknown task id(s) in {name!r}: {', '.join(unknown[:10])}{more} "
                f"(known: the 800 BFCL V3 multi-turn ids, e.g. multi_turn_base_0; categories: {', '.join(CATEGORIES)})"
            )
        out[name] = list(ids)
    both = sorted(set(out["train"]) & set(out["eval"]))
    if both:
        raise ValueError(f"{source}: {len(both)} id(s) in both train and eval: {', '.join(both[:10])}")
    return out


def read_split_file(path: Optional[str] = None) -> dict[str, list[str]]:
    """The validated split: ``{"train": [...], "eval": [...]}`` from ``path``, or the shipped SEAL split.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: not JSON, wrong shape, empty half, duplicates, unknown ids, or overlap.
    """
    known = set(load_tasks())
    if path is None:
        return _check_split(load_split(), "the shipped SEAL split", known)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"split file not found: {path}")
    try:
        data = read_json_object(path, "split file")
    except FileContentError as exc:
        raise ValueError(str(exc)) from None
    return _check_split(data, path, known)


def _row(task: BFCLTask, index: int, split: str, call_format: str, agent_name: str) -> dict[str, Any]:
    first = [{"role": str(m["role"]), "content": str(m["content"])} for m in task.questions[0]]
    if not first:
        raise ValueError(f"{task.id}: the first turn has no user message")
    return {
        "data_source": task.category,
        "agent_name": agent_name,
        "prompt": first,
        "ability": ABILITY,
        "reward_model": {"style": "rule", "ground_truth": json.dumps(task.ground_truth, ensure_ascii=False)},
        "extra_info": {"index": index, "task_id": task.id, "split": split, "call_format": call_format},
    }


def build_rows(task_ids: list[str], split: str, call_format: str = "json") -> list[dict[str, Any]]:
    """The dataset rows of ``task_ids`` for ``split`` (``train`` or ``eval``), in the given order."""
    if split not in SPLIT_FILES:
        raise ValueError(f"unknown split {split!r}; expected one of {', '.join(SPLIT_FILES)}")
    if call_format not in CALL_FORMATS:
        raise ValueError(f"unknown call format {call_format!r}; expected one of {', '.join(CALL_FORMATS)}")
    tasks = load_tasks(task_ids)
    agent = SPLIT_FILES[split][1]
    return [_row(tasks[tid], i, split, call_format, agent) for i, tid in enumerate(task_ids)]


#: The one-word record of a data folder's call format, next to its parquet files (read by ``_launch.sh``).
CALL_FORMAT_FILE = "call_format.txt"


def prepare_data(out_dir: str, call_format: str = "json", split_file: Optional[str] = None,
                 prompt_tokens: Optional[Callable[[list[str]], dict[str, int]]] = None,
                 max_prompt_length: Optional[int] = None) -> dict[str, Any]:
    """Write ``train.parquet`` and ``eval.parquet`` under ``out_dir``; return a summary.

    With ``prompt_tokens`` (task ids -> first-prompt token counts under the backbone's tokenizer and chat
    template) and ``max_prompt_length``, a task whose first prompt is longer is left out with a warning and
    listed in ``summary["rejected"]``: a prompt over the budget is rejected here instead of failing a
    training step.

    The summary: ``{"out_dir", "call_format", "split_source", "splits": {name: {"path", "rows",
    "agent_name", "per_category": {category: rows}}}}``.
    """
    import pandas as pd

    if call_format not in CALL_FORMATS:
        raise ValueError(f"unknown call format {call_format!r}; expected one of {', '.join(CALL_FORMATS)}")
    split = read_split_file(split_file)
    _refuse_other_format(out_dir, call_format)
    os.makedirs(out_dir, exist_ok=True)
    summary: dict[str, Any] = {
        "out_dir": os.path.abspath(out_dir),
        "call_format": call_format,
        "split_source": split_file or "shipped SEAL split (env_wrappers/bfcl/data/bfcl_v3_seal_split.json)",
        "splits": {},
    }
    summary["rejected"] = {}
    if prompt_tokens is not None and max_prompt_length is not None:
        lengths = prompt_tokens(split["train"] + split["eval"])
        over = {t: n for t, n in lengths.items() if n > max_prompt_length}
        for t, n in sorted(over.items()):
            warnings.warn(f"{t}: first prompt of {n} tokens exceeds max_prompt_length={max_prompt_length}; left out")
        summary["rejected"] = over
        split = {name: [t for t in ids if t not in over] for name, ids in split.items()}
    for name, (fname, agent) in SPLIT_FILES.items():
        rows = build_rows(split[name], name, call_format)
        path = os.path.join(out_dir, fname)
        tmp = path + ".tmp"
        pd.DataFrame(rows).to_parquet(tmp, index=False)
        os.replace(tmp, path)
        per_cat = Counter(r["data_source"] for r in rows)
        summary["splits"][name] = {
            "path": os.path.abspath(path),
            "rows": len(rows),
            "agent_name": agent,
            "per_category": {c: per_cat.get(c, 0) for c in CATEGORIES},
        }
    marker = os.path.join(out_dir, CALL_FORMAT_FILE)
    with open(marker + ".tmp", "w", encoding="utf-8") as f:
        f.write(call_format + "\n")
    os.replace(marker + ".tmp", marker)
    return summary


def _refuse_other_format(out_dir: str, call_format: str) -> None:
    """Each call format gets its own folder: writing one format over data of the other is an error (the
    agent loop of one backbone rejects rows prepared for the other)."""
    import pandas as pd

    for fname, _ in SPLIT_FILES.values():
        path = os.path.join(out_dir, fname)
        if not os.path.isfile(path):
            continue
        try:
            infos = pd.read_parquet(path, columns=["extra_info"])["extra_info"]
            found = {i.get("call_format") for i in infos}
        except Exception:  # not our dataset: leave the decision to the overwrite below
            continue
        other = sorted(str(f) for f in found if f != call_format)
        if other:
            raise ValueError(
                f"{path} holds call_format={other[0]} data; write call_format={call_format} to its own folder "
                f"(e.g. --out {os.path.join(os.path.dirname(os.path.abspath(out_dir)), call_format)})"
            )


def format_summary(summary: dict[str, Any]) -> str:
    """A short human-readable table of a ``prepare_data`` summary."""
    lines = [f"call format: {summary['call_format']}; split: {summary['split_source']}"]
    cats = list(CATEGORIES)
    lines.append(f"{'split':<6} {'rows':>5} {'agent':<10} " + " ".join(f"{c.replace('multi_turn_', ''):>12}" for c in cats))
    for name, s in summary["splits"].items():
        lines.append(f"{name:<6} {s['rows']:>5} {s['agent_name']:<10} "
                     + " ".join(f"{s['per_category'][c]:>12}" for c in cats))
    if summary.get("rejected"):
        lines.append(f"left out {len(summary['rejected'])} task(s) whose first prompt exceeds the budget: "
                     + ", ".join(sorted(summary["rejected"])))
    for name, s in summary["splits"].items():
        lines.append(f"wrote {s['path']}")
    return "\n".join(lines)
