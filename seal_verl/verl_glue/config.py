"""The ``seal:`` section of a verl trainer config: parsing, validation, and consistency with verl's settings.

Layout (every key optional; defaults come from the SEAL core's dataclasses)::

    seal:
      switches:    {env_side: true, reweighting: true, closed_loop: true}
      weighting:   {w_min, w_max, apply_to, warmup_steps, rho, dynamic, alpha, beta, n_conf, rho_clip}
      interface:   {on_threshold, off_threshold, patience, max_cue_chars, ...}   # seal_verl.interface
      state_dir:   null     # also write the closed-loop state of every step here (JSON, one file per step)
      run_dir:     null     # write the run folder here (driver.RunFolder: state, traces, metrics per step)
      state_actor: {name: null, namespace: null, detached: false, resources: null}  # see state_actor.py

Unknown keys and bad values are rejected here, at start-up, with the offending key in the message; the
field-level checks are the core's own ``validate()`` methods. ``check_run_config`` adds the checks that
need the rest of the verl config (estimator, trainer mode).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Optional

#: Name of the registered advantage estimator.
SEAL_GRPO = "seal_grpo"

#: Registered V1 trainer names (``trainer.v1.trainer_mode``) -> the verl mode they extend.
SEAL_TRAINER_MODES: dict[str, str] = {"seal": "sync"}

SWITCH_KEYS = ("env_side", "reweighting", "closed_loop")
TOP_KEYS = ("switches", "weighting", "interface", "state_dir", "run_dir", "state_actor")
STATE_ACTOR_KEYS = ("name", "namespace", "detached", "resources")


class SealConfigError(ValueError):
    """The ``seal`` section, or its combination with the verl config, is invalid."""


def to_plain(node: Any) -> Any:
    """A DictConfig/ListConfig (resolved) or mapping as plain dicts/lists; other values unchanged."""
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf
    except ImportError:  # pragma: no cover - omegaconf ships with verl and hydra
        DictConfig = ListConfig = ()  # type: ignore[assignment]
    if DictConfig and isinstance(node, (DictConfig, ListConfig)):
        return OmegaConf.to_container(node, resolve=True)
    if isinstance(node, dict):
        return {k: to_plain(v) for k, v in node.items()}
    return node


def _no_nones(d: dict) -> dict:
    """Drop keys whose value is None, so YAML ``null`` means "the core's default"."""
    return {k: v for k, v in d.items() if v is not None}


def _section(d: dict, key: str, allowed: Optional[tuple] = None) -> dict:
    value = d.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise SealConfigError(f"seal.{key} must be a mapping, got {type(value).__name__}: {value!r}")
    if allowed is not None:
        unknown = sorted(set(value) - set(allowed))
        if unknown:
            raise SealConfigError(f"unknown key(s) {unknown} in seal.{key}; allowed keys: {', '.join(allowed)}")
    return value


@dataclass
class StateActorConfig:
    name: Optional[str] = None
    namespace: Optional[str] = None
    detached: bool = False
    #: Ray custom resources the actor asks for (name -> amount), to pin it to the nodes that offer them
    resources: dict = field(default_factory=dict)


@dataclass
class SealConfig:
    """The validated ``seal`` section. ``weighting`` and ``interface`` are the core's config objects."""

    switches: Any
    weighting: Any
    interface: Any
    state_dir: Optional[str] = None
    state_actor: StateActorConfig = field(default_factory=StateActorConfig)
    run_dir: Optional[str] = None

    @property
    def any_on(self) -> bool:
        return any(bool(getattr(self.switches, k)) for k in SWITCH_KEYS)

    def switches_dict(self) -> dict[str, bool]:
        return {k: bool(getattr(self.switches, k)) for k in SWITCH_KEYS}

    def to_dict(self) -> dict[str, Any]:
        return {
            "switches": self.switches_dict(),
            "weighting": self.weighting.to_dict(),
            "interface": self.interface.to_dict(),
            "state_dir": self.state_dir,
            "run_dir": self.run_dir,
            "state_actor": dataclasses.asdict(self.state_actor),
        }


#: The YAML 1.1 spellings of a boolean (any letter case): a value given as a string in an override or a
#: quoted YAML scalar means what YAML would read. Anything else for a boolean option is an error.
_TRUE = frozenset({"true", "yes", "on", "y"})
_FALSE = frozenset({"false", "no", "off", "n"})


