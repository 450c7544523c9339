"""The SEAL agent loops for verl 0.9.1: one pair, serving every registered tool environment.

One loop instance runs ONE multi-turn task end to end, over all its user turns. verl 0.9.1 has no
interactions (``verl.interactions`` is gone), so the loop appends the next user turn itself. The environment
comes from :mod:`env_wrappers.registry` through the protocol of :mod:`env_wrappers.protocol`, chosen per
dataset row by ``extra_info.env`` (else the loop's ``env`` init kwarg, else the loop's default); the task by
``extra_info.task_id``. Per trajectory the loop owns one fresh episode of that environment.

Registered names, chosen per parquet row by the ``agent_name`` column:

- ``seal_env`` (training rows) and ``env`` (evaluation rows): any environment; the row names it;
- ``seal_bfcl`` / ``bfcl``: the same two loops with BFCL as the default environment (the names the BFCL
  recipes and data use).

A training loop wraps the episode in :class:`seal_verl.core.observation.SealObservationWrapper` with the current
closed-loop interface state Omega_t, read from the SEAL state actor the trainer publishes to
(``seal_verl.verl_glue.state_actor``; see :func:`set_state_source` for in-process runs and the fallback
order); an evaluation loop has no wrapper, never reads the state, and adds not one byte of cue text.
Everything else is identical in the two loops: the same prompt rendering, the same call format, the same
budgets, the same trace. verl cannot tell training from validation inside an agent loop, hence two names.

Token layout (verl's Continuous Token builder, the path ``ToolAgentLoop`` uses):

- the prompt: the task's first user turn rendered with the backbone's own chat template
  (``ct_build_initial_tokens``); the environment's ``initial_messages`` says how the tools are shown (as
  ``tools=`` for the chat template, or in a system prompt of its own; BFCL: :mod:`env_wrappers.bfcl.environment.prompts`);
- each assistant message: the generated token ids, appended as is (``ct_merge_assistant_token``), mask 1;
- tool results: one ``tool`` role message per executed call (``tool_role``, default ``tool``; Llama 3.1
  templates render it as ``ipython``), rendered by the chat template (``ct_merge_context_msg``), mask 0;
- the next user turn: a ``user`` message (``ct_merge_context_msg``), mask 0. Cue text is only ever inside
  these observation messages (and in the first user message, i.e. the prompt), so it is never trained on.

Functions revealed mid-episode (BFCL ``miss_func``): the tools in the prompt cannot be re-rendered without
breaking the token prefix already generated against; the environment's ``reveal_messages`` writes them into
the reveal turn's user message instead. This happens in both loops, so training and evaluation see the same.

Budgets (init kwargs, from the loop's entry in the agent-loop YAML at
``actor_rollout_ref.rollout.agent.agent_loop_config_path``; every key of an entry other than ``name`` and
``_target_`` is passed to ``__init__``):

- ``rollout.response_length``: the whole trajectory's response side (LLM + observation tokens). Each
  generation gets ``max_tokens`` = what is left; an observation that would not fit is not appended, and the
  episode is stopped (remaining turns are recorded as empty: the model ran out of budget);
- ``max_tokens_per_turn``: LLM tokens one user turn may generate over all its steps (None = unbounded); when
  spent, the turn is ended from outside (``ended_by = "token_budget"``);
- ``max_tokens_per_step``: LLM tokens of one assistant message (None = unbounded);
- ``max_steps_per_turn``: executed tool-call steps per user turn before the episode is force-terminated
  (default: the environment's own cap; BFCL's is 20);
- ``max_cue_tokens``: cue tokens one training trajectory may carry in total (None = unbounded). An
  observation whose cues would exceed it is rendered without its cues and the interface is switched off for
  the rest of that trajectory. Each single cue is bounded in characters by ``seal.interface.max_cue_chars``.

Other init kwargs: ``env`` (the environment of rows that name none), ``call_format`` (one of the
environment's ``call_formats``, e.g. ``json`` | ``python`` for BFCL; a row whose ``extra_info.call_format``
differs is an error), ``tool_role`` (``tool`` | ``ipython``: verl's Continuous Token builder only appends ``tool``
messages, and Llama 3.1 templates render a ``tool`` message as the ``ipython`` turn, so both send ``tool``),
``system_prompt`` (prepended as a system message), ``call_timeout_s`` (per tool call),
``single_call_tool_groups`` (default: on for ``python``; renders tool results after a synthetic assistant
with one tool call, for Llama 3.1-style templates that reject several calls in one assistant message).

Where a training loop gets Omega_t (:meth:`EnvAgentLoopBase._payload`): a source pinned in this process with
:func:`set_state_source` (in-process runs: ``seal-verl dry-run``, tests); else, when Ray is initialised, the
SEAL state actor the trainer publishes to (``state_actor.actor_coordinates(config)``), read through the
per-process ``StateClient`` cached per ``global_steps`` (the V1 trainer passes it to agent loops) or, without
``global_steps`` (legacy trainer), read once per trajectory; a missing actor is an error there (the trainer
creates it before the first rollout); else (no Ray) the initial state of the ``seal`` config section.
``seal.switches.env_side=false`` (or ``seal.interface.enabled=false``) means no wrapper at all.

Outputs (``AgentLoopOutput.extra_fields``, which verl hands to the reward function as part of ``extra_info``
through the reward loop's ``tool_extra_fields``; see ``verl/experimental/agent_loop/agent_loop.py:
AgentLoopWorker._compute_score`` and ``verl/experimental/reward_loop/reward_manager/naive.py``):

- ``seal_trace``: the full trace as a JSON string, ``trace.meta`` holding the environment name (``env``,
  which the reward function reads), the loop name, call format, interface state, cue statistics and budget
  events;
- ``task_id``, ``seal_agent_loop``, ``seal_cue_tokens`` (int), ``seal_cue_count`` (int);
- ``min_global_steps`` / ``max_global_steps`` from the rollout server (as ``ToolAgentLoop`` keeps them).

``AgentLoopMetrics`` has a fixed set of fields in verl 0.9.1, so the cue token count is an extra field, not a
metric; the trainer side reads it from the batch.
"""

