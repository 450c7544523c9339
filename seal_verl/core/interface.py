"""Omega: the training-time interface state, its evolution, and the cue texts.

``o~ = o (+) phi_schema(F) (+) phi_err(o, H_t) (+) phi_cap(C_t)``. The interface is a set of named cue kinds,
each in one of the three families. Which failure label switches which kind on is configuration
(``InterfaceConfig.triggers``, label -> kind); a kind no label names is never on:

============================  ===========  =====================  =====================================
kind                          family       default trigger        what it adds
============================  ===========  =====================  =====================================
``call_format``               schema       invalid_tool_call      the legal call syntax; decode errors
``schema_constraints``        schema       argument_mismatch      required params, types, enums
``tool_affordance``           capability   missing_tool_call      what the offered tools can do for the
                                                                  pending request (from schemas + request)
``act_with_tools``            capability   (none)                 "act with a tool call, not text"
``error_recovery``            error        recovery_failure       structured next-step error feedback
``ask_or_abstain``            capability   spurious_tool_call     "ask when a parameter/function lacks"
============================  ===========  =====================  =====================================

The paper names three triggers (``PAPER_TRIGGERS``: argument_mismatch -> schema/constraint cues,
missing_tool_call -> tool-affordance cues, recovery_failure -> structured error feedback); the default
(``DEFAULT_TRIGGERS``) adds the two failure types Psi tells apart that those three leave without a cue of
their own (a malformed call, a call where the agent should ask). ``act_with_tools`` is the behavioural sentence
an earlier build used as its affordance cue, kept as a kind of its own that a trigger map may name.

``evolve`` switches kinds with hysteresis, so that the interface does not flap when a trigger rate hovers
around a threshold, and lets scaffolding fade once a failure has stayed rare for a while.

This module holds the interface's configuration and state and how they evolve; the cue texts themselves
are rendered by :mod:`seal_verl.core.cues`. It imports neither verl nor BFCL.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Dict, Iterable, Optional

from seal_verl.core import taxonomy as tx
from seal_verl.core.options import from_mapping

__all__ = [
    "FAMILIES",
    "CueKind",
    "CUE_KINDS",
    "DEFAULT_TRIGGERS",
    "PAPER_TRIGGERS",
    "PLACEMENTS",
    "SHORT_NAMES",
    "MIN_CUE_CHARS",
    "InterfaceConfig",
    "InterfaceState",
    "initial_state",
    "evolve",
    "retire",
    "active_kinds",
    "active_families",
    "kinds_in_family",
    "check_kinds",
]

SCHEMA, ERROR, CAPABILITY = "schema", "error", "capability"
#: The three cue families of the paper: phi_schema, phi_err, phi_cap.
FAMILIES: tuple[str, ...] = (SCHEMA, ERROR, CAPABILITY)


@dataclass(frozen=True)
class CueKind:
    """A named cue kind and the family it belongs to (which label switches it on is configuration:
    ``InterfaceConfig.triggers``)."""

    name: str
    family: str


CALL_FORMAT = "call_format"
SCHEMA_CONSTRAINTS = "schema_constraints"
TOOL_AFFORDANCE = "tool_affordance"
ERROR_RECOVERY = "error_recovery"
ASK_OR_ABSTAIN = "ask_or_abstain"
ACT_WITH_TOOLS = "act_with_tools"

#: Every cue kind there is, in a fixed order (used to break ties and to order displays).
CUE_KINDS: dict[str, CueKind] = {
    CALL_FORMAT: CueKind(CALL_FORMAT, SCHEMA),
    SCHEMA_CONSTRAINTS: CueKind(SCHEMA_CONSTRAINTS, SCHEMA),
    TOOL_AFFORDANCE: CueKind(TOOL_AFFORDANCE, CAPABILITY),
    ACT_WITH_TOOLS: CueKind(ACT_WITH_TOOLS, CAPABILITY),  # where the affordance sentence of earlier builds stood
    ERROR_RECOVERY: CueKind(ERROR_RECOVERY, ERROR),
    ASK_OR_ABSTAIN: CueKind(ASK_OR_ABSTAIN, CAPABILITY),
}

#: The paper's failure-type-specific activation: three triggers, label -> the kind it switches on.
PAPER_TRIGGERS: dict[str, str] = {
    tx.ARGUMENT_MISMATCH: SCHEMA_CONSTRAINTS,
    tx.MISSING_TOOL_CALL: TOOL_AFFORDANCE,
    tx.RECOVERY_FAILURE: ERROR_RECOVERY,
}

#: The project's default: the paper's three, plus a cue for each of the two failure types Psi labels that those
#: three leave without help of their own (a call that cannot be decoded; a call where the agent should have
#: asked). Each is measured by the cue-effect probe like the others, and each can be switched off (null).
DEFAULT_TRIGGERS: dict[str, str] = {
    tx.INVALID_TOOL_CALL: CALL_FORMAT,
    **PAPER_TRIGGERS,
    tx.SPURIOUS_TOOL_CALL: ASK_OR_ABSTAIN,
}

#: Where the proactive cues (phi_schema, phi_cap) go (``InterfaceConfig.placement``).
START_OF_TASK, EVERY_OBSERVATION = "start_of_task", "every_observation"
PLACEMENTS: tuple[str, ...] = (START_OF_TASK, EVERY_OBSERVATION)

#: Short names of the kinds for one-line displays (console step lines, the run watcher, reports).
SHORT_NAMES: dict[str, str] = {CALL_FORMAT: "fmt", SCHEMA_CONSTRAINTS: "schema", TOOL_AFFORDANCE: "afford",
                               ERROR_RECOVERY: "recov", ASK_OR_ABSTAIN: "ask", ACT_WITH_TOOLS: "act"}

#: Largest value of ``patience`` and of the cue bounds: far beyond any use, and it keeps them 64-bit integers
#: wherever they are logged or stored.
MAX_COUNT = 1_000_000_000

#: Smallest bound a cue may be given (``max_cue_chars``); shorter cues could not say anything useful.
MIN_CUE_CHARS = 50


def kinds_in_family(family: str) -> tuple[str, ...]:
    """Names of the cue kinds of one family (all there are, configured or not).

    Args:
        family: one of ``FAMILIES``.
    """
    if family not in FAMILIES:
        raise ValueError(f"unknown cue family {family!r}; families: {', '.join(FAMILIES)}")
    return tuple(k for k, v in CUE_KINDS.items() if v.family == family)


def check_kinds(kinds: Iterable[str]) -> set[str]:
    """``kinds`` as a set; ``ValueError`` listing the known kinds on an unknown one."""
    out = set(kinds)
    unknown = out - set(CUE_KINDS)
    if unknown:
        raise ValueError(f"unknown cue kind(s) {sorted(unknown)}; known kinds: {', '.join(CUE_KINDS)}")
    return out


def ordered(kinds: Iterable[str]) -> list[str]:
    """``kinds`` in the fixed order of ``CUE_KINDS`` (unknown kinds raise ``ValueError``)."""
    return sorted(check_kinds(kinds), key=list(CUE_KINDS).index)


def check_triggers(triggers: Any) -> dict[str, Optional[str]]:
    """A trigger map checked: keys failure labels, values cue kinds or ``None`` (that label switches nothing on),
    no kind named by two labels. Returns a copy in label order; ``ValueError`` naming the entry otherwise."""
    if not isinstance(triggers, dict):
        raise ValueError(f"triggers must be a mapping of failure label -> cue kind, got {triggers!r:.80}")
    out: dict[str, Optional[str]] = {}
    seen: dict[str, str] = {}
    for label, kind in triggers.items():
        if label not in tx.FAILURE_LABELS:
            raise ValueError(f"triggers: {label!r:.80} is not a failure label; failure labels: "
                             f"{', '.join(tx.FAILURE_LABELS)}")
        if kind is None:
            out[label] = None
            continue
        if not isinstance(kind, str) or kind not in CUE_KINDS:
            raise ValueError(f"triggers.{label}: unknown cue kind {kind!r:.80}; known kinds: {', '.join(CUE_KINDS)} "
                             "(null: this label switches no cue on)")
        if kind in seen:
            raise ValueError(f"triggers: cue kind {kind!r} is named by both {seen[kind]!r} and {label!r}; a kind "
                             "has one trigger label")
        seen[kind] = label
        out[label] = kind
    return {label: out[label] for label in tx.FAILURE_LABELS if label in out}


# --------------------------------------------------------------------------------------------------------
# configuration and state
# --------------------------------------------------------------------------------------------------------


@dataclass
class InterfaceConfig:
    """How Omega evolves and how large its cues may be.

    Attributes:
        on_threshold: a kind turns on when its trigger label's (EMA) rate reaches this: the label's share of the
            turns where it can occur (``seal_verl.core.profile.StepProfile.rate``), not of all turns.
        off_threshold: below this a kind starts counting towards switching off; must be < on_threshold, and
            the gap between the two is the hysteresis band where the state is simply kept.
        patience: consecutive steps below ``off_threshold`` before an active kind turns off (>= 1).
        max_cue_chars: upper bound on each rendered cue, marker included (>= 50).
        max_schema_cue_chars: upper bound on a schema cue (the compact signatures of the offered tools).
            Larger than ``max_cue_chars`` because it lists every tool: at 600 characters it was cut on 394
            of the 400 training tasks (full length: median 1,288, largest 2,310 characters).
        enabled: false disables the environment side: no kind is ever on (ablation "no environment side").
            Takes precedence over ``fixed_all_on``.
        fixed_all_on: every kind always on and ``evolve`` changes nothing (ablation "no closed loop").
        ema_beta: EMA rate of the prevalence the interface reads, in (0, 1] (1.0 = this step only). An
            addition to the published fields: the closed loop smooths C_t before ``evolve`` and needs a rate
            that belongs to the interface, not to dynamic rho.
        proactive_cues: true (the default; the paper's interface adds phi_schema up front): cues also come before
            the agent acts, as blocks in the first user message (schema constraints, call format, capability
            reminders) and as the schema of functions revealed later. False keeps only the reactive ones, the feedback that
            follows a failed call (phi_err), so a rollout without a failed call sees exactly the bare
            environment; the capability kinds, which have no feedback to give, then never switch on. For a
            policy that cannot read prompt text it has never seen (the CPU overlay's 0.4M-parameter model:
            ``python -m seal_verl.models.warm_start.probe_cues``), not for real backbones.
        triggers: failure label -> the cue kind it switches on (``DEFAULT_TRIGGERS``); a label mapped to null
            (or left out) switches nothing on, so each kind can be switched off. ``PAPER_TRIGGERS`` are the
            paper's three. A kind has at most one trigger label.
        placement: where the proactive cues go. ``start_of_task`` (the default): the schema, call-format and
            capability blocks once, in the first user message (and the schema of functions revealed later in
            the message that reveals them). ``every_observation``: the paper's formula read literally, the
            schema and capability cues with every observation the policy sees (each user message and each
            step's tool results). The affordance cue is about the pending request, so under both it comes with
            every user request (and, under ``every_observation``, with every observation). Ignored without
            ``proactive_cues``.
    """

    on_threshold: float = 0.15
    off_threshold: float = 0.05
    patience: int = 2
    max_cue_chars: int = 600
    max_schema_cue_chars: int = 2400
    enabled: bool = True
    fixed_all_on: bool = False
    ema_beta: float = 0.5
    proactive_cues: bool = True
    triggers: Dict[str, Optional[str]] = field(default_factory=lambda: dict(DEFAULT_TRIGGERS))
    placement: str = START_OF_TASK

    def validate(self) -> "InterfaceConfig":
        """Raise ``ValueError`` naming the offending field; return ``self`` (normalised) on success."""
        try:
            self.on_threshold = float(self.on_threshold)
            self.off_threshold = float(self.off_threshold)
            self.ema_beta = float(self.ema_beta)
        except (TypeError, ValueError):
            raise ValueError("on_threshold, off_threshold and ema_beta must be numbers") from None
        for name in ("on_threshold", "off_threshold"):
            v = getattr(self, name)
            if not (0.0 <= v <= 1.0):
                raise ValueError(f"{name} must be in [0, 1], got {v}")
        if not self.off_threshold < self.on_threshold:
            raise ValueError(
                f"off_threshold ({self.off_threshold}) must be < on_threshold ({self.on_threshold}) for hysteresis"
            )
        for name, lo in (("patience", 1), ("max_cue_chars", MIN_CUE_CHARS), ("max_schema_cue_chars", MIN_CUE_CHARS)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) and not (isinstance(v, float) and v.is_integer()):
                raise ValueError(f"{name} must be an integer, got {v!r}")
            v = int(v)
            if v < lo:
                raise ValueError(f"{name} must be >= {lo}, got {v}")
            if v > MAX_COUNT:
                raise ValueError(f"{name} must be <= {MAX_COUNT}, got {v}")
            setattr(self, name, v)
        if not (0.0 < self.ema_beta <= 1.0):
            raise ValueError(f"ema_beta must be in (0, 1], got {self.ema_beta}")
        self.enabled = bool(self.enabled)
        self.fixed_all_on = bool(self.fixed_all_on)
        if not isinstance(self.proactive_cues, bool):
            raise ValueError(f"proactive_cues must be true or false, got {self.proactive_cues!r}")
        self.triggers = check_triggers(self.triggers)
        if self.placement not in PLACEMENTS:
            raise ValueError(f"placement must be one of {', '.join(PLACEMENTS)}, got {self.placement!r:.80}")
        return self

    def kinds(self) -> tuple[str, ...]:
        """The cue kinds some trigger label switches on, in ``CUE_KINDS`` order."""
        named = {k for k in dict(self.triggers).values() if k is not None}
        return tuple(k for k in CUE_KINDS if k in named)

    def trigger_of(self) -> dict[str, str]:
        """Cue kind -> the failure label that switches it on, for the configured kinds."""
        return {kind: label for label, kind in dict(self.triggers).items() if kind is not None}

    def switchable_kinds(self) -> tuple[str, ...]:
        """The kinds that can be on under this configuration: the configured ones (``kinds``); none without
        the environment side; without proactive cues, those that have feedback to give (every family but
        capability)."""
        if not self.enabled:
            return ()
        if self.proactive_cues:
            return self.kinds()
        return tuple(k for k in self.kinds() if CUE_KINDS[k].family != CAPABILITY)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict of the fields."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Optional[dict[str, Any]]) -> "InterfaceConfig":
        """Build and validate from a plain dict; unknown keys raise ``ValueError`` listing the allowed ones.

        Args:
            d: field values; ``None`` or ``{}`` gives the defaults.
        """
        return from_mapping(cls, d, "interface option").validate()


@dataclass
class InterfaceState:
    """Omega_t: which cue kinds are on, and how long each active one has been below ``off_threshold``.

    Attributes:
        active: kind -> on/off, one entry per configured kind (``InterfaceConfig.kinds``; a state built without
            a configuration has one per kind of ``CUE_KINDS``).
        streak_below: kind -> consecutive evolve steps with prevalence < off_threshold while on.
        step: number of ``evolve`` steps applied.
        retired: kinds the cue-effect probe retired (``seal.cue_effect.retire``): off for the rest of the run.
        effect_below: kind -> probes in a row whose cue-effect interval lay wholly below zero.
    """

    active: dict[str, bool] = field(default_factory=lambda: {k: False for k in CUE_KINDS})
    streak_below: dict[str, int] = field(default_factory=lambda: {k: 0 for k in CUE_KINDS})
    step: int = 0
    retired: frozenset = frozenset()
    effect_below: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (the probe's fields only once the probe has something to keep)."""
        out: dict[str, Any] = {"active": dict(self.active), "streak_below": dict(self.streak_below),
                               "step": int(self.step)}
        if self.retired:
            out["retired"] = sorted(self.retired, key=list(CUE_KINDS).index)
        if any(self.effect_below.values()):
            out["effect_below"] = {k: int(v) for k, v in self.effect_below.items() if v}
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "InterfaceState":
        """Inverse of ``to_dict``.

        Args:
            d: a dict from ``to_dict``. Unknown kinds raise ``ValueError``. The state holds the kinds the dict
                names (in ``active`` or ``streak_below``; a kind named in one only starts off with a zero
                streak), every kind of ``CUE_KINDS`` when it names none.
        """
        active = dict(d.get("active", {}))
        streak = dict(d.get("streak_below", {}))
        retired = check_kinds(d.get("retired") or [])
        below = dict(d.get("effect_below") or {})
        check_kinds(active)
        check_kinds(streak)
        check_kinds(below)
        kinds = ordered(set(active) | set(streak)) if active or streak else list(CUE_KINDS)
        return cls(
            active={k: bool(active.get(k, False)) and k not in retired for k in kinds},
            streak_below={k: int(streak.get(k, 0)) for k in kinds},
            step=int(d.get("step", 0)),
            retired=frozenset(retired),
            effect_below={k: int(v) for k, v in below.items() if int(v)},
        )


def initial_state(cfg: InterfaceConfig) -> InterfaceState:
    """Omega_0: every kind off (scaffolding is earned by failures), or every configured kind on when
    ``cfg.fixed_all_on`` (and ``cfg.enabled``).

    Args:
        cfg: the interface configuration.
    """
    on = set(cfg.switchable_kinds()) if cfg.fixed_all_on else set()
    kinds = cfg.kinds()
    return InterfaceState(active={k: k in on for k in kinds}, streak_below={k: 0 for k in kinds}, step=0)


def evolve(state: InterfaceState, prevalence: dict[str, float], cfg: InterfaceConfig) -> InterfaceState:
    """Omega_{t+1} = evolve(Omega_t, C_t); pure, returns a new state.

    Per configured kind (``cfg.triggers``), with p the rate of its trigger label among the turns where that label
    can occur (abstention turns for ``spurious_tool_call``, turns with a ground-truth call for the others; the
    closed loop passes the EMA of ``StepProfile.rate``):

    - off -> on as soon as ``p >= on_threshold`` (a failure that has become common gets help at once);
    - on -> off only after ``patience`` consecutive steps with ``p < off_threshold`` (help fades once the
      failure has stayed rare, not after one lucky batch); any step with ``p >= off_threshold`` resets the
      streak;
    - between the thresholds the state is kept, so a prevalence hovering around one threshold cannot make
      a kind flap.

    With ``cfg.enabled`` false every kind is off; with ``cfg.fixed_all_on`` every kind is on; in both cases
    the prevalence is ignored. A kind outside ``cfg.switchable_kinds()`` (capability kinds without proactive
    cues) stays off. The new state holds the configured kinds only.

    Args:
        state: Omega_t.
        prevalence: label -> trigger rate (normally the EMA of the eligible-turn rates of C_t); keys from
            ``taxonomy.PROFILE_KEYS``; missing keys count as 0.
        cfg: thresholds, patience and the ablation flags.

    Raises:
        ValueError: a prevalence key that is not a profile key, or a value outside [0, 1].
    """
    for key, value in prevalence.items():
        if key not in tx.PROFILE_KEYS:
            raise ValueError(f"unknown prevalence key {key!r}; allowed keys: {', '.join(tx.PROFILE_KEYS)}")
        if not (0.0 <= float(value) <= 1.0):
            raise ValueError(f"prevalence of {key!r} must be in [0, 1], got {value!r}")
    switchable = set(cfg.switchable_kinds())
    kinds = cfg.kinds()
    if not cfg.enabled or cfg.fixed_all_on:
        return InterfaceState(
            active={k: k in switchable for k in kinds}, streak_below={k: 0 for k in kinds},
            step=state.step + 1,
        )
    switchable -= set(state.retired)
    trigger = cfg.trigger_of()
    active: dict[str, bool] = {}
    streak: dict[str, int] = {}
    for name in kinds:
        if name not in switchable:
            active[name], streak[name] = False, 0
            continue
        p = float(prevalence.get(trigger[name], 0.0))
        was_on = bool(state.active.get(name, False))
        below = int(state.streak_below.get(name, 0))
        if not was_on:
            active[name] = p >= cfg.on_threshold
            streak[name] = 0
        elif p < cfg.off_threshold:
            below += 1
            if below >= cfg.patience:
                active[name], streak[name] = False, 0
            else:
                active[name], streak[name] = True, below
        else:
            active[name], streak[name] = True, 0
    return InterfaceState(active=active, streak_below=streak, step=state.step + 1, retired=frozenset(state.retired),
                          effect_below=dict(state.effect_below))


def retire(state: InterfaceState, kinds: Iterable[str], effect_below: dict[str, int]) -> InterfaceState:
    """``state`` with ``kinds`` retired (switched off for good: ``evolve`` never turns them on again) and the
    probe's counts ``effect_below`` kept; pure."""
    gone = frozenset(state.retired) | frozenset(check_kinds(kinds))
    return InterfaceState(active={k: bool(on) and k not in gone for k, on in state.active.items()},
                          streak_below={k: (0 if k in gone else v) for k, v in state.streak_below.items()},
                          step=state.step, retired=gone, effect_below={k: int(v) for k, v in effect_below.items()})


def active_kinds(state: InterfaceState) -> set[str]:
    """The names of the kinds that are on.

    Args:
        state: the interface state to read.
    """
    return {k for k, on in state.active.items() if on}


def active_families(state: InterfaceState) -> set[str]:
    """The families with at least one active kind.

    Args:
        state: the interface state to read.
    """
    return {CUE_KINDS[k].family for k in active_kinds(state)}
