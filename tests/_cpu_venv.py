"""The training venv the opt-in CPU tests run in: ``SEAL_CPU_TRAIN_VENV``, or ``<repo>/.venv-cpu-train`` with
``SEAL_CPU_TRAINING=1``; ``None`` (the tests skip) otherwise."""

from __future__ import annotations

import os

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cpu_train_venv():
    explicit = os.environ.get("SEAL_CPU_TRAIN_VENV")
    if explicit:
        return os.path.abspath(explicit)
    if os.environ.get("SEAL_CPU_TRAINING", "").strip().lower() in ("1", "true", "yes"):
        return os.path.join(REPO, ".venv-cpu-train")
    return None
