"""One launch of verl's ``main_ppo`` for both CPU run scripts: ``run_cpu.sh`` (the BFCL V3 recipe on the CPU split)
and ``recipes/ledger_cpu/run_ledger.sh`` (the ledger learning run). The scripts find (or build) the training venv
and source ``cpu_env.sh``; the rest is here, in this order, and a mistake stops the run with one line and exit 2
before any work:

1. the settings: the project's ``SEAL_`` variables (``seal_verl.env_vars``) and the scripts' own (below);
2. the model: the shipped warm start, verified against its ``build.json`` and copied into the model cache (a
   shipped folder without ``build.json`` is one line: restore it, or ``REBUILD=1``), a given one
   (``SEAL_CPU_MODEL``: verified, never written), or one the preparation builds here (``REBUILD=1``);
3. the run folder ``OUT``, claimed (``seal_verl.outputs``): an earlier run's results, a model or files the run
   did not write are refused unless ``FORCE=1``, which moves them aside into a dated sibling folder and says
   where; it is locked while the run writes it; it is never the model nor the model cache;
4. the model and the data (the recipe's preparation script; its whole output in ``prepare.log``, its progress on
   the console);
5. verl's launcher with the recipe's config, its output in ``main_ppo.log``, the console following the run folder
   (``seal_verl.runs.watch``);
6. ``timing.json`` (``seal_verl.runs.folder.Timing``: the same keys for both recipes), then the commands that check
   and render the run.

    python recipes/bfcl_v3/cpu/launch.py {bfcl,ledger} [--venv-seconds N] [HYDRA_OVERRIDE ...]

Settings (environment): ``VARIANT``, ``STEPS``, ``SEED``, ``OUT``, ``FORCE=1``, ``PREPARE_ONLY=1``, ``REBUILD=1``,
``VERBOSE=1``, ``SEAL_CPU_MODEL``, ``SEAL_CPU_MODELS``; the BFCL recipe also ``RESUME_FROM``, ``WARM_START=0`` and
``VAL`` (the run scripts' headers say what each does).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Callable, Optional

from seal_verl.runs import folder as RF

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
BFCL_DIR = os.path.join(REPO, "recipes", "bfcl_v3")
LEDGER_DIR = os.path.join(REPO, "recipes", "ledger_cpu")
#: what the preparation writes into a run folder, which a later run may reuse or rewrite (a folder holding only
#: these is not an earlier run), and the learning benchmark's measurement of the prepared model
PREPARED = (RF.DATA, RF.PREPARE, RF.PREPARE_LOG, "cue_effect.json")


class Refused(Exception):
    """A setting or a folder the run cannot start with; one line, exit status 2."""


@dataclass(frozen=True)
class Recipe:
    """What differs between the two CPU runs.

    Attributes:
        name: ``bfcl`` or ``ledger``; say: the console prefix.
        defaults: VARIANT, STEPS, SEED and OUT (relative to the repository) when unset.
        prepare: the preparation script (model and data into the run folder).
        shipped: the shipped warm start; cached: its copy's name in the model cache.
        overrides: the Hydra arguments of main_ppo, from the run's settings.
        resumable: the run takes ``RESUME_FROM``, ``WARM_START`` and ``VAL``.
        threads: OMP_NUM_THREADS when unset (None: leave it).
    """

    name: str
    say: str
    defaults: dict
    prepare: str
    shipped: str
    cached: str
    overrides: Callable[["Settings", str, str], list]
    resumable: bool
    threads: Optional[str] = None


def _bfcl_overrides(s: "Settings", model: str, ckpt: str) -> list:
    out = ["--config-path", os.path.join(BFCL_DIR, "config"), "--config-name", "bfcl_v3",
           f"hydra.searchpath=[pkg://verl.trainer.config,file://{HERE}/config]",
           "backbone=qwen2.5-3b", f"variant={s.variant}", "+cpu=tiny", f"recipe.dir={BFCL_DIR}",
           f"recipe.data_dir={s.out}/data", f"actor_rollout_ref.model.path={model}",
           f"trainer.total_training_steps={s.steps}", f"actor_rollout_ref.rollout.seed={s.seed}", f"data.seed={s.seed}",
           f"trainer.default_local_dir={ckpt}", f"seal.run_dir={s.out}", f"hydra.run.dir={s.out}/hydra"]
    if s.val == "train":
        out.append(f"data.val_files={s.out}/data/val_train_tasks.parquet")
    if s.resume_from:
        out += ["trainer.resume_mode=resume_path", f"trainer.resume_from_path={s.resume_from}"]
    else:
        out.append("trainer.resume_mode=disable")
    return out


def _ledger_overrides(s: "Settings", model: str, ckpt: str) -> list:
    return ["--config-path", os.path.join(BFCL_DIR, "config"), "--config-name", "bfcl_v3",
            f"hydra.searchpath=[pkg://verl.trainer.config,file://{HERE}/config,file://{LEDGER_DIR}/config]",
            "backbone=qwen2.5-3b", f"variant={s.variant}", "+cpu=tiny", "+learn=ledger", f"recipe.dir={BFCL_DIR}",
            f"recipe.ledger_dir={LEDGER_DIR}", f"recipe.data_dir={s.out}/data", f"actor_rollout_ref.model.path={model}",
            f"data.seed={s.seed}", f"actor_rollout_ref.rollout.seed={s.seed}",
            f"trainer.total_training_steps={s.steps}", f"trainer.test_freq={s.steps}",
            f"trainer.default_local_dir={ckpt}", f"seal.run_dir={s.out}", f"hydra.run.dir={s.out}/hydra",
            "trainer.resume_mode=disable"]


RECIPES = {
    "bfcl": Recipe("bfcl", "run-cpu", {"VARIANT": "seal", "STEPS": "4", "SEED": "42", "OUT": "runs/cpu/{variant}"},
                   os.path.join(HERE, "prepare_run.py"), os.path.join(HERE, "model"), "tiny-warm-shipped",
                   _bfcl_overrides, resumable=True),
    # one thread per process: on a small shared machine two torch threads per process make each step several
    # times slower
    "ledger": Recipe("ledger", "run-ledger", {"VARIANT": "grpo", "STEPS": "20", "SEED": "1",
                                              "OUT": "runs/ledger/{variant}_s{seed}"},
                     os.path.join(LEDGER_DIR, "prepare_ledger.py"), os.path.join(LEDGER_DIR, "model"),
                     "ledger-mix-shipped", _ledger_overrides, resumable=False, threads="1"),
}


@dataclass
class Settings:
    """The run's settings, read from the environment and checked."""

    variant: str
    steps: int
    seed: int
    out: str
    models: str
    force: bool
    prepare_only: bool
    rebuild: bool
    verbose: bool
    model: Optional[str]
    resume_from: Optional[str]
    warm_start: bool
    val: str


