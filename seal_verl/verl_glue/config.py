"""The ``seal:`` section of a verl trainer config: checked as a structured config, and against verl's settings.

The section's fields and their single defaults are the core's dataclasses (``seal_verl.core.settings.SealSettings``;
the table is in docs/config.md). Here, as verl does with its own dataclass configs, OmegaConf merges the
user's section onto ``OmegaConf.structured(SealSettings)``: unknown keys and values of the wrong type are
refused there, and the core's ``validate()`` adds the range checks. Every failure is a one-line
``SealConfigError`` naming the key (``seal.weighting.w_min``). YAML ``null`` means "the default".
``check_run_config`` adds the checks that need the rest of the verl config (estimator, trainer mode).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import typing
from typing import Any, Optional

from seal_verl.core.options import parse_bool as _parse_bool
from seal_verl.core.settings import SealSettings, StateActorConfig

__all__ = ["SEAL_GRPO", "SEAL_TRAINER_MODES", "SealConfig", "SealConfigError", "StateActorConfig", "check_run_config",
           "estimator_name", "parse_bool", "parse_seal_config", "staleness_bound", "to_plain"]

#: Name of the registered advantage estimator.
SEAL_GRPO = "seal_grpo"

#: Registered V1 trainer names (``trainer.v1.trainer_mode``) -> the verl mode they extend.
SEAL_TRAINER_MODES: dict[str, str] = {"seal": "sync", "seal_colocate_async": "colocate_async",
                                      "seal_separate_async": "separate_async"}
#: verl's modes whose rollouts may be trained in a later step than the one whose state they ran under
ASYNC_MODES = ("colocate_async", "separate_async")

#: The validated section; the glue's historical name for the core's settings class.
SealConfig = SealSettings


class SealConfigError(ValueError):
    """The ``seal`` section, or its combination with the verl config, is invalid."""


def to_plain(node: Any) -> Any:
    """A DictConfig/ListConfig (resolved) or mapping as plain dicts/lists; other values unchanged."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    if isinstance(node, (DictConfig, ListConfig)):
        return OmegaConf.to_container(node, resolve=True)
    if isinstance(node, dict):
        return {k: to_plain(v) for k, v in node.items()}
    return node


def parse_bool(value: Any, where: str) -> bool:
    """A boolean option's value (a bool or a YAML spelling of one); ``SealConfigError`` otherwise."""
    try:
        return _parse_bool(value, where)
    except ValueError as exc:
        raise SealConfigError(str(exc)) from None


#: Most entries a table of the section may have (``weighting.rho`` has nine keys, ``state_actor.resources`` a
#: few): a longer one is a mistake, and OmegaConf's merge of a table takes time in proportion to its size.
MAX_TABLE_ENTRIES = 256

#: Longest message a ``SealConfigError`` quotes in full; longer ones keep their start (the key) and end.
_MAX_MESSAGE = 400


