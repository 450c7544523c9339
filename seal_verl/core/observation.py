"""The SEAL observation wrapper: applies Omega_t's cues to what the agent observes.

``o~ = o (+) phi_schema(F) (+) phi_err(o, H_t) (+) phi_cap(C_t)``. In the manner of a Gymnasium
``ObservationWrapper``, :class:`SealObservationWrapper` wraps an environment and changes only the
observations it hands out; every action goes to the wrapped environment unchanged, so the calls that run
and their results (the tool semantics) are exactly those of the bare environment.

The wrapper is environment-neutral: it imports nothing of BFCL and works on any environment with this
interface (the one :class:`env_wrappers.bfcl.environment.env.BFCLEnv` has):

- ``reset() -> list[dict]``: the first turn's user messages (``{"role": "user", "content": str}``);
- ``step(message) -> StepResult`` and ``end_turn(reason) -> StepResult`` where ``StepResult`` has
  ``tool_results`` (objects with ``name``, ``call``, ``content``, ``is_error``), ``attempt`` (a
  :class:`seal_verl.core.trace.Attempt`), ``failed_calls`` (``CallRecord`` s that could not be executed as calls),
  ``next_user``, ``revealed_tools``, ``turn_done``, ``episode_done``;
- ``tools() -> list[dict]``: the OpenAI-style tools offered now; ``call_format`` (``json``/``python``);
  ``trace``. Everything not overridden here is delegated to the wrapped environment.

Where each cue goes (every cue is a block that starts with :data:`HINT_PREFIX`, appended after a blank line):

=====================================  ==========================================================================
cue                                    placement ``start_of_task`` (the default)
=====================================  ==========================================================================
schema constraints (phi_schema)        first user message: all functions offered at the start; the message of
                                       a turn that reveals functions: those functions only
call format (phi_schema)               first user message (only for the ``json`` and ``python`` formats)
capability reminders (phi_cap)         first user message; the active capability-family kinds that have a
                                       reminder, ordered by the prevalence of their trigger labels
tool affordance (phi_cap)              every user request (the first and each later turn's message): what the
                                       offered tools can do for that request
error feedback (phi_err)               appended to the content of the tool result it is about
=====================================  ==========================================================================

With ``cfg.placement == "every_observation"`` (the paper's formula, ``o~ = o (+) phi_schema (+) phi_err (+)
phi_cap`` on each observation) the schema, call-format, reminder and affordance blocks come with every
observation instead: the first user message, each later user message, and each step's tool results (once per
step, after the last result; the schema block lists every function offered at that moment, revealed ones
included). Error feedback is placed as above under both.

With ``cfg.proactive_cues`` false only error feedback is inserted (the other rows are what comes before the
agent acts), so a rollout without a failed call observes exactly what the bare environment returns.

Failed attempts that produce no tool result (BFCL drops a malformed ``<tool_call>`` block silently, and
ends the turn when nothing of a message decodes) are handled so that feedback still arrives without
changing the protocol:

- if the same step has tool results, the feedback is appended to the step's last tool result;
- if the step has none (BFCL ends the turn silently), the feedback is carried to the NEXT user message,
  prefixed with :data:`PREVIOUS_TURN_PREFIX`; when the episode is over there is no next message and the
  cue is dropped (counted in ``cue_stats["dropped"]``).

Identical feedback texts within one observation are inserted once. Nothing is ever added as a new
message: only the contents of existing messages grow.

With ``cfg.enabled`` false, or no active kind, the wrapper returns the wrapped environment's objects
unchanged (byte-for-byte transparent). It never mutates the objects the wrapped environment returns: an
observation that gets a cue is a copy. The wrapped environment's trace is untouched; the agent loop stores
``cue_stats`` in ``trace.meta["cues"]`` itself (or calls :meth:`SealObservationWrapper.annotate_trace`).

The cue texts come from :mod:`seal_verl.core.interface`, whose renderers only restate tool schemas, the agent's
own call record and fixed wording; they never see the ground truth.
"""

from __future__ import annotations

import copy
from typing import Any, Optional

from seal_verl.core import cues as cue_text
from seal_verl.core import interface as omega
from seal_verl.core import taxonomy as tx
from seal_verl.core.trace import CallRecord

__all__ = ["HINT_PREFIX", "CUE_MARKER", "CUE_SEPARATOR", "PREVIOUS_TURN_PREFIX", "SealObservationWrapper", "empty_cue_stats"]

#: Every cue starts with this marker (at the start of a line), so cues can be found and counted.
HINT_PREFIX = "[hint] "
#: the text that shows a cue in a decoded sequence (what the run folder and the checks search for)
CUE_MARKER = HINT_PREFIX.strip()
#: Put between the original content (when non-empty) and a cue.
CUE_SEPARATOR = "\n\n"
#: Starts feedback about an attempt of the previous turn that BFCL ended silently.
PREVIOUS_TURN_PREFIX = "About your last message of the previous request: "