def _flag(env: dict, name: str) -> bool:
    raw = env.get(name, "0").strip() or "0"
    if raw not in ("0", "1"):
        raise Refused(f"{name} must be 0 or 1, got {raw!r:.40}")
    return raw == "1"


def _whole(env: dict, name: str, default: str, low: int) -> int:
    raw = env.get(name, "").strip() or default
    if not re.fullmatch(r"\d{1,9}", raw) or int(raw) < low:
        what = "a positive integer" if low else "a non-negative integer"
        raise Refused(f"{name} must be {what}, got {raw!r:.40}")
    return int(raw)


def read_settings(recipe: Recipe, env: dict) -> Settings:
    """The run's settings from ``env``.

    Raises:
        Refused: one line naming the setting.
    """
    from seal_verl import env_vars

    variants = sorted(n[:-5] for n in os.listdir(os.path.join(BFCL_DIR, "config", "variant")) if n.endswith(".yaml"))
    variant = env.get("VARIANT", "").strip() or recipe.defaults["VARIANT"]
    if variant not in variants:
        raise Refused(f"unknown VARIANT={variant!r:.40}; one of: {' '.join(variants)}")
    steps = _whole(env, "STEPS", recipe.defaults["STEPS"], 1)
    seed = _whole(env, "SEED", recipe.defaults["SEED"], 0)
    if not recipe.resumable:
        given = [n for n in ("RESUME_FROM", "WARM_START", "VAL") if env.get(n, "").strip()]
        if given:
            raise Refused(f"{', '.join(given)}: not a setting of the {recipe.name} run (run_cpu.sh has them)")
    resume = env.get("RESUME_FROM", "").strip() or None
    if resume is not None and not os.path.isdir(resume):
        raise Refused(f"RESUME_FROM={resume} is not a folder")
    val = env.get("VAL", "").strip() or "train"
    if val not in ("train", "heldout"):
        raise Refused(f"VAL must be train or heldout, got {val!r:.40}")
    warm_start = env.get("WARM_START", "").strip() or "1"
    if warm_start not in ("0", "1"):
        raise Refused(f"WARM_START must be 0 or 1, got {warm_start!r:.40}")
    out = env.get("OUT", "").strip() or os.path.join(REPO, recipe.defaults["OUT"].format(variant=variant, seed=seed))
    models = env_vars.value("SEAL_CPU_MODELS", env) or os.path.join(REPO, "runs", "cpu", "models")
    return Settings(variant=variant, steps=steps, seed=seed, out=os.path.abspath(out), models=os.path.abspath(models),
                    force=_flag(env, "FORCE"), prepare_only=_flag(env, "PREPARE_ONLY"), rebuild=_flag(env, "REBUILD"),
                    verbose=_flag(env, "VERBOSE"), model=env_vars.value("SEAL_CPU_MODEL", env),
                    resume_from=os.path.abspath(resume) if resume else None, warm_start=warm_start == "1", val=val)


