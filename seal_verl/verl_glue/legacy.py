"""SEAL for verl's legacy trainer (``trainer.use_v1=false``, ``verl/trainer/ppo/ray_trainer.py``).

The legacy ``RayPPOTrainer`` is not configurable by class, so the plugin wraps seven of its hook points in
the process that imports verl (every process; they only act in the legacy trainer's driver):

- ``ray_trainer.compute_advantage`` (module function, called once per step by ``RayPPOTrainer.fit`` with the
  whole batch, reward extras in ``non_tensor_batch``): reads the batch's rollouts once (``batch_read``), runs
  the SEAL step around verl's own ``compute_advantage`` (``step.seal_step``), closes the step and leaves the
  ``seal/...`` metrics in ``batch.meta_info["seal_metrics"]``;
- ``ray_trainer.compute_data_metrics`` (module function, called by ``fit`` when it collects the step's
  metrics): moves ``batch.meta_info["seal_metrics"]`` into the returned metrics dict, which ``fit`` logs;
- ``verl.utils.tracking.Tracking.log`` (the method ``fit`` logs a step's whole metrics dict with, once per step):
  the step's ``metrics.jsonl`` row, with every scalar verl logged for it;
- ``RayPPOTrainer._load_checkpoint`` / ``_save_checkpoint``: restore / save ``global_step_N/seal_state.json``
  and publish the state to the rollout workers before the first rollout;
- ``RayPPOTrainer._validate`` and ``ray_trainer.extract_reward`` (module function, called by ``_validate`` once per
  validation batch, after its reward, with ``meta_info["validate"]``): the validation rollouts, for the run folder.

With ``seal.run_dir`` set, the run folder (``driver.RunFolder``) is kept here too: ``config.json`` and
``provenance.json`` (at the checkpoint load, ``run_start.record_start``), ``state_step_{k}.json`` (by the
driver), ``traces_step_{k}.jsonl`` (in the ``compute_advantage`` wrapper, from the closed step's record), one
``metrics.jsonl`` row per step (at verl's ``Tracking.log`` of the step: every scalar it logs, the ``seal/...``
metrics, the actor's, the timers and the rollout/actor agreement included) and the validation rollouts
(``val_traces.jsonl``).

Every wrapper is a pass-through unless the run's config selects SEAL (``check_run_config``), and
``compute_advantage`` is a pass-through inside an active ``WeightPlan`` (the V1 trainer already handled the
batch). V1's ``compute_advantage_for_multi_trajectories`` binds the original function at import time (the
plugin imports V1 before wrapping), so the V1 path never reaches the wrapper anyway.
"""

from __future__ import annotations

import functools
import logging
import os
from typing import Any, Optional

from seal_verl.verl_glue import state_actor
from seal_verl.verl_glue.advantage import SealWiringError, active_plan
from seal_verl.verl_glue.batch_read import data_proto_advantages, data_proto_val_rows, read_data_proto
from seal_verl.verl_glue.config import SEAL_GRPO, check_run_config, estimator_name
from seal_verl.verl_glue.driver import SealDriver, resume_folder
from seal_verl.verl_glue.multinode import check_multinode
from seal_verl.verl_glue.run_start import record_start
from seal_verl.verl_glue.step import StepWriter, seal_step, zero_excluded_rows

logger = logging.getLogger(__name__)

METRICS_KEY = "seal_metrics"

#: id(root config) -> (that root config, the SealDriver of its run). The legacy trainer has no place to hang
#: per-run state, so it is kept here; the entry holds the config itself, so its id cannot be reused by another
#: config while the entry exists, and a lookup checks identity (one run per process in practice; tests create
#: several).
_DRIVERS: dict[int, tuple[Any, Optional[SealDriver]]] = {}


def _root_of(config: Any) -> Any:
    """The root of an OmegaConf node (``config.algorithm`` -> whole trainer config); None otherwise."""
    try:
        from omegaconf import DictConfig
    except ImportError:  # pragma: no cover
        return None
    if isinstance(config, DictConfig):
        return config._get_root()
    return None


def driver_for(root: Any, *, create: bool = True) -> Optional[SealDriver]:
    """The ``SealDriver`` of the run whose root config is ``root`` (``None`` when SEAL is not selected)."""
    key = id(root)
    entry = _DRIVERS.get(key)
    if entry is not None and entry[0] is not root:
        entry = None  # cannot happen while the entry holds its config; kept as a guard
    if entry is None and create:
        seal_cfg = check_run_config(root)
        entry = (root, None if seal_cfg is None else SealDriver(seal_cfg, actor=state_actor.actor_coordinates(root)))
        _DRIVERS[key] = entry
    return None if entry is None else entry[1]


