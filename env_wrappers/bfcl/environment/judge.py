"""Verifier + Psi for BFCL: from a trace (live rollout or replayed result file) to verdict and labels.

This is the one place that turns the BFCL verifier's evidence into Psi's environment-neutral
:class:`~seal_verl.core.diagnosis.TurnCheck` objects, and that rebuilds traces from ``bfcl generate`` result
entries by replaying them through :class:`~.env.BFCLEnv`.
"""

from __future__ import annotations

from dataclasses import dataclass

from seal_verl.core.diagnosis import Diagnosis, TurnCheck, diagnose
from seal_verl.core.trace import Trace

from ..tools.backends import ERROR_PREFIX, is_timeout_result
from ..tools.calls import split_call
from .env import BFCLEnv
from .isolated_verify import verify_isolated
from .tasks import BFCLTask
from .verifier import FORCE_TERMINATED, INFERENCE_ERROR, Judged, Verdict, judge_job


@dataclass
class Judgement:
    """Official verdict, the verdict under the chosen reward semantics, and Psi's labels."""

    task_id: str
    category: str
    valid: bool            # official BFCL pass/fail
    error_type: str
    reward_valid: bool     # pass/fail under the training semantics (strict abstention if chosen)
    diagnosis: Diagnosis

    @property
    def labels(self) -> list[str]:
        return self.diagnosis.labels


def _names(calls: list[str]) -> list[str]:
    out = []
    for c in calls:
        try:
            out.append(split_call(c)[0])
        except ValueError:
            out.append("")
    return out


def turn_checks(verdict: Verdict) -> list[TurnCheck]:
    return [
        TurnCheck(
            abstention=ev.abstention,
            passed=ev.passed,
            state_ok=ev.state_ok,
            response_ok=ev.response_ok,
            gt_functions=_names(ev.gt_calls),
            checker_error=ev.checker_error,
        )
        for ev in verdict.turns
    ]


def judge_trace(task: BFCLTask, trace: Trace, strict_abstention: bool = False,
                call_timeout_s: float | None = 10.0) -> Judgement:
    """Verify a trace's decoded calls and diagnose it.

    A force-terminated trace fails officially (BFCL scores a short result as ``force_terminated``); its
    turns are still labelled from the calls it made.
    """
    return _judge(task, trace, strict_abstention, call_timeout_s)


def verify_trace(task: BFCLTask, trace: Trace, strict_abstention: bool = False,
                 call_timeout_s: float | None = 10.0) -> tuple[bool, str, bool, list[TurnCheck]]:
    """The verifier's side of :func:`judge_trace`: ``(valid, error_type, reward_valid, checks)``, the checks
    being what Psi reads (one per ground-truth turn)."""
    return _verify(task, trace, strict_abstention, call_timeout_s)


def _judge(task: BFCLTask, trace: Trace, strict_abstention: bool, call_timeout_s: float | None,
           replay: BFCLEnv | None = None) -> Judgement:
    """judge_trace; with ``replay`` (an environment whose calls were queued, not run), the verifier's model
    path runs them, once (in a limited worker, see ``isolated_verify``), and its outcomes complete the trace
    before Psi reads it."""
    valid, error_type, reward_valid, checks = _verify(task, trace, strict_abstention, call_timeout_s, replay)
    return Judgement(task_id=task.id, category=task.category, valid=valid, error_type=error_type,
                     reward_valid=reward_valid, diagnosis=diagnose(trace, checks))


def _verify(task: BFCLTask, trace: Trace, strict_abstention: bool, call_timeout_s: float | None,
            replay: BFCLEnv | None = None) -> tuple[bool, str, bool, list[TurnCheck]]:
    decoded = trace.decoded_steps()
    attempted = [any(a.has_call_attempt for a in t.attempts) for t in trace.turns]
    judged = _judgement(task, trace, decoded, attempted, strict_abstention, call_timeout_s, replay)
    if replay is not None:
        if judged.failed:
            # No outcome to settle with, and running the calls here would meet what stopped the verifier
            # (the same overrunning calls, each waited out again): they stay unrun, and say why.
            replay.abandon(ERROR_PREFIX + f"not run: the verifier could not judge this trajectory ({judged.error})")
        else:
            flat = [o for turn in judged.outcomes or [] for o in turn]
            if judged.outcomes is None or len(judged.outcomes) != len(decoded) or not replay.settle(flat):
                replay.flush()  # the verifier stopped short in one turn: run the calls on the replay itself
    official, verdict = judged.official, judged.verdict
    valid, error_type = official.valid, official.error_type
    if trace.force_terminated:
        valid, error_type = False, FORCE_TERMINATED
    reward_valid = verdict.valid and not trace.force_terminated
    return valid, error_type, reward_valid, turn_checks(verdict)


