"""BFCL multi-turn verification with BFCL's exact semantics, on safe execution, with per-turn evidence.

The official checker (``bfcl_eval...multi_turn_checker``) replays the model's decoded calls and the ground
truth turn by turn on separate instances, skips turns whose ground truth is empty, compares every public
attribute of every involved instance, then requires the turn's ground-truth results to be a multiset subset
of all model results so far, and stops at the first failing turn. :func:`verify` returns that same verdict
(``valid``, ``error_type``, ``failed_turn``) and, for SEAL's diagnosis, evidence for *every* turn:

- up to and including the first failing turn, the evidence is the official cumulative judgement;
- after it, each turn is judged counterfactually: the model's calls of that turn replayed on a copy of the
  ground-truth state at the start of the turn, so one early mistake does not mark every later turn.

No check runs on instances another check has mutated: the cumulative model path, the ground-truth path and
every counterfactual copy are separate objects. Calls are executed by :class:`~.backends.Backends`, never by
``eval``.
"""

from __future__ import annotations

import copy
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field

from ..sandbox import faults
from ..tools.backends import Backends, timeout_text
from .tasks import BFCLTask

EMPTY_TURN = "multi_turn:empty_turn_model_response"
STATE_MISMATCH = "multi_turn:instance_state_mismatch"
RESPONSE_MISMATCH = "multi_turn:execution_response_mismatch"
FORCE_TERMINATED = "multi_turn:force_terminated"
INFERENCE_ERROR = "multi_turn:inference_error"
SPURIOUS_CALL = "multi_turn:abstention_violated"  # only under strict abstention
CHECKER_ERROR = "checker_error"


@dataclass
class TurnEvidence:
    """What the verifier found for one ground-truth turn.

    ``checked`` is false for abstention turns (empty ground truth) that the official score skips.
    ``counterfactual`` is true when the turn was judged from the ground-truth state at its start.
    ``model_calls``: the decoded call strings of the turn; ``model_results``: their results (as replayed for
    this judgement); ``missing_results``: ground-truth results absent from the model's results.
    ``state_diff``: ``{class: [attribute, ...]}`` of differing public attributes.
    """

    index: int
    abstention: bool
    gt_calls: list = field(default_factory=list)
    model_calls: list = field(default_factory=list)
    model_results: list = field(default_factory=list)
    gt_results: list = field(default_factory=list)
    checked: bool = True
    counterfactual: bool = False
    empty: bool = False
    state_ok: bool = True
    response_ok: bool = True
    state_diff: dict = field(default_factory=dict)
    missing_results: list = field(default_factory=list)
    checker_error: str = ""

    @property
    def passed(self) -> bool:
        return not self.checker_error and (not self.checked or (not self.empty and self.state_ok and self.response_ok))


@dataclass
class Verdict:
    """The task-level verdict (official semantics unless ``strict_abstention``) and per-turn evidence."""

    valid: bool
    error_type: str = ""
    failed_turn: int | None = None
    turns: list = field(default_factory=list)  # list[TurnEvidence]


def _compare(model: Backends, gt_state: dict) -> dict:
    """BFCL's state check: every public attribute of each ground-truth instance must equal the model's.
    ``gt_state``: ``{class: {attribute: value}}``, the ground-truth instances' public attributes."""
    diff: dict[str, list[str]] = {}
    for class_name, attrs in gt_state.items():
        model_inst = model.instances[class_name]
        for attr, value in attrs.items():
            if getattr(model_inst, attr) != value:
                diff.setdefault(class_name, []).append(attr)
    return diff


def _public(backends: Backends) -> dict:
    """The live public attributes of every instance (what :func:`_compare` reads), not copied."""
    return {name: {a: v for a, v in vars(inst).items() if not a.startswith("_")}
            for name, inst in backends.instances.items()}


class _GroundTruthPath:
    """The ground-truth path of one task, run once: per turn, its calls' results and a deep copy of the
    instances' public attributes after the turn, or the error that stopped the turn.

    BFCL's checker replays the ground truth next to every trajectory it judges; the path does not depend on
    the trajectory (its calls are fixed, the backends deterministic: their random generators are per
    instance and seeded, and the two calls that set a process-wide precision set it themselves before they
    compute), so a judge keeps it per task (see :func:`ground_truth_path`) and compares each trajectory with
    the copies. The copies compare exactly as the live attributes did: a deep copy keeps the values of
    immutable atoms (floats included) and rebuilds containers equal to the originals."""

    __slots__ = ("turns",)

    def __init__(self, task: BFCLTask):
        gt = Backends(task.involved_classes, task.initial_config, task.long_context, None)
        self.turns: list = []
        broken = ""
        for k in range(task.n_turns):
            if broken:
                self.turns.append(broken)
                continue
            try:
                results = [gt.execute(c)[0] for c in task.ground_truth[k]]
                self.turns.append((results, copy.deepcopy(_public(gt))))
            except Exception as exc:  # noqa: BLE001 - this turn and every later one fail with the reason
                broken = f"{type(exc).__name__}: {exc}"[:500]
                self.turns.append(broken)