def empty_cue_stats(active_kinds: Optional[list[str]] = None, enabled: bool = True) -> dict[str, Any]:
    """The ``cue_stats`` of a rollout before any cue: the same keys the wrapper always reports.

    Keys: ``enabled``; ``active_kinds`` (sorted names); ``count`` and ``chars`` (cues inserted and their
    characters, separators and markers included, i.e. exactly how much the observations grew);
    ``by_family`` / ``chars_by_family`` (per cue family: ``schema``, ``error``, ``capability``; error feedback
    counts as ``error`` whichever kind enabled it); ``dropped`` (feedback with no message left to carry it).
    """
    return {
        "enabled": bool(enabled),
        "active_kinds": sorted(active_kinds or []),
        "count": 0,
        "chars": 0,
        "by_family": {f: 0 for f in omega.FAMILIES},
        "chars_by_family": {f: 0 for f in omega.FAMILIES},
        "dropped": 0,
    }


def _tool_name(tool: Any) -> Optional[str]:
    if not isinstance(tool, dict):
        return None
    fn = tool.get("function") if isinstance(tool.get("function"), dict) else tool
    name = fn.get("name")
    return name if isinstance(name, str) else None


_EPS = 1e-9


def _check_prevalence(prevalence: Optional[dict]) -> dict[str, float]:
    out = {}
    for key, value in dict(prevalence or {}).items():
        if key not in tx.PROFILE_KEYS:
            raise ValueError(f"unknown prevalence key {key!r}; allowed keys: {', '.join(tx.PROFILE_KEYS)}")
        try:
            v = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"prevalence of {key!r} must be a number, got {value!r}") from None
        if not (-_EPS <= v <= 1.0 + _EPS):  # an EMA may overshoot by a rounding error, never more
            raise ValueError(f"prevalence of {key!r} must be in [0, 1], got {value!r}")
        out[key] = min(1.0, max(0.0, v))
    return out


