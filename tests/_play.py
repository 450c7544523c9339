"""Play a ``bfcl generate``-style result through BFCLEnv's live protocol (not a test module): the trace a rollout
that answered exactly so would leave, for tests of the reward function and its options."""

from __future__ import annotations

from env_wrappers.bfcl.environment.env import BFCLEnv


def play(task, result, fmt: str):
    """Every step of ``result`` (``[turn][step]``) as the assistant's message, turn by turn; returns the trace."""
    env = BFCLEnv(task, call_format=fmt)
    env.reset()
    for turn in result:
        if env.done:
            break
        for step in turn:
            if env.step(step).turn_done:
                break
    assert env.done
    return env.trace
