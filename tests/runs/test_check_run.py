"""``seal-verl check``'s weighted-advantage check (``seal_verl.runs.check``) on run folders written by the trainer's own
writer (``RunFolder``, ``runs.rows.trace_row``, ``runs.rows.step_row``, ``SealDriver``): a correct step passes; a step where the
weighting was skipped, misaligned (one rollout's weight on another) or applied before GRPO's group normalisation
fails, and so does a step without learning signal when a least share of non-zero advantages is asked for."""

from __future__ import annotations

import json
import os
import statistics

import pytest

from seal_verl.runs import check as CHECK
# (reward, labels, abstention) of two groups of four rollouts
GROUPS = {
    "g1": [(1.0, ["pass", "pass"], [False, False]),
           (0.0, ["argument_mismatch", "pass"], [False, False]),
           (0.0, ["missing_tool_call", "pass"], [False, True]),
           (1.0, ["pass", "pass"], [False, True])],
    "g2": [(0.0, ["invalid_tool_call", "state_mismatch"], [False, False]),
           (1.0, ["pass", "pass"], [False, False]),
           (0.0, ["pass", "spurious_tool_call"], [False, True]),
           (0.0, ["recovery_failure", "pass"], [False, False])],
}


def _grpo(rewards):
    m, s = statistics.fmean(rewards), statistics.stdev(rewards)
    return [(r - m) / (s + 1e-6) for r in rewards]


def _write_run(tmp_path, mutate=None, groups=GROUPS, active=()):
    from _step_rows import record, trained

    from seal_verl.core.profile import TrajectoryRecord, trajectory_profile
    from seal_verl.runs.rows import step_row, trace_row
    from seal_verl.verl_glue.config import parse_seal_config
    from seal_verl.verl_glue.driver import SealDriver

    run = tmp_path / "run"
    drv = SealDriver(parse_seal_config({"run_dir": str(run)}))
    rows, records = [], []
    for uid, members in groups.items():
        rewards = [r for r, _, _ in members]
        profiles = [trajectory_profile(lab, ab) for _, lab, ab in members]
        ws = [float(w) for w in drv.weights(profiles, 0)]
        grpo = _grpo(rewards)
        used = [w * a for w, a in zip(ws, grpo)]
        if mutate == "skipped":
            used = list(grpo)
        elif mutate == "misaligned":
            used = [ws[(i + 1) % len(ws)] * a for i, a in enumerate(grpo)]
        elif mutate == "before_normalisation":
            used = _grpo([w * r for w, r in zip(ws, rewards)])
        for i, (reward, labels, abst) in enumerate(members):
            extras = {"seal_labels": json.dumps(labels), "seal_abstention": json.dumps(abst), "score": reward,
                      "acc": reward, "seal_category": "multi_turn_base"}
            fields = {"seal_trace": json.dumps({"task_id": f"t_{uid}", "meta": {"interface_active": list(active)}}),
                      "task_id": f"t_{uid}", "seal_agent_loop": "seal_bfcl", "seal_cue_tokens": 0}
            rows.append(trained(key=f"{uid}_{i}", uid=uid, extras=extras, fields=fields, w=ws[i], advantage=used[i],
                                hint_in_text=False, grpo_advantage=grpo[i], advantage_range=(used[i], used[i])))
            records.append(TrajectoryRecord("multi_turn_base", labels, abst, reward))
    drv.add_records(records)
    drv.end_step(1)
    step = record(1, rows, drv.state_before, drv.state)
    drv.run_folder.write_traces(1, [trace_row(1, t) for t in step.trained])
    drv.run_folder.write_config({"seal": drv.cfg.to_dict()})
    drv.run_folder.append_metrics(step_row(step, seconds=1.0, metrics={}))
    return str(run)


def _weights_check(path, min_nonzero=0.25):
    run = CHECK.Run(path)
    rep = CHECK.Report()
    CHECK.check_weights(run, rep, None, min_nonzero)
    return rep.items[0]


def test_correct_weighting_passes(tmp_path):
    name, ok, detail = _weights_check(_write_run(tmp_path))
    assert ok, detail
    assert "w != 1" in detail and "non-zero GRPO advantage" in detail


@pytest.mark.parametrize("mutate", ["skipped", "misaligned", "before_normalisation"])
def test_broken_weighting_fails(tmp_path, mutate):
    name, ok, detail = _weights_check(_write_run(tmp_path, mutate))
    assert not ok, f"{mutate} was not caught: {detail}"
    assert "expected w x A" in detail


def test_no_learning_signal_fails_when_required(tmp_path):
    flat = {uid: [(0.0, lab, ab) for _, lab, ab in members] for uid, members in GROUPS.items()}
    name, ok, detail = _weights_check(_write_run(tmp_path, groups=flat))
    assert not ok and "no learning signal" in detail
    name, ok, detail = _weights_check(_write_run(tmp_path / "b", groups=flat), min_nonzero=0.0)
    assert ok, detail


