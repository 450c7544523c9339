"""The cues of a training rollout: the closed-loop state it reads, the small view of it a rollout needs, the
observation wrapper made from that view, and the rollout's cue-token budget.

Where the state comes from (:func:`read_view`), in order:

1. the source the in-process agent-loop worker was made with (``in_process.make_worker(..., state_source=)``:
   ``seal-verl dry-run``, the warm start, tests). verl hands every loop it makes the worker's server client, the
   one object an in-process caller chooses, so the source rides on it (attribute :data:`STATE_SOURCE_ATTR`);
2. when Ray is initialised, the SEAL state actor the trainer publishes to (``state_actor``), read through the
   per-process ``StateClient`` cached per ``global_steps`` (the V1 trainer passes it to agent loops; the
   cue-effect probe's rows read in a slot of their own, so a kind the probe retires is off for the same step's
   training rollouts), or, without ``global_steps`` (legacy trainer), once per rollout; a missing actor is an
   error there (the trainer creates it before the first rollout);
3. else (no Ray) the initial state of the run's ``seal`` config section.

A source is a ``ClosedLoopState``, a payload dict (``{"state": a ClosedLoopState or its dict, "global_step":
int, "switches": {...}}``, as the state actor holds), a callable ``(global_step or None) -> either of those``, or
``None`` (the initial state). The parsed :class:`CueView` is cached per state (and config): every rollout of a
step reads the same payload, so the state is parsed and validated once per step and process, not per rollout.
``seal.switches.env_side=false`` (or ``seal.interface.enabled=false``) means no wrapper at all.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Optional

#: the attribute of an in-process worker's server client that holds its state source
STATE_SOURCE_ATTR = "seal_state_source"
#: the ``StateClient`` slot the cue-effect probe's rollouts read in
PROBE_SLOT = "probe"


@dataclass(frozen=True)
class CueView:
    """What a training rollout needs of the closed-loop state.

    Attributes:
        source: ``off`` (no environment side), ``initial`` (the config's initial state) or ``published``.
        global_step: the global step of the state (its version; None: not published by a trainer).
        interface: Omega_t (None when ``source`` is ``off``).
        icfg: the interface settings the run's switches imply (None when ``source`` is ``off``).
        env_side: the switches' environment side.
        prevalence: the label rates that rank the capability cues (the state's ``rate_ema``).
    """

    source: str
    global_step: Optional[int] = None
    interface: Any = None
    icfg: Any = None
    env_side: bool = False
    prevalence: Optional[dict] = None

    def wrapper(self, env: Any, meta: dict, probe: Optional[dict] = None):
        """The observation wrapper of one rollout over ``env`` (None without cues); fills the trace ``meta``.

        Args:
            probe: a cue-effect probe row's ``{"condition", "kinds"}``: exactly those kinds, whatever Omega_t says.
        """
        from seal_verl.core.observation import SealObservationWrapper

        meta["interface_source"] = self.source
        meta["interface_global_step"] = self.global_step
        if self.source == "off":
            meta["interface_step"] = 0
            meta["interface_active"] = []
            return None
        interface, icfg = self.interface, self.icfg
        if probe is not None and self.env_side and icfg.enabled:
            interface = replace(interface, active={k: k in probe["kinds"] for k in interface.active})
            icfg = replace(icfg, fixed_all_on=False)
            meta["probe"] = probe["condition"]
        meta["interface_step"] = int(interface.step)
        meta["interface_active"] = sorted(k for k, on in interface.active.items() if on)
        if not self.env_side or not icfg.enabled:
            meta["interface_active"] = []
            return None
        wrapper = SealObservationWrapper(env, interface, icfg, prevalence=dict(self.prevalence or {}))
        meta["interface_active"] = sorted(wrapper.kinds)
        return wrapper


OFF = CueView(source="off")


class _Views:
    """The last few parsed views, keyed by the identity of the config and the state they were made from (both
    held, so an identity is not reused while its entry lives)."""

    def __init__(self, size: int = 4):
        self.size = size
        self.entries: list[tuple[tuple, tuple, CueView]] = []
        self.configs: list[tuple[Any, Any]] = []

    def seal_config(self, config: Any):
        """The run's parsed ``seal`` section (parsed once per config object)."""
        from seal_verl.verl_glue.config import parse_seal_config

        for cfg, parsed in self.configs:
            if cfg is config:
                return parsed
        parsed = parse_seal_config(config.get("seal") if hasattr(config, "get") else None)
        self.configs = [(config, parsed)] + self.configs[: self.size - 1]
        return parsed

    def view(self, config: Any, value: Any) -> CueView:
        state, step, switches = _unpack(value)
        key = (id(config), id(state), step, None if switches is None else tuple(sorted(switches.items())))
        for k, _held, view in self.entries:
            if k == key:
                return view
        view = _view_of(self.seal_config(config), state, step, switches)
        self.entries = [(key, (config, state), view)] + self.entries[: self.size - 1]
        return view


_VIEWS = _Views()


def _unpack(value: Any) -> tuple[Any, Optional[int], Optional[dict]]:
    """(state or its dict or None, global step, switches) of a source's value."""
    if value is None:
        return None, None, None
    if isinstance(value, dict):
        if "state" not in value:
            raise ValueError("a SEAL state payload needs a 'state' key (ClosedLoopState.to_dict())")
        step = value.get("global_step")
        return value["state"], None if step is None else int(step), value.get("switches") or None
    if callable(getattr(value, "to_dict", None)):  # a ClosedLoopState
        return value, None, None
    raise TypeError(f"unsupported SEAL state source value of type {type(value).__name__}")


def _view_of(seal_cfg: Any, state: Any, step: Optional[int], switches: Optional[dict]) -> CueView:
    from seal_verl.core.loop import ClosedLoopState, SealSwitches, effective_interface_config

    sw = SealSwitches.from_dict(switches) if switches else seal_cfg.switches
    if state is None:
        state = ClosedLoopState.initial(sw, seal_cfg.interface, seal_cfg.weighting)
        source = "initial"
    else:
        # an in-process state object is checked and normalised as a published one is (once per view)
        state = ClosedLoopState.from_dict(state.to_dict() if isinstance(state, ClosedLoopState) else state)
        source = "published"
    return CueView(source=source, global_step=step, interface=state.interface,
                   icfg=effective_interface_config(sw, seal_cfg.interface), env_side=bool(sw.env_side),
                   prevalence=dict(state.rate_ema or {}))


async def _source_value(config: Any, server: Any, step: Optional[int], probe: bool) -> Any:
    """The raw state a rollout reads (see the module docstring for the order); None for the initial state."""
    source: Optional[Callable] = getattr(server, STATE_SOURCE_ATTR, None)
    if source is not None:
        return source(step) if callable(source) else source
    import ray

    if not ray.is_initialized():
        return None
    from seal_verl.verl_glue import state_actor

    if step is not None:
        client = state_actor.client_for(config)
        return await client.aget(step, slot=PROBE_SLOT if probe else client.ROLLOUTS)
    # The legacy trainer does not pass global_steps to agent loops: read uncached (one small remote call).
    name, namespace, _ = state_actor.actor_coordinates(config)
    payload = await state_actor.lookup_state_actor(name, namespace).get.remote()
    if payload is None:
        raise state_actor.SealStateError(f"SEAL state actor {name!r} holds no state yet")
    return payload


async def read_view(config: Any, server: Any, step: Optional[int], probe: bool = False) -> CueView:
    """The cue view of a training rollout.

    Args:
        config: verl's trainer config (its ``seal`` section and the state actor's coordinates).
        server: the loop's server client (an in-process worker's carries the state source).
        step: the ``global_steps`` verl passed the loop (None on the legacy trainer).
        probe: the rollout is a cue-effect probe row.
    """
    if not _VIEWS.seal_config(config).switches.env_side:
        # No environment side: no cues, so no closed-loop state is needed (vanilla GRPO may run on verl's stock
        # trainer, where no state actor exists).
        return OFF
    return _VIEWS.view(config, await _source_value(config, server, step, probe))


# ------------------------------------------------------------------------------------------------ cue budget

class CueBudget:
    """Cue-token bookkeeping of one trajectory (``max_cue_tokens``: None = unbounded).

    Cue tokens are counted by encoding each inserted block on its own (separator and marker included). Over the
    limit, the blocks just inserted are stripped again (the wrapper only appends) and the interface is off for
    the rest of the trajectory.
    """

    def __init__(self, limit: Optional[int]):
        self.limit = limit
        self.tokens = 0
        self.count = 0
        self.suppressed = 0
        self.exhausted = False

    def apply(self, wrapper: Any, n_before: int, msgs: list[dict], count_tokens: Callable[[str], int]) -> list[dict]:
        """Account the cues ``wrapper`` inserted since ``n_before`` into ``msgs``; returns the messages to show."""
        new_blocks = wrapper.inserted_cues[n_before:]
        if not new_blocks:
            return msgs
        tokens = sum(count_tokens(b) for b in new_blocks)
        if self.limit is not None and self.tokens + tokens > self.limit:
            self.suppressed += len(new_blocks)
            self.exhausted = True
            return [dict(m, content=strip_blocks(m.get("content"), new_blocks)) for m in msgs]
        self.tokens += tokens
        self.count += len(new_blocks)
        return msgs


def strip_blocks(content: Any, blocks: list[str]) -> Any:
    """Remove cue blocks appended at the end of ``content`` (the wrapper only ever appends)."""
    if not isinstance(content, str):
        return content
    changed = True
    while changed:
        changed = False
        for b in reversed(blocks):
            if b and content.endswith(b):
                content = content[: -len(b)]
                changed = True
                break
    return content
