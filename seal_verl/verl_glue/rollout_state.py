"""One agent-loop rollout while it runs: where it is (:class:`Phase`) and what it carries between the state
handlers of ``agent_loop.py`` (:class:`RunningRollout`): the episode and its cue wrapper, the messages and token
ids so far, the server's answers, and at the end the trace's statistics. No verl import.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Optional

from seal_verl.verl_glue.rollout_cues import CueBudget


class Phase(Enum):
    """Where a rollout is (the counterpart of verl's ``AgentState``)."""

    PROMPTING = "prompting"
    GENERATING = "generating"
    OBSERVING = "observing"
    DONE = "done"


@dataclass
class RunningRollout:
    """Everything one rollout carries between the state handlers.

    Attributes:
        task_id, environment, task: the row's task and the registered environment that serves it.
        episode: the environment's episode of the task (its tools, its trace).
        wrapper: the cue wrapper over ``episode`` (None: the evaluation loop, or no cues).
        meta: what the trace's ``meta`` records of the loop and the interface.
        budget: the rollout's cue-token budget.
        request_id: the id the server sees (``<task_id>/<uuid>``; the scripted LLM of the dry run reads it).
    """

    task_id: str
    environment: Any
    task: Any
    episode: Any
    wrapper: Any
    meta: dict
    budget: CueBudget
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
        """What the agent talks to: the cue wrapper, or the bare episode without one or once the cue budget
        is spent."""
        return self.episode if (self.wrapper is None or self.budget.exhausted) else self.wrapper

    def record_server_output(self, output: Any) -> None:
        """Preemption count and the server's extra fields (the first answer's, with the latest
        ``max_global_steps``), as verl's ToolAgentLoop keeps them."""
        if self.metrics.get("num_preempted") is None:
            self.metrics["num_preempted"] = output.num_preempted if output.num_preempted is not None else -1
        elif output.num_preempted is not None:
            self.metrics["num_preempted"] += output.num_preempted
        if not self.extra_from_server:
            self.extra_from_server.update(output.extra_fields or {})
        elif (output.extra_fields or {}).get("max_global_steps") is not None:
            self.extra_from_server["max_global_steps"] = output.extra_fields["max_global_steps"]

    def log_probs(self, output: Any, token_ids: list[int]) -> Optional[list[float]]:
        """The generation's log-probs, cut to its tokens. The server either returns them or not, decided by
        its first answer; a server that changes its mind mid-trajectory is an error."""
        log_probs = list(output.log_probs)[: len(token_ids)] if output.log_probs is not None else None
        if self.assistant_msgs == 0:
            self.use_logprobs = log_probs is not None
        if self.use_logprobs and not token_ids:
            log_probs = []
        if self.use_logprobs and (log_probs is None or len(log_probs) != len(token_ids)):
            raise ValueError("the rollout server returned log-probs for some generations and not for others")
        return log_probs

    def finish_trace(self) -> Any:
        """The episode's trace with the loop's record in its ``meta``: interface, cue statistics, budget events,
        token counts."""
        from seal_verl.core.observation import empty_cue_stats

        wrapper, budget = self.wrapper, self.budget
        stats = copy.deepcopy(wrapper.cue_stats) if wrapper is not None else empty_cue_stats([], enabled=False)
        stats["tokens"] = budget.tokens
        stats["count_rendered"] = budget.count
        stats["suppressed_by_token_budget"] = budget.suppressed
        trace = self.episode.trace
        trace.meta.update(self.meta)
        trace.meta["cues"] = stats
        trace.meta["budget_events"] = self.events
        trace.meta["tokens"] = {"prompt": self.n_prompt, "response": len(self.response_mask),
                                "llm": int(sum(self.response_mask))}
        return trace