class SealObservationWrapper:
    """Wrap ``env`` so that its observations carry the cues of the interface state ``state``.

    Args:
        env: the environment of one rollout (BFCLEnv-like, see the module docstring).
        state: Omega_t, the interface state (which cue kinds are on).
        cfg: the interface configuration; ``enabled`` false switches every cue off (ablation "no environment
            side"), ``fixed_all_on`` switches every kind on whatever ``state`` says (ablation "no closed
            loop"), ``max_cue_chars`` bounds each cue.
        prevalence: the current failure rates (label -> rate, keys from ``taxonomy.PROFILE_KEYS``; the loops
            pass the closed loop's rate EMA); orders the capability reminders, and is ignored with
            ``fixed_all_on`` (no closed loop: nothing adapts). Unknown keys or values outside [0, 1] raise
            ``ValueError``.

    Attributes:
        env: the wrapped environment.
        kinds: the cue kinds in effect for this rollout (frozen at construction).
        inserted_cues: every cue string exactly as inserted (separator and marker included), in order;
            removing them from the observations gives back the bare environment's observations.
        cue_stats: per-rollout cue statistics (see :func:`empty_cue_stats`); JSON-serialisable.
    """

    def __init__(self, env: Any, state: omega.InterfaceState, cfg: omega.InterfaceConfig,
                 prevalence: Optional[dict[str, float]] = None):
        self.env = env
        self.state = state
        self.cfg = cfg
        # Without the closed loop (every kind fixed on) nothing may adapt to C_t: the capability reminders keep
        # their fixed order instead of being ranked by the current failure rates.
        checked = _check_prevalence(prevalence)
        self.prevalence = {} if cfg.fixed_all_on else checked
        if not cfg.enabled:
            kinds: set[str] = set()
        elif cfg.fixed_all_on:
            kinds = set(cfg.switchable_kinds())
        else:
            kinds = omega.active_kinds(state)
            unknown = kinds - set(omega.CUE_KINDS)
            if unknown:
                raise ValueError(f"unknown cue kind(s) {sorted(unknown)} in the interface state")
        self.kinds: frozenset[str] = frozenset(kinds)
        self.max_chars = int(cfg.max_cue_chars)
        self.max_schema_chars = int(cfg.max_schema_cue_chars)
        self.inserted_cues: list[str] = []
        self.cue_stats: dict[str, Any] = empty_cue_stats(sorted(self.kinds), enabled=cfg.enabled)
        self._pending: list[tuple[str, str]] = []  # (family, cue text) waiting for the next user message
        self._request = ""  # the pending user request's text (what the affordance cue is about)
        self._every = cfg.proactive_cues and cfg.placement == omega.EVERY_OBSERVATION

    # ------------------------------------------------------------------------------------------------------
    # Gymnasium-style plumbing
    # ------------------------------------------------------------------------------------------------------
    @property
    def unwrapped(self) -> Any:
        """The innermost environment."""
        return getattr(self.env, "unwrapped", self.env)

    @property
    def active(self) -> bool:
        """Whether this wrapper can add anything at all (false: fully transparent)."""
        return bool(self.kinds)

    def __getattr__(self, name: str) -> Any:
        # Only called for attributes not found on the wrapper: delegate (trace, tools, call_format, ...).
        if name.startswith("__") or name == "env":
            raise AttributeError(name)
        return getattr(self.env, name)

    def annotate_trace(self, trace: Any = None) -> None:
        """Store a copy of ``cue_stats`` in ``trace.meta["cues"]`` (default: the wrapped env's trace)."""
        trace = self.env.trace if trace is None else trace
        trace.meta["cues"] = copy.deepcopy(self.cue_stats)

    # ------------------------------------------------------------------------------------------------------
    # the protocol
    # ------------------------------------------------------------------------------------------------------
    def reset(self) -> list[dict]:
        """The first turn's user messages, with the start-of-task cues appended to the last of them."""
        msgs = self.env.reset()
        self._request = _request_text(msgs)
        if not self.kinds or not self.cfg.proactive_cues:
            return msgs
        return self._add_to_messages(msgs, self._proactive(self.env.tools()))

    def _proactive(self, tools: list[dict]) -> list[tuple[str, str]]:
        """The blocks that come before the agent acts, for the kinds on: the schema constraints of ``tools``,
        the call format, the reminders and what the tools can do for the pending request."""
        cues: list[tuple[str, str]] = []
        if omega.SCHEMA_CONSTRAINTS in self.kinds:
            cues.append(("schema", cue_text.schema_cue(tools, max_chars=self.max_schema_chars)))
        if omega.CALL_FORMAT in self.kinds:
            fmt = getattr(self.env, "call_format", None)
            if fmt in cue_text.CALL_FORMATS:  # replay formats (fc, auto) have no syntax to describe
                cues.append(("schema", cue_text.call_format_cue(fmt, max_chars=self.max_chars)))
        cap_kinds = self.kinds & set(omega.kinds_in_family(omega.CAPABILITY))
        if cap_kinds:
            cues.append(("capability", cue_text.capability_cue(self.prevalence, cap_kinds, max_chars=self.max_chars,
                                                               trigger_of=self.cfg.trigger_of())))
        cues += self._affordance(tools)
        return [(f, t) for f, t in cues if t]

    def _affordance(self, tools: list[dict]) -> list[tuple[str, str]]:
        if omega.TOOL_AFFORDANCE not in self.kinds:
            return []
        return [("capability", cue_text.affordance_cue(tools, self._request, max_chars=self.max_chars))]

    def step(self, message: Any) -> Any:
        """Pass ``message`` to the environment unchanged; return its result with the cues applied."""
        return self._observe(self.env.step(message))

    def end_turn(self, reason: str = "token_budget") -> Any:
        """End the current turn in the environment; the next user message gets any pending cues."""
        return self._observe(self.env.end_turn(reason))

    # ------------------------------------------------------------------------------------------------------
    def _observe(self, result: Any) -> Any:
        if not self.kinds:
            return result
        tool_results = list(getattr(result, "tool_results", None) or [])
        attempt = getattr(result, "attempt", None)
        calls = list(getattr(attempt, "calls", None) or [])
        tools_now: Optional[list[dict]] = None

        def tools() -> list[dict]:
            nonlocal tools_now
            if tools_now is None:
                tools_now = list(self.env.tools())
            return tools_now

        # 1. feedback on calls that have a tool result: appended to that result
        matched = _match_results(tool_results, calls)
        per_result: list[list[str]] = [[] for _ in tool_results]
        used: set[int] = set()
        for i, (tr, rec) in enumerate(zip(tool_results, matched)):
            if rec is None:
                rec = CallRecord(name=getattr(tr, "name", "") or None, is_error=bool(getattr(tr, "is_error", False)))
                rec.available = rec.name in {_tool_name(t) for t in tools()}
            else:
                used.add(id(rec))
            if not _needs_feedback(rec, tr):
                continue
            text = self._error_text(rec, tools())
            if text:
                per_result[i].append(text)

        # 2. failed attempts that produced no tool result
        orphans = [c for c in (getattr(result, "failed_calls", None) or []) if id(c) not in used]
        orphan_texts = [t for t in (self._error_text(c, tools()) for c in orphans) if t]
        if orphan_texts:
            if tool_results:
                per_result[-1].extend(orphan_texts)
            else:
                budget = self.max_chars - len(PREVIOUS_TURN_PREFIX)
                for c in orphans:
                    text = self._error_text(c, tools(), max_chars=budget)
                    if text:
                        self._pending.append(("error", PREVIOUS_TURN_PREFIX + text))

        next_user = getattr(result, "next_user", None)
        # every_observation: the proactive blocks after the step's last tool result, unless a user message
        # follows in the same observation (it gets them, about its own request)
        proactive_here: list[tuple[str, str]] = []
        if self._every and tool_results and not next_user:
            proactive_here = self._proactive(tools())

        out = result
        if any(per_result) or proactive_here:
            out = copy.copy(result)
            new_results = []
            last = len(tool_results) - 1
            for i, (tr, texts) in enumerate(zip(tool_results, per_result)):
                blocks = [("error", t) for t in _dedupe(texts)] + (proactive_here if i == last else [])
                if blocks:
                    tr = copy.copy(tr)
                    tr.content = self._append(tr.content, blocks)
                new_results.append(tr)
            out.tool_results = new_results

        # 3. the next user message: carried-over feedback, then the proactive blocks (every_observation) or the
        # schema of newly revealed functions and what the tools can do for the new request (start_of_task)
        if next_user:
            cues = _dedupe(self._pending)
            self._pending = []
            self._request = _request_text(next_user)
            if self._every:
                cues += self._proactive(tools())
            elif self.cfg.proactive_cues:
                revealed = list(getattr(result, "revealed_tools", None) or [])
                if revealed and omega.SCHEMA_CONSTRAINTS in self.kinds:
                    cues.append(("schema", cue_text.schema_cue(revealed, max_chars=self.max_schema_chars)))
                cues += self._affordance(tools())
            cues = [(f, t) for f, t in cues if t]
            if cues:
                if out is result:
                    out = copy.copy(result)
                out.next_user = self._add_to_messages(next_user, cues)
        elif getattr(result, "episode_done", False) and self._pending:
            self.cue_stats["dropped"] += len(_dedupe(self._pending))
            self._pending = []
        return out

    def _error_text(self, rec: CallRecord, tools: list[dict], max_chars: Optional[int] = None) -> str:
        schema = None
        if rec.name is not None and rec.available:
            schema = next((t for t in tools if _tool_name(t) == rec.name), None)
        names = [n for n in (_tool_name(t) for t in tools) if n]
        return cue_text.error_cue(rec, schema, set(self.kinds), available_names=names,
                               max_chars=self.max_chars if max_chars is None else max_chars)

    def _add_to_messages(self, msgs: list[dict], cues: list[tuple[str, str]]) -> list[dict]:
        """Append ``cues`` to the last message of ``msgs`` (a copy); with no message, keep them pending."""
        if not cues:
            return msgs
        if not msgs:
            self._pending.extend(cues)
            return msgs
        out = [dict(m) for m in msgs]
        last = out[-1]
        content = last.get("content")
        if isinstance(content, list):  # structured content: add one text part
            text = self._append("", cues)
            last["content"] = list(content) + [{"type": "text", "text": text}]
        else:
            last["content"] = self._append("" if content is None else str(content), cues)
        return out

    def _append(self, content: str, cues: list[tuple[str, str]]) -> str:
        for family, text in cues:
            block = (CUE_SEPARATOR if content else "") + HINT_PREFIX + text
            content = content + block
            self.inserted_cues.append(block)
            st = self.cue_stats
            st["count"] += 1
            st["chars"] += len(block)
            st["by_family"][family] += 1
            st["chars_by_family"][family] += len(block)
        return content