from __future__ import annotations

import copy
import logging
import os
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable, Optional, Union
from uuid import uuid4

import numpy as np

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register
from verl.utils.profiler import simple_timer

from seal_verl import env_vars

logger = logging.getLogger(__name__)
logger.setLevel(os.getenv("VERL_LOGGING_LEVEL", "WARN"))

# The project's SEAL_ settings, parsed when a rollout worker imports the loops: a bad value stops it with one line
# naming its variable, before any rollout runs under it.
env_vars.check()

#: Registered names: training (SEAL interface on) and evaluation (no interface), for any environment ...
GENERIC_TRAIN_LOOP = "seal_env"
GENERIC_EVAL_LOOP = "env"
#: ... and the same loops with BFCL as the default environment (the names the BFCL recipes and data use).
TRAIN_LOOP = "seal_bfcl"
EVAL_LOOP = "bfcl"

#: extra_fields keys every rollout carries (same keys in both loops, so batches concatenate cleanly).
TRACE_FIELD = "seal_trace"
TASK_ID_FIELD = "task_id"
CUE_TOKENS_FIELD = "seal_cue_tokens"
CUE_COUNT_FIELD = "seal_cue_count"
LOOP_FIELD = "seal_agent_loop"


# ------------------------------------------------------------------------------------------------------------
# where the training loop gets Omega_t from
# ------------------------------------------------------------------------------------------------------------

StateLike = Union[dict, Any]  # a state-actor payload dict, or a seal_verl.core.loop.ClosedLoopState
_STATE_SOURCE: Optional[Union[StateLike, Callable[[Optional[int]], StateLike]]] = None


def set_state_source(source: Optional[Union[StateLike, Callable[[Optional[int]], StateLike]]]) -> None:
    """Pin the closed-loop state the training loops read in THIS process (in-process runs and tests).

    Args:
        source: a ``ClosedLoopState``, a state-actor payload dict (``{"state": ..., "switches": ...}``), a
            callable ``(global_step or None) -> either of those``, or ``None`` to go back to the default.

    Without a pinned source the loop reads, in order: the SEAL state actor (when Ray is initialised; the
    trainer publishes to it before the first rollout, so a missing actor is an error there), else the initial
    state of the run's ``seal`` config section (all cue kinds off, or all on without the closed loop).
    """
    global _STATE_SOURCE
    _STATE_SOURCE = source


