"""Every place seal-verl reaches into verl internals, in one module, checked against the verl it was written for.

verl 0.9.1 gives documented extension points for most of what SEAL adds (plugins, ``register`` for agent
loops, ``register_adv_est``, ``register_trainer``, custom reward functions). Where it gives none, the glue goes
through a function here instead of touching verl's private names itself. Each function names the verl version
its reach was checked against (:data:`CHECKED_VERL`); :func:`check_verl_version` runs when the plugin registers
and fails with one clear line on any other version, instead of a confusing error deep in a training step.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.metadata as _md
import os
import sys
from typing import Any, Callable, Optional

#: The verl release every reach below was read against and exercised with (tests run the real code paths).
CHECKED_VERL = "0.9.1"

#: What each reach relies on, by function name (shown in the version error, kept next to the code). Every private
#: name of verl (or OmegaConf) that the plugin reads, overrides or replaces is named in one of these lines, and so
#: is every verl module attribute it replaces: ``tests/verl/test_verl_reaches.py`` scans the installed source for them.
REACHES: dict[str, str] = {
    "single_call_synthetic_assistant": "ContinuousTokenBuilder._synthetic_assistant_for_tools (private method)",
    "agent_loop_registry": "verl.experimental.agent_loop.agent_loop._agent_loop_registry (private dict)",
    "run_as_trainer_mode": "PPOTrainer.trainer_mode compared with 'sync' in trainer_base (attribute set after "
                           "__init__, replay buffer rebuilt with PPOTrainer._build_replay_buffer())",
    "v1_trainer_overrides": "trainer.py's SealTrainerMixin overrides private PPOTrainer methods: "
                            "_compute_advantage(batch, metrics) (returns the KVBatchMeta; the step's rows are in "
                            "TransferQueue), _compute_metrics(batch, metrics, timing_raw, global_steps, epoch) "
                            "(called after step(), the batch still in TransferQueue), _validate() (samples "
                            "partition 'val' from the replay buffer and clears it), _save_checkpoint() and "
                            "_load_checkpoint() (global_steps is set when it returns); the KVBatchMeta step() "
                            "returns is the one fit passes to _compute_metrics, so the closed step's record rides "
                            "in its extra_info, as verl's own stages pass batch-level data; the cue-effect probe "
                            "(_seal_cue_probe) submits rows as _validate does (TransferQueue partition 'val', "
                            "agent_loop_manager.generate_sequences, replay_buffer.sample) and, without reward "
                            "workers, grades them with _compute_reward_colocate(batch) as _validate does",
    "omegaconf_root": "OmegaConf DictConfig._get_root() (private): the legacy compute_advantage receives "
                      "config.algorithm and SEAL needs the whole trainer config it belongs to (legacy.py)",
    "wrap_replay_buffer_sample": "PPOTrainer._validate calls self.replay_buffer.sample(partition_id='val')",
    "session_of_key": "TransferQueue keys of agent-loop outputs are '<session>_<index>_<output>'",
    "legacy_trainer_wrappers": "module-level replacement (legacy.py) of ray_trainer.compute_advantage (called once "
                               "per step by RayPPOTrainer.fit with the whole DataProto) and "
                               "ray_trainer.compute_data_metrics (called by fit with batch=..., its dict logged), "
                               "ray_trainer.extract_reward (imported by name from verl.trainer.ppo.reward, called "
                               "by _validate once per validation batch after its reward, meta_info['validate'] "
                               "set), and of the private methods RayPPOTrainer._load_checkpoint / "
                               "RayPPOTrainer._save_checkpoint (self.global_steps set by the load) / "
                               "RayPPOTrainer._validate, and verl.utils.tracking.Tracking.log (called by fit once "
                               "per step with the step's whole metrics dict, step=self.global_steps)",
    "distinct_weight_sync_socket": "the colocated weight sync's ZMQ IPC path, 'ipc:///tmp/rl-colocate-zmq-<Ray job "
                                   "id>-replica-<r>-rank-<k>.sock', computed twice: ServerAdapter.__init__ sets "
                                   "self.zmq_handle (vllm_rollout.py, the sender, which removes a file already "
                                   "at the path and binds) and vLLMColocateWorkerExtension._get_zmq_handle() "
                                   "(utils.py, the receiver in vLLM's worker process, which connects)",
    "plant_faults": "the planted fault skip_weight_sync (SEAL_FAULT, for showing that seal-verl check fails) wraps "
                    "CheckpointEngineManager.update_weights (verl/checkpoint_engine/base.py), which the V1 trainer "
                    "calls once at start-up and after every step to send the actor's weights to the rollout",
    "exclude_rows_from_update": "the actor update reads response_mask and advantages of the step's rows from "
                                "TransferQueue (jagged tensors), as verl's own rollout correction rewrites them",
    "wrap_grpo_outcome_advantage": "ray_trainer.compute_advantage calls core_algos.compute_grpo_outcome_advantage "
                                   "by module attribute for adv_estimator=grpo (also under the V1 trainer, through "
                                   "compute_advantage_for_multi_trajectories); replaced at module level, the "
                                   "estimator registry keeps the original",
}


class VerlVersionError(RuntimeError):
    """seal-verl's reaches into verl internals met a verl version they were not checked against."""