def parse_bool(value: Any, where: str) -> bool:
    """A boolean option's value: a bool, or a string YAML reads as one; ``SealConfigError`` otherwise."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        low = value.strip().lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
    raise SealConfigError(f"{where} must be a boolean (true or false), got {value!r}")


def _bool_fields(cls: type) -> set:
    """Names of the dataclass fields of ``cls`` annotated ``bool``."""
    return {f.name for f in dataclasses.fields(cls) if f.type in (bool, "bool")}


def _with_bools(d: dict, cls: type, section: str) -> dict:
    """``d`` with the values of ``cls``'s boolean fields parsed by :func:`parse_bool`."""
    out = dict(d)
    for name in _bool_fields(cls) & set(out):
        out[name] = parse_bool(out[name], f"{section}.{name}")
    return out


def _make_switches(d: dict) -> Any:
    from seal_verl.loop import SealSwitches

    d = {k: parse_bool(v, f"seal.switches.{k}") if k in SWITCH_KEYS else v for k, v in d.items()}
    try:
        return SealSwitches.from_dict(d)
    except ValueError as e:
        raise SealConfigError(f"seal.switches: {e}") from e


def parse_seal_config(node: Any) -> SealConfig:
    """Validate and build a ``SealConfig`` from the ``seal`` node (DictConfig, dict or None = all defaults).

    Raises:
        SealConfigError: unknown key at any level, wrong type, or a value the core's ``validate()`` rejects
            (its message is kept, prefixed with the section).
    """
    from seal_verl.interface import InterfaceConfig
    from seal_verl.weighting import WeightingConfig

    d = to_plain(node)
    if d is None:
        d = {}
    if not isinstance(d, dict):
        raise SealConfigError(f"the seal section must be a mapping, got {type(d).__name__}: {d!r}")
    unknown = sorted(set(d) - set(TOP_KEYS))
    if unknown:
        raise SealConfigError(f"unknown key(s) {unknown} in seal; allowed keys: {', '.join(TOP_KEYS)}")

    switches = _make_switches(_no_nones(_section(d, "switches", SWITCH_KEYS)))
    weighting_d = _with_bools(_no_nones(_section(d, "weighting")), WeightingConfig, "seal.weighting")
    rho = weighting_d.get("rho")
    if rho is not None and not isinstance(rho, dict):
        raise SealConfigError(f"seal.weighting.rho must be a mapping of label -> utility, got {rho!r}")
    clip = weighting_d.get("rho_clip")
    if clip is not None and not isinstance(clip, (list, tuple)):
        raise SealConfigError(f"seal.weighting.rho_clip must be a list [low, high], got {clip!r}")
    try:
        weighting = WeightingConfig.from_dict(weighting_d)
    except (ValueError, TypeError) as e:
        raise SealConfigError(f"seal.weighting: {e}") from e
    try:
        interface = InterfaceConfig.from_dict(
            _with_bools(_no_nones(_section(d, "interface")), InterfaceConfig, "seal.interface"))
    except (ValueError, TypeError) as e:
        raise SealConfigError(f"seal.interface: {e}") from e

    state_dir = d.get("state_dir")
    if state_dir is not None and not isinstance(state_dir, str):
        raise SealConfigError(f"seal.state_dir must be a path string or null, got {state_dir!r}")
    run_dir = d.get("run_dir")
    if run_dir is not None and not isinstance(run_dir, str):
        raise SealConfigError(f"seal.run_dir must be a path string or null, got {run_dir!r}")
    sa = _section(d, "state_actor", STATE_ACTOR_KEYS)
    for k in ("name", "namespace"):
        if sa.get(k) is not None and not isinstance(sa[k], str):
            raise SealConfigError(f"seal.state_actor.{k} must be a string or null, got {sa[k]!r}")
    sa = dict(sa)
    if sa.get("detached") is not None:
        sa["detached"] = parse_bool(sa["detached"], "seal.state_actor.detached")
    if sa.get("resources") is not None:
        sa["resources"] = _parse_resources(sa["resources"], "seal.state_actor.resources")
    state_actor = StateActorConfig(**_no_nones(sa))
    return SealConfig(
        switches=switches, weighting=weighting, interface=interface, state_dir=state_dir, state_actor=state_actor,
        run_dir=run_dir,
    )