def _plain(value: Any) -> Any:
    """Unwrap the numpy containers verl puts row values in (0-d object arrays, numpy scalars)."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value.item()
    if isinstance(value, np.generic):
        value = value.item()
    return value


def _row_extra_info(kwargs: dict) -> dict:
    info = _plain(kwargs.get("extra_info"))
    if info is None:
        return {}
    if not isinstance(info, dict):
        raise ValueError(f"dataset row extra_info must be a mapping, got {type(info).__name__}")
    return info


def task_id_of(kwargs: dict) -> str:
    """The task id of a dataset row (``extra_info.task_id``)."""
    info = _row_extra_info(kwargs)
    task_id = _plain(info.get("task_id"))
    if not task_id:
        raise ValueError(
            "the SEAL agent loops need extra_info.task_id in every dataset row (write the data with "
            "`seal-verl prepare-data`); got extra_info keys: " + ", ".join(sorted(map(str, info)))
        )
    return str(task_id)


def probe_of(kwargs: dict) -> Optional[dict]:
    """A probe row's ``{"condition", "kinds", "sampling"}`` (checked), or None for an ordinary row."""
    from seal_verl.core.interface import check_kinds
    from seal_verl.verl_glue.probe import PROBE_KEY, PROBE_SAMPLING

    value = _plain(_row_extra_info(kwargs).get(PROBE_KEY))
    if value is None:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("condition"), str):
        raise ValueError(f"extra_info.{PROBE_KEY} must be a mapping with a condition name, got {value!r:.200}")
    kinds = value.get("kinds")
    kinds = list(kinds.tolist() if isinstance(kinds, np.ndarray) else kinds or [])
    sampling = value.get("sampling") or {}
    if not isinstance(sampling, dict) or set(sampling) - set(PROBE_SAMPLING):
        raise ValueError(f"extra_info.{PROBE_KEY}.sampling may set only {', '.join(PROBE_SAMPLING)}, got "
                         f"{sampling!r:.200}")
    return {"condition": value["condition"], "kinds": check_kinds(str(k) for k in kinds),
            "sampling": {k: v for k, v in sampling.items() if v is not None}}


def env_name_of(kwargs: dict, default: Optional[str]) -> str:
    """The environment of a dataset row: ``extra_info.env``, else ``default`` (the loop's)."""
    name = _plain(_row_extra_info(kwargs).get("env")) or default
    if not name:
        raise ValueError(
            "this agent loop serves any environment, so every dataset row needs extra_info.env (a name "
            "registered in env_wrappers.registry), or give the loop an `env` in the agent-loop YAML"
        )
    return str(name)


class _Budget:
    """Cue-token bookkeeping of one trajectory."""

    def __init__(self, limit: Optional[int]):
        self.limit = limit
        self.tokens = 0
        self.count = 0
        self.suppressed = 0
        self.exhausted = False


class _State(Enum):
    """Where a rollout is (the counterpart of verl's ``AgentState``)."""

    PROMPTING = "prompting"
    GENERATING = "generating"
    OBSERVING = "observing"
    DONE = "done"


@dataclass
class _Rollout:
    """Everything one rollout carries between the state handlers."""

    task_id: str
    environment: Any
    task: Any
    env: Any
    wrapper: Any
    meta: dict
    budget: _Budget
    request_id: str
    metrics: dict = field(default_factory=dict)
    messages: list = field(default_factory=list)
    tools: Optional[list] = None
    all_ids: list = field(default_factory=list)
    n_prompt: int = 0
    n_cues: int = 0
    response_mask: list = field(default_factory=list)
    response_logprobs: list = field(default_factory=list)
    use_logprobs: bool = False
    extra_from_server: dict = field(default_factory=dict)
    routed_experts: Any = None
    assistant_msgs: int = 0
    context_msgs: int = 0
    turn_tokens: int = 0
    turn_index: int = 0
    events: list = field(default_factory=list)
    #: the environment's answer to the last step (or to the end of a turn), for the observing state
    result: Any = None

    def observed(self) -> Any:
        """What the agent talks to: the cue wrapper, or the bare environment without one or once the cue
        budget is spent."""
        return self.env if (self.wrapper is None or self.budget.exhausted) else self.wrapper


# ------------------------------------------------------------------------------------------------------------
# the loops
# ------------------------------------------------------------------------------------------------------------


