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
closed-loop interface state Omega_t (:mod:`seal_verl.verl_glue.rollout_cues`: where the state comes from, the view
of it a rollout reads, the cue budget); an evaluation loop has no wrapper, never reads the state, and adds not one
byte of cue text. Everything else is identical in the two loops: the same prompt rendering, the same call format,
the same budgets, the same trace. verl cannot tell training from validation inside an agent loop, hence two names.

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

The loops' init kwargs (budgets, call format, prompts) come from their entry in the agent-loop YAML; see
:meth:`EnvAgentLoopBase.__init__`.

Outputs (``AgentLoopOutput.extra_fields``, which verl hands to the reward function as part of ``extra_info``
through the reward loop's ``tool_extra_fields``; see ``verl/experimental/agent_loop/agent_loop.py:
AgentLoopWorker._compute_score`` and ``verl/experimental/reward_loop/reward_manager/naive.py``):

- the fields of :data:`seal_verl.core.extras.LOOP_FIELDS`: the trace as a JSON string (``trace.meta`` holding the
  environment name the reward function reads, the loop name, call format, interface state, cue statistics and
  budget events), the task id, the loop's name, the cue tokens and blocks, the global step of the closed-loop
  state the rollout ran under;
- ``min_global_steps`` / ``max_global_steps`` from the rollout server (as ``ToolAgentLoop`` keeps them).

``AgentLoopMetrics`` has a fixed set of fields in verl 0.9.1, so the cue token count is an extra field, not a
metric; the trainer side reads it from the batch.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Callable, Optional
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register
from verl.utils.profiler import simple_timer