def _shown(value: Any, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters: a value in an error message, however large the value."""
    if isinstance(value, (list, tuple, dict)) and len(value) > limit:
        return f"a {type(value).__name__} of {len(value)} entries"
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit - 3]}..."


def _one_line(message: str) -> str:
    """``message`` on one line and at most ``_MAX_MESSAGE`` characters, its start and end kept."""
    text = " ".join(message.split())
    if len(text) <= _MAX_MESSAGE:
        return text
    return f"{text[:250]} ... ({len(text) - 400} characters left out) ... {text[-150:]}"


def _prepared(cls: type, d: dict, where: str) -> dict:
    """``d`` made ready for OmegaConf's merge: nulls dropped (the default applies), booleans read strictly
    (OmegaConf would take 1 and 0), strings kept strings (it would turn 3 into "3"), and a mapping where a
    section or a table belongs. Checked here rather than by the merge, because the merge's messages do not
    name the key or its cost grows with the value: a pair's length, a table's size, an integer too large
    for a float, OmegaConf's "missing" marker. Unknown keys are left for OmegaConf to refuse."""
    hints = typing.get_type_hints(cls)
    out = {}
    for key, value in d.items():
        if value is None:
            continue
        tp = hints.get(key)
        name = f"{where}.{key}"
        if tp is None:
            out[key] = value
            continue
        if isinstance(value, str) and value == "???":  # OmegaConf would keep the default without a word
            raise SealConfigError(f"{name} is ??? (a value left to fill in): set it, or null for the default")
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        base = args[0] if typing.get_origin(tp) is typing.Union and len(args) == 1 else tp
        origin = typing.get_origin(base)
        is_map = dataclasses.is_dataclass(base) or origin in (dict, typing.Dict)
        if is_map and not isinstance(value, dict):
            raise SealConfigError(f"{name} must be a mapping, got {type(value).__name__}: {_shown(value)}")
        if dataclasses.is_dataclass(base):
            value = _prepared(base, value, name)
        elif origin in (dict, typing.Dict):
            if len(value) > MAX_TABLE_ENTRIES:
                raise SealConfigError(f"{name} has {len(value)} entries; at most {MAX_TABLE_ENTRIES}")
            value = {k: _number(v, f"{name}.{k}") for k, v in value.items()}
        elif origin in (tuple, typing.Tuple):
            n = len(typing.get_args(base))
            if not isinstance(value, (list, tuple)) or len(value) != n:
                raise SealConfigError(f"{name} must be a list of {n} numbers, got {_shown(value)}")
            value = [_number(v, f"{name}[{i}]") for i, v in enumerate(value)]
        elif base is bool:
            value = parse_bool(value, name)
        elif base is str and not isinstance(value, str):
            raise SealConfigError(f"{name} must be a string or null, got {_shown(value)}")
        elif base in (int, float):
            value = _number(value, name)
        out[key] = value
    return out


def _number(value: Any, name: str) -> Any:
    """``value`` unchanged, unless it is an integer too large for a float (OmegaConf's conversion would raise
    ``OverflowError`` with a message that names no key)."""
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            float(value)
        except OverflowError:
            raise SealConfigError(f"{name} must be a finite number, got an integer of {len(str(value))} digits") \
                from None
    return value


def _section_class(path: list[str]) -> type:
    cls: type = SealSettings
    for part in path:
        cls = typing.get_type_hints(cls)[part]
    return cls


def parse_seal_config(node: Any) -> SealSettings:
    """Validate and build the settings from the ``seal`` node (DictConfig, dict or None = all defaults).

    Raises:
        SealConfigError: unknown key at any level, wrong type, or a value the core's ``validate()`` rejects
            (its message is kept, prefixed with the key's section).
    """
    try:
        d = to_plain(node)
    except Exception as exc:  # OmegaConf's interpolation errors, e.g. ${oc.env:VAR} of an unset variable
        key = getattr(exc, "full_key", None)
        where = f"seal.{key}" if key else "the seal section"
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SealConfigError(_one_line(f"{where}: {reason}")) from None
    if d is None:
        d = {}
    if not isinstance(d, dict):
        raise SealConfigError(f"the seal section must be a mapping, got {type(d).__name__}: {_shown(d)}")
    try:
        key = json.dumps(d, sort_keys=True)
    except (TypeError, ValueError):
        key = None
    cached = _PARSED.get(key) if key is not None else None
    if cached is None:
        try:
            cached = _parse_section(d)
        except SealConfigError as exc:
            raise SealConfigError(_one_line(str(exc))) from None
        if key is not None:
            if len(_PARSED) >= _PARSED_MAX:
                _PARSED.clear()
            _PARSED[key] = cached
    return copy.deepcopy(cached)


#: Parsed sections by their canonical JSON: the agent loops parse the run's section once per rollout, and a
#: structured merge costs milliseconds (about 0.1 s on a loaded two-core machine) where a copy costs microseconds.
_PARSED: dict[str, SealSettings] = {}
_PARSED_MAX = 64


def _schema() -> Any:
    global _SCHEMA
    if _SCHEMA is None:
        from omegaconf import OmegaConf

        _SCHEMA = OmegaConf.structured(SealSettings)
    return _SCHEMA


_SCHEMA: Any = None


def _parse_section(d: dict) -> SealSettings:
    from omegaconf import OmegaConf
    from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

    d = _prepared(SealSettings, d, "seal")
    try:
        merged = OmegaConf.merge(_schema(), d)
        settings = OmegaConf.to_object(merged)
    except ConfigKeyError as exc:
        path = str(exc.full_key).split(".")[:-1]
        where = ".".join(["seal"] + path)
        allowed = [f.name for f in dataclasses.fields(_section_class(path))]
        raise SealConfigError(f"unknown key(s) [{exc.key!r}] in {where}; allowed keys: {', '.join(allowed)}") \
            from None
    except (OmegaConfBaseException, OverflowError, ValueError, TypeError) as exc:
        key = getattr(exc, "full_key", None)
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SealConfigError(f"seal.{key}: {reason}" if key else f"the seal section: {reason}") from None
    try:
        return settings.validate("seal")
    except (ValueError, TypeError) as exc:
        raise SealConfigError(str(exc)) from None


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


#: the reward functions whose options this module checks at start-up (file names or ``pkg://`` module names)
_SEAL_REWARD_FILES = ("seal_reward", "bfcl_reward")


def check_reward_options(config: Any) -> None:
    """Parse ``reward.custom_reward_function.reward_kwargs`` the way SEAL's reward function will, when that is
    the configured reward function: a bad option is then one line at start-up, not an error in the first
    reward call after the workers and the inference servers have started."""
    path = str(_get(config, "reward.custom_reward_function.path", "") or "")
    stem = path.rsplit("/", 1)[-1].rsplit(".", 1)[-1] if path.startswith("pkg://") else \
        path.rsplit("/", 1)[-1].removesuffix(".py")
    if stem not in _SEAL_REWARD_FILES:
        return
    kwargs = to_plain(_get(config, "reward.custom_reward_function.reward_kwargs", None)) or {}
    from reward_fns.seal_reward import parse_options

    try:
        parse_options("reward.custom_reward_function.reward_kwargs", dict(kwargs))
    except ValueError as exc:
        raise SealConfigError(str(exc)) from None


def staleness_bound(config: Any) -> Optional[int]:
    """How many training steps a rollout of this run may lag behind the step that trains it: 0 under a synchronous
    trainer; under verl's asynchronous modes ``trainer.v1.sampler.max_off_policy_threshold`` (verl's replay buffer
    keeps a prompt submitted at step p out of every step g with ``g - p + 1`` above it), None when that is null
    (verl then bounds nothing)."""
    mode = str(_get(config, "trainer.v1.trainer_mode", "sync"))
    if not bool(_get(config, "trainer.use_v1", True)) or SEAL_TRAINER_MODES.get(mode, mode) not in ASYNC_MODES:
        return 0
    threshold = _get(config, "trainer.v1.sampler.max_off_policy_threshold", None)
    return None if threshold is None else int(threshold)


def check_run_config(config: Any) -> Optional[SealConfig]:
    """Validate the ``seal`` section together with the verl settings it depends on.

    Returns the parsed ``SealConfig``, or ``None`` for a run that uses no SEAL at all (no ``seal`` section
    or every switch off, ``adv_estimator != seal_grpo``, no seal trainer mode).

    Rules (each a ``SealConfigError`` naming the keys to change):

    - ``algorithm.adv_estimator=seal_grpo`` if and only if ``seal.switches.reweighting`` is on: the weight
      is never silently 1 and never silently applied;
    - SEAL's reward function gets options it accepts (:func:`check_reward_options`), whatever the switches;
    - V1 trainer (``trainer.use_v1``, verl's default): any SEAL switch on requires a SEAL trainer mode
      (``trainer.v1.trainer_mode=seal``), the only place that feeds labels to the estimator and runs the
      closed loop; a SEAL trainer mode with ``trainer.use_v1=false`` is ignored by verl, so it is an error;
    - an asynchronous SEAL mode needs a bound on staleness (``trainer.v1.sampler.max_off_policy_threshold`` not
      null): each rollout is weighted with the rho of the state it ran under, and the driver keeps the states of
      as many steps as a rollout may lag behind.
    """
    check_reward_options(config)
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
        if is_seal_mode and staleness_bound(config) is None:
            raise SealConfigError(
                f"trainer.v1.trainer_mode={mode} with trainer.v1.sampler.max_off_policy_threshold=null: SEAL weights "
                "each rollout with the rho of the closed-loop state it was generated under and keeps the states of "
                "as many steps as a rollout may lag behind, so the lag needs a bound; set "
                "trainer.v1.sampler.max_off_policy_threshold to a positive integer (verl's default is 8)"
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
