"""One training step's rollouts as the trainer side reads them, once, and what the update did with each.

The record flows one way: the trainer glue reads a batch into :class:`Rollout` values (the reward's extras
decoded once into a :class:`~seal_verl.core.extras.Grade`); the SEAL step adds one :class:`Update` per rollout
after the advantages; the driver closes the step into a :class:`StepRecord` with the closed-loop states around
it; the run folder's rows are built from that (``seal_verl.runs.rows``). Nothing writes back into a record.

Every rollout carries ``state_step``: the global step of the closed-loop state it was generated under. Under
verl's synchronous trainer that is always the state just before the step; a trainer that trains on rollouts
generated earlier (verl's asynchronous modes) reads the rollout's weight from that step's rho
(``SealDriver.rho_for``), and the closed loop counts each rollout once, in the step that trains on it. No verl
import.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from seal_verl.core.extras import Grade


@dataclass(frozen=True)
class Rollout:
    """One real (non-padding) rollout of a step, read once from the batch.

    Attributes:
        index: its row in the batch (padding rows have no record).
        key: its name in the batch (the TransferQueue key, or the row number of a ``DataProto``).
        uid: its GRPO group.
        grade: the reward's extras, decoded.
        task_id: the task.
        agent_loop: the registered name of the loop that ran it.
        cue_tokens, cue_count: the cues the interface rendered into it.
        state_step: the global step of the closed-loop state it was generated under (None: the initial state
            of an in-process run, or no environment side).
        trace: its trace as a dict (read only when the run folder keeps it; else None).
        hint_in_text: whether the cue marker occurs in its decoded tokens (None: not decoded).
        tokens: ``{"prompt", "response", "llm"}`` token counts (None: not read).
        timing: the agent loop's timers in seconds (None: not in the batch).
        sync: summed |p - q| of its response tokens' probabilities between the rollout engine, the actor and the
            reference, with ``"n"`` the tokens summed over (None: no log-probs in the batch).
    """

    index: int
    key: str
    uid: str
    grade: Grade
    task_id: str
    agent_loop: Optional[str] = None
    cue_tokens: int = 0
    cue_count: int = 0
    state_step: Optional[int] = None
    trace: Optional[dict] = field(default=None, repr=False)
    hint_in_text: Optional[bool] = None
    tokens: Optional[dict] = None
    timing: Optional[dict] = None
    sync: Optional[dict] = None


@dataclass(frozen=True)
class Update:
    """What the update did with one rollout.

    Attributes:
        w: the SEAL weight its advantage was multiplied by (1 without reweighting).
        grpo_advantage: verl's GRPO advantage before the weight (None: the estimator is not SEAL's, so the
            advantage below is verl's own).
        advantage: mean advantage over its response tokens.
        advantage_range: (min, max) of that advantage (None when no token has mask 1, e.g. excluded).
        excluded: kept out of the update (its verification raised).
    """

    w: float
    grpo_advantage: Optional[float]
    advantage: Optional[float]
    advantage_range: Optional[tuple[float, float]]
    excluded: bool


@dataclass(frozen=True)
class Trained:
    """A rollout and its update."""

    rollout: Rollout
    update: Update


@dataclass(frozen=True)
class StepRecord:
    """A closed training step: its rollouts with their updates, and the closed-loop state before and after.

    Attributes:
        step: verl's global step (from 1).
        trained: the step's rollouts in batch order (several advantage computations of one step concatenated).
        state_before: the state the step's rollouts ran under (after any probe of the step changed it).
        state_after: the state after the closed-loop update.
    """

    step: int
    trained: tuple[Trained, ...]
    state_before: Any
    state_after: Any

    @property
    def rollouts(self) -> tuple[Rollout, ...]:
        return tuple(t.rollout for t in self.trained)