#: Ground-truth paths kept per process (least recently used dropped first): a training batch's tasks, or a
#: result file's tasks judged entry by entry. A BFCL state pickles to 5 KB on average, 20 KB at most (the
#: long-context ones), so even a 6-turn path of the largest weighs about 120 KB and all kept ones at most ~15 MB.
MAX_GROUND_TRUTH_PATHS = 128
_GT_PATHS: OrderedDict = OrderedDict()
_GT_LOCK = threading.Lock()


def ground_truth_path(task: BFCLTask) -> _GroundTruthPath:
    """This task object's ground-truth path, run on first use and kept (see ``MAX_GROUND_TRUTH_PATHS``)."""
    if faults.at("judge", "ground_truth", task.id) == "exit":
        faults.die()
    key = id(task)
    with _GT_LOCK:
        hit = _GT_PATHS.get(key)
        if hit is not None and hit[0]() is task:
            _GT_PATHS.move_to_end(key)
            return hit[1]
    path = _GroundTruthPath(task)
    with _GT_LOCK:
        _GT_PATHS[key] = (weakref.ref(task), path)
        _GT_PATHS.move_to_end(key)
        while len(_GT_PATHS) > MAX_GROUND_TRUTH_PATHS:
            _GT_PATHS.popitem(last=False)
    return path


def _missing(gt_results: list, model_results: list) -> list:
    """Ground-truth results not covered by the model's results (multiset, order-free)."""
    pool = list(model_results)
    missing = []
    for item in gt_results:
        try:
            pool.remove(item)
        except ValueError:
            missing.append(item)
    return missing


def _ground_truth_state(task: BFCLTask, gt_calls_so_far: list, call_timeout_s: float | None) -> Backends:
    """The ground-truth state at the start of a turn, on fresh instances, for a counterfactual judgement.

    Rebuilt by replaying the ground-truth calls of the earlier turns rather than deep-copying the
    ground-truth path: the backends are deterministic (their random generators are per instance and
    seeded), so the public state, the generators and every later result are the same, and building plus
    replaying costs a fraction of copying (several times less for long-context states). The replay runs
    inline (ground-truth calls only); the model's calls on the result get ``call_timeout_s``.
    """
    b = Backends(task.involved_classes, task.initial_config, task.long_context, None)
    for c in gt_calls_so_far:
        b.execute(c)
    b.call_timeout_s = call_timeout_s
    return b


def _run_model_calls(backends: Backends, calls: list, timed_out: dict, call_timeout_s: float | None,
                     on_call=None, where: tuple = ()) -> list:
    """Run the model's calls of one turn; a call the rollout recorded as stopped at its time limit is not
    run again (the isolated rollout dropped its effects: see the sandbox) and gets the rollout's error.

    ``on_call``, if given, is told ``where + (position,)`` and the call before each call starts and None when
    it ended:
    a judge worker reports it to the process that enforces the time limit (see ``isolated_verify``)."""
    if not timed_out and on_call is None:
        return backends.execute_many(calls)
    out: list = [None] * len(calls)
    run = [i for i in range(len(calls)) if i not in timed_out]
    if on_call is None:
        for i, r in zip(run, backends.execute_many([calls[i] for i in run])):
            out[i] = r
    else:
        for i in run:
            on_call(where + (i,), calls[i])
            out[i] = backends.execute(calls[i])
            on_call(None)
    for i, text in timed_out.items():
        if i < len(calls):
            if not isinstance(text, str):
                text = timeout_text(calls[i].split("(", 1)[0].strip(), call_timeout_s or 0)
            out[i] = (text, True, True)
    return out