def installed_verl() -> Optional[str]:
    fn = getattr(_md.version, "__wrapped__", _md.version)
    try:
        return fn("verl")
    except _md.PackageNotFoundError:
        return None


def check_verl_version(lookup: Callable[[], Optional[str]] = installed_verl) -> str:
    """The installed verl version if it is :data:`CHECKED_VERL`; else raise :class:`VerlVersionError`.

    ``lookup`` exists for tests.
    """
    found = lookup()
    if found != CHECKED_VERL:
        shown = "verl not installed" if found is None else f"verl=={found}"
        raise VerlVersionError(
            f"seal_verl.verl_glue.compat: written for verl=={CHECKED_VERL}, found {shown}; it relies on verl "
            f"internals ({'; '.join(REACHES.values())}). Install verl=={CHECKED_VERL} or re-check each reach in "
            "seal_verl/verl_glue/compat.py and update CHECKED_VERL"
        )
    return found


_CHECKED: Optional[str] = None


def require_checked_verl(reach: str) -> None:
    """Raise :class:`VerlVersionError` unless the installed verl is the checked one (looked up once)."""
    global _CHECKED
    if _CHECKED is None:
        try:
            _CHECKED = check_verl_version()
        except VerlVersionError as exc:
            raise VerlVersionError(f"{reach}: {exc}") from None


# ------------------------------------------------------------------------------------------------ agent loops


def single_call_synthetic_assistant(builder: Any) -> None:
    """Make ``builder`` render a group of tool results after a synthetic assistant with ONE tool call.

    verl's Continuous Token builder renders appended tool messages as the suffix after a synthetic assistant
    message carrying one tool call per tool message (``_synthetic_assistant_for_tools``). Llama 3.1-style
    templates raise on an assistant message with more than one tool call, but render each tool message as its
    own ``ipython`` turn whatever the call count, so one synthetic call gives the same suffix bytes without the
    exception. Applied to this builder instance only.
    """
    require_checked_verl("single_call_synthetic_assistant")
    original = builder._synthetic_assistant_for_tools

    def synthetic(tool_messages):
        return original(list(tool_messages)[:1])

    builder._synthetic_assistant_for_tools = synthetic


def agent_loop_registry() -> dict:
    """verl's name -> ``{"_target_": ...}`` table of agent loops (``register`` writes it; the plugin
    re-registers idempotently in every process, which needs the table itself)."""
    require_checked_verl("agent_loop_registry")
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry

    return _agent_loop_registry


# ------------------------------------------------------------------------------------------------ trainer


def run_as_trainer_mode(trainer: Any, base_mode: str) -> None:
    """Make a registered trainer subclass behave as ``base_mode`` wherever verl compares ``trainer_mode``.

    verl's V1 trainer base compares ``self.trainer_mode`` with ``"sync"`` (replay buffer, TransferQueue
    checkpointing, dataloader granularity) and sets it from the config, where it names our mode. We report
    the mode we extend and rebuild what ``__init__`` built from the other value.
    """
    require_checked_verl("run_as_trainer_mode")
    trainer.trainer_mode = base_mode
    trainer.parameter_sync_step = trainer.config.trainer.v1.get(base_mode, {}).get("parameter_sync_step", 1)
    trainer.replay_buffer = trainer._build_replay_buffer()


class wrap_replay_buffer_sample:
    """Context manager: while active, ``on_sample(out)`` sees every ``trainer.replay_buffer.sample(...)``
    result of ``partition_id`` (verl's ``_validate`` samples the validation rollouts there and clears them
    before returning, so this is the only moment they can be read). The wrapper is an instance attribute,
    removed on exit."""

    def __init__(self, trainer: Any, partition_id: str, on_sample: Callable[[Any], None]):
        require_checked_verl("wrap_replay_buffer_sample")
        self.buffer = trainer.replay_buffer
        self.partition_id = partition_id
        self.on_sample = on_sample

    def __enter__(self):
        original = self.buffer.sample

        def sample(*args, **kwargs):
            out = original(*args, **kwargs)
            if kwargs.get("partition_id") == self.partition_id:
                self.on_sample(out)
            return out

        self.buffer.sample = sample
        return self

    def __exit__(self, *exc):
        del self.buffer.sample
        return False


