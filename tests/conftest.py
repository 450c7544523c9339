"""Shared test set-up: bfcl-eval writes under BFCL_PROJECT_ROOT, so point it at a temporary folder; the fault
hooks may act (SEAL_ALLOW_FAULTS); fixtures several modules use."""

import os
import tempfile

import pytest

os.environ.setdefault("BFCL_PROJECT_ROOT", tempfile.mkdtemp(prefix="bfcl-root-"))
# The fault-injection hooks (seal_verl/env_vars.py) act only with this consent: the suite injects faults on purpose.
os.environ["SEAL_ALLOW_FAULTS"] = "1"
# Under pytest-xdist (``make test`` runs two workers) each worker gets its own folder below it: bfcl-eval writes
# result and score files by model and category name, and two workers must not write the same file.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["BFCL_PROJECT_ROOT"] = os.path.join(os.environ["BFCL_PROJECT_ROOT"], os.environ["PYTEST_XDIST_WORKER"])
    os.makedirs(os.environ["BFCL_PROJECT_ROOT"], exist_ok=True)

#: Test modules that start a local Ray cluster (each with TransferQueue and its own state actors).
RAY_MODULES = frozenset({"test_agent_loop.py", "test_multinode.py", "test_probe_retire.py", "test_verl_advantage.py",
                         "test_verl_plugin.py", "test_verl_state.py"})


def xdist_work_unit(nodeid: str) -> str:
    """The work unit of a test under pytest-xdist: its file, so that a module's fixtures are built once, except
    the Ray modules, which form one unit and so share one worker: no two Ray clusters start their worker
    processes at once on a 2-core machine (with the files spread over two workers, an actor call in
    test_agent_loop.py once hit its 120 s timeout)."""
    path = nodeid.split("::", 1)[0]
    return "ray" if os.path.basename(path) in RAY_MODULES else path


try:
    from xdist.scheduler import LoadScopeScheduling
except ImportError:  # pytest-xdist absent: the suite runs in one process
    pass
else:
    class _FileScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_work_unit(nodeid)

    def pytest_xdist_make_scheduler(config, log):
        """``make test`` runs ``pytest -n 2``: whole files per worker, the Ray files together (xdist_work_unit)."""
        return _FileScheduling(config, log)


@pytest.fixture(scope="module")
def tasks():
    """All 800 BFCL V3 multi-turn tasks by id, loaded once per test module (modules that need only a few
    tasks define their own ``tasks`` and so override this one)."""
    from env_wrappers.bfcl.environment.tasks import load_tasks

    return load_tasks()