def _parse_resources(value: Any, where: str) -> dict[str, float]:
    """A mapping of Ray custom resource names to positive amounts. CPU, GPU and memory are not custom
    resources (Ray takes them as separate options), so they are refused here rather than by Ray mid-run."""
    if not isinstance(value, dict):
        raise SealConfigError(f"{where} must be a mapping of resource name to amount, got {value!r}")
    out = {}
    for name, amount in value.items():
        if not isinstance(name, str) or not name or name in ("CPU", "GPU", "memory", "object_store_memory"):
            raise SealConfigError(f"{where}: {name!r} is not a custom resource name")
        if isinstance(amount, bool) or not isinstance(amount, (int, float)) or not amount > 0:
            raise SealConfigError(f"{where}.{name} must be a positive number, got {amount!r}")
        out[name] = float(amount)
    return out


def _get(node: Any, dotted: str, default: Any = None) -> Any:
    cur = node
    for part in dotted.split("."):
        if cur is None:
            return default
        try:
            cur = cur.get(part)
        except AttributeError:
            return default
    return default if cur is None else cur


def estimator_name(adv_estimator: Any) -> str:
    """The estimator's registry name, for a str or verl's ``AdvantageEstimator`` enum."""
    value = getattr(adv_estimator, "value", adv_estimator)
    return str(value)


def check_run_config(config: Any) -> Optional[SealConfig]:
    """Validate the ``seal`` section together with the verl settings it depends on.

    Returns the parsed ``SealConfig``, or ``None`` for a run that uses no SEAL at all (no ``seal`` section
    or every switch off, ``adv_estimator != seal_grpo``, no seal trainer mode).

    Rules (each a ``SealConfigError`` naming the keys to change):

    - ``algorithm.adv_estimator=seal_grpo`` if and only if ``seal.switches.reweighting`` is on: the weight
      is never silently 1 and never silently applied;
    - V1 trainer (``trainer.use_v1``, verl's default): any SEAL switch on requires a SEAL trainer mode
      (``trainer.v1.trainer_mode=seal``), the only place that feeds labels to the estimator and runs the
      closed loop; a SEAL trainer mode with ``trainer.use_v1=false`` is ignored by verl, so it is an error.
    """
    seal_node = _get(config, "seal")
    adv = estimator_name(_get(config, "algorithm.adv_estimator", ""))
    use_v1 = bool(_get(config, "trainer.use_v1", True))
    mode = str(_get(config, "trainer.v1.trainer_mode", "sync"))
    is_seal_mode = mode in SEAL_TRAINER_MODES

    if seal_node is None and adv != SEAL_GRPO and not (use_v1 and is_seal_mode):
        return None
    cfg = parse_seal_config(seal_node)
    reweighting = bool(cfg.switches.reweighting)
    if adv == SEAL_GRPO and not reweighting:
        raise SealConfigError(
            "algorithm.adv_estimator=seal_grpo but seal.switches.reweighting=false: use "
            "algorithm.adv_estimator=grpo for a run without reweighting"
        )
    if reweighting and adv != SEAL_GRPO:
        raise SealConfigError(
            f"seal.switches.reweighting=true but algorithm.adv_estimator={adv}: the SEAL weights are applied "
            "only by algorithm.adv_estimator=seal_grpo (or set seal.switches.reweighting=false)"
        )
    if use_v1:
        if cfg.any_on and not is_seal_mode:
            raise SealConfigError(
                f"SEAL switches {cfg.switches_dict()} need the SEAL trainer, but trainer.v1.trainer_mode={mode}: "
                f"set trainer.v1.trainer_mode to one of {sorted(SEAL_TRAINER_MODES)}"
            )
    elif is_seal_mode:
        raise SealConfigError(
            f"trainer.v1.trainer_mode={mode} has no effect with trainer.use_v1=false; the legacy trainer "
            "gets SEAL through the seal_verl plugin's compute_advantage wrapper. Set trainer.v1.trainer_mode=sync "
            "or trainer.use_v1=true"
        )
    if not cfg.any_on and adv != SEAL_GRPO and not (use_v1 and is_seal_mode):
        return None
    return cfg
