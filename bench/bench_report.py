"""Benchmark: ``seal-verl report`` on a long run, in numbers (see ``seal_verl/runs/report.py``).

Writes a synthetic run folder of ``--steps`` training steps with the run folder's own writer
(``seal_verl.runs.folder.RunFolder``, the rows ``seal_verl.runs.rows`` builds), then times reading it
(``load_run``) and the whole report (``build_report``: the PNGs and the page) and prints this process's peak
resident memory. CPU time is printed beside wall time because the wall time depends on what else the machine
runs. Also prints the size of a closed-loop state after as many steps (its history keeps the last
``loop.HISTORY_WINDOW`` rows; ``python -m bench.bench_state`` sets it against a state that keeps them all).

    python -m bench.bench_report                 # 10,000 steps, 8 rollouts each
    python -m bench.bench_report --steps 1000
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time


CATEGORIES = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context")


def write_run(path: str, steps: int, rollouts: int, val_every: int, probe_every: int) -> None:
    """A training run folder of ``steps`` steps whose rows have the shapes the trainer writes."""
    from seal_verl.core import extras as X
    from seal_verl.core import taxonomy as tx
    from seal_verl.core.diagnosis import Diagnosis
    from seal_verl.core.interface import InterfaceConfig
    from seal_verl.core.loop import ClosedLoopState, SealSwitches
    from seal_verl.core.step_record import Rollout, StepRecord, Trained, Update
    from seal_verl.core.weighting import WeightingConfig
    from seal_verl.runs import folder as RF
    from seal_verl.runs.rows import step_row, trace_row, val_row

    folder = RF.RunFolder(path)
    folder.write_config({"seal": {"switches": {"env_side": True, "reweighting": True, "closed_loop": True}}})
    state = ClosedLoopState.initial(SealSwitches(), InterfaceConfig(), WeightingConfig())
    labels = ["pass", "argument_mismatch", "state_mismatch"]
    for k in range(1, steps + 1):
        trained = []
        for i in range(rollouts):
            cat = CATEGORIES[i % len(CATEGORIES)]
            n = 1 + (k + i) % 3
            grade = X.decode(X.encode(Diagnosis(labels=labels[:n], abstention=[False] * n), score=float((k + i) % 2),
                                      acc=float((k + i) % 2), category=cat, task_id=f"{cat}_{i}", cue_tokens=7))
            rollout = Rollout(index=i, key=f"{k}_{i}", uid=str(i), grade=grade, task_id=f"{cat}_{i}",
                              agent_loop="seal_bfcl", cue_tokens=7, hint_in_text=False,
                              trace={"task_id": f"{cat}_{i}", "meta": {"interface_active": []}})
            trained.append(Trained(rollout, Update(w=0.5 + (k * i % 7) / 4, grpo_advantage=0.1, advantage=0.1,
                                                   advantage_range=None, excluded=False)))
        record = StepRecord(step=k, trained=tuple(trained), state_before=state, state_after=state)
        folder.write_traces(k, [trace_row(k, t) for t in record.trained])
        metrics = {f"seal/prevalence_by_category/{c}/{key}": 0.1 for c in CATEGORIES for key in tx.PROFILE_KEYS}
        metrics.update({f"seal/cue_active/{kind}": float(k % 2) for kind in ("call_format", "error_recovery")})
        effect = None
        if probe_every and k % probe_every == 0:
            effect = {"confidence": 0.95, "effects": {"all": {"with": 0.6, "without": 0.4, "diff": 0.2, "lo": -0.1,
                                                              "hi": 0.5, "n_with": 8, "n_without": 8}}}
        row = step_row(record, seconds=1.0, metrics=metrics, cue_effect=effect)
        row["prevalence"] = {key: 0.1 for key in tx.PROFILE_KEYS}
        folder.append_metrics(row)
        if val_every and k % val_every == 0:
            folder.append_val([val_row(global_step=k, key=str(j), reward_extras={X.ACC: float(j % 2)},
                                       extra_fields={X.ROW_TASK_ID: f"{CATEGORIES[j % 4]}_{j}", X.TRACE: "{}"},
                                       score=float(j % 2), hint_in_text=False) for j in range(16)])


def state_size(steps: int) -> int:
    """Bytes of a closed-loop state file after ``steps`` steps of the loop (the last rows of its history)."""
    from seal_verl.core.interface import InterfaceConfig
    from seal_verl.core.loop import HISTORY_WINDOW, SealSwitches, closed_loop_step, initial
    from seal_verl.core.profile import TrajectoryRecord
    from seal_verl.core.weighting import WeightingConfig

    sw, icfg, wcfg = SealSwitches(), InterfaceConfig(), WeightingConfig()
    state = initial(sw, icfg, wcfg)
    rec = [TrajectoryRecord(labels=["pass", "argument_mismatch"], abstention=[False, False],
                            category="multi_turn_base", reward=0.5)]
    state, _ = closed_loop_step(state, rec, sw, icfg, wcfg)
    row = state.history[-1]
    state.history_start = max(0, steps - HISTORY_WINDOW)
    state.history = [dict(row, step=i) for i in range(state.history_start, steps)]
    return len(json.dumps(state.to_dict(), indent=1, sort_keys=True))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=10_000)
    p.add_argument("--rollouts", type=int, default=8)
    p.add_argument("--val-every", type=int, default=500)
    p.add_argument("--probe-every", type=int, default=5)
    args = p.parse_args()
    from seal_verl.runs.report import build_report, load_run

    with tempfile.TemporaryDirectory(prefix="seal-report-bench-") as tmp:
        run = os.path.join(tmp, "run")
        t0 = time.perf_counter()
        write_run(run, args.steps, args.rollouts, args.val_every, args.probe_every)
        wrote = time.perf_counter() - t0
        size = sum(os.path.getsize(os.path.join(run, f)) for f in os.listdir(run))
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        t0, c0 = time.perf_counter(), time.process_time()
        loaded = load_run(run)
        read, read_cpu = time.perf_counter() - t0, time.process_time() - c0
        t0, c0 = time.perf_counter(), time.process_time()
        rep = build_report([run], os.path.join(tmp, "out"))
        whole, whole_cpu = time.perf_counter() - t0, time.process_time() - c0
        rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        page = os.path.getsize(rep.html)
    print(f"steps {args.steps}, rollouts/step {args.rollouts}: folder {size / 1e6:.1f} MB written in {wrote:.1f} s")
    print(f"load_run: {read:.1f} s wall, {read_cpu:.1f} s CPU ({len(loaded.steps)} steps, "
          f"{sum(len(w) for w in loaded.weights.values())} weights, {len(loaded.validation)} validations)")
    print(f"build_report: {whole:.1f} s wall, {whole_cpu:.1f} s CPU, {len(rep.pngs)} PNGs, page {page / 1e6:.2f} MB, {len(rep.warnings)} warnings")
    print(f"peak RSS: {rss0 / 1024:.0f} MB before reading, {rss1 / 1024:.0f} MB after the report")
    print(f"one closed-loop state file after {args.steps} steps: {state_size(args.steps) / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
