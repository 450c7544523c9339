"""What a warm start prepares a model for (an environment and the run that trains on it), and the one error a
warm start raises for a request it cannot build."""

from __future__ import annotations

import dataclasses

from seal_verl.models.warm_start.run_config import RunSettings, run_settings


class WarmStartError(RuntimeError):
    """The warm start cannot be built as asked (a ground-truth trajectory that does not fit, bad arguments)."""


@dataclasses.dataclass(frozen=True)
class Target:
    """What a warm start prepares a model for: a registered environment and the run (``run_config.RUNS``) that
    trains the model on it."""

    env: str
    run: str

    @property
    def settings(self) -> RunSettings:
        return run_settings(self.run)

    @property
    def loops(self) -> tuple[str, str]:
        """(training loop, evaluation loop) of the environment."""
        from seal_verl.rollouts import loop_names

        return loop_names(self.env)
