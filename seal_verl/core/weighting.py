"""Policy side of SEAL: utilities rho, the trajectory weight w_j and its use on advantages.

``w_j = clip(sum_z p_j(z) rho(z), w_min, w_max)`` rescales trajectory j's GRPO advantage after group
normalisation, so that rollouts showing the failure modes the utility table values most move the policy
more. Everything here is a pure function with its own tests; the verl trainer hook only calls it.

torch is imported lazily inside the two tensor functions so that the rest (config, weights, dynamic rho)
can be used by torch-free code such as the closed loop and offline analysis.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Dict, Optional, Tuple

from seal_verl.core import taxonomy as tx
from seal_verl.core.options import from_mapping

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch

    from seal_verl.core.profile import StepProfile

__all__ = [
    "APPLY_TO",
    "WeightingConfig",
    "trajectory_weight",
    "weights_for_batch",
    "apply_weights",
    "update_rho",
]

#: Which advantages the weight applies to: every response token, or only those with a positive / negative
#: advantage (e.g. "negative" sharpens the push away from failures without inflating the credit of successes).
APPLY_TO: tuple[str, ...] = ("all", "positive", "negative")


#: Largest count setting (``warmup_steps``, ``n_conf``): far beyond any run, and it keeps the value a 64-bit
#: integer wherever it is logged or stored.
MAX_COUNT = 1_000_000_000


def _finite(name: str, value: Any) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(v):
        raise ValueError(f"{name} must be finite, got {v}")
    return v


@dataclass
class WeightingConfig:
    """Configuration of the trajectory weight and of dynamic rho.

    Attributes:
        w_min, w_max: clip bounds of the weight (paper defaults 0.5 and 2.0); they keep one trajectory from
            dominating or vanishing from the update.
        apply_to: ``"all"``, ``"positive"`` or ``"negative"`` advantages (see ``APPLY_TO``).
        warmup_steps: training steps with weight 1 everywhere, so the first updates are plain GRPO while the
            profile is still uninformed.
        rho: the utility table, keys from ``taxonomy.PROFILE_KEYS``; missing keys take
            ``taxonomy.DEFAULT_RHO``. Serves as the base table of dynamic rho.
        dynamic: adapt rho across steps from C_t (``update_rho``), as the reference code does; static
            otherwise. On by default everywhere (core, recipe, dry run); the paper's static table is
            ``preset=paper`` (docs/paper_settings.md).
        alpha: strength of the dynamic adjustment (>= 0).
        beta: EMA rate of dynamic rho, in (0, 1].
        n_conf: number of trajectories carrying a label needed for full confidence in its statistics (>= 1);
            below it the adjustment is scaled down.
        rho_clip: (low, high) bounds of a dynamic rho target, inside ``[taxonomy.RHO_MIN, taxonomy.RHO_MAX]``.
    """

    w_min: float = 0.5
    w_max: float = 2.0
    apply_to: str = "all"
    warmup_steps: int = 0
    rho: Dict[str, float] = field(default_factory=lambda: dict(tx.DEFAULT_RHO))
    dynamic: bool = True
    alpha: float = 1.0
    beta: float = 0.25
    n_conf: int = 32
    rho_clip: Tuple[float, float] = (0.1, 5.0)

    def validate(self) -> "WeightingConfig":
        """Check every field; raise ``ValueError`` with a message naming the field and the allowed range.

        On success the config is normalised in place (``rho`` becomes the full table with defaults filled
        in, numbers become floats/ints, ``rho_clip`` a tuple) and returned, so ``cfg.validate()`` can be
        chained.
        """
        self.rho = tx.check_rho(self.rho if self.rho is not None else {})
        self.w_min = _finite("w_min", self.w_min)
        self.w_max = _finite("w_max", self.w_max)
        if self.w_min <= 0:
            raise ValueError(f"w_min must be > 0, got {self.w_min}")
        if self.w_min > self.w_max:
            raise ValueError(f"w_min ({self.w_min}) must not exceed w_max ({self.w_max})")
        if self.apply_to not in APPLY_TO:
            raise ValueError(f"apply_to must be one of {', '.join(APPLY_TO)}; got {self.apply_to!r}")
        if isinstance(self.warmup_steps, bool) or int(self.warmup_steps) != self.warmup_steps:
            raise ValueError(f"warmup_steps must be an integer, got {self.warmup_steps!r}")
        self.warmup_steps = int(self.warmup_steps)
        if self.warmup_steps < 0:
            raise ValueError(f"warmup_steps must be >= 0, got {self.warmup_steps}")
        if self.warmup_steps > MAX_COUNT:
            raise ValueError(f"warmup_steps must be <= {MAX_COUNT}, got {self.warmup_steps}")
        self.dynamic = bool(self.dynamic)
        self.alpha = _finite("alpha", self.alpha)
        if self.alpha < 0:
            raise ValueError(f"alpha must be >= 0, got {self.alpha}")
        self.beta = _finite("beta", self.beta)
        if not (0.0 < self.beta <= 1.0):
            raise ValueError(f"beta must be in (0, 1], got {self.beta}")
        if isinstance(self.n_conf, bool) or int(self.n_conf) != self.n_conf:
            raise ValueError(f"n_conf must be an integer, got {self.n_conf!r}")
        self.n_conf = int(self.n_conf)
        if self.n_conf < 1:
            raise ValueError(f"n_conf must be >= 1, got {self.n_conf}")
        if self.n_conf > MAX_COUNT:
            raise ValueError(f"n_conf must be <= {MAX_COUNT}, got {self.n_conf}")
        clip = self.rho_clip
        try:
            n = len(clip)
        except TypeError:
            n = None
        if n != 2 or isinstance(clip, (str, bytes, dict)):  # a huge list is named by its length, not quoted
            shown = f"a {type(clip).__name__} of {n} entries" if n is not None and n > 8 else repr(clip)[:80]
            raise ValueError(f"rho_clip must be a pair (low, high), got {shown}")
        lo, hi = clip
        lo, hi = _finite("rho_clip[0]", lo), _finite("rho_clip[1]", hi)
        if not (tx.RHO_MIN <= lo <= hi <= tx.RHO_MAX):
            raise ValueError(
                f"rho_clip must satisfy {tx.RHO_MIN} <= low <= high <= {tx.RHO_MAX}; got ({lo}, {hi})"
            )
        self.rho_clip = (lo, hi)
        return self

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (``rho_clip`` as a list)."""
        d = asdict(self)
        d["rho"] = dict(self.rho)
        d["rho_clip"] = list(self.rho_clip)
        return d

    @classmethod
    def from_dict(cls, d: Optional[dict[str, Any]]) -> "WeightingConfig":
        """Build and validate a config from a plain dict (e.g. a Hydra node converted to a container).

        Args:
            d: field values; ``None`` or ``{}`` gives the defaults. Unknown keys raise ``ValueError`` listing
                the allowed keys, so a misspelt option does not silently fall back to its default.
        """
        d = dict(d or {})
        if d.get("rho") is not None:
            d["rho"] = dict(d["rho"])
        if d.get("rho_clip") is not None and not isinstance(d["rho_clip"], (str, bytes)):
            d["rho_clip"] = tuple(d["rho_clip"])
        return from_mapping(cls, d, "weighting option").validate()