def choose_model(recipe: Recipe, s: Settings, say: Callable[[str], None]) -> tuple[Optional[str], list]:
    """The model folder the preparation is given (None: it builds one) and the inputs the run folder may not be.

    Raises:
        Refused: a given model that is not one or does not match its record, a damaged or unrecorded shipped
            model, or a model cache that cannot take its copy.
    """
    from seal_verl.models import shipped as sm

    try:
        os.makedirs(s.models, exist_ok=True)
    except OSError as exc:
        raise Refused(f"the model cache {s.models} (SEAL_CPU_MODELS): {exc.strerror or exc}") from None
    if not os.access(s.models, os.W_OK | os.X_OK):
        raise Refused(f"the model cache {s.models} (SEAL_CPU_MODELS) is not writable")
    inputs = [s.models]
    if s.model:
        try:
            how = sm.check_model(s.model, "SEAL_CPU_MODEL")
        except sm.ShippedModelError as exc:
            raise Refused(str(exc)) from None
        say(f"model: {s.model} ({how}; used as it is, never written)")
        return os.path.abspath(s.model), inputs + [s.model]
    if s.rebuild or not s.warm_start:
        return None, inputs
    rel = os.path.relpath(recipe.shipped, REPO)
    if not os.path.isfile(os.path.join(recipe.shipped, sm.BUILD_FILE)):
        raise Refused(f"the shipped warm start {rel} has no {sm.BUILD_FILE}, so it cannot be verified: restore it "
                      f"(git checkout -- {rel}), or build one on this machine with REBUILD=1 (several minutes)")
    try:
        model = sm.use(recipe.shipped, os.path.join(s.models, recipe.cached))
    except sm.CacheError as exc:
        raise Refused(str(exc)) from None
    except sm.ShippedModelError as exc:
        raise Refused(f"the shipped warm start {rel} is damaged: {exc}") from None
    say(f"model: the shipped warm start ({rel}, verified against its {sm.BUILD_FILE}; REBUILD=1 builds one here "
        "instead)")
    return model, inputs + [recipe.shipped, model]


