"""The ``seal_grpo`` advantage estimator and the reward extras it is fed from.

verl calls a registered estimator with token rewards, the response mask, the uid index and the algorithm
config only, never with per-sample data. The trainer-side glue (the V1 trainer subclass in ``trainer.py``,
or the legacy ``compute_advantage`` wrapper in ``legacy.py``) therefore reads the reward extras itself,
computes the per-trajectory weights and activates a ``WeightPlan`` around verl's own advantage
computation; the estimator then computes verl's GRPO outcome advantage (group-normalised) and multiplies it
by the plan's weights (``seal_verl.core.weighting.apply_weights``).

Outside an active plan the estimator raises ``SealWiringError``: selecting ``seal_grpo`` without the part
that supplies labels is an error at the first advantage computation, never a silent weight of 1.

A rollout whose verification raised (a ``checker_error`` turn: the verifier failed, not the agent) is excluded
from the update: it leaves its group's GRPO statistics (the group is normalised over the other members), its
advantage is 0, and the trainer glue sets its response mask to 0 so that it adds nothing to the loss, the KL
term or the token-mean denominator (``excluded_rows``).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
from dataclasses import dataclass
from typing import Any, Iterator, Optional

import numpy as np

from seal_verl.core import taxonomy as tx
from seal_verl.verl_glue.config import SEAL_GRPO

#: Reward-extra key carrying p_j(z) for each profile key.
PROFILE_PREFIX = "seal_p_"
PROFILE_FIELDS: tuple[str, ...] = tuple(PROFILE_PREFIX + k for k in tx.PROFILE_KEYS)
LABELS_FIELD = "seal_labels"
ABSTENTION_FIELD = "seal_abstention"
CATEGORY_FIELD = "seal_category"
SCORE_FIELD = "score"
CHECKER_ERROR_FIELD = "seal_checker_error"
#: Every reward extra the trainer side reads.
REQUIRED_FIELDS: tuple[str, ...] = PROFILE_FIELDS + (LABELS_FIELD, ABSTENTION_FIELD, CATEGORY_FIELD, SCORE_FIELD)


class SealWiringError(RuntimeError):
    """SEAL's trainer side is not wired: estimator without labels, missing reward extras, misalignment."""


_HINT = (
    "algorithm.adv_estimator=seal_grpo needs the SEAL trainer side: with the V1 trainer (verl's default) set "
    "trainer.v1.trainer_mode=seal; with trainer.use_v1=false the seal_verl plugin's compute_advantage wrapper "
    "does it (check that the plugin is installed: `pip install -e .` registers the verl.plugins entry point). "
    "The reward function must return the seal_* extras (reward.custom_reward_function -> "
    "reward_fns/bfcl_reward.py:compute_score)."
)


# --------------------------------------------------------------------------------------------------------
# reward extras -> profiles and records
# --------------------------------------------------------------------------------------------------------


def _scalar(value: Any) -> Any:
    """Unwrap numpy scalars / 0-d arrays and 1-element containers that batching wraps values in."""
    if isinstance(value, np.ndarray):
        if value.ndim == 0 or value.size == 1:
            return value.reshape(-1)[0].item() if value.dtype != object else value.reshape(-1)[0]
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


def _json_list(value: Any, key: str, row: int) -> list:
    value = _scalar(value)
    if isinstance(value, (bytes, bytearray)):
        value = value.decode()
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise SealWiringError(f"reward extra {key!r} of row {row} is not valid JSON: {value[:200]!r}") from e
    if not isinstance(value, list):
        raise SealWiringError(f"reward extra {key!r} of row {row} must be a JSON list, got {value!r}")
    return value


