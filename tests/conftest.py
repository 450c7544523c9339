"""Shared test set-up: bfcl-eval writes under BFCL_PROJECT_ROOT, so point it at a temporary folder; fixtures
several modules use."""

import os
import tempfile

import pytest

os.environ.setdefault("BFCL_PROJECT_ROOT", tempfile.mkdtemp(prefix="bfcl-root-"))


@pytest.fixture(scope="module")
def tasks():
    """All 800 BFCL V3 multi-turn tasks by id, loaded once per test module (modules that need only a few
    tasks define their own ``tasks`` and so override this one)."""
    from env_wrappers.bfcl.tasks import load_tasks

    return load_tasks()
