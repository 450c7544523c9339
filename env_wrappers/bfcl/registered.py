"""The BFCL environment as the registry names it (``bfcl``): the environment room's
:class:`~env_wrappers.bfcl.environment.environment.BFCLEnvironment`, serving the subcommands of both rooms that
have some: the environment's (``prepare-data``, ``preflight``) and the evaluation's (``diagnose``,
``demo-results``, ``eval``, ``bfcl-ids``).

It sits above the rooms because it joins them: the evaluation builds on the environment (episodes, tasks, the
judge), so the environment cannot reach the evaluation's commands itself.
"""

from __future__ import annotations

from .environment.environment import BFCLEnvironment
from .evaluation.commands import COMMANDS as EVALUATION_COMMANDS


class BFCL(BFCLEnvironment):
    """BFCL V3 multi-turn with every subcommand of the ``seal-verl`` command line that works on its files."""

    def commands(self) -> dict:
        return {**EVALUATION_COMMANDS, **super().commands()}
