"""Omega: the training-time interface state, its evolution, and the cue texts.

``o~ = o (+) phi_schema(F) (+) phi_err(o, H_t) (+) phi_cap(C_t)``. The interface is a set of named cue kinds,
each in one of the three families and each switched on by one failure label of the profile:

============================  ===========  =====================  =====================================
kind                          family       trigger label          what it adds
============================  ===========  =====================  =====================================
``call_format``               schema       invalid_tool_call      the legal call syntax; decode errors
``schema_constraints``        schema       argument_mismatch      required params, types, enums
``tool_affordance``           capability   missing_tool_call      "act with a tool call, not text"
``error_recovery``            error        recovery_failure       structured next-step error feedback
``ask_or_abstain``            capability   spurious_tool_call     "ask when a parameter/function lacks"
============================  ===========  =====================  =====================================

``evolve`` switches kinds with hysteresis, so that the interface does not flap when a trigger rate hovers
around a threshold, and lets scaffolding fade once a failure has stayed rare for a while.

Cue renderers are pure and bounded. They only ever restate what they are given: names, types and enum
members from the tool schemas, the agent's own call and error text, and fixed wording. In particular error
feedback never contains an argument value: the renderers have no access to ground truth, and they do not
echo values at all, so nothing can leak an answer. This module imports neither verl nor BFCL.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Optional

from seal_verl import schema as sc
from seal_verl import taxonomy as tx
from seal_verl import trace as tr
from seal_verl.options import from_mapping

__all__ = [
    "FAMILIES",
    "CueKind",
    "CUE_KINDS",
    "CALL_FORMATS",
    "TRUNCATION_MARKER",
    "InterfaceConfig",
    "InterfaceState",
    "initial_state",
    "evolve",
    "active_kinds",
    "active_families",
    "kinds_in_family",
    "schema_cue",
    "call_format_cue",
    "error_cue",
    "capability_cue",
    "cue_stats",
]

SCHEMA, ERROR, CAPABILITY = "schema", "error", "capability"
#: The three cue families of the paper: phi_schema, phi_err, phi_cap.
FAMILIES: tuple[str, ...] = (SCHEMA, ERROR, CAPABILITY)


@dataclass(frozen=True)
class CueKind:
    """A named cue kind: which family it belongs to and which failure label switches it on."""

    name: str
    family: str
    trigger: str


CALL_FORMAT = "call_format"
SCHEMA_CONSTRAINTS = "schema_constraints"
TOOL_AFFORDANCE = "tool_affordance"
ERROR_RECOVERY = "error_recovery"
ASK_OR_ABSTAIN = "ask_or_abstain"

#: The failure-type-specific activation map, in a fixed order (used to break ties).
CUE_KINDS: dict[str, CueKind] = {
    CALL_FORMAT: CueKind(CALL_FORMAT, SCHEMA, tx.INVALID_TOOL_CALL),
    SCHEMA_CONSTRAINTS: CueKind(SCHEMA_CONSTRAINTS, SCHEMA, tx.ARGUMENT_MISMATCH),
    TOOL_AFFORDANCE: CueKind(TOOL_AFFORDANCE, CAPABILITY, tx.MISSING_TOOL_CALL),
    ERROR_RECOVERY: CueKind(ERROR_RECOVERY, ERROR, tx.RECOVERY_FAILURE),
    ASK_OR_ABSTAIN: CueKind(ASK_OR_ABSTAIN, CAPABILITY, tx.SPURIOUS_TOOL_CALL),
}

#: Call syntaxes ``call_format_cue`` can describe: Qwen-style JSON in <tool_call> tags, BFCL's Python list.
CALL_FORMATS: tuple[str, ...] = ("json", "python")

#: Appended to a cue that had to be cut to ``max_cue_chars``; the result, marker included, fits the bound.
TRUNCATION_MARKER = " [...]"

_MIN_CUE_CHARS = 50
_NAME_CHARS = 64        # longest function / parameter name rendered
_PARSE_ERROR_CHARS = 160  # longest excerpt of the parser's own message rendered


def kinds_in_family(family: str) -> tuple[str, ...]:
    """Names of the cue kinds of one family.

    Args:
        family: one of ``FAMILIES``.
    """
    if family not in FAMILIES:
        raise ValueError(f"unknown cue family {family!r}; families: {', '.join(FAMILIES)}")
    return tuple(k for k, v in CUE_KINDS.items() if v.family == family)


def _check_kinds(kinds: Iterable[str]) -> set[str]:
    out = set(kinds)
    unknown = out - set(CUE_KINDS)
    if unknown:
        raise ValueError(f"unknown cue kind(s) {sorted(unknown)}; known kinds: {', '.join(CUE_KINDS)}")
    return out


# --------------------------------------------------------------------------------------------------------
# configuration and state
# --------------------------------------------------------------------------------------------------------


@dataclass
class InterfaceConfig:
    """How Omega evolves and how large its cues may be.

    Attributes:
        on_threshold: a kind turns on when its trigger label's (EMA) rate reaches this: the label's share of the
            turns where it can occur (``seal_verl.profile.StepProfile.rate``), not of all turns.
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
        proactive_cues: true (the default, DESIGN 2.5): cues also come before the agent acts, as blocks in
            the first user message (schema constraints, call format, capability reminders) and as the
            schema of functions revealed later. False keeps only the reactive ones, the feedback that
            follows a failed call (phi_err), so a rollout without a failed call sees exactly the bare
            environment; the capability kinds, which have no feedback to give, then never switch on. For a
            policy that cannot read prompt text it has never seen (the CPU overlay's 0.4M-parameter model:
            ``recipes/bfcl_v3/cpu/probe_cues.py``), not for real backbones.
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
        for name, lo in (("patience", 1), ("max_cue_chars", _MIN_CUE_CHARS), ("max_schema_cue_chars", _MIN_CUE_CHARS)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) and not (isinstance(v, float) and v.is_integer()):
                raise ValueError(f"{name} must be an integer, got {v!r}")
            v = int(v)
            if v < lo:
                raise ValueError(f"{name} must be >= {lo}, got {v}")
            setattr(self, name, v)
        if not (0.0 < self.ema_beta <= 1.0):
            raise ValueError(f"ema_beta must be in (0, 1], got {self.ema_beta}")
        self.enabled = bool(self.enabled)
        self.fixed_all_on = bool(self.fixed_all_on)
        if not isinstance(self.proactive_cues, bool):
            raise ValueError(f"proactive_cues must be true or false, got {self.proactive_cues!r}")
        return self

    def switchable_kinds(self) -> tuple[str, ...]:
        """The kinds that can be on under this configuration: none without the environment side; without
        proactive cues, the kinds that have feedback to give (every family but capability)."""
        if not self.enabled:
            return ()
        if self.proactive_cues:
            return tuple(CUE_KINDS)
        return tuple(k for k, v in CUE_KINDS.items() if v.family != CAPABILITY)

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
        active: kind -> on/off, one entry per kind of ``CUE_KINDS``.
        streak_below: kind -> consecutive evolve steps with prevalence < off_threshold while on.
        step: number of ``evolve`` steps applied.
    """

    active: dict[str, bool] = field(default_factory=lambda: {k: False for k in CUE_KINDS})
    streak_below: dict[str, int] = field(default_factory=lambda: {k: 0 for k in CUE_KINDS})
    step: int = 0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict."""
        return {"active": dict(self.active), "streak_below": dict(self.streak_below), "step": int(self.step)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "InterfaceState":
        """Inverse of ``to_dict``.

        Args:
            d: a dict from ``to_dict``. Unknown kinds raise ``ValueError``; kinds missing from it (a state
                saved before a kind existed) start off with a zero streak.
        """
        active = dict(d.get("active", {}))
        streak = dict(d.get("streak_below", {}))
        _check_kinds(active)
        _check_kinds(streak)
        return cls(
            active={k: bool(active.get(k, False)) for k in CUE_KINDS},
            streak_below={k: int(streak.get(k, 0)) for k in CUE_KINDS},
            step=int(d.get("step", 0)),
        )


def initial_state(cfg: InterfaceConfig) -> InterfaceState:
    """Omega_0: every kind off (scaffolding is earned by failures), or every kind on when
    ``cfg.fixed_all_on`` (and ``cfg.enabled``).

    Args:
        cfg: the interface configuration.
    """
    on = set(cfg.switchable_kinds()) if cfg.fixed_all_on else set()
    return InterfaceState(active={k: k in on for k in CUE_KINDS}, streak_below={k: 0 for k in CUE_KINDS}, step=0)


def evolve(state: InterfaceState, prevalence: dict[str, float], cfg: InterfaceConfig) -> InterfaceState:
    """Omega_{t+1} = evolve(Omega_t, C_t); pure, returns a new state.

    Per kind, with p the rate of its trigger label among the turns where that label can occur (abstention
    turns for ``spurious_tool_call``, turns with a ground-truth call for the others; the closed loop passes the
    EMA of ``StepProfile.rate``):

    - off -> on as soon as ``p >= on_threshold`` (a failure that has become common gets help at once);
    - on -> off only after ``patience`` consecutive steps with ``p < off_threshold`` (help fades once the
      failure has stayed rare, not after one lucky batch); any step with ``p >= off_threshold`` resets the
      streak;
    - between the thresholds the state is kept, so a prevalence hovering around one threshold cannot make
      a kind flap.

    With ``cfg.enabled`` false every kind is off; with ``cfg.fixed_all_on`` every kind is on; in both cases
    the prevalence is ignored. A kind outside ``cfg.switchable_kinds()`` (capability kinds without proactive
    cues) stays off.

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
    if not cfg.enabled or cfg.fixed_all_on:
        return InterfaceState(
            active={k: k in switchable for k in CUE_KINDS}, streak_below={k: 0 for k in CUE_KINDS},
            step=state.step + 1,
        )
    active: dict[str, bool] = {}
    streak: dict[str, int] = {}
    for name, kind in CUE_KINDS.items():
        if name not in switchable:
            active[name], streak[name] = False, 0
            continue
        p = float(prevalence.get(kind.trigger, 0.0))
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
    return InterfaceState(active=active, streak_below=streak, step=state.step + 1)


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


# --------------------------------------------------------------------------------------------------------
# cue renderers
# --------------------------------------------------------------------------------------------------------


def _bound(text: str, max_chars: int) -> str:
    """Cut ``text`` to at most ``max_chars`` characters, marking the cut."""
    if max_chars < _MIN_CUE_CHARS:
        raise ValueError(f"max_chars must be >= {_MIN_CUE_CHARS}, got {max_chars}")
    if len(text) <= max_chars:
        return text
    return text[: max_chars - len(TRUNCATION_MARKER)].rstrip() + TRUNCATION_MARKER


def _short(name: Any, limit: int = _NAME_CHARS) -> str:
    s = str(name)
    return s if len(s) <= limit else s[: limit - 3] + "..."


def _function_of(tool: dict) -> Optional[dict]:
    """Accept both ``{"type": "function", "function": {...}}`` and a bare ``{"name", "parameters"}`` doc."""
    if not isinstance(tool, dict):
        return None
    fn = tool.get("function") if isinstance(tool.get("function"), dict) else tool
    return fn if isinstance(fn.get("name"), str) else None


def _type_text(schema: Any, depth: int = 0) -> str:
    """Compact type of a parameter schema: type, enum members, array item type, one level of object fields."""
    if not isinstance(schema, dict):
        return "any"
    t = schema.get("type")
    if isinstance(t, list):
        text = "|".join(str(x) for x in t)
    elif isinstance(t, str):
        text = t
    else:
        text = "any"
    if text in ("array", "tuple", "list") and isinstance(schema.get("items"), dict):
        text = f"{text} of {_type_text(schema['items'], depth + 1)}"
    if text in ("object", "dict") and isinstance(schema.get("properties"), dict) and schema["properties"] and depth < 1:
        text = f"{text} {{{_params_text(schema, depth + 1)}}}"
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        # the members imply the type; "|" keeps them apart from the ", " between parameters
        text = "one of " + "|".join(json.dumps(m, ensure_ascii=False) for m in enum)
    return text


def _params_text(schema: dict, depth: int = 0) -> str:
    props = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(props, dict):
        return ""
    required = set(schema.get("required") or [])
    # required parameters first: they are the ones a call cannot omit
    names = sorted(props, key=lambda n: (n not in required, list(props).index(n)))
    parts = [f"{_short(n)}{'*' if n in required else ''}: {_type_text(props[n], depth)}" for n in names]
    return ", ".join(parts)


def schema_cue(tools: list[dict], names: Optional[list[str]] = None, max_chars: int = 600) -> str:
    """phi_schema: the constraints implicit in the tool schemas, one compact line per function.

    Example line: ``- sort(file_name*: string, reverse: boolean)`` (``*`` marks required parameters;
    enum members are listed as ``one of "a"|"b"``). Descriptions are left out: the agent already sees the full
    docs, the cue only pulls out what calls most often get wrong.

    Args:
        tools: OpenAI-style tool dicts (``{"type": "function", "function": {"name", "description",
            "parameters"}}``, ``parameters`` a JSON Schema object) or bare function docs.
        names: if given, only these functions (e.g. the ones revealed in this turn), in ``tools`` order;
            names not in ``tools`` are ignored, since the cue may only restate what it is given.
        max_chars: bound on the returned text.

    Returns:
        The cue, or ``""`` when no function is selected.
    """
    wanted = None if names is None else set(names)
    lines = []
    for tool in tools:
        fn = _function_of(tool)
        if fn is None or (wanted is not None and fn["name"] not in wanted):
            continue
        params = fn.get("parameters") if isinstance(fn.get("parameters"), dict) else {}
        lines.append(f"- {_short(fn['name'])}({_params_text(params)})")
    if not lines:
        return ""
    return _bound("Function parameters (* = required):\n" + "\n".join(lines), max_chars)


_CALL_FORMAT_TEXT = {
    "json": (
        "Tool call format: for each call write one block\n"
        "<tool_call>\n"
        '{"name": "<function name>", "arguments": {"<parameter>": <value>, ...}}\n'
        "</tool_call>\n"
        "The block must be valid JSON: double-quoted keys and strings, \"arguments\" an object (use {} when "
        "there are none). Use only function names from the tool list."
    ),
    "python": (
        "Tool call format: a Python list of calls, e.g. [function_name(parameter=value), "
        "other_function(parameter=value)]. Keyword arguments only, literal values only (quote strings), "
        "no other text around the list. Use only function names from the tool list."
    ),
}


def call_format_cue(call_format: str, max_chars: int = 600) -> str:
    """The legal call syntax (part of phi_schema), with placeholders only, never concrete values.

    Args:
        call_format: ``"json"`` (Qwen-style ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``)
            or ``"python"`` (BFCL's ``[func(a=1), g(b='x')]`` list).
        max_chars: bound on the returned text.

    Raises:
        ValueError: an unknown call format.
    """
    if call_format not in _CALL_FORMAT_TEXT:
        raise ValueError(f"unknown call format {call_format!r}; known formats: {', '.join(CALL_FORMATS)}")
    return _bound(_CALL_FORMAT_TEXT[call_format], max_chars)


_PARSE_REASONS = {
    tr.PARSE_BAD_SYNTAX: "its syntax is not valid for the call format",
    tr.PARSE_BAD_STRUCTURE: "it is not a call: a call needs a function name and an object of named arguments",
    tr.PARSE_NON_LITERAL: "an argument is an expression; arguments must be literal values",
    tr.PARSE_BAD_NAME: "the function name is not a callable function name",
    tr.PARSE_TOO_LARGE: "it is too large or too deeply nested",
}

def _violations(fname: str, arguments: Any, params: dict) -> list[str]:
    """The violations :mod:`seal_verl.schema` finds (the same the environment records as evidence), worded
    for the agent by schema facts and parameter names only."""
    if not isinstance(arguments, dict):
        return [f"the arguments of `{fname}` must be an object of named parameters"]
    checked = sc.ParameterSchema(params)
    given = params.get("properties") if isinstance(params.get("properties"), dict) else {}
    out = []
    for v in checked.check(arguments):
        if not v.path:
            if v.kind == "required":
                out.extend(f"required parameter `{_short(n)}` is missing" for n in v.names)
            elif v.kind == "unknown":
                known = ", ".join(_short(p) for p in checked.properties) or "none"
                out.extend(f"`{_short(n)}` is not a parameter of `{fname}` (its parameters: {known})"
                           for n in v.names)
            else:
                out.append(f"the arguments of `{fname}` violate the schema's '{_short(v.kind)}' constraint")
            continue
        where = f"`{_short(v.path[0])}`" + "".join(f"[{p}]" if isinstance(p, int) else f".{_short(p)}"
                                                 for p in v.path[1:])
        if v.kind == "type":
            sub = given.get(v.path[0]) if len(v.path) == 1 else None
            shown = sub["type"] if isinstance(sub, dict) and "type" in sub else v.expected  # the schema's own word
            out.append(f"{where} must be of type {_type_text({'type': shown})}")
        elif v.kind == "enum":
            allowed = v.expected if isinstance(v.expected, list) else [v.expected]
            members = ", ".join(json.dumps(m, ensure_ascii=False) for m in allowed)
            out.append(f"{where} must be one of [{members}]")
        elif v.kind == "required":
            out.append(f"{where} is missing required field(s): " + ", ".join(_short(n) for n in v.names))
        elif v.kind == "unknown":
            out.append(f"{where} has unknown field(s): " + ", ".join(_short(n) for n in v.names))
        else:
            out.append(f"{where} violates the schema's '{_short(v.kind)}' constraint")
    return out


def error_cue(
    call: tr.CallRecord,
    tool: Optional[dict],
    kind_active: set[str],
    available_names: Optional[list[str]] = None,
    max_chars: int = 600,
) -> str:
    """phi_err: recovery-oriented feedback for one failed call, or ``""`` if there is nothing to add.

    What is said depends on how the call failed and on which cue kinds are on (each failure type has its
    kind, ``error_recovery`` turns on structured feedback for all of them):

    - not decodable (``call_format`` or ``error_recovery``): why decoding failed, the parser's own message
      about the agent's text, and to resend in the required format;
    - a name that is not an available function (``call_format`` or ``error_recovery``): that it is not
      available and only listed functions may be called; the available names only if passed in;
    - schema violations (``schema_constraints`` or ``error_recovery``): which constraint failed, by
      parameter name, expected type, enum members or "required", as the schema states them;
    - an execution error (``error_recovery``): the error text is already in the agent's observation, so
      only a next step is suggested (inspect state with a read-only function, retry corrected).

    It never contains an argument value: not the agent's (it saw them) and, above all, never a value the
    agent has not produced itself. The only sources are the call record, the tool schema and fixed text.

    Args:
        call: the call as recorded in the trace.
        tool: the schema of ``call.name`` (OpenAI-style or bare doc), or ``None`` if unknown/unavailable.
        kind_active: the names of the cue kinds now on.
        available_names: the functions the agent may call now; listed only when given.
        max_chars: bound on the returned text.

    Raises:
        ValueError: an unknown cue kind in ``kind_active``.
    """
    kinds = _check_kinds(kind_active)
    fmt_on = CALL_FORMAT in kinds or ERROR_RECOVERY in kinds
    schema_on = SCHEMA_CONSTRAINTS in kinds or ERROR_RECOVERY in kinds
    recovery_on = ERROR_RECOVERY in kinds

    if not call.parsed:
        if not fmt_on:
            return ""
        reason = _PARSE_REASONS.get(call.parse_status, "it is not in the required call format")
        text = f"Your tool call could not be decoded: {reason}."
        if call.parse_error:
            text += f" Parser message: {_short(call.parse_error, _PARSE_ERROR_CHARS)}."
        text += " Nothing was executed; rewrite the call in the required format and send it again."
        return _bound(text, max_chars)

    fname = _short(call.name or "")
    if not call.available:
        if not fmt_on:
            return ""
        text = f"`{fname}` is not an available function here. Call only functions from the tool list."
        if available_names:
            text += " Available now: " + ", ".join(_short(n) for n in available_names) + "."
        text += " If none of them fits the request, say so or ask the user instead of calling."
        return _bound(text, max_chars)

    parts = []
    if call.schema_errors and schema_on:
        fn = _function_of(tool) if tool is not None else None
        params = fn.get("parameters") if fn is not None and isinstance(fn.get("parameters"), dict) else None
        found = _violations(fname, call.arguments, params) if params is not None else []
        if found:
            parts.append(f"The arguments of `{fname}` break its schema: " + "; ".join(found) + ".")
        else:
            parts.append(
                f"The arguments of `{fname}` break its schema: check the required parameters, their types and "
                "allowed values in the function's description."
            )
        parts.append("Correct the arguments and call it again.")
    if call.is_error and recovery_on:
        parts.append(
            f"The call to `{fname}` failed (the error is in the tool response). Read what it says is wrong; if "
            "needed, check the current state with a read-only function first, then call again with corrected "
            "arguments or call the function that establishes what it needs. Do not move on or answer in text "
            "before the requested action has succeeded."
        )
    return _bound(" ".join(parts), max_chars) if parts else ""


_REMINDERS = {
    CALL_FORMAT: "Write every tool call exactly in the required call format, using only listed function names.",
    SCHEMA_CONSTRAINTS: (
        "Before calling, check each function's required parameters, their types and allowed values; "
        "pass only parameters the function defines."
    ),
    TOOL_AFFORDANCE: (
        "Complete every requested action with a tool call before answering in text; never report an action "
        "as done without calling the function for it."
    ),
    ERROR_RECOVERY: (
        "When a call returns an error, fix its cause (check the state with a read-only function if needed) "
        "and retry before moving on."
    ),
    ASK_OR_ABSTAIN: (
        "If a required parameter is missing or no offered function fits the request, ask the user instead "
        "of calling a function or guessing a value."
    ),
}


def capability_cue(prevalence: dict[str, float], active: set[str], max_chars: int = 600) -> str:
    """phi_cap: one short reminder per active kind, the most prevalent failure first.

    The reminders are fixed behavioural sentences; the prevalence only orders them (ties keep the order of
    ``CUE_KINDS``), it is not shown. A caller that renders the schema-family cues separately may pass only
    the capability-family kinds (``kinds_in_family("capability")``).

    Args:
        prevalence: label -> prevalence (C_t or its EMA); missing labels count as 0.
        active: names of the cue kinds to remind of.
        max_chars: bound on the returned text.

    Returns:
        The cue, or ``""`` when ``active`` is empty.
    """
    kinds = _check_kinds(active)
    if not kinds:
        return ""
    order = list(CUE_KINDS)
    ranked = sorted(kinds, key=lambda k: (-float(prevalence.get(CUE_KINDS[k].trigger, 0.0)), order.index(k)))
    return _bound("Reminders:\n" + "\n".join(f"- {_REMINDERS[k]}" for k in ranked), max_chars)


def cue_stats(text: str) -> dict[str, int]:
    """Size of a cue for metrics: characters, lines, and 1 when empty.

    Tokens are counted by callers, which own the tokenizer.

    Args:
        text: a rendered cue.
    """
    return {"chars": len(text), "lines": len(text.splitlines()), "empty": int(len(text) == 0)}