def check_extras_present(keys: Any, where: str) -> None:
    """Raise ``SealWiringError`` listing the missing SEAL reward extras among ``keys``."""
    present = set(keys)
    missing = [k for k in REQUIRED_FIELDS if k not in present]
    if missing:
        shown = ", ".join(missing[:6]) + (f" (+{len(missing) - 6} more)" if len(missing) > 6 else "")
        raise SealWiringError(f"SEAL reward extras missing from {where}: {shown}. {_HINT}")


def profile_from_extras(extras: dict, row: int = 0) -> dict[str, float]:
    """p_j(z) from one sample's reward extras (``seal_p_<key>`` for every key of ``PROFILE_KEYS``)."""
    out = {}
    for key, fieldname in zip(tx.PROFILE_KEYS, PROFILE_FIELDS):
        if fieldname not in extras:
            check_extras_present(extras.keys(), f"the reward extras of row {row}")
        try:
            out[key] = float(_scalar(extras[fieldname]))
        except (TypeError, ValueError):
            raise SealWiringError(f"reward extra {fieldname!r} of row {row} is not a number: {extras[fieldname]!r}")
    return out


def record_from_extras(extras: dict, row: int = 0):
    """The ``TrajectoryRecord`` (category, labels, abstention, reward=score) of one sample."""
    from seal_verl.core.profile import TrajectoryRecord

    check_extras_present(extras.keys(), f"the reward extras of row {row}")
    labels = _json_list(extras[LABELS_FIELD], LABELS_FIELD, row)
    abstention = [bool(x) for x in _json_list(extras[ABSTENTION_FIELD], ABSTENTION_FIELD, row)]
    category = _scalar(extras[CATEGORY_FIELD])
    try:
        reward = float(_scalar(extras[SCORE_FIELD]))
    except (TypeError, ValueError):
        raise SealWiringError(f"reward extra 'score' of row {row} is not a number: {extras[SCORE_FIELD]!r}")
    try:
        return TrajectoryRecord(category=str(category), labels=[str(x) for x in labels], abstention=abstention, reward=reward)
    except ValueError as e:
        raise SealWiringError(f"reward extras of row {row} do not form a valid trajectory record: {e}") from e


def excluded_rows(rows: list) -> list[bool]:
    """Per row: True when the rollout's verification raised (``seal_checker_error`` set, or a ``checker_error``
    label): the verifier failed, so the rollout must not enter the update as a failure. ``None`` rows (padding)
    are not excluded here (they carry no evidence and the trainer already treats them apart)."""
    out = []
    for i, r in enumerate(rows):
        if r is None:
            out.append(False)
            continue
        flag = r.get(CHECKER_ERROR_FIELD)
        if flag is not None:
            try:
                out.append(float(_scalar(flag)) > 0)
                continue
            except (TypeError, ValueError):
                raise SealWiringError(f"reward extra {CHECKER_ERROR_FIELD!r} of row {i} is not a number: {flag!r}")
        out.append(tx.CHECKER_ERROR in _json_list(r.get(LABELS_FIELD, "[]"), LABELS_FIELD, i))
    return out


def rows_from_non_tensor_batch(non_tensor_batch: dict, n: int) -> list[dict]:
    """Per-row dicts of the SEAL extras from a DataProto's ``non_tensor_batch`` (legacy trainer)."""
    check_extras_present(non_tensor_batch.keys(), "the batch (DataProto.non_tensor_batch)")
    rows = []
    for i in range(n):
        rows.append({k: non_tensor_batch[k][i] for k in REQUIRED_FIELDS})
    return rows


# --------------------------------------------------------------------------------------------------------
# the weight plan and the estimator
# --------------------------------------------------------------------------------------------------------