def _request_text(msgs: Any) -> str:
    """The text of a turn's user messages (string contents and the text parts of structured ones)."""
    parts = []
    for m in msgs or []:
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts += [str(p.get("text", "")) for p in content if isinstance(p, dict)]
    return "\n".join(parts)


def _dedupe(texts: list) -> list:
    seen, out = set(), []
    for t in texts:
        if t not in seen:
            seen.add(t)
            out.append(t)
    return out


def _needs_feedback(rec: CallRecord, tool_result: Any) -> bool:
    return (not rec.parsed or not rec.available or bool(rec.schema_errors) or bool(rec.is_error)
            or bool(getattr(tool_result, "is_error", False)))


def _match_results(tool_results: list, calls: list) -> list:
    """The call record each tool result answers (or None), matched in order.

    An environment shows results for a subsequence of the step's calls, in call order; a result matches the
    next call whose recorded result text equals the result's content.
    """
    out = []
    j = 0
    for tr in tool_results:
        content = getattr(tr, "content", None)
        found = None
        k = j
        while k < len(calls):
            c = calls[k]
            # a call with a result shown is either decoded or an error BFCL reports (never a dropped block)
            if getattr(c, "result", None) == content and (c.parsed or c.is_error):
                found = c
                j = k + 1
                break
            k += 1
        out.append(found)
    return out