#: console lines of the preparation shown as they come (the warm start's first epoch and every 10th are shown, the
#: others only when the next shown line comes; the pass-rate table; the data summary)
SHOWN = re.compile(r"^\[warm-start\]|^multi_turn|^mean |^task |^model:")
EPOCH = re.compile(r"^\[warm-start\] epoch\s+(\d+)")


def prepare(recipe: Recipe, s: Settings, model: Optional[str], env: dict) -> int:
    """Run the recipe's preparation into ``s.out``; its whole output goes to ``prepare.log``."""
    cmd = [sys.executable, recipe.prepare, s.out, "--models-dir", s.models]
    cmd += ["--model", model] if model else []
    cmd += ["--no-warm-start"] if not s.warm_start else []
    held = ""
    with open(os.path.join(s.out, RF.PREPARE_LOG), "w", encoding="utf-8") as log, \
            subprocess.Popen(cmd, cwd=REPO, env=dict(env, PYTHONUNBUFFERED="1"), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, errors="replace") as proc:
        for line in proc.stdout:
            log.write(line)
            epoch = EPOCH.match(line)
            if epoch:
                n = int(epoch.group(1))
                held = "" if n == 1 or n % 10 == 0 else line
                if not held:
                    print(line, end="", flush=True)
            elif SHOWN.match(line):
                print(held + line, end="", flush=True)
                held = ""
    return proc.returncode


def _tail(path: str, n: int) -> str:
    with open(path, encoding="utf-8", errors="replace") as fh:
        lines = [ln for ln in fh if not re.search(r"Warning|warn\(|^WARNING", ln)]
    return "".join(lines[-n:])