class EnvAgentLoopBase(AgentLoopBase):
    """Shared implementation; the subclasses only set ``training``, their registered name and default env."""

    #: True: wrap the environment with the SEAL observation wrapper (training loop only).
    training: bool = False
    loop_name: str = ""
    #: The environment of rows that name none (None: every row must name one).
    default_env: Optional[str] = None

    def __init__(
        self,
        *args,
        tools: Any = None,
        name: Optional[str] = None,
        env: Optional[str] = None,
        call_format: str = "json",
        max_tokens_per_turn: Optional[int] = None,
        max_tokens_per_step: Optional[int] = None,
        max_steps_per_turn: Optional[int] = None,
        max_cue_tokens: Optional[int] = None,
        tool_role: str = "tool",
        system_prompt: Optional[str] = None,
        call_timeout_s: Optional[float] = 10.0,
        single_call_tool_groups: Optional[bool] = None,
        **kwargs,
    ):
        """Args (besides verl's): see the module docstring. ``tools`` (verl's global tool list) and ``name``
        (the YAML entry's name) are accepted and ignored: the tools of a task come from its environment."""
        super().__init__(*args, **kwargs)
        self.env_name = env or self.default_env
        if self.env_name:
            # Fail at start-up, not at the first rollout, on a format the loop's environment does not speak.
            _check_call_format(self.env_name, call_format)
        for key, value in (("max_tokens_per_turn", max_tokens_per_turn), ("max_tokens_per_step", max_tokens_per_step),
                           ("max_steps_per_turn", max_steps_per_turn), ("max_cue_tokens", max_cue_tokens)):
            if value is not None and (isinstance(value, bool) or int(value) != value or int(value) < (0 if key == "max_cue_tokens" else 1)):
                raise ValueError(f"{key} must be a positive integer or null, got {value!r}")
        if tool_role not in ("tool", "ipython"):
            raise ValueError(f"tool_role must be 'tool' or 'ipython', got {tool_role!r}")
        self.call_format = call_format
        self.max_tokens_per_turn = None if max_tokens_per_turn is None else int(max_tokens_per_turn)
        self.max_tokens_per_step = None if max_tokens_per_step is None else int(max_tokens_per_step)
        self.max_steps_per_turn = None if max_steps_per_turn is None else int(max_steps_per_turn)
        self.max_cue_tokens = None if max_cue_tokens is None else int(max_cue_tokens)
        self.tool_role = tool_role
        self.system_prompt = system_prompt
        self.call_timeout_s = call_timeout_s
        self.prompt_length = int(self.rollout_config.prompt_length)
        self.response_length = int(self.rollout_config.response_length)
        if single_call_tool_groups is None:
            single_call_tool_groups = call_format == "python"
        if single_call_tool_groups:
            from seal_verl.verl_glue.compat import single_call_synthetic_assistant

            single_call_synthetic_assistant(self.continuous_token_builder)

    # -------------------------------------------------------------------------------- interface state

    async def _payload(self, kwargs: dict) -> Optional[dict]:
        """The closed-loop state payload for this rollout, or None for "use the config's initial state"."""
        step = _plain(kwargs.get("global_steps"))
        step = None if step is None else int(step)
        source = _STATE_SOURCE
        if source is not None:
            value = source(step) if callable(source) else source
            return _as_payload(value)
        import ray

        if not ray.is_initialized():
            return None
        from seal_verl.verl_glue import state_actor

        if step is not None:
            return await state_actor.client_for(self.config).aget(step)
        # The legacy trainer does not pass global_steps to agent loops: read uncached (one small remote call).
        name, namespace, _ = state_actor.actor_coordinates(self.config)
        payload = await state_actor.lookup_state_actor(name, namespace).get.remote()
        if payload is None:
            raise state_actor.SealStateError(f"SEAL state actor {name!r} holds no state yet")
        return payload

    async def _make_wrapper(self, env, kwargs: dict, meta: dict):
        """The observation wrapper for a training rollout, or None when the environment side is off."""
        from seal_verl.core.observation import SealObservationWrapper
        from seal_verl.core.interface import InterfaceState
        from seal_verl.core.loop import ClosedLoopState, SealSwitches, effective_interface_config
        from seal_verl.verl_glue.config import parse_seal_config

        seal_cfg = parse_seal_config(self.config.get("seal") if hasattr(self.config, "get") else None)
        if not seal_cfg.switches.env_side:
            # No environment side: no cues, so no closed-loop state is needed (vanilla GRPO may run on verl's
            # stock trainer, where no state actor exists).
            meta["interface_source"] = "off"
            meta["interface_global_step"] = None
            meta["interface_step"] = 0
            meta["interface_active"] = []
            return None
        payload = await self._payload(kwargs)
        if payload is None:
            switches = seal_cfg.switches
            state = ClosedLoopState.initial(switches, seal_cfg.interface, seal_cfg.weighting)
            meta["interface_source"] = "initial"
            meta["interface_global_step"] = None
        else:
            switches = SealSwitches.from_dict(payload["switches"]) if payload.get("switches") else seal_cfg.switches
            state = ClosedLoopState.from_dict(payload["state"])
            meta["interface_source"] = "published"
            meta["interface_global_step"] = payload.get("global_step")
        icfg = effective_interface_config(switches, seal_cfg.interface)
        interface: InterfaceState = state.interface
        probe = probe_of(kwargs)
        if probe is not None and switches.env_side and icfg.enabled:
            # A cue-effect probe rollout: exactly the kinds its condition names, whatever Omega_t says.
            from dataclasses import replace

            interface = replace(interface, active={k: k in probe["kinds"] for k in interface.active})
            icfg = replace(icfg, fixed_all_on=False)
            meta["probe"] = probe["condition"]
        meta["interface_step"] = int(interface.step)
        meta["interface_active"] = sorted(k for k, on in interface.active.items() if on)
        if not switches.env_side or not icfg.enabled:
            meta["interface_active"] = []
            return None
        wrapper = SealObservationWrapper(env, interface, icfg, prevalence=dict(state.rate_ema or {}))
        meta["interface_active"] = sorted(wrapper.kinds)
        return wrapper

    # -------------------------------------------------------------------------------- rendering helpers

    def _initial_messages(self, environment, task, first_user: list[dict]
                          ) -> tuple[list[dict], Optional[list[dict]]]:
        """(messages, tools) of the prompt: the loop's system prompt, then the environment shows its tools."""
        messages = [dict(m) for m in first_user]
        if self.system_prompt:
            if messages and messages[0].get("role") == "system":
                messages[0]["content"] = self.system_prompt + "\n\n" + str(messages[0].get("content") or "")
            else:
                messages.insert(0, {"role": "system", "content": self.system_prompt})
        return environment.initial_messages(task, messages, self.call_format)

    def _tool_messages(self, tool_results: list) -> list[dict]:
        from env_wrappers.protocol import tool_messages

        return tool_messages(tool_results)

    def _count_tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False)) if text else 0

    async def _initial_tokens(self, messages: list[dict], tools: Optional[list[dict]]) -> list[int]:
        ids = await self.loop.run_in_executor(
            None, lambda: self.continuous_token_builder.build_initial_tokens(messages, tools=tools)
        )
        if len(ids) > self.prompt_length:
            # verl would left-truncate, which cuts the tool list out of the system prompt: fail loudly instead.
            raise ValueError(
                f"prompt of {len(ids)} tokens exceeds rollout.prompt_length={self.prompt_length} "
                "(data.max_prompt_length); raise it so the task's tool docs fit"
            )
        return list(ids)

    # -------------------------------------------------------------------------------- cue budget

    def _apply_cue_budget(self, budget: _Budget, wrapper, n_before: int, msgs: list[dict]) -> list[dict]:
        """Account the cues the wrapper inserted since ``n_before`` into ``msgs``; over ``max_cue_tokens`` they
        are stripped again (the wrapper only appends) and the interface is off for the rest of the trajectory.

        Cue tokens are counted by encoding each inserted block on its own (separator and marker included).
        """
        new_blocks = wrapper.inserted_cues[n_before:]
        if not new_blocks:
            return msgs
        tokens = sum(self._count_tokens(b) for b in new_blocks)
        if budget.limit is not None and budget.tokens + tokens > budget.limit:
            budget.suppressed += len(new_blocks)
            budget.exhausted = True
            return [dict(m, content=_strip_blocks(m.get("content"), new_blocks)) for m in msgs]
        budget.tokens += tokens
        budget.count += len(new_blocks)
        return msgs

    # -------------------------------------------------------------------------------- the rollout
    #
    # One handler per state, as verl's ToolAgentLoop has: PROMPTING renders the first prompt, GENERATING asks
    # the server for the next assistant message (or ends a turn whose budget is spent) and steps the
    # environment with it, OBSERVING appends the observation that follows (tool results or the next user turn).
    # Each handler returns the next state; the episode's running data lives in one _Rollout.

    async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
        probe = probe_of(kwargs) if self.training else None
        if probe is not None:  # the probe samples like training (verl samples its validation rows greedily)
            sampling_params = {**sampling_params, **probe["sampling"]}
        rollout = await self._start(kwargs)
        try:
            state = _State.PROMPTING
            while state is not _State.DONE:
                if state is _State.PROMPTING:
                    state = await self._handle_prompting(rollout)
                elif state is _State.GENERATING:
                    state = await self._handle_generating(rollout, sampling_params)
                elif state is _State.OBSERVING:
                    state = await self._handle_observing(rollout)
                else:  # pragma: no cover - every state is handled above
                    raise RuntimeError(f"unknown agent-loop state {state!r}")
            return self._output(rollout)
        finally:
            # The episode's tools are let go now, not when the episode is collected (an environment's close
            # must not block: BFCL's hands its worker to the sandbox's own threads).
            close = getattr(rollout.env, "close", None)
            if callable(close):
                close()

    async def _start(self, kwargs: dict) -> "_Rollout":
        """The row's task in a fresh episode of its environment, and the training interface over it."""
        from env_wrappers.registry import get_environment

        task_id = task_id_of(kwargs)
        env_name = env_name_of(kwargs, self.env_name)
        environment = get_environment(env_name)
        if env_name != self.env_name:
            _check_call_format(env_name, self.call_format)
        row_format = _plain(_row_extra_info(kwargs).get("call_format"))
        if row_format and row_format != self.call_format:
            raise ValueError(
                f"dataset row of {task_id} was prepared for call_format={row_format!r} but the {self.loop_name!r} "
                f"agent loop is configured with call_format={self.call_format!r} (agent-loop YAML); use the "
                "agent-loop file of the backbone the data was prepared for"
            )
        task = await self.loop.run_in_executor(None, lambda: environment.load_task(task_id))
        env = environment.start(task, call_format=self.call_format, max_steps_per_turn=self.max_steps_per_turn,
                                call_timeout_s=self.call_timeout_s)
        meta: dict[str, Any] = {"env": env_name, "agent_loop": self.loop_name, "call_format": self.call_format}
        wrapper = await self._make_wrapper(env, kwargs, meta) if self.training else None
        return _Rollout(task_id=task_id, environment=environment, task=task, env=env, wrapper=wrapper, meta=meta,
                        budget=_Budget(self.max_cue_tokens), request_id=f"{task_id}/{uuid4().hex}")

    def _next_after_step(self, r: "_Rollout") -> "_State":
        return _State.GENERATING if not r.env.done else _State.DONE

    async def _handle_prompting(self, r: "_Rollout") -> "_State":
        """The first user turn (with any start-of-task cues) rendered by the chat template."""
        first_user = r.observed().reset()
        if r.wrapper is not None:
            first_user = self._apply_cue_budget(r.budget, r.wrapper, r.n_cues, first_user)
            r.n_cues = len(r.wrapper.inserted_cues)
        r.messages, r.tools = self._initial_messages(r.environment, r.task, first_user)
        r.all_ids = await self._initial_tokens(r.messages, r.tools)
        r.n_prompt = len(r.all_ids)
        return self._next_after_step(r)

    async def _handle_generating(self, r: "_Rollout", sampling_params: dict[str, Any]) -> "_State":
        """The next assistant message within the budgets, stepped through the environment; or the end of the
        episode (trajectory budget spent) or of the turn (turn budget spent)."""
        left = self.response_length - len(r.response_mask)
        turn_left = None if self.max_tokens_per_turn is None else self.max_tokens_per_turn - r.turn_tokens
        if left <= 0:
            r.env.terminate("token_budget")
            r.events.append({"turn": r.turn_index, "event": "trajectory_budget"})
            return _State.DONE
        if turn_left is not None and turn_left <= 0:
            r.result = r.observed().end_turn("token_budget")
            r.events.append({"turn": r.turn_index, "event": "turn_budget"})
            return _State.OBSERVING
        max_tokens = left if turn_left is None else min(left, turn_left)
        if self.max_tokens_per_step is not None:
            max_tokens = min(max_tokens, self.max_tokens_per_step)
        params = dict(sampling_params)
        params["max_tokens"] = int(max_tokens)
        with simple_timer("generate_sequences", r.metrics):
            output = await self.server_manager.generate(
                request_id=r.request_id, prompt_ids=r.all_ids, sampling_params=params
            )
        self._record_server_output(r, output)
        token_ids = list(output.token_ids)[: int(max_tokens)]
        log_probs = self._log_probs(r, output, token_ids)
        merge, r.response_mask, new_logprobs = await self.ct_merge_assistant_token(
            r.all_ids, token_ids, r.response_mask,
            r.response_logprobs if r.use_logprobs else None,
            assistant_logprobs=log_probs if r.use_logprobs else None,
        )
        r.all_ids = merge.token_ids
        if new_logprobs is not None:
            r.response_logprobs = new_logprobs
        if output.routed_experts is not None:
            r.routed_experts = output.routed_experts
        r.assistant_msgs += 1
        r.turn_tokens += len(token_ids)
        text = self.tokenizer.decode(token_ids, skip_special_tokens=True)
        r.messages.append({"role": "assistant", "content": text})
        with simple_timer("tool_calls", r.metrics):
            r.result = await self._run_blocking(r, lambda: r.observed().step(text))
        return _State.OBSERVING

    async def _run_blocking(self, r: "_Rollout", fn: Callable[[], Any]) -> Any:
        """Run a blocking step of the episode: where the environment says (``run_blocking``: BFCL runs it in its
        sandbox's own threads, apart from the default executor verl's own work uses), else in the loop's
        default executor."""
        runner = getattr(r.env, "run_blocking", None)
        if runner is None:
            return await self.loop.run_in_executor(None, fn)
        return await runner(fn)

    @staticmethod
    def _record_server_output(r: "_Rollout", output: Any) -> None:
        """Preemption count and the server's extra fields (the first answer's, with the latest
        ``max_global_steps``), as ToolAgentLoop keeps them."""
        if r.metrics.get("num_preempted") is None:
            r.metrics["num_preempted"] = output.num_preempted if output.num_preempted is not None else -1
        elif output.num_preempted is not None:
            r.metrics["num_preempted"] += output.num_preempted
        if not r.extra_from_server:
            r.extra_from_server.update(output.extra_fields or {})
        elif (output.extra_fields or {}).get("max_global_steps") is not None:
            r.extra_from_server["max_global_steps"] = output.extra_fields["max_global_steps"]

    @staticmethod
    def _log_probs(r: "_Rollout", output: Any, token_ids: list[int]) -> Optional[list[float]]:
        """The generation's log-probs, cut to its tokens. The server either returns them or not, decided by
        its first answer; a server that changes its mind mid-trajectory is an error."""
        log_probs = list(output.log_probs)[: len(token_ids)] if output.log_probs is not None else None
        if r.assistant_msgs == 0:
            r.use_logprobs = log_probs is not None
        if r.use_logprobs and not token_ids:
            log_probs = []
        if r.use_logprobs and (log_probs is None or len(log_probs) != len(token_ids)):
            raise ValueError("the rollout server returned log-probs for some generations and not for others")
        return log_probs

    async def _handle_observing(self, r: "_Rollout") -> "_State":
        """The observation after a step: its tool results, or the next user turn (with any revealed
        functions), cues included within the cue budget. An observation that does not fit ends the episode."""
        result = r.result
        new_msgs: list[dict] = []
        if result.tool_results and not result.turn_done:
            new_msgs = self._tool_messages(result.tool_results)
        elif result.turn_done and not result.episode_done:
            r.turn_index += 1
            r.turn_tokens = 0
            new_msgs = r.environment.reveal_messages(r.task, r.env.turn, list(result.next_user or []),
                                                     list(result.revealed_tools or []), self.call_format)
        if r.wrapper is not None and not r.budget.exhausted:
            new_msgs = self._apply_cue_budget(r.budget, r.wrapper, r.n_cues, new_msgs)
        if r.wrapper is not None:
            r.n_cues = len(r.wrapper.inserted_cues)
        if not new_msgs:
            return self._next_after_step(r)  # episode over (or a turn ended with nothing to show)
        previous = list(r.messages)
        r.messages.extend(new_msgs)
        merge, new_mask, new_logprobs = await self.ct_merge_context_msg(
            previous, r.messages, r.all_ids, r.response_mask,
            r.response_logprobs if r.use_logprobs else None,
            tools=r.tools,
        )
        if len(new_mask) >= self.response_length:
            # the observation does not fit (and nothing could follow it): stop the episode here
            r.messages[:] = previous
            r.env.terminate("token_budget")
            r.events.append({"turn": r.turn_index, "event": "observation_over_budget"})
            return _State.DONE
        r.all_ids = merge.token_ids
        r.response_mask = new_mask
        if r.use_logprobs and new_logprobs is not None:
            r.response_logprobs = new_logprobs
        r.context_msgs += 1
        return self._next_after_step(r)

    def _output(self, r: "_Rollout") -> AgentLoopOutput:
        """The trace (with cue statistics, budget events, token counts) and verl's output of the rollout."""
        from seal_verl.core.observation import empty_cue_stats

        env, budget, wrapper = r.env, r.budget, r.wrapper
        stats = copy.deepcopy(wrapper.cue_stats) if wrapper is not None else empty_cue_stats([], enabled=False)
        stats["tokens"] = budget.tokens
        stats["count_rendered"] = budget.count
        stats["suppressed_by_token_budget"] = budget.suppressed
        env.trace.meta.update(r.meta)
        env.trace.meta["cues"] = stats
        env.trace.meta["budget_events"] = r.events
        env.trace.meta["tokens"] = {"prompt": r.n_prompt, "response": len(r.response_mask),
                                    "llm": int(sum(r.response_mask))}

        all_ids, response_mask = r.all_ids, r.response_mask
        n_resp = len(response_mask)
        response_ids = all_ids[len(all_ids) - n_resp:] if n_resp else []
        prompt_ids = all_ids[: len(all_ids) - n_resp]
        extra_fields = dict(r.extra_from_server)
        extra_fields.update({
            TRACE_FIELD: env.trace.to_json(),
            TASK_ID_FIELD: r.task_id,
            LOOP_FIELD: self.loop_name,
            CUE_TOKENS_FIELD: int(budget.tokens),
            CUE_COUNT_FIELD: int(budget.count),
        })
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=response_ids[: self.response_length],
            response_mask=response_mask[: self.response_length],
            response_logprobs=r.response_logprobs[: self.response_length] if r.use_logprobs else None,
            routed_experts=(r.routed_experts[: len(prompt_ids) + self.response_length]
                            if r.routed_experts is not None else None),
            num_turns=1 + r.assistant_msgs + r.context_msgs,
            metrics=r.metrics,
            extra_fields=extra_fields,
        )


