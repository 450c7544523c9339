"""The ``seal`` section of a run as plain dataclasses: the one place each setting gets its default.

The recipe (``recipes/bfcl_v3/config``), the dry run and code that builds the core's objects directly all
start from these classes, so a setting means the same everywhere. The verl glue
(``seal_verl/verl_glue/config.py``) hands them to OmegaConf as a structured config, which refuses unknown
keys and values of the wrong type; ``validate()`` here adds the range checks types cannot express.
``docs/config.md`` has the field table, checked against :func:`field_rows` by a test.

Plain dataclasses and no verl import, so that the SEAL core stays usable without verl.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass, field
from typing import Any, Dict, Optional

from seal_verl.core.cue_effect import CueEffectConfig
from seal_verl.core.interface import InterfaceConfig
from seal_verl.core.loop import SealSwitches
from seal_verl.core.weighting import WeightingConfig

__all__ = ["StateActorConfig", "SealSettings", "RewardOptions", "field_rows", "markdown_table", "paper_departures"]

#: Ray resource names that are not custom resources (Ray takes them as separate options).
_BUILTIN_RESOURCES = ("CPU", "GPU", "memory", "object_store_memory")


@dataclass
class StateActorConfig:
    """The Ray actor that hands the closed-loop state to the rollout workers (``verl_glue/state_actor.py``).

    Attributes:
        name: actor name; ``None`` derives ``seal_state/<project_name>/<experiment_name>``.
        namespace: Ray namespace; ``None`` is the job's.
        detached: keep the actor alive after the driver exits.
        resources: Ray custom resources it asks for (name -> amount), to pin it to the nodes offering them.
    """

    name: Optional[str] = None
    namespace: Optional[str] = None
    detached: bool = False
    resources: Dict[str, float] = field(default_factory=dict)

    def validate(self, where: str = "state_actor") -> "StateActorConfig":
        """Refuse built-in resource names (Ray would refuse them mid-run) and non-positive amounts."""
        out = {}
        for name, amount in dict(self.resources or {}).items():
            if not isinstance(name, str) or not name or name in _BUILTIN_RESOURCES:
                raise ValueError(f"{where}.resources: {name!r:.80} is not a custom resource name")
            if isinstance(amount, bool) or not isinstance(amount, (int, float)) or not 0 < amount < math.inf:
                raise ValueError(f"{where}.resources.{name:.80} must be a positive finite number, got {amount!r:.80}")
            out[name] = float(amount)
        self.resources = out
        self.detached = bool(self.detached)
        return self


#: Longest folder path accepted (Linux's PATH_MAX): a longer one fails only when the first step writes to it.
_MAX_PATH = 4096


def _check_folder(path: Optional[str], where: str) -> None:
    """Refuse a folder name the first write of the run would fail on, hours after the start."""
    if not path:  # null or "": no such folder
        return
    if not isinstance(path, str):
        raise ValueError(f"{where} must be a folder name or null, got {path!r:.80}")
    if "\x00" in path:
        raise ValueError(f"{where} holds a NUL character: {path!r:.80}")
    if len(path) > _MAX_PATH:
        raise ValueError(f"{where} has {len(path)} characters; at most {_MAX_PATH}")


@dataclass
class SealSettings:
    """The whole ``seal`` section. Every field has its default here and nowhere else.

    Attributes:
        switches: the paper's ablation switches (``seal_verl.core.loop.SealSwitches``).
        weighting: trajectory weights and dynamic rho (``seal_verl.core.weighting.WeightingConfig``).
        interface: cue triggers and sizes (``seal_verl.core.interface.InterfaceConfig``).
        state_dir: also write the closed-loop state of every step here (JSON, one file per step).
        run_dir: write the run folder here (state, traces, metrics per step).
        state_actor: see :class:`StateActorConfig`.
        cue_effect: the cue-effect probe (``seal_verl.core.cue_effect.CueEffectConfig``): the same policy on the same
            tasks with and without its cues, measured every few steps and never trained on.
    """

    switches: SealSwitches = field(default_factory=SealSwitches)
    weighting: WeightingConfig = field(default_factory=WeightingConfig)
    interface: InterfaceConfig = field(default_factory=InterfaceConfig)
    state_dir: Optional[str] = None
    run_dir: Optional[str] = None
    state_actor: StateActorConfig = field(default_factory=StateActorConfig)
    cue_effect: CueEffectConfig = field(default_factory=CueEffectConfig)

    def validate(self, where: str = "seal") -> "SealSettings":
        """Run each section's range checks; a failure is a ``ValueError`` whose message starts with the
        section's dotted name (``seal.weighting: w_min ...``)."""
        for name, section in (("switches", self.switches), ("weighting", self.weighting),
                              ("interface", self.interface), ("cue_effect", self.cue_effect)):
            try:
                if isinstance(section, SealSwitches):
                    SealSwitches.from_dict(section.to_dict())
                elif isinstance(section, CueEffectConfig):  # after the interface: its budget needs the kinds
                    section.validate(n_kinds=len(self.interface.kinds()))
                else:
                    section.validate()
            except (ValueError, TypeError) as exc:
                raise ValueError(f"{where}.{name}: {exc}") from None
        self.state_actor.validate(f"{where}.state_actor")
        for name in ("state_dir", "run_dir"):
            _check_folder(getattr(self, name), f"{where}.{name}")
        return self

    @classmethod
    def from_dict(cls, d: Optional[dict[str, Any]]) -> "SealSettings":
        """The settings a run recorded (``to_dict``'s output, as a run folder's ``config.json`` keeps it); a
        section it leaves out takes its defaults here, the one place they live.

        Raises:
            ValueError: not a mapping, an unknown section or key, or a value a section refuses (the message
                starts with the section's name).
        """
        if d is None:
            d = {}
        if not isinstance(d, dict):
            raise ValueError(f"the seal section must be a mapping, got {type(d).__name__}")
        unknown = sorted(set(d) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ValueError(f"unknown seal section(s) {unknown}")
        out = cls()
        for name, kind in (("switches", SealSwitches), ("weighting", WeightingConfig),
                           ("interface", InterfaceConfig), ("cue_effect", CueEffectConfig)):
            try:
                setattr(out, name, kind.from_dict(d.get(name)))
            except (ValueError, TypeError) as exc:
                raise ValueError(f"seal.{name}: {exc}") from None
        actor = d.get("state_actor") or {}
        if not isinstance(actor, dict) or set(actor) - {f.name for f in dataclasses.fields(StateActorConfig)}:
            raise ValueError(f"seal.state_actor: not the state actor's settings: {actor!r:.80}")
        out.state_actor = StateActorConfig(**actor)
        out.state_dir, out.run_dir = d.get("state_dir"), d.get("run_dir")
        return out.validate()

    @property
    def any_on(self) -> bool:
        """True when any SEAL switch is on."""
        return any(self.switches_dict().values())

    def switches_dict(self) -> dict[str, bool]:
        """The switches as a plain dict."""
        return {k: bool(v) for k, v in self.switches.to_dict().items()}

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict of every field."""
        return {
            "switches": self.switches_dict(),
            "weighting": self.weighting.to_dict(),
            "interface": self.interface.to_dict(),
            "state_dir": self.state_dir,
            "run_dir": self.run_dir,
            "state_actor": dataclasses.asdict(self.state_actor),
            "cue_effect": self.cue_effect.to_dict(),
        }


@dataclass(frozen=True)
class RewardOptions:
    """The reward function's options (``reward.custom_reward_function.reward_kwargs``; ``reward_fns/``).

    Here rather than beside the reward function because verl loads that file by path, outside
    ``sys.modules``, where a dataclass cannot be defined.

    Attributes:
        strict_abstention: a tool-call attempt on an abstention turn fails the task for ``score``;
            ``acc`` keeps the official semantics either way.
        dense_credit: a failing task scores the share of its checked turns that pass, instead of 0.
        near_miss_credit: with ``dense_credit``, a turn Psi labels ``argument_mismatch`` (the call parsed and
            named the tools; its arguments are wrong) counts this fraction of a passing turn. 0 counts passing
            turns only. Without it a policy that never calls keeps its abstention turns' credit while every
            attempt that misses an argument earns nothing, and GRPO can slide into never calling.
        argument_credit: with ``dense_credit``, an ``argument_mismatch`` turn earns in addition this fraction times
            the share of the ground truth's arguments its calls match (``TurnCheck.argument_share``; 0 where the
            verifier does not measure it), so that a call with more arguments right scores more. A flat
            near-miss credit pays every wrong call the same, and once the policy names the right tools the
            groups' rewards tie and GRPO's advantage vanishes. ``near_miss_credit + argument_credit`` must stay
            below 1: a near miss earns less than a pass.
    """

    strict_abstention: bool = True
    dense_credit: bool = False
    near_miss_credit: float = 0.0
    argument_credit: float = 0.0

    def validate(self) -> "RewardOptions":
        """Raises ValueError on a value out of range or a setting that needs another one."""
        if not 0.0 <= self.near_miss_credit < 1.0:
            raise ValueError(f"near_miss_credit must be in [0, 1), got {self.near_miss_credit!r}: a near miss "
                             "earns less than a passing turn")
        if self.near_miss_credit and not self.dense_credit:
            raise ValueError("near_miss_credit needs dense_credit: true (it is a share of a turn's credit, and "
                             "without dense_credit a failing task scores 0 whatever its turns)")
        if not 0.0 <= self.argument_credit < 1.0:
            raise ValueError(f"argument_credit must be in [0, 1), got {self.argument_credit!r}")
        if self.argument_credit and not self.dense_credit:
            raise ValueError("argument_credit needs dense_credit: true (it is a share of a turn's credit, and "
                             "without dense_credit a failing task scores 0 whatever its turns)")
        if self.near_miss_credit + self.argument_credit >= 1.0:
            raise ValueError(f"near_miss_credit + argument_credit must be below 1, got {self.near_miss_credit!r} + "
                             f"{self.argument_credit!r}: a near miss earns less than a passing turn")
        return self


#: the settings beyond the paper that the ``paper`` preset leaves at their default: key -> (is it on?, what it is)
_BEYOND_THE_PAPER = {
    "seal.cue_effect.retire": (lambda st: st.cue_effect.retire,
                               "retires cue kinds on the probe's measurements, which the paper's closed loop does not"),
}


def paper_departures(settings: "SealSettings", preset: Optional[str]) -> list[str]:
    """One line per setting beyond the paper that a run of the ``paper`` preset has switched on (empty for any
    other preset): said on the console, by ``seal-verl check`` and by the report, since the run then no longer
    reproduces the paper's settings."""
    if preset != "paper":
        return []
    return [f"{key} is on under preset=paper: the run {what}; it leaves the paper's settings"
            for key, (on, what) in _BEYOND_THE_PAPER.items() if on(settings)]