def trajectory_weight(profile: dict[str, float], rho: dict[str, float], w_min: float, w_max: float) -> float:
    """w_j = clip(sum_z p_j(z) rho(z), w_min, w_max).

    Args:
        profile: p_j(z) from ``profile.trajectory_profile``; keys from ``taxonomy.PROFILE_KEYS``, shares in
            [0, 1]. Missing keys count as 0.
        rho: the utility table; must hold every key that has a non-zero share.
        w_min, w_max: clip bounds, 0 < w_min <= w_max.

    Returns:
        The weight. A profile that is all zeros (no labelled turn: empty trajectory or only checker errors)
        carries no evidence about the agent, so it gets exactly 1.0, i.e. its advantage is left as GRPO
        computed it (not clipped to the bounds, since 1.0 means "do not reweight").

    Raises:
        ValueError: unknown profile key, share outside [0, 1] or not finite, missing rho entry, bad bounds.
    """
    if not (0 < w_min <= w_max):
        raise ValueError(f"need 0 < w_min <= w_max, got w_min={w_min}, w_max={w_max}")
    total = 0.0
    mass = 0.0
    for key, share in profile.items():
        if key not in tx.PROFILE_KEYS:
            raise ValueError(f"unknown profile key {key!r}; allowed keys: {', '.join(tx.PROFILE_KEYS)}")
        p = float(share)
        if not (math.isfinite(p) and 0.0 <= p <= 1.0):
            raise ValueError(f"profile share for {key!r} must be in [0, 1], got {share!r}")
        if p == 0.0:
            continue
        if key not in rho:
            raise ValueError(f"rho has no utility for {key!r}; pass a full table (taxonomy.check_rho fills defaults)")
        total += p * float(rho[key])
        mass += p
    if mass == 0.0:
        return 1.0
    return min(max(total, float(w_min)), float(w_max))


def weights_for_batch(
    profiles: list[dict[str, float]], rho: dict[str, float], cfg: WeightingConfig, step: int
) -> "torch.Tensor":
    """Weights of a batch of trajectories as a float32 tensor of shape ``[len(profiles)]``.

    Args:
        profiles: one p_j per trajectory, in batch order.
        rho: the current utility table (static, or dynamic rho_t).
        cfg: supplies the clip bounds and ``warmup_steps``.
        step: the current training step (0-based). While ``step < cfg.warmup_steps`` every weight is 1.0,
            so the weighting starts only once the policy and the profile have settled.
    """
    import torch

    if step < cfg.warmup_steps:
        return torch.ones(len(profiles), dtype=torch.float32)
    return torch.tensor(
        [trajectory_weight(p, rho, cfg.w_min, cfg.w_max) for p in profiles], dtype=torch.float32
    )