def session_of_key(key: str) -> Optional[str]:
    """The agent-loop session of a TransferQueue key ``<session>_<index>_<output>`` (None if not that form)."""
    require_checked_verl("session_of_key")
    parts = str(key).rsplit("_", 2)
    if len(parts) != 3:
        return None
    return f"{parts[0]}_{parts[1]}"


def wrap_grpo_outcome_advantage(make: Callable[[Callable], Callable]) -> None:
    """Replace verl's ``core_algos.compute_grpo_outcome_advantage`` by ``make(original)`` once in this process.

    ``ray_trainer.compute_advantage`` (the legacy trainer, and the V1 trainer through
    ``compute_advantage_for_multi_trajectories``) calls it by module attribute for ``adv_estimator=grpo``, so the
    wrapper is what plain GRPO runs; the estimator registry keeps the original.
    """
    require_checked_verl("wrap_grpo_outcome_advantage")
    from verl.trainer.ppo import core_algos

    _wrap_once(core_algos, "compute_grpo_outcome_advantage", make)


def exclude_rows_from_update(batch: Any, excluded: Any) -> None:
    """Zero ``response_mask`` and ``advantages`` of the rows marked in ``excluded`` in TransferQueue, so that the
    actor update (policy loss, KL term, token-mean denominator) ignores them. verl's V1 trainer itself rewrites
    ``response_mask`` there when rollout correction rejects samples (``PPOTrainer._compute_advantage``).

    Args:
        batch: the step's ``KVBatchMeta`` (keys in row order).
        excluded: one flag per row of ``batch``.
    """
    require_checked_verl("exclude_rows_from_update")
    import torch
    import transfer_queue as tq
    from tensordict import TensorDict

    if len(excluded) != len(batch.keys):
        raise ValueError(f"{len(excluded)} exclusion flags for {len(batch.keys)} rows")
    data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id,
                           select_fields=["response_mask", "advantages"])
    out = {}
    for name in ("response_mask", "advantages"):
        value = data[name]
        rows = list(value.unbind()) if getattr(value, "is_nested", False) else list(value)
        rows = [torch.zeros_like(r) if ex else r for r, ex in zip(rows, excluded)]
        out[name] = torch.nested.as_nested_tensor(rows, layout=torch.jagged)
    tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=TensorDict(out, batch_size=len(batch)))


# ------------------------------------------------------------------------------------------------ weight sync


#: verl's modules that name the weight-sync socket: the sender's (the trainer side) and the receiver's (vLLM's worker)
SENDER_MODULE = "verl.workers.rollout.vllm_rollout.vllm_rollout"
RECEIVER_MODULE = "verl.workers.rollout.vllm_rollout.utils"
SOCKET_PREFIX = "ipc:///tmp/rl-colocate-zmq-"
_DISTINCT_MARK = "_seal_distinct_socket"


def host_unique_socket(handle: str, raylet_pid: Optional[str] = None) -> str:
    """``handle`` with the node's raylet pid after verl's prefix (``RAY_RAYLET_PID``, set in every Ray worker and
    inherited by vLLM's worker processes); unchanged outside Ray or when already marked.

    verl names the socket by the Ray job id, which every Ray cluster counts from ``01000000``: two runs side by
    side on one host (two clusters) get the same path, and the sender removes a file already there before it
    binds. When two weight syncs overlap, one run's receiver connects to the other run's socket, and both sides
    of the first wait forever. The sender and its receiver run on the same node under the same raylet, two
    clusters on one host never share a raylet, so the pid tells them apart and keeps the two sides equal.
    """
    pid = raylet_pid if raylet_pid is not None else os.environ.get("RAY_RAYLET_PID", "")
    if not pid or not handle.startswith(SOCKET_PREFIX):
        return handle
    tag = f"raylet{pid}-"
    rest = handle[len(SOCKET_PREFIX):]
    return handle if rest.startswith(tag) else SOCKET_PREFIX + tag + rest


def _wrap_once(cls: Any, name: str, make: Callable[[Callable], Callable]) -> None:
    """Replace ``cls.<name>`` by ``make(original)``, marked, so a second call (the plugin runs in every process,
    and a module may be patched both now and after its import) leaves it as it is."""
    original = getattr(cls, name)
    if getattr(original, _DISTINCT_MARK, False):
        return
    wrapper = functools.wraps(original)(make(original))
    setattr(wrapper, _DISTINCT_MARK, True)
    setattr(cls, name, wrapper)


def _distinct_sender(module: Any) -> None:
    def make(original):
        def __init__(self, *args, **kwargs):
            original(self, *args, **kwargs)
            if isinstance(getattr(self, "zmq_handle", None), str):
                self.zmq_handle = host_unique_socket(self.zmq_handle)
        return __init__

    _wrap_once(module.ServerAdapter, "__init__", make)