def _type_name(tp: Any) -> str:
    """A short, stable spelling of a field's annotation for the docs table."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Union and type(None) in args:
        inner = [a for a in args if a is not type(None)]
        return f"{_type_name(inner[0])} or null"
    if origin in (dict, typing.Dict):
        return f"map {_type_name(args[0])} -> {_type_name(args[1])}" if args else "map"
    if origin in (tuple, typing.Tuple):
        return "[" + ", ".join(_type_name(a) for a in args) + "]"
    return {bool: "bool", int: "int", float: "float", str: "str"}.get(tp, getattr(tp, "__name__", str(tp)))


def _default_text(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_default_text(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_default_text(v) for v in value) + "]"
    return str(value)


def field_rows(cls: type = SealSettings, prefix: str = "seal") -> list[tuple[str, str, str]]:
    """``(dotted key, type, default)`` for every leaf setting of ``cls``, in declaration order."""
    hints = typing.get_type_hints(cls)
    default = cls()
    rows: list[tuple[str, str, str]] = []
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        key = f"{prefix}.{f.name}"
        if dataclasses.is_dataclass(tp):
            rows.extend(field_rows(tp, key))
        else:
            rows.append((key, _type_name(tp), _default_text(getattr(default, f.name))))
    return rows


def markdown_table(rows: Optional[list[tuple[str, str, str]]] = None) -> str:
    """The key/type/default columns of ``docs/config.md`` as a Markdown table."""
    rows = field_rows() if rows is None else rows
    lines = ["| key | type | default |", "| --- | --- | --- |"]
    lines += [f"| `{k}` | {t} | `{d}` |" for k, t, d in rows]
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover - prints the table for docs/config.md
    print(markdown_table())