def test_no_learning_signal_names_the_reward_and_the_cues_on(tmp_path):
    """A step where every group scored alike says whether all failed or all passed, and under which cue kinds:
    the first thing to look at when a policy stops passing once the closed loop switches a cue on."""
    failed = {uid: [(0.0, lab, ab) for _, lab, ab in members] for uid, members in GROUPS.items()}
    name, ok, detail = _weights_check(_write_run(tmp_path, groups=failed, active=["call_format"]))
    assert not ok and "mean reward 0.00, cue kinds on: call_format" in detail
    passed = {uid: [(1.0, ["pass", "pass"], ab) for _, _, ab in members] for uid, members in GROUPS.items()}
    name, ok, detail = _weights_check(_write_run(tmp_path / "b", groups=passed))
    assert not ok and "mean reward 1.00, cue kinds on: none" in detail


# ---- the sync check: did the update move the weights, and did the rollout follow them? ----

def _sync_row(step, grad=0.37, kl=1.7e-5, actor_vs_ref=None, rollout_vs_actor=1.9e-3, rollout_vs_ref=None):
    if actor_vs_ref is None:  # step 1 starts at the reference's weights; step 2 as measured (runs/cpu/seal)
        actor_vs_ref = 0.0 if step == 1 else 2.7e-3
    rollout_vs_ref = rollout_vs_actor + actor_vs_ref if rollout_vs_ref is None else rollout_vs_ref
    return {"global_step": step, "metrics": {
        "training/rollout_probs_diff_valid": 1, "training/rollout_probs_diff_mean": 2e-3,
        "training/rollout_actor_probs_pearson_corr": 0.99, "rollout_corr/k3_kl": 1e-4,
        "actor/grad_norm": grad, "actor/kl_loss": kl, "seal/sync/actor_vs_ref": actor_vs_ref,
        "seal/sync/rollout_vs_actor": rollout_vs_actor, "seal/sync/rollout_vs_ref": rollout_vs_ref}}


def _sync_check(rows, require_moving=True):
    from types import SimpleNamespace
    rep = CHECK.Report()
    CHECK.check_sync(SimpleNamespace(metrics=rows), rep, require_moving)
    return rep.items[0]


@pytest.mark.parametrize("rows, ok, says", [
    # a real one-step run: grad 0.37, and the KL after the first mini-batch's step scored exactly 0 in bf16
    ([_sync_row(1, kl=0.0)], True, "after every weight sync"),
    ([_sync_row(1), _sync_row(2, kl=4.9e-4)], True, "after every weight sync"),
    # the update computed no gradient, or a non-finite one (verl skips that optimizer step)
    ([_sync_row(1, grad=0.0)], False, "actor/grad_norm 0.0"),
    ([_sync_row(1, grad=float("nan"))], False, "actor/grad_norm nan"),
    ([_sync_row(1), _sync_row(2, grad=float("inf"))], False, "actor/grad_norm inf"),
    # a second step whose actor is still the reference: step 1's update was lost
    ([_sync_row(1), _sync_row(2, kl=0.0)], False, "step 2: actor/kl_loss 0.0"),
    ([_sync_row(1), _sync_row(2, actor_vs_ref=0.0)], False, "step 2: seal/sync/actor_vs_ref 0.0"),
    # the actor moved, the rollout kept the initial weights
    ([_sync_row(1), _sync_row(2, actor_vs_ref=2e-2, rollout_vs_actor=6e-3, rollout_vs_ref=1.9e-3)], False,
     "closer to the initial weights"),
])
def test_sync_requires_moving_weights_from_the_step_where_they_can_be_seen(rows, ok, says):
    name, passed, detail = _sync_check(rows)
    assert name == "sync" and passed is ok, detail
    assert says in detail


def test_sync_without_moving_weights_only_checks_the_agreement():
    name, passed, detail = _sync_check([_sync_row(1, grad=0.0, kl=0.0)], require_moving=False)
    assert passed, detail
    assert "the weights never moved" in detail


def _traces(*advantages_per_step):
    """traces rows of steps 1, 2, ...: one row per GRPO advantage given."""
    return {k: [{"grpo_advantage": a, "task_id": f"t{i}"} for i, a in enumerate(adv)]
            for k, adv in enumerate(advantages_per_step, start=1)}


def _sync_check_with(rows, traces, parent_rows=None):
    from types import SimpleNamespace
    rep = CHECK.Report()
    run = SimpleNamespace(metrics=rows, traces=traces)
    if parent_rows is None:
        CHECK.check_sync(run, rep, True)
    else:
        CHECK.check_sync(run, rep, True, SimpleNamespace(metrics=parent_rows))
    return rep.items[0]


FLAT = [0.0, 0.0, 0.0, 0.0]          # every group scored alike: no learning signal
MIXED = [0.87, -0.87, 0.87, -0.87]  # one group with both outcomes


