"""The console of a training run (seal_verl/runs/watch.py): one line per step, the validation after its step, and
files still being written are read without error."""

from __future__ import annotations

import io
import json
import os

import pytest

from seal_verl.runs.watch import Watcher, step_line, validation_lines


def _write(path, rows, torn: str = ""):
    with open(path, "a", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
        f.write(torn)


def _metrics(k, **kw):
    row = {"global_step": k, "prevalence": {"pass": 0.55, "correct_abstention": 0.2, "invalid_tool_call": 0.23},
           "active_during": ["call_format"] if k > 1 else [], "w_min": 1.0, "w_max": 1.5, "seconds": 88.4}
    row.update(kw)
    return row


def _traces(rewards, advantages):
    return [{"reward": r, "grpo_advantage": a, "excluded": False} for r, a in zip(rewards, advantages)]


def _val(k, scores):
    return [{"global_step": k, "task_id": f"multi_turn_{cat}_1", "score": s} for cat, s in scores.items()]


@pytest.mark.parametrize("rewards,advantages,share", [
    ([1, 0, 1, 0], [0.87, -0.87, 0.87, -0.87], "100%"),
    ([1, 1, 0, 0], [0.0, 0.0, 0.87, -0.87], "50%"),
    ([0, 0, 0, 0], [0.0, 0.0, 0.0, 0.0], "0%"),
])
def test_step_line(rewards, advantages, share):
    line = step_line(_metrics(2), _traces(rewards, advantages), total=4)
    mean = sum(rewards) / len(rewards)
    assert line.startswith(f"step 2/4  reward {mean:.2f}  pass {mean:.2f}  adv!=0 {share}  ")
    assert "labels ok .55 abst .20 inv .23" in line and "cues fmt" in line and "w 1.00-1.50" in line
    assert line.endswith("88 s")


def test_validation_lines_per_category():
    (line,) = validation_lines(_val(4, {"base": 0.5, "miss_func": 1.0, "miss_param": 1.0}))
    assert line == "validation at step 4 (greedy, no cues, 3 tasks): mean 0.83  base 0.50  miss_func 1.00  miss_param 1.00"


def test_validation_of_a_step_comes_after_its_step_line(tmp_path):
    """verl writes step k's validation before step k's metrics: the console still reads step, then validation."""
    run = str(tmp_path)
    out = io.StringIO()
    w = Watcher(run, None, 2, out=out, progress=False)
    _write(os.path.join(run, "val_traces.jsonl"), _val(0, {"base": 1.0}))
    w.poll()
    assert out.getvalue().splitlines() == ["validation at step 0 (greedy, no cues, 1 tasks): mean 1.00  base 1.00"]
    # step 1 validated, its metrics row not written yet: nothing new
    _write(os.path.join(run, "val_traces.jsonl"), _val(1, {"base": 0.5}))
    _write(os.path.join(run, "traces_step_1.jsonl"), _traces([1, 0], [0.7, -0.7]))
    w.poll()
    assert len(out.getvalue().splitlines()) == 1
    # a metrics row still being written is not read
    _write(os.path.join(run, "metrics.jsonl"), [], torn='{"global_step": 1, "prev')
    w.poll()
    assert len(out.getvalue().splitlines()) == 1
    with open(os.path.join(run, "metrics.jsonl"), "w", encoding="utf-8") as f:
        f.write(json.dumps(_metrics(1)) + "\n")
    w.poll()
    lines = out.getvalue().splitlines()
    assert [x.split("  ")[0] for x in lines] == ["validation at step 0 (greedy, no cues, 1 tasks): mean 1.00",
                                                 "step 1/2", "validation at step 1 (greedy, no cues, 1 tasks): mean 0.50"]
    # the last validation of a run that ended without its metrics row is printed at the end
    _write(os.path.join(run, "val_traces.jsonl"), _val(2, {"base": 1.0}))
    w.poll()
    assert len(out.getvalue().splitlines()) == 3
    w.poll(final=True)
    lines = out.getvalue().splitlines()
    assert lines[-2].startswith("validation at step 2 ")
    # and the held-out comparison: before the first step against after the last
    assert lines[-1] == ("validation without cues (greedy, 1 rollouts): 1.00 before the first step, 1.00 after step 2 "
                         "(+0.00)")
    w.poll(final=True)
    assert len(out.getvalue().splitlines()) == 5


# verl's start-up and first step, as its console prints them (colour codes included), shortened
LOG = """\x1b[36m(TaskRunnerV1 pid=11)\x1b[0m 2026-01-01 10:00:00,000\tINFO worker.py:2029 -- Started a local Ray instance.
\x1b[36m(vLLMHttpServer pid=12)\x1b[0m INFO:2026-01-01 10:00:05,000:vLLMHttpServer, replica_rank: 0, node_rank: 0
\x1b[36m(vLLMHttpServer pid=12)\x1b[0m INFO:2026-01-01 10:00:09,000:Initializing a V1 LLM engine with config: model='m'
\x1b[36m(TaskRunnerV1 pid=11)\x1b[0m INFO:2026-01-01 10:00:10,000:all initialize finished, ready to fit
\x1b[36m(WorkerDict pid=13)\x1b[0m INFO:2026-01-01 10:00:11,000:update_weights done, time cost: 1.11s
\x1b[36m(vLLMHttpServer pid=12)\x1b[0m (Worker pid=14) WARNING 01-01 10:00:11 [utils.py:333] Attempted to load weight
\x1b[36m(TaskRunnerV1 pid=11)\x1b[0m ("Initial validation metrics: {'val-aux/multi_turn_base/reward/mean@1': "
\x1b[36m(WorkerDict pid=13)\x1b[0m INFO:2026-01-01 10:01:00,000:update_weights done, time cost: 0.03s
\x1b[36m(vLLMHttpServer pid=12)\x1b[0m (Worker pid=14) WARNING 01-01 10:01:00 [utils.py:333] Attempted to load weight
"""


def test_phases_follow_the_run_and_never_go_back_to_the_server_start(tmp_path):
    """Every log line of the vLLM server's actor names it; only its start-up line means 'starting the server'."""
    log = tmp_path / "main_ppo.log"
    out = io.StringIO()
    w = Watcher(str(tmp_path), str(log), 2, out=out, progress=False)
    for line in LOG.splitlines(keepends=True):  # the log grows a line at a time
        with open(log, "a", encoding="utf-8") as f:
            f.write(line)
        w.poll()
    phases = [x.split("] ", 1)[1] for x in out.getvalue().splitlines()]
    assert phases == ["Ray started", "starting the vLLM server", "loading the model into vLLM", "workers ready",
                      "weights synced to vLLM", "validation", "weights synced to vLLM"]


# Ray's lines when its memory monitor killed workers (from a CPU run that had three trainings side by side)
OOM_LINES = [
    "\x1b[33m(raylet)\x1b[0m [2026-12-04 06:02:45,856 E 16804 16804] (raylet) node_manager.cc:3517: 5 Workers (tasks "
    "/ actors) killed due to memory pressure (OOM), 0 Workers crashed due to other reasons at node (ID: f687b2)",
    "ray.exceptions.OutOfMemoryError: 4 worker(s) were killed due to the node running low on memory. Memory on the "
    "node (IP: 192.0.2.2) was 22.23GB used / 23.54GB limit (0.944443)",
]


@pytest.mark.parametrize("line", OOM_LINES)
def test_workers_killed_for_memory_are_said_once(line, tmp_path):
    """A run whose rollout worker Ray killed waits forever: the console says so, once, not only verl's log."""
    log = tmp_path / "main_ppo.log"
    out = io.StringIO()
    w = Watcher(str(tmp_path), str(log), 4, out=out, progress=False)
    log.write_text(LOG.splitlines(keepends=True)[0] + line + "\n" + line + "\n", encoding="utf-8")
    w.poll()
    w.poll()
    warnings = [x for x in out.getvalue().splitlines() if "warning:" in x]
    assert len(warnings) == 1 and "killed workers for lack of memory" in warnings[0]


def test_a_step_far_longer_than_the_others_is_said_once_per_step(tmp_path):
    """No step for 3x the longest step so far (and at least STALL_MIN_S): one warning, naming the step."""
    from seal_verl.runs import watch as run_watch
    now = [1000.0]
    out = io.StringIO()
    w = Watcher(str(tmp_path), None, 4, out=out, progress=False, clock=lambda: now[0])
    w.poll()
    now[0] += 10 * run_watch.STALL_MIN_S  # before the first step nothing is judged (start-up varies)
    w.poll()
    _write(os.path.join(tmp_path, "metrics.jsonl"), [_metrics(1, seconds=200.0)])
    w.poll()
    now[0] += 3 * 200.0 - 1  # inside the limit
    w.poll()
    assert "warning" not in out.getvalue()
    now[0] += 2
    w.poll()
    w.poll()
    warnings = [x for x in out.getvalue().splitlines() if "warning:" in x]
    assert len(warnings) == 1 and "no step 2 after 601 s" in warnings[0] and "200 s" in warnings[0]
    # the next step comes: the clock restarts, and a later stall of step 3 is said again
    _write(os.path.join(tmp_path, "metrics.jsonl"), [_metrics(2, seconds=100.0)])
    w.poll()
    now[0] += 601
    w.poll()
    assert [x for x in out.getvalue().splitlines() if "warning:" in x][1].split("warning: ")[1].startswith("no step 3")


def test_short_steps_are_not_called_stalled_before_the_minimum(tmp_path):
    from seal_verl.runs import watch as run_watch
    now = [0.0]
    out = io.StringIO()
    w = Watcher(str(tmp_path), None, 4, out=out, progress=False, clock=lambda: now[0])
    _write(os.path.join(tmp_path, "metrics.jsonl"), [_metrics(1, seconds=10.0)])
    w.poll()
    now[0] += run_watch.STALL_MIN_S - 1  # 29 x the step, under the minimum
    w.poll()
    assert "warning" not in out.getvalue()


def test_a_damaged_row_is_said_once_and_the_next_rows_still_shown(tmp_path):
    """A complete line that is not JSON is skipped with one warning; the steps after it are printed."""
    out = io.StringIO()
    w = Watcher(str(tmp_path), None, 3, out=out, progress=False)
    _write(os.path.join(tmp_path, "metrics.jsonl"), [_metrics(1)], torn="{broken\n")
    _write(os.path.join(tmp_path, "metrics.jsonl"), [_metrics(2)])
    w.poll()
    w.poll()
    lines = out.getvalue().splitlines()
    assert [x.split("  ")[0] for x in lines if not x.startswith("[")] == ["step 1/3", "step 2/3"]
    warnings = [x for x in lines if "warning:" in x]
    assert len(warnings) == 1 and "metrics.jsonl:2: not valid JSON" in warnings[0]
