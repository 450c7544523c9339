"""Two verl runs side by side on one host must not share the weight-sync socket.

verl 0.9.1 names the colocated weight sync's ZMQ IPC socket by the Ray job id, and every Ray cluster counts job ids
from ``01000000``: two runs on one host (``make bench-learning`` runs two at once) computed the same path. When two
syncs overlapped, one run's trainer waited in ``BucketedWeightSender._init_buffer`` and its vLLM worker in
``BucketedWeightReceiver._init_buffer`` for good (seen in the benchmark: a run stuck after its first step, its
socket file removed by the other run's sender). ``compat.distinct_weight_sync_socket`` adds the raylet's pid on both
sides. The last test runs verl's own sender and receiver code in the CPU training venv (opt-in like
``tests/cpu_training/test_cpu_training.py``) and fails without the plugin's reach: there both clusters get the same path.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import subprocess
import sys
import textwrap
import types

import pytest
from _paths import REPO
from _cpu_venv import cpu_train_venv

from seal_verl.verl_glue import compat

VERL_PATH = "ipc:///tmp/rl-colocate-zmq-01000000-replica-0-rank-0.sock"


@pytest.mark.parametrize("handle, pid, expected", [
    (VERL_PATH, "6107", "ipc:///tmp/rl-colocate-zmq-raylet6107-01000000-replica-0-rank-0.sock"),
    (VERL_PATH, "", VERL_PATH),  # outside Ray: verl's own name
    ("ipc:///tmp/rl-colocate-zmq-raylet6107-01000000-replica-0-rank-0.sock", "6107",
     "ipc:///tmp/rl-colocate-zmq-raylet6107-01000000-replica-0-rank-0.sock"),  # marked once
    ("tcp://127.0.0.1:5555", "6107", "tcp://127.0.0.1:5555"),  # not verl's IPC path: left alone
])
def test_the_socket_carries_the_raylet(handle, pid, expected):
    assert compat.host_unique_socket(handle, raylet_pid=pid) == expected


def test_two_clusters_on_one_host_get_two_sockets():
    assert compat.host_unique_socket(VERL_PATH, "6107") != compat.host_unique_socket(VERL_PATH, "11385")


def test_the_reach_patches_a_module_after_it_loads_and_once(tmp_path, monkeypatch):
    """The hook finds the module through the other finders, runs the patch right after the module's code, leaves
    ``sys.meta_path`` and keeps the real loader's source (tracebacks, inspect)."""
    (tmp_path / "seal_fake_sync_mod.py").write_text("class A:\n    def name(self):\n        return 'x'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    hook = compat._AfterImport("seal_fake_sync_mod", lambda m: seen.append(m.A().name()))
    monkeypatch.setattr(sys, "meta_path", [hook] + sys.meta_path)
    module = importlib.import_module("seal_fake_sync_mod")
    try:
        assert seen == ["x"] and hook not in sys.meta_path
        assert "return 'x'" in inspect.getsource(module.A)
        importlib.reload(module)
        assert seen == ["x"]  # once
    finally:
        sys.modules.pop("seal_fake_sync_mod", None)


def test_both_sides_are_wrapped_once_with_the_same_name(monkeypatch):
    """On stand-ins with verl's two names: the sender's handle set in ``__init__`` and the receiver's method give
    the same marked path, and a second install does not wrap twice."""

    class ServerAdapter:
        def __init__(self):
            self.zmq_handle = VERL_PATH

    class vLLMColocateWorkerExtension:
        def _get_zmq_handle(self):
            return VERL_PATH

    sender = types.SimpleNamespace(ServerAdapter=ServerAdapter)
    receiver = types.SimpleNamespace(vLLMColocateWorkerExtension=vLLMColocateWorkerExtension)
    for _ in range(2):
        compat._distinct_sender(sender)
        compat._distinct_receiver(receiver)
    monkeypatch.setenv("RAY_RAYLET_PID", "77")
    sent = ServerAdapter().zmq_handle
    received = vLLMColocateWorkerExtension()._get_zmq_handle()
    assert sent == received == "ipc:///tmp/rl-colocate-zmq-raylet77-01000000-replica-0-rank-0.sock"
    assert not hasattr(ServerAdapter.__init__.__wrapped__, "__wrapped__")  # wrapped once
    assert not hasattr(vLLMColocateWorkerExtension._get_zmq_handle.__wrapped__, "__wrapped__")


#: verl's own sender (ServerAdapter.__init__) and receiver (vLLMColocateWorkerExtension._get_zmq_handle) in a process
#: where ``import verl`` ran the plugin; Ray's job id is the first one of every cluster
REAL_SIDES = textwrap.dedent("""
    import json, types
    import verl
    import verl.workers.rollout.vllm_rollout.vllm_rollout as sender
    import verl.workers.rollout.vllm_rollout.utils as receiver
    from verl.workers.config import RolloutConfig
    sender.ray.get_runtime_context = lambda: types.SimpleNamespace(get_job_id=lambda: "01000000")
    adapter = sender.ServerAdapter(RolloutConfig(name="vllm"), types.SimpleNamespace(), None)
    worker = types.SimpleNamespace(model_runner=None, local_rank=0)
    print(json.dumps([adapter.zmq_handle, receiver.vLLMColocateWorkerExtension._get_zmq_handle(worker)]))
""")


@pytest.mark.skipif(cpu_train_venv() is None,
                    reason="verl's vLLM glue: set SEAL_CPU_TRAINING=1 or SEAL_CPU_TRAIN_VENV")
def test_verls_own_sides_agree_within_a_cluster_and_differ_between_two(tmp_path):
    venv = cpu_train_venv()
    paths = []
    for raylet in ("6107", "11385"):  # two clusters on one host: two raylets, the same job id
        env = dict(os.environ, SEAL_CPU_PLATFORM="1", RAY_RAYLET_PID=raylet, RANK="0", RAY_LOCAL_WORLD_SIZE="1",
                   VERL_RAY_JOB_ID="01000000", VERL_REPLICA_RANK="0", BFCL_PROJECT_ROOT=str(tmp_path))
        proc = subprocess.run([os.path.join(venv, "bin", "python"), "-c", REAL_SIDES], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        sent, received = json.loads(proc.stdout.strip().splitlines()[-1])
        assert sent == received, (sent, received)  # the trainer binds where its vLLM worker connects
        paths.append(sent)
    assert paths[0] != paths[1], paths
