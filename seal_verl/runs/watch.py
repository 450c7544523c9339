"""Follow a training run from its run folder: a progress bar, the start-up phase, one line per step.

    python -m seal_verl.runs.watch RUN_DIR [--log LOG] [--steps N] [--pid PID]

verl's console output is long (the resolved config, one very long metrics line per step, the warnings of every
worker); the run scripts send it to a log in the run folder and run this next to it. It reads only files,
through ``seal_verl.runs.folder``: the step rows and their rollouts (written by the SEAL trainer after each step),
the validation rows (every validation) and the log (for the start-up phase), and prints per training step

    step 3/8  reward 0.44  pass 0.44  adv!=0 81%  labels ok .62 arg .12 miss .08 ...  cues fmt,schema  w 0.78-1.63  41 s

(mean reward, share of rollouts that passed, share of rollouts with a non-zero GRPO advantage, the label mix of
the step, the cue kinds the rollouts ran under, the range of the SEAL weights) and, after each validation, the
accuracy per category. It says when the cue-effect probe retired a cue kind (``seal.cue_effect.retire``), and
once, as soon as the run's ``config.json`` is there, a setting beyond the paper under ``preset=paper`` and any
fault injection the run was started with. It warns, once, when Ray's memory monitor killed workers (a verl run
that lost a rollout worker waits forever instead of failing), when a step takes far longer than every step
before it, when the steps go back (two runs writing into one folder), and when a row is damaged (a row still
being written is simply read on the next poll). It stops
when the process ``--pid`` is gone (or on Ctrl-C) and never touches the run.
No verl import: it works on any run folder, also one copied off a GPU cluster.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections import defaultdict
from typing import Optional

from seal_verl.runs import folder as RF
from seal_verl.core.cue_effect import short_line
from seal_verl.core.interface import SHORT_NAMES

#: log line pattern -> phase shown next to the progress bar (the last one seen wins)
PHASES = (
    (re.compile(r"Started a local Ray instance|Connected to Ray cluster"), "Ray started"),
    # the server's own start-up line; every later line of that actor (weight loads, warnings) also names it
    (re.compile(r"vLLMHttpServer, replica_rank"), "starting the vLLM server"),
    (re.compile(r"Initializing a V1 LLM engine"), "loading the model into vLLM"),
    (re.compile(r"all initialize finished, ready to fit"), "workers ready"),
    (re.compile(r"update_weights done"), "weights synced to vLLM"),
    (re.compile(r"pending: \d+, running: (\d+), finished: (\d+)"), "rollouts"),
    (re.compile(r"Initial validation metrics|validation generation end"), "validation"),
    (re.compile(r"Final validation metrics"), "final validation"),
)

#: Ray's lines when its memory monitor killed workers. A verl run that lost a rollout worker this way does not fail:
#: its agent loop waits for the lost rollouts forever (``running: 8, finished: 0`` every minute)
OOM_KILL = re.compile(r"killed due to memory pressure|killed due to the node running low on memory")
#: a step is called stalled after this many times the longest step so far, and never before STALL_MIN_S
STALL_FACTOR = 3.0
STALL_MIN_S = 300.0

SHORT_LABELS = (("pass", "ok"), ("correct_abstention", "abst"), ("invalid_tool_call", "inv"),
                ("argument_mismatch", "arg"), ("state_mismatch", "state"), ("recovery_failure", "recov"),
                ("missing_tool_call", "miss"), ("response_mismatch", "resp"), ("spurious_tool_call", "spur"))
SHORT_KINDS = SHORT_NAMES


def _kinds(kinds) -> str:
    return ",".join(SHORT_KINDS.get(k, k) for k in kinds or []) or "-"


def step_line(row: dict, traces: list[dict], total: Optional[int] = None) -> str:
    """The console line of one training step (its step row and its rollouts' rows)."""
    k = int(row.get("global_step", row.get("step", 0)))
    rewards = [float(t["reward"]) for t in traces if t.get("reward") is not None]
    reward = sum(rewards) / len(rewards) if rewards else float("nan")
    passed = sum(1 for r in rewards if r >= 1.0) / len(rewards) if rewards else float("nan")
    grpo = [t.get("grpo_advantage") for t in traces if not t.get("excluded")]
    nonzero = sum(1 for a in grpo if a is not None and abs(float(a)) > 1e-6)
    prev = row.get("prevalence") or {}
    mix = " ".join(f"{short} {prev[key]:.2f}".replace(" 0.", " .") for key, short in SHORT_LABELS
                   if prev.get(key, 0.0) >= 0.005)
    w = ""
    if row.get("w_min") is not None:
        w = f"  w {row['w_min']:.2f}-{row['w_max']:.2f}"
    secs = f"  {row['seconds']:.0f} s" if row.get("seconds") is not None else ""
    excluded = sum(1 for t in traces if t.get("excluded"))
    return (f"step {k}{'/' + str(total) if total else ''}  reward {reward:.2f}  pass {passed:.2f}  "
            f"adv!=0 {nonzero / max(1, len(traces)):.0%}  labels {mix or '-'}  "
            f"cues {_kinds(row.get('active_during'))}{w}{secs}"
            + (f"  ({excluded} excluded: checker error)" if excluded else "")
            + _cue_effect(row.get("cue_effect")))


def _cue_effect(probe) -> str:
    """``  effect all +.25 [-.05,+.50] fmt ...`` on a step that ran the cue-effect probe (its rollouts are not
    in the step's reward: they are measured, never trained on)."""
    if not isinstance(probe, dict) or not isinstance(probe.get("effects"), dict) or not probe["effects"]:
        return ""
    try:
        return "  " + short_line(probe["effects"])
    except (KeyError, TypeError, ValueError):  # a damaged row: the line without it
        return ""


def retired_line(row: dict) -> Optional[str]:
    """The line saying that a step's cue-effect probe retired cue kinds, or None."""
    probe = row.get("cue_effect")
    kinds = probe.get("retired") if isinstance(probe, dict) else None
    if not kinds or not isinstance(kinds, list):
        return None
    k = row.get("global_step", row.get("step"))
    return (f"step {k}: the cue-effect probe retired {', '.join(map(str, kinds))} (its effect stayed below zero, "
            "interval and all, on the probes in a row the run asks for): off for the rest of the run")


def config_lines(config: dict) -> list[str]:
    """What a run's ``config.json`` says that the console must say at its start: fault injection (its numbers
    are not a model's) and settings beyond the paper under ``preset=paper``."""
    from seal_verl.core.settings import SealSettings, paper_departures

    out = [f"fault injection on: {name}={value} (results are changed on purpose)"
           for name, value in sorted((config.get(RF.FAULT_SETTINGS) or {}).items())]
    try:
        out += paper_departures(SealSettings.from_dict(config.get("seal")), config.get("preset"))
    except ValueError:
        pass  # a config the run itself refused: the run says so
    return out


def validation_lines(rows: list[dict]) -> list[str]:
    """Accuracy per category of each validation (validation rows grouped by global step)."""
    by_step: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        cat = str(r.get("task_id", "")).rsplit("_", 1)[0] or "?"
        by_step[int(r.get("global_step", 0))][cat].append(float(r.get("score") or 0.0))
    out = []
    for g in sorted(by_step):
        cats = by_step[g]
        acc = {c: sum(v) / len(v) for c, v in sorted(cats.items())}
        mean = sum(acc.values()) / len(acc)
        parts = "  ".join(f"{c.replace('multi_turn_', '')} {a:.2f}" for c, a in acc.items())
        n = sum(len(v) for v in cats.values())
        out.append(f"validation at step {g} (greedy, no cues, {n} tasks): mean {mean:.2f}  {parts}")
    return out


def held_out_summary(rows: list[dict]) -> Optional[str]:
    """``validation without cues: 0.22 before the first step, 0.41 after step 20 (+0.19)`` when the run validated
    before its first step and after a later one; the score is the mean over the validation rollouts."""
    by_step: dict[int, list[float]] = defaultdict(list)
    for r in rows:
        score = r.get("score")
        if isinstance(score, (int, float)):
            by_step[int(r.get("global_step", 0))].append(float(score))
    if 0 not in by_step or len(by_step) < 2:
        return None
    first = sum(by_step[0]) / len(by_step[0])
    k = max(by_step)
    last = sum(by_step[k]) / len(by_step[k])
    return (f"validation without cues (greedy, {len(by_step[k])} rollouts): {first:.2f} before the first step, "
            f"{last:.2f} after step {k} ({last - first:+.2f})")


def _alive(pid: Optional[int]) -> bool:
    if pid is None:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Watcher:
    """Polls the run folder and the log; prints what is new."""

    def __init__(self, run_dir: str, log: Optional[str], steps: Optional[int], out=sys.stdout, progress: bool = True,
                 clock=time.monotonic):
        self.run_dir = run_dir
        self.clock = clock
        self._last_step_at: Optional[float] = None  # when the last new step line was printed
        self._longest_step = 0.0
        self._warned: set[str] = set()
        self.log = log
        self.steps = steps
        self.out = out
        self.seen_steps: set[int] = set()
        self.val_said: set[int] = set()
        self._summary_said = False
        self._config_said = False
        self.phase = "starting"
        self._log_pos = 0
        self.bar = None
        self._last_said_phase = None
        if progress and sys.stderr.isatty():  # a bar redrawn into a log file is noise: phase lines instead
            from tqdm import tqdm

            self.bar = tqdm(total=steps, desc="training", unit="step", file=sys.stderr, dynamic_ncols=True,
                            bar_format="{desc}: {n_fmt}/{total_fmt} steps |{bar}| {elapsed} {postfix}")
            self.bar.set_postfix_str(self.phase)

    def _say(self, line: str) -> None:
        if self.bar is not None:
            self.bar.write(line, file=self.out)
        else:
            print(line, file=self.out, flush=True)

    def _read_log(self) -> None:
        if not self.log or not os.path.exists(self.log):
            return
        with open(self.log, encoding="utf-8", errors="replace") as fh:
            fh.seek(self._log_pos)
            chunk = fh.read()
            self._log_pos = fh.tell()
        for line in chunk.splitlines():
            if OOM_KILL.search(line):
                self._warn("oom", f"Ray killed workers for lack of memory (see {os.path.basename(self.log)}). A run "
                                  "that lost a rollout worker can wait forever instead of failing: if no step "
                                  "follows, stop it and start it again with fewer runs side by side or more memory")
            for pattern, phase in PHASES:
                m = pattern.search(line)
                if m:
                    self.phase = f"rollouts running {m.group(1)}, finished {m.group(2)}" if phase == "rollouts" else phase
        if self.bar is not None:
            self.bar.set_postfix_str(self.phase[:60])
        elif self.phase != self._last_said_phase and not self.phase.startswith("rollouts"):
            self._say(f"[{time.strftime('%H:%M:%S')}] {self.phase}")
            self._last_said_phase = self.phase

    def _warn(self, key: str, text: str) -> None:
        """Say ``text`` once per ``key`` (on the console and, with a bar, above it)."""
        if key not in self._warned:
            self._warned.add(key)
            self._say(f"[{time.strftime('%H:%M:%S')}] warning: {text}")

    def _check_stall(self) -> None:
        """Warn once per step when no new step came for STALL_FACTOR x the longest step so far (at least
        STALL_MIN_S). Before the first step nothing is judged: start-up times vary too much."""
        if self._last_step_at is None or not self._longest_step:
            return
        waited = self.clock() - self._last_step_at
        limit = max(STALL_FACTOR * self._longest_step, STALL_MIN_S)
        if waited > limit:
            k = max(self.seen_steps) + 1
            self._warn(f"stall {k}", f"no step {k} after {waited:.0f} s (the longest step so far took "
                                     f"{self._longest_step:.0f} s; phase: {self.phase}). If the rollouts stay "
                                     f"'running' with none finished, a worker may be gone: look for errors in "
                                     f"{os.path.basename(self.log) if self.log else 'the log'}")

    def _rows(self, rows_and_damage: tuple[list, list]) -> list[dict]:
        """Rows read through ``run_folder``; a damaged line is said once, a cut last line (being written) not."""
        rows, damage = rows_and_damage
        for d in damage:
            if not d.cut:
                self._warn(f"damage {d}", f"skipped {d}")
        return rows

    def poll(self, final: bool = False) -> None:
        """Print what is new. verl validates after a step's update but logs the step's metrics after the
        validation, so the validation of step k waits for step k's line (``final``: the run is over, print all)."""
        self._read_log()
        if not self._config_said:
            config, _ = RF.read_object(os.path.join(self.run_dir, RF.CONFIG))
            if config is not None:
                self._config_said = True
                for line in config_lines(config):
                    self._say(f"[{time.strftime('%H:%M:%S')}] {line}")
        val = self._rows(RF.read_validation(self.run_dir))

        def say_validations(upto: Optional[int]) -> None:
            steps = sorted({int(r.get("global_step", 0)) for r in val} - self.val_said)
            for g in steps:
                if upto is not None and g > upto:
                    break
                for line in validation_lines([r for r in val if int(r.get("global_step", 0)) == g]):
                    self._say(line)
                self.val_said.add(g)

        rows = self._rows(RF.read_steps(self.run_dir))
        back = RF.steps_going_back([r.get("global_step", r.get("step", 0)) for r in rows])
        if back:
            self._warn("back", back)
        for row in rows:
            k = int(row.get("global_step", row.get("step", 0)))
            if k in self.seen_steps:
                continue
            say_validations(k - 1)
            self.seen_steps.add(k)
            traces = self._rows(RF.read_traces(self.run_dir, k))
            self._say(step_line(row, traces, self.steps))
            retired = retired_line(row)
            if retired:
                self._say(retired)
            if row.get("seconds") is not None:
                self._longest_step = max(self._longest_step, float(row["seconds"]))
            self._last_step_at = self.clock()
            if self.bar is not None:
                self.bar.update(1)
        say_validations(None if final else max(self.seen_steps, default=0))
        if final:
            line = held_out_summary(val)
            if line and not self._summary_said:
                self._summary_said = True
                self._say(line)
        else:
            self._check_stall()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def watch(run_dir: str, log: Optional[str] = None, steps: Optional[int] = None, pid: Optional[int] = None,
          interval: float = 2.0, progress: bool = True, running=None) -> int:
    """Follow ``run_dir`` until ``pid`` exits (forever without one), or while ``running()`` says so (a parent
    follows its own child this way: an ended child it has not reaped still has a pid); returns the number of
    steps seen."""
    w = Watcher(run_dir, log, steps, progress=progress)
    alive = running if running is not None else lambda: _alive(pid)
    try:
        while alive():
            w.poll()
            time.sleep(interval)
        w.poll(final=True)
    except KeyboardInterrupt:
        pass
    finally:
        w.close()
    return len(w.seen_steps)


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run_dir", help="the run folder (seal.run_dir)")
    p.add_argument("--log", default=None, help=f"verl's console log (default: RUN_DIR/{RF.LOG})")
    p.add_argument("--steps", type=int, default=None, help="total training steps, for the progress bar")
    p.add_argument("--pid", type=int, default=None, help="stop when this process has exited")
    p.add_argument("--interval", type=float, default=2.0, help="seconds between polls (default: %(default)s)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar, only the step lines")
    args = p.parse_args(argv)
    from seal_verl import env_vars
    env_vars.check_or_exit("run_watch")
    if not os.path.isdir(args.run_dir):
        print(f"run_watch: error: no run folder {args.run_dir}", file=sys.stderr)
        return 2
    watch(args.run_dir, args.log or os.path.join(args.run_dir, RF.LOG), args.steps, args.pid,
          args.interval, not args.no_progress)
    return 0


if __name__ == "__main__":
    sys.exit(main())