#: the closed step whose metrics row is still to be written (compute_advantage -> verl's Tracking.log of the same
#: step): the legacy trainer hands the batch to its workers in between, so the record does not ride on it
_PENDING_ROW: dict[str, Any] = {}
#: model path -> tokenizer (or None when it cannot be loaded), for the run folder's cue-marker check
_TOKENIZERS: dict[str, Any] = {}


def _tokenizer(root: Any):
    try:
        path = str(root.actor_rollout_ref.model.path)
    except Exception:  # noqa: BLE001 - a config without a model path (tests)
        return None
    if path not in _TOKENIZERS:
        try:
            from transformers import AutoTokenizer

            _TOKENIZERS[path] = AutoTokenizer.from_pretrained(path)
        except Exception:  # noqa: BLE001 - no tokenizer: the rows say hint_in_text=None
            _TOKENIZERS[path] = None
    return _TOKENIZERS[path]


def forget(root: Any) -> None:
    """Drop the cached driver of ``root`` (tests)."""
    _DRIVERS.pop(id(root), None)


# ------------------------------------------------------------------------------------------------ wrappers


def _seal_compute_advantage(original, data, adv_estimator, gamma, lam, num_repeat, norm_adv_by_std_in_grpo, config):
    kwargs = dict(
        adv_estimator=adv_estimator,
        gamma=gamma,
        lam=lam,
        num_repeat=num_repeat,
        norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo,
        config=config,
    )
    if active_plan() is not None:
        return original(data, **kwargs)
    name = estimator_name(adv_estimator)
    root = _root_of(config)
    if root is None:
        if name == SEAL_GRPO:
            raise SealWiringError(
                "seal_grpo in the legacy trainer needs the full OmegaConf trainer config (compute_advantage was "
                f"called with config of type {type(config).__name__}, so the seal section cannot be found)"
            )
        return original(data, **kwargs)
    driver = driver_for(root)
    if driver is None:
        return original(data, **kwargs)

    if name == SEAL_GRPO and "uid" not in data.non_tensor_batch:
        raise SealWiringError("seal_grpo needs non_tensor_batch['uid'] (the GRPO group index)")
    keep = driver.run_folder is not None
    read = read_data_proto(data, _tokenizer(root) if keep else None, keep_trace=keep)
    step0 = driver.global_step  # steps completed so far = 0-based index of this step
    result = seal_step(driver, read, lambda: original(data, **kwargs), step0=step0, adv_estimator=adv_estimator,
                       exclude=zero_excluded_rows, advantages=data_proto_advantages, close_at=step0 + 1)
    out = result.batch
    if keep:
        StepWriter(driver.run_folder).write_traces(result.record)
        _PENDING_ROW.clear()
        _PENDING_ROW.update(driver=driver, record=result.record)
    out.meta_info.setdefault(METRICS_KEY, {}).update(result.metrics)
    return out


def _seal_compute_data_metrics(original, *args, **kwargs):
    result = original(*args, **kwargs)
    batch = kwargs.get("batch", args[0] if args else None)
    meta = getattr(batch, "meta_info", None)
    if isinstance(meta, dict) and METRICS_KEY in meta:
        result.update(meta.pop(METRICS_KEY))
    return result


def _seal_tracking_log(original, self, data, step, *args, **kwargs):
    """verl's ``Tracking.log``: the legacy trainer logs a step's whole metrics dict once, after its update, timers
    and validation; the step's ``metrics.jsonl`` row is written from that dict (as the V1 trainer writes it in
    ``_compute_metrics``). A pass-through unless a legacy SEAL step of that number waits for its row."""
    record = _PENDING_ROW.get("record")
    if record is not None and isinstance(data, dict) and int(step) == int(record.step):
        pending = dict(_PENDING_ROW)
        _PENDING_ROW.clear()
        StepWriter(pending["driver"].run_folder).write_metrics(record, seconds=data.get("timing_s/step"), metrics=data)
    return original(self, data, step, *args, **kwargs)


def _seal_load_checkpoint(original, self, *args, **kwargs):
    if check_run_config(self.config) is not None:  # before verl reads a checkpoint, as the V1 trainer does
        check_multinode(self.config)
    result = original(self, *args, **kwargs)
    forget(self.config)
    driver = driver_for(self.config)
    if driver is not None:
        steps = int(getattr(self, "global_steps", 0) or 0)
        folder = resume_folder(self.config.trainer, steps)
        if folder is not None:
            driver.load_from(folder, expected_step=steps)
        driver.state_before = driver.state
        record_start(driver, self.config, resumed_from=folder, global_steps=steps)
        driver.publish()
    return result