def row_identities(uids: Any, response_mask: Any) -> list[str]:
    """One identity per batch row, computable both where the weights are made and inside the estimator.

    The estimator sees only the uid index (a GRPO group id, shared by every rollout of a prompt) and the
    response mask. A row's uid plus the positions of its LLM tokens tells the rollouts of a group apart
    (identical positions mean the same token layout), so a reordering inside a group is caught too.
    """
    import hashlib

    import torch

    mask = torch.as_tensor(response_mask) if not getattr(response_mask, "is_nested", False) else response_mask
    rows = list(mask.unbind()) if getattr(mask, "is_nested", False) else list(mask)
    out = []
    for uid, row in zip(list(uids), rows, strict=True):
        positions = torch.nonzero(torch.as_tensor(row).reshape(-1) != 0).reshape(-1).to(torch.int64)
        digest = hashlib.blake2b(positions.numpy().tobytes(), digest_size=8).hexdigest()
        out.append(f"{uid}/{digest}")
    return out


@dataclass
class WeightPlan:
    """Per-row weights for the next advantage computation.

    ``uids`` are the rows' GRPO group ids, ``rows`` (optional) their :func:`row_identities`. The estimator
    checks that it is called on exactly these rows in this order: group ids alone repeat within a group, so
    two rollouts of one prompt swapped between reading the extras and computing the advantage would pass a
    uid comparison and silently take each other's weights.

    Attributes:
        uids, weights, apply_to: the GRPO group of each row, its weight w_j, and which advantages w scales.
        exclude: per row, True to keep it out of its group's statistics and the update (checker errors).
        used: how many times the estimator consumed the plan.
        rows: the rows' identities (see above), or None to check group ids only.
        grpo: after the estimator ran, the per-row GRPO advantage before weighting (one value per rollout:
            an outcome advantage is the same on every response token), for the run folder's checks.
    """

    uids: np.ndarray
    weights: Any  # torch.Tensor [bs]
    apply_to: str = "all"
    exclude: Optional[Any] = None
    used: int = 0
    rows: Optional[list] = None
    grpo: Optional[list] = None

    def check_alignment(self, index: Any, response_mask: Any = None) -> None:
        index = np.asarray(index, dtype=object)
        if len(index) != len(self.uids) or not np.array_equal(index, self.uids):
            raise SealWiringError(
                f"seal_grpo received {len(index)} rows whose uids do not match the {len(self.uids)} rows the "
                "weights were computed for (row order changed between reading the extras and computing the "
                "advantage)"
            )
        if self.rows is None or response_mask is None:
            return
        got = row_identities(index, response_mask)
        moved = [i for i, (a, b) in enumerate(zip(got, self.rows)) if a != b]
        if moved:
            raise SealWiringError(
                f"seal_grpo received {len(moved)} rows (e.g. row {moved[0]}) that are not the rollouts the weights "
                "were computed for, though their group ids match: the row order changed within a group between "
                "reading the extras and computing the advantage"
            )


_ACTIVE_PLAN: contextvars.ContextVar[Optional[WeightPlan]] = contextvars.ContextVar("seal_weight_plan", default=None)


def active_plan() -> Optional[WeightPlan]:
    return _ACTIVE_PLAN.get()


@contextlib.contextmanager
def weight_plan(plan: WeightPlan) -> Iterator[WeightPlan]:
    """Make ``plan`` the one ``seal_grpo`` uses inside the block."""
    token = _ACTIVE_PLAN.set(plan)
    try:
        yield plan
    finally:
        _ACTIVE_PLAN.reset(token)


def _cfg_get(config: Any, key: str, default: Any) -> Any:
    if config is None:
        return default
    if hasattr(config, "get"):
        try:
            value = config.get(key, default)
            return default if value is None else value
        except (TypeError, AttributeError):
            pass
    return getattr(config, key, default)


