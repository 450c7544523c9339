"""A demo ``bfcl generate`` result file with every failure kind, in all three result forms.

``seal-verl demo-results demo.jsonl`` writes it; ``seal-verl diagnose demo.jsonl`` then shows every label.
The entries are ground-truth trajectories of real BFCL tasks with one seeded perturbation each.
"""

from __future__ import annotations

import json

from ..environment.perturb import KINDS, ground_truth_steps, perturb, to_result
from ..environment.tasks import CATEGORIES, load_split, load_tasks

FORMATS = ("json", "python", "fc")


def demo_entries(per_category: int = 12) -> list[dict]:
    tasks = load_tasks()
    split = load_split()["eval"]
    entries = []
    i = 0
    for cat in CATEGORIES:
        ids = [t for t in split if t.startswith(cat + "_")][:per_category]
        for task_id in ids:
            task = tasks[task_id]
            fmt = FORMATS[i % len(FORMATS)]
            kind = (None,) + KINDS
            chosen = kind[i % len(kind)]
            i += 1
            if chosen is None:
                traj = ground_truth_steps(task)
            else:
                out = perturb(task, chosen, seed=i)
                traj = out[0] if out else ground_truth_steps(task)
            entries.append({"id": task_id, "result": to_result(task, traj, fmt)})
    # One hand-made example per label (recovery, response and spurious failures do not arise from the
    # generic perturbations above).
    from ..environment.examples import examples

    for j, (task_id, result) in enumerate(examples(FORMATS[i % len(FORMATS)]).values()):
        entries.append({"id": task_id, "result": result})
    # The two forms BFCL fails before checking anything.
    entries.append({"id": split[0], "result": "Error during inference: connection reset"})
    entries.append({"id": split[1], "result": [[]]})
    return entries


def write_demo_results(path: str, per_category: int = 12) -> int:
    entries = demo_entries(per_category)
    with open(path, "w") as f:
        for e in entries:
            f.write(json.dumps(e) + "\n")
    return len(entries)