def _distinct_receiver(module: Any) -> None:
    _wrap_once(module.vLLMColocateWorkerExtension, "_get_zmq_handle",
               lambda original: lambda self: host_unique_socket(original(self)))


class _AfterImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``name`` through the other finders and runs ``then(module)`` once its code has run, so installing
    the reach never imports vLLM into a process that does not use it."""

    def __init__(self, name: str, then: Callable[[Any], None]):
        self.name, self.then, self.inner = name, then, None

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name or self.inner is not None:
            return None
        for finder in [f for f in sys.meta_path if f is not self and hasattr(f, "find_spec")]:
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                self.inner, spec.loader = spec.loader, self
                return spec
        return None

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        self.inner.exec_module(module)
        self.then(module)

    def __getattr__(self, attr):  # get_source, is_package...: the real loader's (tracebacks show source lines)
        inner = self.__dict__.get("inner")
        if inner is None:
            raise AttributeError(attr)
        return getattr(inner, attr)


def distinct_weight_sync_socket() -> None:
    """Name verl's weight-sync socket by the raylet as well as the job id (:func:`host_unique_socket`), in the
    sender's and the receiver's module: now where a module is loaded, else right after it loads. Idempotent;
    runs in every process through the plugin."""
    require_checked_verl("distinct_weight_sync_socket")
    for name, patch in ((SENDER_MODULE, _distinct_sender), (RECEIVER_MODULE, _distinct_receiver)):
        module = sys.modules.get(name)
        if module is not None:
            patch(module)
        elif not any(isinstance(f, _AfterImport) and f.name == name for f in sys.meta_path):
            sys.meta_path.insert(0, _AfterImport(name, patch))


# ------------------------------------------------------------------------------------------------ planted faults

#: the environment variable that plants faults in a run (a comma-separated list of :data:`FAULTS` names)
FAULT_ENV = "SEAL_FAULT"
#: fault name -> what it does; each exists to show that a check fails when what it checks is broken
FAULTS = {"skip_weight_sync": "every weight sync after the first (start-up) one is skipped: the rollout keeps "
                              "sampling from the weights it started with while the actor trains"}
_FAULT_MARK = "_seal_fault_planted"


def parse_faults(raw: str) -> list[str]:
    """The fault names of a ``SEAL_FAULT`` value, in :data:`FAULTS` order (the parser ``seal_verl.env_vars``
    registers for it).

    Raises:
        ValueError: a name that is not a known fault (a typo must not leave a run unfaulted in silence).
    """
    names = [n.strip() for n in raw.split(",") if n.strip()]
    unknown = sorted(set(names) - set(FAULTS))
    if unknown:
        raise ValueError(f"unknown fault(s) {unknown}; known: {sorted(FAULTS)}")
    return [n for n in FAULTS if n in names]


def planted_faults(environ: Optional[dict] = None) -> list[str]:
    """The faults ``SEAL_FAULT`` asks for, in :data:`FAULTS` order, read through the project's registry of
    settings (``seal_verl.env_vars``: refused without ``SEAL_ALLOW_FAULTS=1``).

    Raises:
        ValueError: a name that is not a known fault, or a fault without that consent (one line naming it).
    """
    from seal_verl import env_vars

    return env_vars.value(FAULT_ENV, environ) or []


def plant_faults() -> list[str]:
    """Plant the faults of ``SEAL_FAULT`` in this (the trainer's) process, announcing each on stdout and stderr;
    returns their names (the trainer records them in every step's metrics and in the run's config.json)."""
    names = planted_faults()
    for name in names:
        banner = f"[seal-verl] FAULT PLANTED ({FAULT_ENV}={name}): {FAULTS[name]}. This run is broken on purpose."
        print(banner, flush=True)
        print(banner, file=sys.stderr, flush=True)
    if "skip_weight_sync" in names:
        require_checked_verl("plant_faults")
        from verl.checkpoint_engine.base import CheckpointEngineManager

        original = CheckpointEngineManager.update_weights
        if not getattr(original, _FAULT_MARK, False):
            calls = {"n": 0}

            @functools.wraps(original)
            def update_weights(self, *args, **kwargs):
                calls["n"] += 1
                if calls["n"] == 1:
                    return original(self, *args, **kwargs)
                print(f"[seal-verl] FAULT skip_weight_sync: weight sync {calls['n']} skipped "
                      f"(args {args} {kwargs})", flush=True)
                try:
                    import asyncio

                    asyncio.get_running_loop()
                except RuntimeError:
                    return {}

                async def skipped():
                    return {}
                return skipped()

            setattr(update_weights, _FAULT_MARK, True)
            CheckpointEngineManager.update_weights = update_weights
    return names