def _check_call_format(env_name: str, call_format: str) -> None:
    from env_wrappers.registry import get_environment

    formats = get_environment(env_name).call_formats
    if call_format not in formats:
        raise ValueError(f"call_format must be one of {', '.join(formats)} for environment {env_name!r}, "
                         f"got {call_format!r}")


def _strip_blocks(content: Any, blocks: list[str]) -> Any:
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


def _as_payload(value: Any) -> Optional[dict]:
    if value is None:
        return None
    if isinstance(value, dict):
        if "state" not in value:
            raise ValueError("a SEAL state payload needs a 'state' key (ClosedLoopState.to_dict())")
        return value
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):  # a ClosedLoopState
        return {"state": to_dict()}
    raise TypeError(f"unsupported SEAL state source value of type {type(value).__name__}")


class SealEnvAgentLoop(EnvAgentLoopBase):
    """``seal_env``: a task of the row's environment under the SEAL training interface Omega_t."""

    training = True
    loop_name = GENERIC_TRAIN_LOOP


class EnvAgentLoop(EnvAgentLoopBase):
    """``env``: a task of the row's environment with the interface removed (evaluation)."""

    training = False
    loop_name = GENERIC_EVAL_LOOP


class SealBFCLAgentLoop(SealEnvAgentLoop):
    """``seal_bfcl``: the training loop with BFCL as the default environment."""

    loop_name = TRAIN_LOOP
    default_env = "bfcl"


class BFCLAgentLoop(EnvAgentLoop):
    """``bfcl``: the evaluation loop with BFCL as the default environment."""

    loop_name = EVAL_LOOP
    default_env = "bfcl"


#: name -> class, for the plugin and for tests.
AGENT_LOOPS = {GENERIC_TRAIN_LOOP: SealEnvAgentLoop, GENERIC_EVAL_LOOP: EnvAgentLoop,
               TRAIN_LOOP: SealBFCLAgentLoop, EVAL_LOOP: BFCLAgentLoop}
for _name, _cls in AGENT_LOOPS.items():
    register(_name)(_cls)


def register_agent_loops() -> None:
    """(Re-)register the loops with verl's agent-loop registry (idempotent; called by the plugin)."""
    from seal_verl.verl_glue.compat import agent_loop_registry

    _agent_loop_registry = agent_loop_registry()
    for name, cls in AGENT_LOOPS.items():
        target = f"{cls.__module__}.{cls.__qualname__}"
        existing = _agent_loop_registry.get(name)
        if existing is None or (isinstance(existing, dict) and set(existing) == {"_target_"}):
            _agent_loop_registry[name] = {"_target_": target}