def seal_grpo_advantage(
    token_level_rewards,
    response_mask,
    index: Optional[np.ndarray] = None,
    config: Any = None,
    epsilon: float = 1e-6,
    **kwargs: Any,
):
    """GRPO outcome advantage (verl's ``compute_grpo_outcome_advantage``) times the SEAL weight w_j.

    Registered as ``seal_grpo``. ``norm_adv_by_std_in_grpo`` is read from the algorithm config as verl's
    GRPO branch does. Returns ``(advantages, returns)`` like every verl estimator (both the weighted
    advantages, as GRPO returns its scores twice).
    """
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    from seal_verl.core.weighting import apply_weights

    plan = _ACTIVE_PLAN.get()
    if plan is None:
        raise SealWiringError(f"seal_grpo was called without per-trajectory SEAL weights. {_HINT}")
    if index is None:
        raise SealWiringError("seal_grpo needs the uid index of the batch (non_tensor_batch['uid'])")
    plan.check_alignment(index, response_mask)
    norm = bool(_cfg_get(config, "norm_adv_by_std_in_grpo", True))
    exclude = None if plan.exclude is None else np.asarray(plan.exclude, dtype=bool)
    group_index = np.asarray(index, dtype=object)
    if exclude is not None and exclude.any():
        # an excluded row forms a group of its own, so it neither shifts nor scales its real group
        group_index = np.array([f"__seal_excluded_row_{i}__" if ex else u for i, (u, ex) in enumerate(zip(group_index, exclude))],
                               dtype=object)
    advantages, _ = compute_grpo_outcome_advantage(
        token_level_rewards=token_level_rewards,
        response_mask=response_mask,
        index=group_index,
        epsilon=epsilon,
        norm_adv_by_std_in_grpo=norm,
    )
    if exclude is not None and exclude.any():
        import torch

        advantages = advantages.masked_fill(torch.as_tensor(exclude, device=advantages.device).unsqueeze(-1), 0.0)
    plan.grpo = per_row_advantage(advantages, response_mask)
    weighted = apply_weights(advantages, response_mask, plan.weights, plan.apply_to)
    plan.used += 1
    return weighted, weighted


def per_row_advantage(advantages, response_mask) -> list[float]:
    """One advantage per row: the mean over its response tokens (mask 1; 0.0 for a row without any)."""
    out = []
    for a, m in zip(advantages, response_mask):
        sel = a[m.bool()]
        out.append(float(sel.float().mean()) if sel.numel() else 0.0)
    return out


def token_range(advantages, response_mask) -> list[Optional[tuple[float, float]]]:
    """Per row: (min, max) of the advantage over its response tokens, None for a row without any."""
    out = []
    for a, m in zip(advantages, response_mask):
        sel = a[m.bool()]
        out.append((float(sel.min()), float(sel.max())) if sel.numel() else None)
    return out


seal_grpo_advantage.__seal_estimator__ = True  # type: ignore[attr-defined]


def register_estimator() -> None:
    """Register ``seal_grpo`` with verl (idempotent, also across a re-executed plugin module)."""
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY, register_adv_est

    existing = ADV_ESTIMATOR_REGISTRY.get(SEAL_GRPO)
    if existing is not None and getattr(existing, "__seal_estimator__", False):
        return
    register_adv_est(SEAL_GRPO)(seal_grpo_advantage)


def cue_metrics(rows) -> dict[str, float]:
    """Cue tokens per rollout (``seal_cue_tokens`` of the reward extras; padding rows ``None`` skipped)."""
    values = [float((r or {}).get("seal_cue_tokens", 0.0) or 0.0) for r in rows if r is not None]
    if not values:
        return {}
    return {"seal/cue_tokens/mean": sum(values) / len(values), "seal/cue_tokens/max": max(values)}


def weight_metrics(weights, prefix: str = "seal/weight") -> dict[str, float]:
    """mean/std/min/max of a weight tensor (empty -> nothing)."""
    import torch

    w = torch.as_tensor(weights, dtype=torch.float32).reshape(-1)
    if w.numel() == 0:
        return {}
    return {
        f"{prefix}/mean": float(w.mean()),
        f"{prefix}/std": float(w.std(unbiased=False)),
        f"{prefix}/min": float(w.min()),
        f"{prefix}/max": float(w.max()),
    }