@pytest.mark.parametrize("rows, traces, ok, says", [
    # a step whose groups all scored alike, actor at the reference: nothing to move, gradient 0 is right
    ([_sync_row(1, grad=0.0, kl=0.0)], _traces(FLAT), True, "step(s) 1 had no learning signal"),
    # ... and the next step too: its actor is still the reference (no earlier update moved it)
    ([_sync_row(1, grad=0.0, kl=0.0), _sync_row(2, grad=0.0, kl=0.0, actor_vs_ref=0.0)], _traces(FLAT, FLAT), True,
     "step(s) 1, 2 had no learning signal"),
    # the first step with signal after a flat one must move the weights; the step after it must start elsewhere
    ([_sync_row(1, grad=0.0, kl=0.0), _sync_row(2, kl=0.0, actor_vs_ref=0.0)], _traces(FLAT, MIXED), True,
     "after every weight sync"),
    ([_sync_row(1, grad=0.0, kl=0.0), _sync_row(2, grad=0.0, kl=0.0, actor_vs_ref=0.0)], _traces(FLAT, MIXED), False,
     "although the step had learning signal"),
    ([_sync_row(1), _sync_row(2, grad=0.0, kl=0.0, actor_vs_ref=0.0)], _traces(MIXED, FLAT), False,
     "step 2: actor/kl_loss 0.0"),
    # a NaN gradient fails with or without signal (verl skips that optimizer step)
    ([_sync_row(1, grad=float("nan"), kl=0.0)], _traces(FLAT), False, "actor/grad_norm nan"),
])
def test_sync_asks_for_movement_only_where_the_step_had_something_to_move(rows, traces, ok, says):
    """Whether a step has learning signal is up to what the model sampled (a partly right model's groups
    can all score alike at a step); the check must follow the step, not assume signal."""
    name, passed, detail = _sync_check_with(rows, traces)
    assert name == "sync" and passed is ok, detail
    assert says in detail


@pytest.mark.parametrize("parent_grad, ok", [(0.37, False), (0.0, True)])
def test_resumed_sync_knows_whether_the_parent_moved_the_weights(parent_grad, ok):
    """A resumed run's first step (global step 2) must start away from the reference only if the parent's update
    moved the weights."""
    rows = [_sync_row(2, grad=0.0, kl=0.0, actor_vs_ref=0.0)]
    name, passed, detail = _sync_check_with(rows, {2: [{"grpo_advantage": 0.0}] * 4},
                                            parent_rows=[_sync_row(1, grad=parent_grad, kl=0.0)])
    assert passed is ok, detail


# ---- the command: seal-verl check ----

def test_check_command_prints_every_check_and_fails_a_partial_run(tmp_path, capsys):
    """``seal-verl check`` on a folder the trainer's writer made: the weights pass, the checks that need what
    only a whole run leaves (exit record, console log, validation) fail, and the exit status says so."""
    from seal_verl.cli import main

    run = _write_run(tmp_path)
    assert main(["check", run, "--steps", "1", "--json", str(tmp_path / "out.json")]) == 1
    out = capsys.readouterr().out
    assert "[PASS] weights" in out and "[FAIL] exit" in out and "[FAIL] cues" in out
    saved = json.loads((tmp_path / "out.json").read_text())
    assert saved["ok"] is False and {c["name"] for c in saved["checks"]} >= {"exit", "steps", "state", "weights"}


def test_check_names_damaged_rows_instead_of_a_traceback(tmp_path, capsys):
    """A row that is not JSON (or a last line cut by a crash) is skipped, named in a failing ``files`` check, and
    the other checks still run on the rest."""
    from seal_verl.runs import folder as RF
    from seal_verl.cli import main

    run = _write_run(tmp_path)
    with open(os.path.join(run, RF.traces_name(1)), "a", encoding="utf-8") as f:
        f.write("{garbage\n")
    with open(os.path.join(run, RF.METRICS), "a", encoding="utf-8") as f:
        f.write('{"step": 2, "glob')
    assert main(["check", run]) == 1
    out = capsys.readouterr().out
    files = next(line for line in out.splitlines() if line.startswith("[FAIL] files"))
    assert f"skipped {os.path.join(run, RF.traces_name(1))}:9: not valid JSON" in files
    assert f"skipped {os.path.join(run, RF.METRICS)}:2: cut short" in files and "[PASS] weights" in out


@pytest.mark.parametrize("argv, says", [(["--min-nonzero", "2"], "--min-nonzero must be in [0, 1]"),
                                        ([], "No such file or directory")])
def test_check_usage_errors_are_one_line(argv, says, tmp_path, capsys):
    from seal_verl.cli import main

    assert main(["check", str(tmp_path / "missing"), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error") and says in err[0]


def test_rows_of_the_wrong_shape_fail_their_checks_not_the_command(tmp_path, capsys):
    """JSON rows that lack the writer's fields (a hand-edited file) make the checks that read them fail, each
    naming what was missing; the command still prints every line and exits 1."""
    from seal_verl.runs import folder as RF
    from seal_verl.cli import main

    run = tmp_path / "run"
    run.mkdir()
    (run / RF.METRICS).write_text(json.dumps({"step": 1, "metrics": {}}) + "\n")
    assert main(["check", str(run)]) == 1
    out = capsys.readouterr().out
    assert "[FAIL] steps    a row is not what the run folder's writer writes: KeyError: 'global_step'" in out
    assert "Traceback" not in out
