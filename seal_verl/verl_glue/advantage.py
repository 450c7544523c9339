"""The ``seal_grpo`` advantage estimator, and SEAL's rule for checker errors in verl's GRPO.

verl calls a registered estimator with token rewards, the response mask, the uid index and the algorithm
config only, never with per-sample data. The trainer-side glue (the V1 trainer subclass in ``trainer.py``,
or the legacy ``compute_advantage`` wrapper in ``legacy.py``) therefore reads the reward extras itself
(``seal_verl.core.extras.decode``), computes the per-trajectory weights and activates a ``WeightPlan`` around
verl's own advantage computation; the estimator then computes verl's GRPO outcome advantage (group-normalised)
and multiplies it by the plan's weights (``seal_verl.core.weighting.apply_weights``).

Outside an active plan the estimator raises ``SealWiringError``: selecting ``seal_grpo`` without the part
that supplies labels is an error at the first advantage computation, never a silent weight of 1.

A rollout whose verification raised (a ``checker_error`` turn: the verifier failed, not the agent) is excluded
from the update under every estimator the SEAL trainer side runs (``seal_grpo`` and plain ``grpo``, so an
ablation differs from SEAL only in its weights): it leaves its group's GRPO statistics (the group is normalised
over the other members), its advantage is 0, and the trainer glue sets its response mask to 0 so that it adds
nothing to the loss, the KL term or the token-mean denominator. verl's ``grpo`` estimator is a plain function
its advantage step calls by module attribute, so the rule reaches it through a wrapper that acts only inside an
active plan (:func:`install_grpo_exclusion`).
"""

from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Optional

import numpy as np

from seal_verl.core import extras as X
from seal_verl.verl_glue.config import SEAL_GRPO


class SealWiringError(X.ExtrasError):
    """SEAL's trainer side is not wired: estimator without labels, missing reward extras, misalignment."""


_HINT = (
    "algorithm.adv_estimator=seal_grpo needs the SEAL trainer side: with the V1 trainer (verl's default) set "
    "trainer.v1.trainer_mode=seal; with trainer.use_v1=false the seal_verl plugin's compute_advantage wrapper "
    "does it (check that the plugin is installed: `pip install -e .` registers the verl.plugins entry point). "
    "The reward function must return the seal_* extras (reward.custom_reward_function -> "
    "reward_fns/bfcl_reward.py:compute_score)."
)


def check_extras_present(keys: Any, where: str) -> None:
    """Raise ``SealWiringError`` listing the SEAL reward extras missing among ``keys``."""
    absent = X.missing(keys)
    if absent:
        raise SealWiringError(f"{X.MissingExtras(absent, where)}. {_HINT}")