def run_main_ppo(recipe: Recipe, s: Settings, model: str, extra: list, env: dict) -> int:
    """verl's launcher into the claimed run folder; the console follows the folder (or the log, VERBOSE=1).
    Ctrl-C (or SIGTERM) is passed on to main_ppo as SIGINT, and the run folder keeps what was written."""
    from seal_verl.runs.watch import watch

    log = os.path.join(s.out, RF.LOG)
    cmd = [sys.executable, "-m", "verl.trainer.main_ppo", *recipe.overrides(s, model, os.path.join(s.out, RF.CHECKPOINTS)),
           *extra]
    print(f"[{recipe.say}] python -m verl.trainer.main_ppo (variant {s.variant}, {s.steps} steps, seed {s.seed}); "
          f"verl's output: {log}", flush=True)
    with open(log, "w", encoding="utf-8") as fh:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=fh, stderr=subprocess.STDOUT)

    def stop(signum, frame):
        try:
            proc.send_signal(signal.SIGINT)
        except ProcessLookupError:
            pass

    old = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        if s.verbose:
            _follow(log, proc)
        else:
            watch(s.out, log, s.steps, running=lambda: proc.poll() is None)
        return proc.wait()
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def _follow(path: str, proc: subprocess.Popen) -> None:
    """Print ``path`` as it grows until ``proc`` ends."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        while True:
            chunk = fh.read()
            if chunk:
                print(chunk, end="", flush=True)
            elif proc.poll() is not None:
                return
            else:
                time.sleep(0.5)


def launch(recipe: Recipe, extra: list, venv_seconds: int = 0, env: Optional[dict] = None) -> int:
    """Everything after the venv (see the module docstring); returns the exit status."""
    from seal_verl import env_vars, outputs

    env = dict(os.environ if env is None else env)
    env_vars.check_or_exit(recipe.say, env)

    def say(text: str) -> None:
        print(f"[{recipe.say}] {text}", flush=True)

    t0 = time.time()
    try:
        s = read_settings(recipe, env)
        model, inputs = choose_model(recipe, s, say)
        # a run resumed from a checkpoint in its own folder continues the results there; resumed into another
        # folder, that folder is claimed like any other
        own = bool(s.resume_from) and os.path.realpath(s.resume_from).startswith(os.path.realpath(s.out) + os.sep)
        claim = outputs.claim(s.out, f"{recipe.say} (variant {s.variant}, seed {s.seed})",
                              reusable=lambda name: name in PREPARED, force=s.force, force_hint="FORCE=1",
                              other_hint="OUT=<another folder>", keep_results=own, option="OUT",
                              inputs=inputs + ([s.resume_from] if s.resume_from and not own else []))
    except (Refused, outputs.OutputRefused) as exc:
        print(f"{recipe.say}: error: {exc}", file=sys.stderr)
        return 2
    with claim:
        outputs.say(claim, f"[{recipe.say}]")
        say(f"variant {s.variant}, {s.steps} steps, seed {s.seed}, run dir {s.out}")
        env = dict(env, PYTHONPATH=REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""))
        if recipe.threads:
            env.setdefault("OMP_NUM_THREADS", recipe.threads)
        say("model and data (a warm start that is not cached yet takes a few minutes) ...")
        rc = prepare(recipe, s, model, env)
        prepare_log = os.path.join(s.out, RF.PREPARE_LOG)
        if rc != 0:
            if rc == 2:  # the preparation's own one-line refusal
                errors = [ln for ln in _tail(prepare_log, 30).splitlines() if ln.startswith("error")]
                print(f"{recipe.say}: {errors[-1] if errors else 'error: preparing failed'}", file=sys.stderr)
                return 2
            print(_tail(prepare_log, 30), end="", file=sys.stderr)
            print(f"{recipe.say}: error: preparing the model and data failed; the whole output is in {prepare_log}",
                  file=sys.stderr)
            return 1
        prepared = RF.read_prepare(s.out)
        t1 = time.time()
        if s.prepare_only:
            say(f"PREPARE_ONLY=1: model {prepared['model']} and data in {s.out}/data ready; no main_ppo run")
            return 0
        rc = run_main_ppo(recipe, s, prepared["model"], extra, env)
        t2 = time.time()
        RF.write_timing(s.out, {"recipe": recipe.name, "variant": s.variant, "seed": s.seed, "steps": s.steps,
                                "exit_code": rc, "venv_s": int(venv_seconds), "prepare_s": round(t1 - t0),
                                "main_ppo_s": round(t2 - t1), RF.FAULT_SETTINGS: env_vars.faults(env)})
    log = os.path.join(s.out, RF.LOG)
    if rc != 0:
        print(f"[{recipe.say}] main_ppo failed (exit {rc}); the end of {log}:", file=sys.stderr)
        print(_tail(log, 40), end="", file=sys.stderr)
    say(f"main_ppo exit {rc}; venv {venv_seconds} s, model+data {round(t1 - t0)} s, main_ppo {round(t2 - t1)} s; "
        f"run dir {s.out}")
    if rc == 0:
        tools = os.path.join(sys.prefix, "bin")
        say(f"check it: {tools}/seal-verl check {s.out} --steps {s.steps}")
        say(f"report:   {tools}/seal-verl report {s.out} --out {s.out}/report   (then open "
            f"{s.out}/report/report.html)")
    return rc


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="launch.py", description=__doc__.splitlines()[0])
    p.add_argument("recipe", choices=sorted(RECIPES))
    p.add_argument("--venv-seconds", type=int, default=0, help="seconds the script spent building the venv")
    p.add_argument("--check-settings", action="store_true",
                   help="only check the settings (any Python 3 runs this: before the training venv is built)")
    p.add_argument("overrides", nargs="*", help="Hydra overrides passed on to main_ppo")
    args = p.parse_args(argv)
    recipe = RECIPES[args.recipe]
    if args.check_settings:
        from seal_verl import env_vars

        env_vars.check_or_exit(recipe.say)
        try:
            read_settings(recipe, dict(os.environ))
        except Refused as exc:
            print(f"{recipe.say}: error: {exc}", file=sys.stderr)
            return 2
        return 0
    try:
        return launch(recipe, args.overrides, args.venv_seconds)
    except KeyboardInterrupt:  # during the preparation (main_ppo's own is passed on, see run_main_ppo)
        print(f"[{recipe.say}] interrupted; what was written stays in the run folder", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