from seal_verl import env_vars
from seal_verl.core import extras as X
from seal_verl.verl_glue.loop_rows import env_name_of, plain, probe_of, row_extra_info, task_id_of
from seal_verl.verl_glue.rollout_cues import CueBudget, read_view
from seal_verl.verl_glue.rollout_state import Phase, RunningRollout

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
        """Args (besides verl's), from the loop's entry in the agent-loop YAML at
        ``actor_rollout_ref.rollout.agent.agent_loop_config_path`` (every key but ``name`` and ``_target_``):

        - budgets: ``rollout.response_length`` (verl's) bounds the whole trajectory's response side (LLM +
          observation tokens): each generation gets ``max_tokens`` = what is left, and an observation that would
          not fit ends the episode (the remaining turns are recorded as empty). ``max_tokens_per_turn``: LLM
          tokens one user turn may generate over all its steps (None = unbounded; when spent the turn is ended
          from outside, ``ended_by = "token_budget"``). ``max_tokens_per_step``: LLM tokens of one assistant
          message. ``max_steps_per_turn``: executed tool-call steps per user turn before the episode is
          force-terminated (default: the environment's own cap; BFCL's is 20). ``max_cue_tokens``: cue tokens
          one training trajectory may carry (an observation whose cues would exceed it is rendered without them
          and the interface is off for the rest of the trajectory; each cue is bounded in characters by
          ``seal.interface.max_cue_chars``);
        - ``env``: the environment of rows that name none; ``call_format``: one of the environment's
          ``call_formats`` (BFCL: ``json`` | ``python``; a row prepared for another is an error);
        - ``tool_role``: ``tool`` | ``ipython`` (verl's builder appends ``tool`` messages, which Llama 3.1
          templates render as the ``ipython`` turn, so both send ``tool``); ``system_prompt``: prepended as a
          system message; ``call_timeout_s``: per tool call; ``single_call_tool_groups`` (default: on for
          ``python``): tool results rendered after a synthetic assistant with one tool call, for Llama 3.1-style
          templates that reject several calls in one assistant message;
        - ``tools`` (verl's global tool list) and ``name`` (the entry's name) are accepted and ignored: a task's
          tools come from its environment.
        """
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

    def _apply_cue_budget(self, budget: CueBudget, wrapper, n_before: int, msgs: list[dict]) -> list[dict]:
        return budget.apply(wrapper, n_before, msgs, self._count_tokens)

    # -------------------------------------------------------------------------------- the rollout
    #
    # One handler per state, as verl's ToolAgentLoop has: PROMPTING renders the first prompt, GENERATING asks
    # the server for the next assistant message (or ends a turn whose budget is spent) and steps the
    # environment with it, OBSERVING appends the observation that follows (tool results or the next user turn).
    # Each handler returns the next state; the episode's running data lives in one RunningRollout.

    async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
        probe = probe_of(kwargs) if self.training else None
        if probe is not None:  # the probe samples like training (verl samples its validation rows greedily)
            sampling_params = {**sampling_params, **probe["sampling"]}
        rollout = await self._start(kwargs)
        try:
            state = Phase.PROMPTING
            while state is not Phase.DONE:
                if state is Phase.PROMPTING:
                    state = await self._handle_prompting(rollout)
                elif state is Phase.GENERATING:
                    state = await self._handle_generating(rollout, sampling_params)
                elif state is Phase.OBSERVING:
                    state = await self._handle_observing(rollout)
                else:  # pragma: no cover - every state is handled above
                    raise RuntimeError(f"unknown agent-loop state {state!r}")
            return self._output(rollout)
        finally:
            # The episode's tools are let go now, not when the episode is collected (an environment's close
            # must not block: BFCL's hands its worker to the sandbox's own threads).
            close = getattr(rollout.episode, "close", None)
            if callable(close):
                close()

    async def _start(self, kwargs: dict) -> "RunningRollout":
        """The row's task in a fresh episode of its environment, and the training interface over it."""
        from env_wrappers.registry import get_environment

        task_id = task_id_of(kwargs)
        env_name = env_name_of(kwargs, self.env_name)
        environment = get_environment(env_name)
        if env_name != self.env_name:
            _check_call_format(env_name, self.call_format)
        row_format = plain(row_extra_info(kwargs).get("call_format"))
        if row_format and row_format != self.call_format:
            raise ValueError(
                f"dataset row of {task_id} was prepared for call_format={row_format!r} but the {self.loop_name!r} "
                f"agent loop is configured with call_format={self.call_format!r} (agent-loop YAML); use the "
                "agent-loop file of the backbone the data was prepared for"
            )
        task = await self.loop.run_in_executor(None, lambda: environment.load_task(task_id))
        episode = environment.start(task, call_format=self.call_format, max_steps_per_turn=self.max_steps_per_turn,
                                    call_timeout_s=self.call_timeout_s)
        meta: dict[str, Any] = {"env": env_name, "agent_loop": self.loop_name, "call_format": self.call_format}
        wrapper = None
        if self.training:  # the evaluation loop never reads the closed-loop state
            step = plain(kwargs.get("global_steps"))
            probe = probe_of(kwargs)
            view = await read_view(self.config, self.server_manager, None if step is None else int(step),
                                   probe=probe is not None)
            wrapper = view.wrapper(episode, meta, probe)
        return RunningRollout(task_id=task_id, environment=environment, task=task, episode=episode, wrapper=wrapper, meta=meta,
                        budget=CueBudget(self.max_cue_tokens), request_id=f"{task_id}/{uuid4().hex}")

    def _next_after_step(self, r: "RunningRollout") -> "Phase":
        return Phase.GENERATING if not r.episode.done else Phase.DONE

    async def _handle_prompting(self, r: "RunningRollout") -> "Phase":
        """The first user turn (with any start-of-task cues) rendered by the chat template."""
        first_user = r.observed().reset()
        if r.wrapper is not None:
            first_user = self._apply_cue_budget(r.budget, r.wrapper, r.n_cues, first_user)
            r.n_cues = len(r.wrapper.inserted_cues)
        r.messages, r.tools = self._initial_messages(r.environment, r.task, first_user)
        r.all_ids = await self._initial_tokens(r.messages, r.tools)
        r.n_prompt = len(r.all_ids)
        return self._next_after_step(r)

    async def _handle_generating(self, r: "RunningRollout", sampling_params: dict[str, Any]) -> "Phase":
        """The next assistant message within the budgets, stepped through the environment; or the end of the
        episode (trajectory budget spent) or of the turn (turn budget spent)."""
        left = self.response_length - len(r.response_mask)
        turn_left = None if self.max_tokens_per_turn is None else self.max_tokens_per_turn - r.turn_tokens
        if left <= 0:
            r.episode.terminate("token_budget")
            r.events.append({"turn": r.turn_index, "event": "trajectory_budget"})
            return Phase.DONE
        if turn_left is not None and turn_left <= 0:
            r.result = r.observed().end_turn("token_budget")
            r.events.append({"turn": r.turn_index, "event": "turn_budget"})
            return Phase.OBSERVING
        max_tokens = left if turn_left is None else min(left, turn_left)
        if self.max_tokens_per_step is not None:
            max_tokens = min(max_tokens, self.max_tokens_per_step)
        params = dict(sampling_params)
        params["max_tokens"] = int(max_tokens)
        with simple_timer("generate_sequences", r.metrics):
            output = await self.server_manager.generate(
                request_id=r.request_id, prompt_ids=r.all_ids, sampling_params=params
            )
        r.record_server_output(output)
        token_ids = list(output.token_ids)[: int(max_tokens)]
        log_probs = r.log_probs(output, token_ids)
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
        return Phase.OBSERVING

    async def _run_blocking(self, r: "RunningRollout", fn: Callable[[], Any]) -> Any:
        """Run a blocking step of the episode: where the environment says (``run_blocking``: BFCL runs it in its
        sandbox's own threads, apart from the default executor verl's own work uses), else in the loop's
        default executor."""
        runner = getattr(r.episode, "run_blocking", None)
        if runner is None:
            return await self.loop.run_in_executor(None, fn)
        return await runner(fn)

    async def _handle_observing(self, r: "RunningRollout") -> "Phase":
        """The observation after a step: its tool results, or the next user turn (with any revealed
        functions), cues included within the cue budget. An observation that does not fit ends the episode."""
        result = r.result
        new_msgs: list[dict] = []
        if result.tool_results and not result.turn_done:
            new_msgs = self._tool_messages(result.tool_results)
        elif result.turn_done and not result.episode_done:
            r.turn_index += 1
            r.turn_tokens = 0
            new_msgs = r.environment.reveal_messages(r.task, r.episode.turn, list(result.next_user or []),
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
            r.episode.terminate("token_budget")
            r.events.append({"turn": r.turn_index, "event": "observation_over_budget"})
            return Phase.DONE
        r.all_ids = merge.token_ids
        r.response_mask = new_mask
        if r.use_logprobs and new_logprobs is not None:
            r.response_logprobs = new_logprobs
        r.context_msgs += 1
        return self._next_after_step(r)

    def _output(self, r: "RunningRollout") -> AgentLoopOutput:
        """The trace (with cue statistics, budget events, token counts) and verl's output of the rollout."""
        trace = r.finish_trace()
        all_ids, response_mask = r.all_ids, r.response_mask
        n_resp = len(response_mask)
        response_ids = all_ids[len(all_ids) - n_resp:] if n_resp else []
        prompt_ids = all_ids[: len(all_ids) - n_resp]
        extra_fields = dict(r.extra_from_server)
        state_step = r.meta.get("interface_global_step")
        extra_fields.update({
            X.TRACE: trace.to_json(),
            X.ROW_TASK_ID: r.task_id,
            X.AGENT_LOOP: self.loop_name,
            X.CUE_TOKENS: int(r.budget.tokens),
            X.CUE_COUNT: int(r.budget.count),
            X.STATE_STEP: -1 if state_step is None else int(state_step),
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