def grade_of(extras: Mapping[str, Any], row: int = 0) -> X.Grade:
    """One rollout's reward extras, decoded (``extras.decode``); a broken contract is a ``SealWiringError``."""
    try:
        return X.decode(extras, row)
    except X.MissingExtras as exc:
        raise SealWiringError(f"{exc}. {_HINT}") from None
    except X.ExtrasError as exc:
        raise SealWiringError(str(exc)) from exc


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
        used: how many times the ``seal_grpo`` estimator consumed the plan.
        rows: the rows' identities (see above), or None to check group ids only.
        grpo: after the estimator ran, the per-row GRPO advantage before weighting (one value per rollout:
            an outcome advantage is the same on every response token), for the run folder's checks.
        grouped: how many GRPO group normalisations ran under the plan (``seal_grpo`` or verl's ``grpo``).
    """

    uids: np.ndarray
    weights: Any  # torch.Tensor [bs]
    apply_to: str = "all"
    exclude: Optional[Any] = None
    used: int = 0
    rows: Optional[list] = None
    grpo: Optional[list] = None
    grouped: int = 0

    def check_alignment(self, index: Any, response_mask: Any = None) -> None:
        index = np.asarray(index, dtype=object)
        if len(index) != len(self.uids) or not np.array_equal(index, self.uids):
            raise SealWiringError(
                f"the GRPO advantage received {len(index)} rows whose uids do not match the {len(self.uids)} rows the "
                "weights were computed for (row order changed between reading the extras and computing the "
                "advantage)"
            )
        if self.rows is None or response_mask is None:
            return
        got = row_identities(index, response_mask)
        moved = [i for i, (a, b) in enumerate(zip(got, self.rows)) if a != b]
        if moved:
            raise SealWiringError(
                f"the GRPO advantage received {len(moved)} rows (e.g. row {moved[0]}) that are not the rollouts the weights "
                "were computed for, though their group ids match: the row order changed within a group between "
                "reading the extras and computing the advantage"
            )


_ACTIVE_PLAN: contextvars.ContextVar[Optional[WeightPlan]] = contextvars.ContextVar("seal_weight_plan", default=None)


def active_plan() -> Optional[WeightPlan]:
    return _ACTIVE_PLAN.get()


@contextlib.contextmanager
def weight_plan(plan: WeightPlan) -> Iterator[WeightPlan]:
    """Make ``plan`` the one ``seal_grpo`` (and verl's ``grpo``, for the exclusions) uses inside the block."""
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


def _grpo_excluding(original: Callable, plan: WeightPlan, token_level_rewards, response_mask, index, epsilon,
                    norm_adv_by_std_in_grpo):
    """verl's GRPO outcome advantage (``original``) on the rows of ``plan``, its excluded rows out of their groups:
    each forms a group of its own, so it neither shifts nor scales its real group, and its advantage is 0."""
    import torch

    plan.check_alignment(index, response_mask)
    exclude = None if plan.exclude is None else np.asarray(plan.exclude, dtype=bool)
    group_index = np.asarray(index, dtype=object)
    if exclude is not None and exclude.any():
        group_index = np.array([f"__seal_excluded_row_{i}__" if ex else u
                                for i, (u, ex) in enumerate(zip(group_index, exclude))], dtype=object)
    advantages, returns = original(token_level_rewards=token_level_rewards, response_mask=response_mask,
                                   index=group_index, epsilon=epsilon, norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo)
    if exclude is not None and exclude.any():
        rows = torch.as_tensor(exclude, device=advantages.device).unsqueeze(-1)
        advantages = advantages.masked_fill(rows, 0.0)
        returns = returns.masked_fill(rows, 0.0)
    plan.grouped += 1
    return advantages, returns


def _verl_grpo() -> Callable:
    """verl's own GRPO outcome advantage (unwrapped, whether or not :func:`install_grpo_exclusion` ran)."""
    from verl.trainer.ppo import core_algos

    fn = core_algos.compute_grpo_outcome_advantage
    return getattr(fn, "__seal_original__", fn)


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
    from seal_verl.core.weighting import apply_weights

    plan = _ACTIVE_PLAN.get()
    if plan is None:
        raise SealWiringError(f"seal_grpo was called without per-trajectory SEAL weights. {_HINT}")
    if index is None:
        raise SealWiringError("seal_grpo needs the uid index of the batch (non_tensor_batch['uid'])")
    norm = bool(_cfg_get(config, "norm_adv_by_std_in_grpo", True))
    advantages, _ = _grpo_excluding(_verl_grpo(), plan, token_level_rewards, response_mask, index, epsilon, norm)
    plan.grpo = per_row_advantage(advantages, response_mask)
    weighted = apply_weights(advantages, response_mask, plan.weights, plan.apply_to)
    plan.used += 1
    return weighted, weighted


def _excluding_wrapper(original: Callable) -> Callable:
    def compute_grpo_outcome_advantage(token_level_rewards, response_mask, index, epsilon: float = 1e-6,
                                       norm_adv_by_std_in_grpo: bool = True, config: Any = None):
        plan = _ACTIVE_PLAN.get()
        if plan is None:
            return original(token_level_rewards=token_level_rewards, response_mask=response_mask, index=index,
                            epsilon=epsilon, norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo, config=config)
        return _grpo_excluding(original, plan, token_level_rewards, response_mask, index, epsilon,
                               norm_adv_by_std_in_grpo)

    compute_grpo_outcome_advantage.__seal_original__ = original  # type: ignore[attr-defined]
    return compute_grpo_outcome_advantage


def install_grpo_exclusion() -> None:
    """Give verl's ``grpo`` estimator the checker-error rule of ``seal_grpo`` inside an active plan (outside one
    it is verl's function unchanged); idempotent. See the module docstring."""
    from seal_verl.verl_glue.compat import wrap_grpo_outcome_advantage

    wrap_grpo_outcome_advantage(_excluding_wrapper)


def per_row_advantage(advantages, response_mask) -> list[float]:
    """One advantage per row: the mean over its response tokens (mask 1; 0.0 for a row without any)."""
    out = []
    for a, m in zip(advantages, response_mask):
        sel = a[m.bool()]
        out.append(float(sel.float().mean()) if sel.numel() else 0.0)
    return out


seal_grpo_advantage.__seal_estimator__ = True  # type: ignore[attr-defined]


def register_estimator() -> None:
    """Register ``seal_grpo`` with verl and give verl's ``grpo`` the same checker-error rule (idempotent, also
    across a re-executed plugin module)."""
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY, register_adv_est

    install_grpo_exclusion()
    existing = ADV_ESTIMATOR_REGISTRY.get(SEAL_GRPO)
    if existing is not None and getattr(existing, "__seal_estimator__", False):
        return
    register_adv_est(SEAL_GRPO)(seal_grpo_advantage)


def cue_metrics(tokens) -> dict[str, float]:
    """Cue tokens per rollout (the reward extras' count of each rollout; ``None`` for a padding row, skipped)."""
    values = [float(t) for t in tokens if t is not None]
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