def verify(task: BFCLTask, decoded: list, strict_abstention: bool = False, attempted: list | None = None,
           call_timeout_s: float | None = 10.0, model_outcomes: list | None = None,
           timed_out: list | None = None, on_call=None) -> Verdict:
    """Verify a model's decoded calls for ``task``.

    Args:
        task: the BFCL task.
        decoded: per turn, per step, the decoded call strings (steps without calls already dropped), as
            BFCL's evaluation builds it. Must have one entry per ground-truth turn.
        strict_abstention: also fail the task when the model attempted a call on an abstention turn (the
            official score does not; the training reward may).
        attempted: per turn, whether any tool-call attempt (decodable or not) happened; used only with
            ``strict_abstention``. Defaults to "decoded calls exist".
        call_timeout_s: per-call time limit for replayed calls.
        model_outcomes: if a list is given, it receives per turn the ``(text, is_error, executed)`` outcomes
            of the model's calls on the cumulative model path (fresh instances, the calls in order: what an
            environment replaying the same calls would get). ``judge_result`` uses them instead of running
            every call a second time in its replay.
        timed_out: per turn, ``{position: recorded error text}`` for the calls (positions in the turn's
            flattened calls) the rollout recorded as stopped at their time limit; they are not run again (a
            call that overran once would stall the verifier too) and get the rollout's error text (a
            position mapped to None gets the standard time-limit text).
        on_call: run every model call inline (no time limit here) and report ``("model"|"cf", turn,
            position)`` before each and None after it: the judge worker's hook; the time limit is then enforced by the
            process that watches the worker (``isolated_verify``).
    """
    n = task.n_turns
    if len(decoded) != n:
        raise ValueError(f"{task.id}: {len(decoded)} decoded turns for {n} ground-truth turns")
    limit = None if on_call is not None else call_timeout_s  # a watched worker runs the calls inline
    model = Backends(task.involved_classes, task.initial_config, task.long_context, limit)
    # The ground-truth path runs only BFCL's own ground-truth calls, inline (no worker-thread hand-off of a
    # time limit), once per task (see ground_truth_path); the rebuilt ground-truth states on which model calls
    # are replayed counterfactually keep the model's limit.
    gt_path = ground_truth_path(task).turns
    gt_history: list[str] = []  # the ground-truth calls of the turns so far
    all_model_results: list[str] = []
    verdict = Verdict(valid=True)
    for k in range(n):
        gt_calls = list(task.ground_truth[k])
        steps = [s for s in decoded[k] if s]
        flat = [c for s in steps for c in s]
        ev = TurnEvidence(index=k, abstention=not gt_calls, gt_calls=gt_calls, model_calls=flat)
        verdict.turns.append(ev)
        try:
            skip = dict(timed_out[k]) if timed_out is not None and k < len(timed_out) else {}
            outcomes = _run_model_calls(model, flat, skip, call_timeout_s, on_call, ("model", k))
            if model_outcomes is not None:
                model_outcomes.append(outcomes)
            results = [r[0] for r in outcomes]
            judged_cf = verdict.failed_turn is not None and bool(gt_calls)
            gt_start = _ground_truth_state(task, gt_history, limit) if judged_cf else None
            if isinstance(gt_path[k], str):
                raise RuntimeError(f"the ground truth failed: {gt_path[k]}")
            gt_results, gt_state = gt_path[k]
            ev.gt_results = list(gt_results)
            gt_history.extend(gt_calls)
            prior = list(all_model_results)
            all_model_results.extend(results)
            ev.model_results = results
            if not gt_calls:
                ev.checked = False
                tried = (attempted[k] if attempted is not None else bool(flat))
                if strict_abstention and tried and verdict.failed_turn is None:
                    verdict.valid, verdict.error_type, verdict.failed_turn = False, SPURIOUS_CALL, k
                continue
            if judged_cf:
                ev.counterfactual = True
                ev.model_results = [r[0] for r in _run_model_calls(gt_start, flat, skip, call_timeout_s, on_call,
                                                                   ("cf", k))]
                compare_to, so_far = gt_start, prior + ev.model_results
            else:
                compare_to, so_far = model, all_model_results
            if not steps:
                ev.empty = True
            ev.state_diff = _compare(compare_to, gt_state)
            ev.state_ok = not ev.state_diff
            ev.missing_results = _missing(ev.gt_results, so_far)
            ev.response_ok = not ev.missing_results
            if verdict.failed_turn is None and not ev.passed:
                verdict.valid = False
                verdict.failed_turn = k
                verdict.error_type = EMPTY_TURN if ev.empty else (STATE_MISMATCH if not ev.state_ok else RESPONSE_MISMATCH)
        except Exception as exc:  # noqa: BLE001 - a verifier failure is recorded, never raised into training
            ev.checker_error = f"{type(exc).__name__}: {exc}"[:500]
            if verdict.failed_turn is None:
                verdict.valid, verdict.error_type, verdict.failed_turn = False, CHECKER_ERROR, k
    return verdict