#: the validation in progress (the trainer's step and tokenizer, the rows read so far), while ``_validate`` runs
_VALIDATING: dict[str, Any] = {}


def _seal_validate(original, self, *args, **kwargs):
    driver = driver_for(self.config, create=False)
    if driver is None or driver.run_folder is None:
        return original(self, *args, **kwargs)
    rows: list = []
    _VALIDATING.update(step=int(getattr(self, "global_steps", 0) or 0), rows=rows,
                       tokenizer=getattr(self, "tokenizer", None))
    try:
        result = original(self, *args, **kwargs)
    finally:
        _VALIDATING.clear()
    if rows:
        driver.run_folder.append_val(rows)
    return result


def _seal_extract_reward(original, batch, *args, **kwargs):
    result = original(batch, *args, **kwargs)
    meta = getattr(batch, "meta_info", None)
    if _VALIDATING and isinstance(meta, dict) and meta.get("validate"):
        _VALIDATING["rows"].extend(data_proto_val_rows(batch, _VALIDATING["tokenizer"], _VALIDATING["step"]))
    return result


def _seal_save_checkpoint(original, self, *args, **kwargs):
    driver = driver_for(self.config, create=False)
    if driver is not None:
        folder = os.path.join(self.config.trainer.default_local_dir, f"global_step_{self.global_steps}")
        driver.save_to(folder)
    return original(self, *args, **kwargs)


def _wrap(original, impl, as_method: bool = False):
    if as_method:

        @functools.wraps(original)
        def wrapper(self, *args, **kwargs):
            return impl(original, self, *args, **kwargs)

    else:

        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            return impl(original, *args, **kwargs)

    wrapper.__seal_wrapper__ = True  # type: ignore[attr-defined]
    wrapper.__seal_original__ = original  # type: ignore[attr-defined]
    return wrapper


def _compute_advantage_impl(original, data, adv_estimator, gamma=1.0, lam=1.0, num_repeat=1,
                            norm_adv_by_std_in_grpo=True, config=None):
    return _seal_compute_advantage(original, data, adv_estimator, gamma, lam, num_repeat, norm_adv_by_std_in_grpo, config)


def install() -> None:
    """Install the seven wrappers (idempotent: an installed wrapper is recognised and kept).

    verl's legacy trainer has no hook for any of them, so they replace module functions and methods of
    ``verl.trainer.ppo.ray_trainer`` by name: checked against the verl version of ``compat``."""
    from verl.trainer.ppo import ray_trainer

    from seal_verl.verl_glue.compat import require_checked_verl

    require_checked_verl("legacy_trainer_wrappers")

    if not getattr(ray_trainer.compute_advantage, "__seal_wrapper__", False):
        ray_trainer.compute_advantage = _wrap(ray_trainer.compute_advantage, _compute_advantage_impl)
    if not getattr(ray_trainer.compute_data_metrics, "__seal_wrapper__", False):
        ray_trainer.compute_data_metrics = _wrap(ray_trainer.compute_data_metrics, _seal_compute_data_metrics)
    cls = ray_trainer.RayPPOTrainer
    if not getattr(cls._load_checkpoint, "__seal_wrapper__", False):
        cls._load_checkpoint = _wrap(cls._load_checkpoint, _seal_load_checkpoint, as_method=True)
    if not getattr(cls._save_checkpoint, "__seal_wrapper__", False):
        cls._save_checkpoint = _wrap(cls._save_checkpoint, _seal_save_checkpoint, as_method=True)
    if not getattr(cls._validate, "__seal_wrapper__", False):
        cls._validate = _wrap(cls._validate, _seal_validate, as_method=True)
    if not getattr(ray_trainer.extract_reward, "__seal_wrapper__", False):
        ray_trainer.extract_reward = _wrap(ray_trainer.extract_reward, _seal_extract_reward)
    from verl.utils.tracking import Tracking

    if not getattr(Tracking.log, "__seal_wrapper__", False):
        Tracking.log = _wrap(Tracking.log, _seal_tracking_log, as_method=True)


def installed() -> bool:
    from verl.trainer.ppo import ray_trainer
    from verl.utils.tracking import Tracking

    return all(
        getattr(f, "__seal_wrapper__", False)
        for f in (
            ray_trainer.compute_advantage,
            ray_trainer.compute_data_metrics,
            ray_trainer.RayPPOTrainer._load_checkpoint,
            ray_trainer.RayPPOTrainer._save_checkpoint,
            ray_trainer.RayPPOTrainer._validate,
            ray_trainer.extract_reward,
            Tracking.log,
        )
    )