def _judgement(task: BFCLTask, trace: Trace, decoded: list, attempted: list, strict_abstention: bool,
               call_timeout_s: float | None, replay: BFCLEnv | None) -> Judged:
    """The judgement of one trajectory; a failure anywhere in it is that task's checker error, so that the
    caller (the reward function, ``diagnose``, ``eval`` scoring) labels it and goes on with the next task."""
    timed_out = None if replay is not None else _timed_out_positions(trace)
    try:
        if call_timeout_s is None:  # trusted, scripted calls only: inline, in this process
            return judge_job(task, decoded, attempted, strict_abstention, None, timed_out, replay is not None)
        # The model's calls: in a worker under a rollout's limits, never in this process. Meanwhile the
        # replay's calls get their schema facts here: the two processes share the work.
        return verify_isolated(task, decoded, attempted, strict_abstention, call_timeout_s, timed_out,
                               replay is not None, meanwhile=replay.annotate if replay is not None else None)
    except Exception as exc:  # noqa: BLE001 - never an exception into training or a batch of result files
        return Judged.checker_error(task, decoded, f"the verifier failed: {type(exc).__name__}: {exc}")


def _timed_out_positions(trace: Trace) -> list | None:
    """Per turn, ``{position: result text}`` of the turn's decoded calls (positions as ``decoded_steps``
    flattens them) whose recorded result is a time-limit error; None when there is none (the common case)."""
    out, found = [], False
    for t in trace.turns:
        calls = [c for a in t.attempts for c in a.calls if c.parsed and c.call is not None]
        hits = {i: c.result for i, c in enumerate(calls) if is_timeout_result(c.result)}
        found = found or bool(hits)
        out.append(hits)
    return out if found else None


def replay_result(task: BFCLTask, result, call_format: str = "auto", call_timeout_s: float | None = 10.0) -> Trace:
    """Rebuild a trace from one ``bfcl generate`` result (``result[turn][step]``) by replaying it.

    ``call_format`` ``auto`` decodes each step by its form: a list/dict is an API model's decoded
    function-calling step, text with ``<tool_call>`` is Qwen-style JSON, other text is BFCL's Python list.
    """
    env = _replay(task, result, call_format, call_timeout_s)
    env.flush()
    return env.trace


def _replay(task: BFCLTask, result, call_format: str, call_timeout_s: float | None) -> BFCLEnv:
    """Decode and record a result entry. Its calls are queued, not run (a replay's messages do not depend
    on results): ``flush`` runs them, ``settle`` fills in outcomes obtained elsewhere."""
    env = BFCLEnv(task, call_format=call_format, call_timeout_s=call_timeout_s)
    env.reset()
    for k, steps in enumerate(result):
        for step in steps if isinstance(steps, list) else [steps]:
            env.feed(step, defer=True)
        if not env.done:
            env.advance()
    return env


def _judge_replayed(task: BFCLTask, env: BFCLEnv, strict_abstention: bool, call_timeout_s) -> Judgement:
    # The verifier's model path runs exactly the queued calls, in order, on fresh instances: its outcomes
    # are the replay's, so each call runs once on that path instead of once there and once in the replay.
    return _judge(task, env.trace, strict_abstention, call_timeout_s, replay=env)


def judge_result(task: BFCLTask, result, call_format: str = "auto", strict_abstention: bool = False,
                 call_timeout_s: float | None = 10.0) -> Judgement:
    """Official verdict and labels for one result entry, scored exactly as BFCL scores it.

    A result that is not a list (an inference-error string) fails as ``multi_turn:inference_error``; one
    whose turn count differs from the ground truth as ``multi_turn:force_terminated``. Both still get one
    label per ground-truth turn (turns the model never produced count as turns without a call).
    ``call_timeout_s``: the per-call time limit of the replay and the verifier (None: no limit, inline).
    """
    if not isinstance(result, list):
        env = _replay(task, [[] for _ in range(task.n_turns)], call_format, call_timeout_s)
        j = _judge_replayed(task, env, strict_abstention, call_timeout_s)
        j.valid, j.error_type, j.reward_valid = False, INFERENCE_ERROR, False
        return j
    n = task.n_turns
    short = len(result) != n
    padded = list(result[:n]) + [[] for _ in range(n - len(result))]
    env = _replay(task, padded, call_format, call_timeout_s)
    env.trace.force_terminated = short
    return _judge_replayed(task, env, strict_abstention, call_timeout_s)