@dataclass(frozen=True)
class Judged:
    """One judgement of a trajectory: the official verdict, the verdict under the training semantics and the
    model path's outcomes. Never half-empty: both verdicts are always there (a judgement that could not finish
    is :meth:`checker_error`, whose two verdicts are the same checker-error verdict), so no caller needs a
    special case to read it."""

    official: Verdict
    verdict: Verdict
    outcomes: list | None = None
    #: Why the judgement as a whole could not finish ("" when it did; single turns may still hold errors).
    error: str = ""

    def __post_init__(self):
        if not isinstance(self.official, Verdict) or not isinstance(self.verdict, Verdict):
            raise TypeError("a judgement needs both verdicts")

    @classmethod
    def checker_error(cls, task: BFCLTask, decoded: list, why: str) -> "Judged":
        """The judgement that could not finish: every turn a checker error carrying ``why``, no outcomes."""
        why = why[:500] or "the judgement failed"
        v = failed_verdict(task, decoded, why)
        return cls(v, v, None, why)

    @property
    def failed(self) -> bool:
        """Whether the judgement as a whole failed (no turn was judged)."""
        return bool(self.error)

    def __iter__(self):  # so that ``official, verdict, outcomes = judged`` unpacks it
        return iter((self.official, self.verdict, self.outcomes))


def judge_job(task: BFCLTask, decoded: list, attempted: list, strict_abstention: bool,
              call_timeout_s: float | None, timed_out: list | None, want_outcomes: bool,
              on_call=None) -> Judged:
    """The official verdict and, with ``strict_abstention``, the training verdict of one trajectory, as a
    :class:`Judged`. One unit of work, so that a judge worker does it in one request (``isolated_verify``);
    in-process with ``on_call=None``.

    The strict verdict replays the trajectory a second time only when an abstention turn with an attempt
    comes before the official failure (otherwise both verdicts are the same)."""
    outcomes: list | None = [] if want_outcomes else None
    official = verify(task, decoded, strict_abstention=False, call_timeout_s=call_timeout_s,
                      model_outcomes=outcomes, timed_out=timed_out, on_call=on_call)
    verdict = official
    if strict_abstention:
        strict_fail = next((k for k, ev in enumerate(official.turns) if ev.abstention and attempted[k]), None)
        if strict_fail is not None and (official.failed_turn is None or strict_fail < official.failed_turn):
            verdict = verify(task, decoded, strict_abstention=True, attempted=attempted,
                             call_timeout_s=call_timeout_s, timed_out=timed_out, on_call=on_call)
    return Judged(official, verdict, outcomes)


def failed_verdict(task: BFCLTask, decoded: list, why: str) -> Verdict:
    """A checker-error verdict, every turn carrying ``why``: what a judgement that could not finish gives."""
    turns = []
    for k in range(task.n_turns):
        gt_calls = list(task.ground_truth[k])
        flat = [c for s in (decoded[k] if k < len(decoded) else []) if s for c in s]
        turns.append(TurnEvidence(index=k, abstention=not gt_calls, gt_calls=gt_calls, model_calls=flat,
                                  checker_error=why[:500]))
    return Verdict(valid=False, error_type=CHECKER_ERROR, failed_turn=0, turns=turns)


def to_wire(verdict: Verdict) -> tuple:
    """A verdict as plain tuples, for the pipe from a judge worker: its per-turn flags and differences
    (everything Psi's checks read), without the call and result lists (several times cheaper to send)."""
    return (verdict.valid, verdict.error_type, verdict.failed_turn,
            [(e.index, e.abstention, e.gt_calls, e.checked, e.counterfactual, e.empty, e.state_ok, e.response_ok,
              e.state_diff, e.checker_error) for e in verdict.turns])


def from_wire(wire: tuple) -> Verdict:
    """The inverse of :func:`to_wire` (the result lists stay empty)."""
    valid, error_type, failed_turn, turns = wire
    return Verdict(valid=valid, error_type=error_type, failed_turn=failed_turn, turns=[
        TurnEvidence(index=i, abstention=a, gt_calls=g, checked=c, counterfactual=cf, empty=em, state_ok=so,
                     response_ok=ro, state_diff=sd, checker_error=ce)
        for i, a, g, c, cf, em, so, ro, sd, ce in turns])