def apply_weights(
    advantages: "torch.Tensor", response_mask: "torch.Tensor", weights: "torch.Tensor", apply_to: str = "all"
) -> "torch.Tensor":
    """A~_j = w_j * A_j on trajectory j's response tokens; returns a new tensor.

    Applied after GRPO's group normalisation. A group whose rewards are all equal has zero advantages and
    stays at zero whatever the weight: reweighting changes how strongly an informative trajectory moves the
    policy, never creates a signal where GRPO has none.

    Args:
        advantages: ``[bs, T]`` token advantages.
        response_mask: ``[bs, T]``, non-zero on response tokens the loss uses. Positions with mask 0
            (padding, observation tokens such as cues) are returned unchanged.
        weights: ``[bs]`` per-trajectory weights (e.g. from ``weights_for_batch``).
        apply_to: ``"all"``; ``"positive"`` to scale only tokens with advantage > 0; ``"negative"`` only
            tokens with advantage < 0.

    Raises:
        ValueError: shape mismatch, unknown ``apply_to``, or non-finite weights.
    """
    import torch

    if apply_to not in APPLY_TO:
        raise ValueError(f"apply_to must be one of {', '.join(APPLY_TO)}; got {apply_to!r}")
    if advantages.dim() != 2:
        raise ValueError(f"advantages must be [bs, T], got shape {tuple(advantages.shape)}")
    if tuple(response_mask.shape) != tuple(advantages.shape):
        raise ValueError(
            f"response_mask shape {tuple(response_mask.shape)} does not match advantages {tuple(advantages.shape)}"
        )
    if weights.dim() != 1 or weights.shape[0] != advantages.shape[0]:
        raise ValueError(f"weights must be [bs]={advantages.shape[0]}, got shape {tuple(weights.shape)}")
    if not bool(torch.isfinite(weights).all()):
        raise ValueError("weights must be finite")
    select = response_mask.to(device=advantages.device) != 0
    if apply_to == "positive":
        select = select & (advantages > 0)
    elif apply_to == "negative":
        select = select & (advantages < 0)
    w = weights.to(device=advantages.device, dtype=advantages.dtype).unsqueeze(-1)
    return torch.where(select, advantages * w, advantages)


def update_rho(
    rho: dict[str, float], base_rho: dict[str, float], step_profile: "StepProfile", cfg: WeightingConfig
) -> dict[str, float]:
    """rho_{t+1} from rho_t and the step's profile C_t (dynamic rho, the reference behaviour).

    For every key z except ``pass`` (the anchor of the scale)::

        target(z) = base(z) * (1 + alpha * prevalence(z) * (1 - mean_reward_with(z)) * min(1, n_with(z) / n_conf))
        target(z) = clip(target(z), *rho_clip)
        rho_{t+1}(z) = (1 - beta) * rho_t(z) + beta * target(z)

    so a failure that is common and still unsolved (trajectories carrying it rarely succeed) gains weight,
    scaled down while few trajectories carry it, and relaxes towards its base utility as it disappears.
    ``(1 - mean_reward)`` is clamped to [0, 1] because rewards are meant to lie in [0, 1]; a key carried by no
    trajectory has target = base.

    Args:
        rho: current utilities rho_t (full table).
        base_rho: the configured static utilities the targets are built from.
        step_profile: C_t from ``profile.aggregate`` (the step's values, not the EMA: the EMA is on rho).
        cfg: alpha, beta, n_conf, rho_clip and the ``dynamic`` switch.

    Returns:
        A new dict; ``rho`` itself when ``cfg.dynamic`` is false (as a copy).
    """
    out = {k: float(v) for k, v in rho.items()}
    if not cfg.dynamic:
        return out
    lo, hi = cfg.rho_clip
    for z in tx.PROFILE_KEYS:
        if z == tx.PASS:
            continue
        if z not in base_rho or z not in rho:
            raise ValueError(f"rho and base_rho must hold every profile key; {z!r} is missing")
        base = float(base_rho[z])
        prevalence = float(step_profile.prevalence.get(z, 0.0))
        n_with = int(step_profile.trajectories_with.get(z, 0))
        mean_r = step_profile.mean_reward_with.get(z)
        if n_with > 0 and mean_r is not None:
            unsolved = min(1.0, max(0.0, 1.0 - float(mean_r)))
            confidence = min(1.0, n_with / cfg.n_conf)
            target = base * (1.0 + cfg.alpha * prevalence * unsolved * confidence)
        else:
            target = base
        target = min(max(target, lo), hi)
        out[z] = (1.0 - cfg.beta) * float(rho[z]) + cfg.beta * target
    return out
