"""The closed loop: C_t -> Omega_{t+1}, rho_{t+1}, with persistence and ablation switches.

Per training step: the rollouts' labels and rewards are aggregated into C_t, the prevalence EMA is updated,
and, in the full method, the interface evolves from the EMA and (if dynamic) rho moves towards the failures
that are common and unsolved. The state is small plain data, saved with each checkpoint and restored on
resume, so a resumed run continues with the same interface and utilities.

The paper's ablations are switches, not code paths elsewhere:

- ``env_side=False``: no cues at all (the interface is all-off forever);
- ``reweighting=False``: w = 1 for every trajectory (``reweighting_enabled`` tells the trainer hook);
- ``closed_loop=False``: a fixed interface with every configured cue kind on and static rho: labels still drive the
  weights and the per-error feedback, but nothing adapts across steps.

With ``env_side`` and ``reweighting`` both off the run is vanilla GRPO. No Ray, verl or torch import here.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from typing import Any, Optional

from seal_verl.atomic import FileContentError, atomic_write_text, read_json_object
from seal_verl.core.options import from_mapping
from seal_verl.core import taxonomy as tx
from seal_verl.core.interface import (
    CUE_KINDS,
    FAMILIES,
    InterfaceConfig,
    InterfaceState,
    active_families,
    active_kinds,
    evolve,
    initial_state,
)
from seal_verl.core.profile import StepProfile, TrajectoryRecord, aggregate, ema_update
from seal_verl.core.weighting import WeightingConfig, update_rho

__all__ = [
    "SealSwitches",
    "ClosedLoopState",
    "effective_interface_config",
    "initial",
    "closed_loop_step",
    "metrics",
    "STATE_FORMAT_VERSION",
]

#: Written into every saved state; bump when the layout changes incompatibly.
STATE_FORMAT_VERSION = 1

_ROUND = 6  # decimals kept in history rows: enough for plots, keeps the checkpoint file small

#: History rows a state keeps: the most recent ones. The loop never reads its history (a resume needs the
#: interface, rho and the EMAs); the rows are a record, and the whole record is the run folder's ``metrics.jsonl``
#: (one row per step). Keeping every row made each saved state grow by a row a step, and the run folder's
#: per-step state files quadratically in all (after 10,000 steps: 17 MB a file, 84 GB in all; now 0.03 MB and
#: 0.29 GB: ``python -m bench.bench_state``).
HISTORY_WINDOW = 16


@dataclass
class SealSwitches:
    """The paper's ablation switches.

    Attributes:
        env_side: the training-time interface adds cues.
        reweighting: trajectory weights scale the advantages (else w = 1).
        closed_loop: interface and rho adapt from C_t (else every configured cue kind on, static rho).
    """

    env_side: bool = True
    reweighting: bool = True
    closed_loop: bool = True

    @property
    def vanilla(self) -> bool:
        """True when neither side of SEAL acts: the run is plain GRPO."""
        return not self.env_side and not self.reweighting

    def to_dict(self) -> dict[str, bool]:
        """A JSON-serialisable dict."""
        return {"env_side": self.env_side, "reweighting": self.reweighting, "closed_loop": self.closed_loop}

    @classmethod
    def from_dict(cls, d: Optional[dict[str, Any]]) -> "SealSwitches":
        """Build from a plain dict; unknown keys raise ``ValueError`` listing the allowed ones.

        Args:
            d: switch values; ``None`` or ``{}`` gives the full method.
        """
        switches = from_mapping(cls, d, "SEAL switch")
        for k, v in switches.to_dict().items():
            if not isinstance(v, bool):
                raise ValueError(f"SEAL switch {k!r} must be a boolean, got {v!r}")
        return switches


def effective_interface_config(switches: SealSwitches, cfg: InterfaceConfig) -> InterfaceConfig:
    """The interface configuration the switches imply (a copy; ``cfg`` is not modified).

    Args:
        switches: the ablation switches.
        cfg: the configured interface.

    Returns:
        ``enabled=False`` without the environment side; ``fixed_all_on=True`` without the closed loop;
        ``cfg`` unchanged otherwise.
    """
    if not switches.env_side:
        return replace(cfg, enabled=False)
    if not switches.closed_loop:
        return replace(cfg, fixed_all_on=True)
    return replace(cfg)


def _rounded(d: dict[str, float]) -> dict[str, float]:
    return {k: round(float(v), _ROUND) for k, v in d.items()}


@dataclass
class ClosedLoopState:
    """Everything the loop carries across steps (saved with checkpoints).

    Attributes:
        step: number of closed-loop steps applied (the index of the next step).
        interface: Omega_t, the interface the next rollouts run under.
        rho: rho_t, the utilities the next weights use.
        base_rho: the configured utilities dynamic rho is anchored to.
        prevalence_ema: EMA of the prevalence over steps (``None`` before the first step with labels).
        rate_ema: EMA of each label's rate among the turns where it is possible (``StepProfile.rate``); what the
            cue triggers read (``None`` before the first step with labels).
        history: one compact row per step (see ``closed_loop_step``), the last :data:`HISTORY_WINDOW` of them.
        history_start: the step of the first row in ``history``: the number of earlier rows left out, so
            ``history_start + len(history) == step`` for a state the loop made.
    """

    step: int
    interface: InterfaceState
    rho: dict[str, float]
    base_rho: dict[str, float]
    prevalence_ema: Optional[dict[str, float]] = None
    history: list[dict] = field(default_factory=list)
    rate_ema: Optional[dict[str, float]] = None
    history_start: int = 0

    @classmethod
    def initial(
        cls, switches: SealSwitches, interface_cfg: InterfaceConfig, weighting_cfg: WeightingConfig
    ) -> "ClosedLoopState":
        """The state before the first step.

        Args:
            switches: the ablation switches (decide whether the interface starts all-off or all-on).
            interface_cfg: the interface configuration.
            weighting_cfg: supplies the base utilities (validated with ``taxonomy.check_rho``).
        """
        base = tx.check_rho(weighting_cfg.rho)
        return cls(
            step=0,
            interface=initial_state(effective_interface_config(switches, interface_cfg)),
            rho=dict(base),
            base_rho=dict(base),
            prevalence_ema=None,
            history=[],
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict, tagged with ``STATE_FORMAT_VERSION``."""
        return {
            "version": STATE_FORMAT_VERSION,
            "step": int(self.step),
            "interface": self.interface.to_dict(),
            "rho": dict(self.rho),
            "base_rho": dict(self.base_rho),
            "prevalence_ema": None if self.prevalence_ema is None else dict(self.prevalence_ema),
            "rate_ema": None if self.rate_ema is None else dict(self.rate_ema),
            "history": json.loads(json.dumps(self.history)),
            "history_start": int(self.history_start),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ClosedLoopState":
        """Inverse of ``to_dict``; every field is checked for type and range (a damaged or hand-edited
        state fails here, naming the field, not one training step later).

        Args:
            d: a dict from ``to_dict`` (e.g. read back from a checkpoint).

        Raises:
            StateFileError: the first invalid field, named in the message.
        """
        _check_state_dict(d)
        ema = d.get("prevalence_ema")
        rate_ema = d.get("rate_ema")
        return cls(
            step=int(d["step"]),
            interface=InterfaceState.from_dict(d["interface"]),
            rho=tx.check_rho(d["rho"]),
            base_rho=tx.check_rho(d["base_rho"]),
            prevalence_ema=None if ema is None else {k: float(v) for k, v in ema.items()},
            history=json.loads(json.dumps(d.get("history", []))),
            rate_ema=None if rate_ema is None else {k: float(v) for k, v in rate_ema.items()},
            history_start=int(d.get("history_start", 0)),
        )

    def save(self, path: str | os.PathLike) -> None:
        """Write the state as JSON atomically: a temporary file in the same directory, fsynced, then
        ``os.replace``. A crash mid-write leaves the previous file intact, never a truncated one that would
        break the resume.

        Args:
            path: destination file; its directory is created if missing.
        """
        payload = json.dumps(self.to_dict(), indent=1, sort_keys=True)  # serialise before touching the disk
        atomic_write_text(os.fspath(path), payload, prefix=_TEMP_PREFIX)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "ClosedLoopState":
        """Read a state written by ``save``; temporary files of interrupted saves beside it are removed.

        Args:
            path: the file.

        Raises:
            StateFileError: one line naming the file and what is wrong with it (unreadable, not JSON, not
                an object, or the first invalid field).
        """
        path = os.fspath(path)
        try:
            data = read_json_object(path, "closed-loop state", temp_prefix=_TEMP_PREFIX)
        except FileContentError as exc:
            raise StateFileError(str(exc)) from None
        try:
            return cls.from_dict(data)
        except StateFileError as exc:
            raise StateFileError(f"{path}: {exc}") from None
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise StateFileError(f"{path}: invalid closed-loop state: {exc}") from None


_TEMP_PREFIX = ".seal_state."


class StateFileError(ValueError):
    """A saved closed-loop state that cannot be used; the message is one line naming the field."""


#: Largest step or streak a saved state may hold: any real run stays far below, and a larger number is damage
#: that would otherwise be carried into the next save and into the metrics.
_MAX_COUNT = 2**63 - 1


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_count(v: Any) -> bool:
    return _is_int(v) and 0 <= v <= _MAX_COUNT


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _check_state_dict(d: Any) -> None:
    """Type and range checks of every field of a saved state (see ``ClosedLoopState.to_dict``)."""
    import math

    def bad(field_name: str, what: str, value: Any) -> StateFileError:
        shown = repr(value)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        return StateFileError(f"field {field_name!r} must be {what}, got {shown}")

    if not isinstance(d, dict):
        raise StateFileError(f"the closed-loop state must be a JSON object, got {type(d).__name__}")
    allowed = {"version", "step", "interface", "rho", "base_rho", "prevalence_ema", "rate_ema", "history",
               "history_start"}
    unknown = sorted(set(d) - allowed)
    if unknown:
        raise StateFileError(f"unknown field(s) {unknown} in the closed-loop state")
    version = d.get("version", STATE_FORMAT_VERSION)
    if not _is_int(version):
        raise bad("version", f"the integer {STATE_FORMAT_VERSION}", version)
    if version != STATE_FORMAT_VERSION:
        raise StateFileError(f"field 'version': the closed-loop state has format version {str(version)[:20]}; this "
                             f"code reads version {STATE_FORMAT_VERSION}")
    for key in ("step", "interface", "rho", "base_rho"):
        if key not in d:
            raise StateFileError(f"field {key!r} is missing from the closed-loop state")
    if not _is_count(d["step"]):
        raise bad("step", "a non-negative integer", d["step"])
    iface = d["interface"]
    if not isinstance(iface, dict):
        raise bad("interface", "an object", iface)
    unknown = sorted(set(iface) - {"active", "streak_below", "step", "retired", "effect_below"})
    if unknown:
        raise StateFileError(f"unknown field(s) {unknown} in 'interface'")
    for key, check, what in (("active", lambda v: isinstance(v, bool), "true or false"),
                             ("streak_below", _is_count, "a non-negative integer")):
        table = iface.get(key, {})
        if not isinstance(table, dict):
            raise bad(f"interface.{key}", "an object of cue kinds", table)
        for kind, v in table.items():
            if not isinstance(kind, str) or kind not in CUE_KINDS:
                raise StateFileError(f"unknown cue kind {kind!r} in 'interface.{key}'; known kinds: "
                                     f"{', '.join(CUE_KINDS)}")
            if not check(v):
                raise bad(f"interface.{key}.{kind}", what, v)
    retired = iface.get("retired", [])
    # each entry is checked to be a string before the lookup: a list or an object there is unhashable
    if not isinstance(retired, list) or len(retired) > len(CUE_KINDS) \
            or any(not isinstance(k, str) or k not in CUE_KINDS for k in retired):
        raise bad("interface.retired", "a list of cue kinds", retired)
    below = iface.get("effect_below", {})
    if not isinstance(below, dict) or any(not isinstance(k, str) or k not in CUE_KINDS or not _is_count(v)
                                          for k, v in below.items()):
        raise bad("interface.effect_below", "an object of cue kinds -> non-negative integers", below)
    if "step" in iface and not _is_count(iface["step"]):
        raise bad("interface.step", "a non-negative integer", iface["step"])
    for key in ("rho", "base_rho"):
        table = d[key]
        if not isinstance(table, dict):
            raise bad(key, "an object of utilities", table)
        for k, v in table.items():
            if k not in tx.PROFILE_KEYS:
                raise StateFileError(f"unknown key {k!r} in {key!r}; known keys: {', '.join(tx.PROFILE_KEYS)}")
            if not _is_number(v) or not math.isfinite(v) or not tx.RHO_MIN <= v <= tx.RHO_MAX:
                raise bad(f"{key}.{k}", f"a number in [{tx.RHO_MIN}, {tx.RHO_MAX}]", v)
    for key in ("prevalence_ema", "rate_ema"):
        ema = d.get(key)
        if ema is None:
            continue
        if not isinstance(ema, dict):
            raise bad(key, "null or an object of shares", ema)
        for k, v in ema.items():
            if k not in tx.PROFILE_KEYS:
                raise StateFileError(f"unknown key {k!r} in {key!r}; known keys: {', '.join(tx.PROFILE_KEYS)}")
            if not _is_number(v) or not math.isfinite(v) or not 0.0 <= v <= 1.0:
                raise bad(f"{key}.{k}", "a share in [0, 1]", v)
    history = d.get("history", [])
    if not isinstance(history, list) or not all(isinstance(row, dict) for row in history):
        raise bad("history", "a list of objects", history if not isinstance(history, list) else "[...]")
    if "history_start" in d and not _is_count(d["history_start"]):
        raise bad("history_start", "a non-negative integer", d["history_start"])


def initial(switches: SealSwitches, interface_cfg: InterfaceConfig, weighting_cfg: WeightingConfig) -> ClosedLoopState:
    """Module-level alias of ``ClosedLoopState.initial`` (same arguments)."""
    return ClosedLoopState.initial(switches, interface_cfg, weighting_cfg)


def closed_loop_step(
    state: ClosedLoopState,
    records: list[TrajectoryRecord],
    switches: SealSwitches,
    interface_cfg: InterfaceConfig,
    weighting_cfg: WeightingConfig,
) -> tuple[ClosedLoopState, StepProfile]:
    """One step of the loop; pure, returns the new state and the step's profile C_t.

    1. C_t = ``aggregate(records)``.
    2. The EMAs (rate ``interface_cfg.ema_beta``) of the prevalence and of the eligible-turn rates are updated,
       unless the step has no labelled turn: an empty step is absence of evidence, not evidence that failures
       vanished.
    3. Interface: all-off without ``env_side``; all-on without ``closed_loop``; otherwise ``evolve`` from the
       rate EMA, i.e. each trigger label's rate among the turns where it can occur (skipped on a step without
       labelled turns, so that no "below threshold" streak is counted from no data).
    4. rho: ``update_rho`` only with ``closed_loop``, ``reweighting`` and ``weighting_cfg.dynamic``; static
       otherwise (without reweighting rho is unused, and keeping it fixed keeps the logs honest).
    5. A history row is appended: ``step``, ``n_trajectories``, ``success_rate``, ``prevalence`` (C_t),
       ``prevalence_ema``, ``rate``, ``rate_ema``, ``active`` (sorted kinds of Omega_{t+1}), ``rho`` (rho_{t+1});
       the oldest rows beyond :data:`HISTORY_WINDOW` are left out (``history_start`` counts them).
    6. ``step`` is incremented.

    Args:
        state: the state after the previous step.
        records: this step's trajectories (labels, abstention flags, category, reward).
        switches: the ablation switches.
        interface_cfg: thresholds, patience, EMA rate.
        weighting_cfg: dynamic-rho parameters.
    """
    sp = aggregate(records)
    has_evidence = sp.n_turns > 0
    ema = ema_update(state.prevalence_ema, sp.prevalence, interface_cfg.ema_beta) if has_evidence else (
        None if state.prevalence_ema is None else dict(state.prevalence_ema)
    )

    rate_ema = ema_update(state.rate_ema, sp.rate, interface_cfg.ema_beta) if has_evidence else (
        None if state.rate_ema is None else dict(state.rate_ema)
    )

    eff = effective_interface_config(switches, interface_cfg)
    if not eff.enabled or eff.fixed_all_on or has_evidence:
        interface = evolve(state.interface, rate_ema or {}, eff)
    else:
        interface = replace(
            state.interface,
            active=dict(state.interface.active),
            streak_below=dict(state.interface.streak_below),
            step=state.interface.step + 1,
        )

    if switches.closed_loop and switches.reweighting and weighting_cfg.dynamic:
        rho = update_rho(state.rho, state.base_rho, sp, weighting_cfg)
    else:
        rho = dict(state.rho)

    row = {
        "step": state.step,
        "n_trajectories": sp.n_trajectories,
        "success_rate": round(sp.success_rate, _ROUND),
        "prevalence": _rounded(sp.prevalence),
        "prevalence_ema": None if ema is None else _rounded(ema),
        "rate": _rounded(sp.rate),
        "rate_ema": None if rate_ema is None else _rounded(rate_ema),
        "active": sorted(active_kinds(interface)),
        "rho": _rounded(rho),
    }
    kept = state.history[-(HISTORY_WINDOW - 1):] if HISTORY_WINDOW > 1 else []
    new_state = ClosedLoopState(
        step=state.step + 1,
        interface=interface,
        rho=rho,
        base_rho=dict(state.base_rho),
        prevalence_ema=ema,
        history=[dict(h) for h in kept] + [row],
        rate_ema=rate_ema,
        history_start=state.history_start + len(state.history) - len(kept),
    )
    return new_state, sp


def metrics(state: ClosedLoopState, step_profile: StepProfile) -> dict[str, float]:
    """Flat scalar metrics for the trainer's logger, all under ``seal/``.

    Names: ``seal/prevalence/<key>`` (C_t), ``seal/prevalence_ema/<key>``, ``seal/rate/<key>`` (rate among the
    turns where the key is possible), ``seal/rate_ema/<key>`` (what the cue triggers read),
    ``seal/prevalence_by_category/<category>/<key>``, ``seal/cue_active/<kind>`` (0/1, per configured kind),
    ``seal/cue_family_active/<family>`` (0/1), ``seal/rho/<key>``,
    ``seal/success_rate``, ``seal/success_rate_by_category/<category>``, ``seal/n_trajectories``, ``seal/n_turns``,
    ``seal/n_checker_errors``, ``seal/step``.

    Args:
        state: the state to report (normally the one ``closed_loop_step`` just returned).
        step_profile: the C_t of the same step.
    """
    out: dict[str, float] = {}
    for key in tx.PROFILE_KEYS:
        out[f"seal/prevalence/{key}"] = float(step_profile.prevalence.get(key, 0.0))
        if state.prevalence_ema is not None:
            out[f"seal/prevalence_ema/{key}"] = float(state.prevalence_ema.get(key, 0.0))
        out[f"seal/rate/{key}"] = float(step_profile.rate.get(key, 0.0))
        if state.rate_ema is not None:
            out[f"seal/rate_ema/{key}"] = float(state.rate_ema.get(key, 0.0))
    for cat, prev in step_profile.prevalence_by_category.items():
        for key in tx.PROFILE_KEYS:
            out[f"seal/prevalence_by_category/{cat}/{key}"] = float(prev.get(key, 0.0))
    for kind in CUE_KINDS:  # the kinds the state holds: the run's configured ones
        if kind in state.interface.active:
            out[f"seal/cue_active/{kind}"] = 1.0 if state.interface.active[kind] else 0.0
    on = active_families(state.interface)
    for family in FAMILIES:
        out[f"seal/cue_family_active/{family}"] = 1.0 if family in on else 0.0
    for key in tx.PROFILE_KEYS:
        out[f"seal/rho/{key}"] = float(state.rho[key])
    out["seal/success_rate"] = float(step_profile.success_rate)
    for cat, rate in step_profile.success_rate_by_category.items():
        out[f"seal/success_rate_by_category/{cat}"] = float(rate)
    out["seal/n_trajectories"] = float(step_profile.n_trajectories)
    out["seal/n_turns"] = float(step_profile.n_turns)
    out["seal/n_checker_errors"] = float(step_profile.n_checker_errors)
    out["seal/step"] = float(state.step)
    return out
