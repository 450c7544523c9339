"""The environment protocol: what a tool environment gives SEAL's agent loop, reward function and dry run.

SEAL's glue (the verl agent loops, the reward function, the dry run) serves any tool environment through two
small objects, in the spirit of Gymnasium's ``Env`` and tau2-bench's domain / tools / evaluator split:

- an :class:`Environment` (one per environment, registered by name in :mod:`env_wrappers.registry`). Its
  required part is five methods: the task ids of a split, a task by id, a fresh :class:`Episode` of a task, the
  prompt's first messages, and the verdict of a finished trace with its per-turn checks (:class:`Verification`).
  The rest are optional protocols with defaults, which :class:`Environment` inherits: :class:`TaskDetails`
  (categories, turn counts, row checks, functions revealed mid-task), :class:`DatasetRows` (parquet rows),
  :class:`Commands` (subcommands of ``seal-verl``) and :class:`Scripted` (the dry run's scripted assistant);
- an :class:`Episode` (one per rollout, never shared): serves the user turns in order, executes one assistant
  message's tool calls and returns a :class:`StepResult`, says where turns end, and records the
  :class:`~seal_verl.core.trace.Trace` that Psi reads.

Which environment serves a dataset row is the row's ``extra_info.env`` (any name the registry resolves: a
registered name or alias, an entry point, an import path), or the agent loop's own default. A task is whatever
``load_task`` returns (SEAL reads no attribute of it); a task id is any non-empty string. The SEAL observation
wrapper (:mod:`seal_verl.core.observation`) wraps any ``Episode``: it only grows observation messages, so the tool
semantics stay the environment's.

Nothing here imports verl; an environment may import whatever it needs (BFCL imports bfcl-eval), and SEAL's
core imports no environment.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, NamedTuple, Optional, Protocol, runtime_checkable

from seal_verl.core.observation import CUE_MARKER
from seal_verl.core.diagnosis import TurnCheck
from seal_verl.core.trace import Attempt, Trace

__all__ = ["ToolResult", "StepResult", "Episode", "Environment", "Verification", "TurnCheck", "TaskDetails",
           "DatasetRows", "Command", "Commands", "Scripted", "REQUIRED", "OPTIONAL", "CUE_MARKER", "CLOSING_TEXT",
           "ABSTAIN_TEXT", "tool_docs_lines"]


@dataclass
class ToolResult:
    """One tool response the agent will see: the call it answers and the result or error text."""

    name: str
    call: str
    content: str
    is_error: bool


@dataclass
class StepResult:
    """What :meth:`Episode.step` and :meth:`Episode.end_turn` return.

    ``tool_results``: responses to show the agent (empty when the turn ended).
    ``turn_done``: the current user turn is over; ``episode_done``: no further user turn.
    ``next_user``: the next turn's user messages when ``turn_done`` and not ``episode_done``.
    ``revealed_tools``: OpenAI-style tools that become available with that next turn.
    ``attempt``: the trace record of the message just fed (None for :meth:`Episode.end_turn`).
    ``failed_calls``: call records that could not be executed as calls (for recovery feedback).
    """

    tool_results: list = field(default_factory=list)
    turn_done: bool = False
    episode_done: bool = False
    next_user: Optional[list] = None
    revealed_tools: list = field(default_factory=list)
    attempt: Optional[Attempt] = None
    failed_calls: list = field(default_factory=list)


@runtime_checkable
class Episode(Protocol):
    """One rollout of one task. The agent loop calls ``reset`` once, then ``step`` until ``done``.

    Attributes: ``trace`` (the evidence record, filled as the episode runs), ``done``, ``turn`` (index of the
    current user turn), ``call_format`` (how assistant text encodes calls; read by the observation wrapper).

    Optional: ``close()`` lets go of what the episode holds (the agent loop calls it when the rollout ends; it
    must not block), and ``async run_blocking(fn)`` runs ``fn`` (a step) from the agent loop's event loop
    where the environment wants its steps run (BFCL: its sandbox's own threads); without it the agent loop
    runs steps in its event loop's default executor.
    """

    trace: Trace
    done: bool
    turn: int
    call_format: str

    def reset(self) -> list[dict]:
        """Start the episode; the first turn's user messages (``{"role": "user", "content": str}``)."""

    def step(self, message: str) -> StepResult:
        """Feed one assistant message: decode its calls, run them, record the attempt in the trace."""

    def end_turn(self, reason: str = "token_budget") -> StepResult:
        """End the current turn from outside (a token budget); returns like :meth:`step`."""

    def terminate(self, reason: str = "token_budget") -> None:
        """Stop now; turns never reached are recorded as empty so the trace has one entry per task turn."""

    def tools(self) -> list[dict]:
        """The OpenAI-style tools offered right now."""


@dataclass
class Verification:
    """The verifier's view of one finished trace; Psi turns ``checks`` into one label per turn.

    ``valid``: the task passes under the environment's official semantics (what evaluation reports);
    ``reward_valid``: it passes under the training reward's semantics (e.g. also failing a call where the
    agent should have abstained); ``checks``: one :class:`TurnCheck` per ground-truth turn.
    """

    task_id: str
    category: str
    valid: bool
    reward_valid: bool
    checks: list
    error_type: str = ""


#: A scripted assistant's text answer (it ends a turn: no call in it).
CLOSING_TEXT = "Done."
#: A scripted assistant's answer on a turn where it must ask instead of calling.
ABSTAIN_TEXT = "I cannot do that yet: a required detail or function is missing. Could you provide it?"



def tool_docs_lines(tools: list[dict]) -> str:
    """OpenAI-style tools as one JSON object per line (the form of a Qwen-style ``<tools>`` block)."""
    return "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)


class TaskDetails:
    """*Optional protocol*: what the glue reads about a task beyond the required part, with defaults that fit an
    environment whose tasks carry a ``category`` attribute and reveal no function mid-task."""

    def category(self, task: Any) -> str:
        """The task's category (the row's ``data_source``; metrics are reported per category)."""
        return str(getattr(task, "category", "") or self.name)

    def n_turns(self, task: Any) -> Optional[int]:
        """Ground-truth user turns of ``task`` (None: unknown, not checked)."""
        return None

    def check_row(self, task: Any, trace: Trace, *, data_source: Any = None, ground_truth: Any = None) -> None:
        """Raise ``ValueError`` when a dataset row or trace disagrees with the task (wrong category, stale
        ground truth, a trace with the wrong number of turns). Default: the turn count check only."""
        n = self.n_turns(task)
        if n is not None and len(trace.turns) != n:
            raise ValueError(
                f"the trace of {trace.task_id} has {len(trace.turns)} turns, the task has {n}; an agent loop "
                "must record every turn (call terminate() when it stops early)"
            )

    def reveal_messages(self, task: Any, turn: int, messages: list[dict], revealed_tools: list[dict],
                        call_format: str) -> list[dict]:
        """The user messages of ``turn`` when functions are revealed there. The prompt's tool list cannot be
        re-rendered mid-rollout (the token prefix is fixed), so by default the revealed tools' JSON, one per
        line, goes in front of the first user message."""
        if not revealed_tools or not messages:
            return messages
        out = [dict(m) for m in messages]
        first = next((i for i, m in enumerate(out) if m.get("role") == "user"), 0)
        out[first]["content"] = tool_docs_lines(revealed_tools) + "\n" + str(out[first].get("content") or "")
        return out


class DatasetRows:
    """*Optional protocol*: the environment's tasks as parquet rows for verl's ``RLHFDataset``."""

    def dataset_rows(self, task_ids: list[str], split: str, call_format: str) -> list[dict]:
        """Parquet rows for verl's ``RLHFDataset`` (``agent_name`` is left for the caller to set). The row's
        ``extra_info`` names the environment and the task; the prompt is the first user turn."""
        rows = []
        for i, task_id in enumerate(task_ids):
            task = self.load_task(task_id)
            first = self.start(task, call_format=call_format).reset()
            rows.append({
                "data_source": self.category(task),
                "agent_name": "",
                "prompt": [{"role": str(m["role"]), "content": str(m["content"])} for m in first],
                "ability": "tool_use",
                "reward_model": {"style": "rule", "ground_truth": ""},
                "extra_info": {"index": i, "task_id": task_id, "env": self.name, "split": split,
                               "call_format": call_format},
            })
        return rows


class Command(NamedTuple):
    """One subcommand of the ``seal-verl`` command line that an environment owns: ``add_arguments(parser)`` defines
    its arguments on the subcommand's ``argparse`` parser, ``run(args)`` runs it on the parsed arguments and returns
    the exit status; ``help`` is its line in ``seal-verl --help``."""

    add_arguments: Callable[[Any], None]
    run: Callable[[Any], int]
    help: str = ""


class Commands:
    """*Optional protocol*: subcommands of the ``seal-verl`` command line that work on this environment's own
    files (``diagnose`` of result files, ``prepare-data``, ...)."""

    def commands(self) -> dict[str, Command]:
        """Subcommand name -> :class:`Command` (its arguments and what runs it). Default: none."""
        return {}


class Scripted:
    """*Optional protocol*: the scripted assistant of the dry run and the tests, where planned messages stand in
    for the model. Without ``reference_turns`` an environment trains and evaluates, but has no dry run."""

    def reference_turns(self, task: Any, call_format: str) -> list[list[str]]:
        """Per user turn, assistant messages that solve it; the last of each turn is a text answer
        (:data:`CLOSING_TEXT`, or :data:`ABSTAIN_TEXT` where the agent must ask)."""
        raise NotImplementedError

    def failure_turns(self, task: Any, target: str, call_format: str, seed: int) -> Iterator[tuple]:
        """Proposals ``(kind, turn, turn_messages)`` meant to show the label ``target`` on one turn, most
        natural first. The dry run keeps a proposal only if the verifier and Psi give exactly that label.
        Default: a text answer instead of the calls (``missing_tool_call``) and a reference call on a turn
        where the agent should ask (``spurious_tool_call``)."""
        reference = self.reference_turns(task, call_format)
        for k, msgs in enumerate(reference):
            if target == "missing_tool_call" and len(msgs) > 1:
                yield "text_only", k, [CLOSING_TEXT]
            if target == "spurious_tool_call" and msgs == [ABSTAIN_TEXT]:
                for other in reference:
                    if len(other) > 1:
                        yield "call_on_abstention", k, [other[0], CLOSING_TEXT]

    def user_turn_texts(self, task: Any) -> list[str]:
        """A text of each user turn that appears in the rendered prompt (a scripted assistant finds where it
        is by looking for them). Default: the first user message of each turn, played with the reference."""
        episode = self.start(task, call_format=self.call_formats[0], call_timeout_s=None)
        reference = self.reference_turns(task, self.call_formats[0])
        texts = [_first_text(episode.reset())]
        while not episode.done:
            k = episode.turn
            for text in list(reference[k] if k < len(reference) else []) + [CLOSING_TEXT]:
                result = episode.step(text)
                if result.turn_done:
                    if result.next_user:
                        texts.append(_first_text(result.next_user))
                    break
        return texts


class Environment(TaskDetails, DatasetRows, Commands, Scripted):
    """Base class of a registered environment.

    The methods defined here are the required part (:data:`REQUIRED`): every environment has them, and an
    environment writes the four that raise ``NotImplementedError`` (``initial_messages`` has a default that fits
    an environment whose prompt gives its tools through the chat template). Everything else comes from the
    optional protocols this class inherits, each with defaults: :class:`TaskDetails` (categories, turn counts,
    row checks, functions revealed mid-task), :class:`DatasetRows`, :class:`Commands` and :class:`Scripted`
    (the dry run's scripted assistant). Override any of their methods to change a default.

    Class attributes: ``name`` (a default only: the registry sets each instance's ``name`` to the name it was
    looked up by, which is what rows and traces carry), ``call_formats`` (the call encodings its episodes decode;
    the first is the default), ``max_steps_per_turn`` (tool-call steps per user turn before the episode is
    force-terminated), ``categories`` (task categories in display order; empty: in order of first appearance).
    """

    name: str = ""
    call_formats: tuple[str, ...] = ("json",)
    max_steps_per_turn: int = 20
    categories: tuple[str, ...] = ()

    def task_ids(self, split: str) -> list[str]:
        """*Write it.* Task ids of a split (``train`` or ``eval``), in a fixed order."""
        raise NotImplementedError

    def load_task(self, task_id: str) -> Any:
        """*Write it.* The task with this id; an unknown id raises ``KeyError`` naming it."""
        raise NotImplementedError

    def start(self, task: Any, *, call_format: str, max_steps_per_turn: Optional[int] = None,
              call_timeout_s: Optional[float] = None) -> Episode:
        """*Write it.* A fresh :class:`Episode` of ``task`` (own state; nothing shared between rollouts)."""
        raise NotImplementedError

    def initial_messages(self, task: Any, messages: list[dict], call_format: str
                         ) -> tuple[list[dict], Optional[list[dict]]]:
        """The prompt: ``(messages, tools)``. ``messages`` are the first user turn (and the loop's system
        prompt, if any); ``tools`` go to the chat template's ``tools=`` (None when the messages already
        describe them). Default: the messages unchanged and the tools the first episode turn offers."""
        return [dict(m) for m in messages], self.start(task, call_format=call_format).tools()

    def verify(self, task: Any, trace: Trace, *, strict_abstention: bool = True,
               call_timeout_s: Optional[float] = 10.0) -> Verification:
        """*Write it.* Verify a finished trace: the official verdict, the reward verdict and per-turn checks.
        Must not execute model text as code, and must not reuse state another check already mutated.
        ``call_timeout_s``: per-call time limit where the environment has one (None: trusted, inline)."""
        raise NotImplementedError


#: The required part of an environment: the methods :class:`Environment` defines itself.
REQUIRED = ("task_ids", "load_task", "start", "initial_messages", "verify")
#: The optional protocols, each with defaults, that :class:`Environment` inherits.
OPTIONAL = (TaskDetails, DatasetRows, Commands, Scripted)


def _first_text(messages: list[dict]) -> str:
    return next((str(m.get("content") or "") for m in messages if m.get("content")), "")


def tool_messages(tool_results: list) -> list[dict]:
    """The chat messages that carry an environment's tool results to the model, one ``tool`` message each.

    Shared by the training agent loop and the token-length tools, so both render the same bytes. Llama 3.1's chat
    template renders a ``tool`` message under its ``ipython`` header, so a backbone whose tool role is ``ipython``
    also gets ``tool`` here (verl's token builder appends only tool/user/system/assistant messages).
    """
    return [{"role": "tool", "name": tr.name or "tool", "content": tr.content} for tr in tool_results]
