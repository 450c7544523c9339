"""The project's environment variables in one registry: every ``SEAL_`` variable is named here, with what it holds.

A setting read deep inside a worker fails where nobody looks: a misspelt sandbox limit once turned every
judgement into a checker error while the command still printed a score and exited 0. So every entry point
calls :func:`check` before any work (the command line, the run scripts' Python steps, the warm starts, the
benchmarks, and in verl's workers the reward function and the agent loops): a variable whose value its parser
refuses, or a ``SEAL_`` variable the registry does not know (a misspelt setting would otherwise be ignored),
ends the command with one line naming it (:class:`SettingError`; exit status 2 from :func:`check_or_exit`).

Fault injection changes results on purpose. A variable registered with ``fault=True`` (``SEAL_BFCL_FAULTS`` in the
tool and judge workers, ``SEAL_FAULT`` in the trainer) is refused unless ``SEAL_ALLOW_FAULTS=1`` is set too (the test
suite sets it: tests/conftest.py; a planted-fault run by hand sets it as well). When allowed it is announced on
every start (:func:`check_or_exit` prints one line per fault on stderr) and recorded wherever a result is
written: the run folder's ``config.json`` and every ``metrics.jsonl`` row (``faults``), ``timing.json``, and so
in ``seal-verl check`` (a failed ``faults`` check) and ``seal-verl report``.

To register a variable, add one :class:`Variable` to ``VARIABLES`` below: its name, a parser (``positive_int``,
``boolean``, ``path``, ``text``, ``one_of(...)``, or any function of the text that returns the value or raises
``ValueError``; a string ``"module:function"`` is imported only when the variable is set), its default and one
line saying what it does. A fault hook adds ``fault=True``, as the trainer's planted faults do::

    Variable("SEAL_FAULT", "seal_verl.verl_glue.compat:parse_faults", None,
             "faults planted in the trainer on purpose (skip_weight_sync: the check must fail the run)", fault=True),

and reads it with ``value("SEAL_FAULT")`` (the parsed value: here the list of fault names). Shell scripts check the environment with
``python -m seal_verl.env_vars PROGRAM`` (exit 2 and the line on a bad value). No import beyond the standard library.
"""

from __future__ import annotations

import difflib
import importlib
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Union

__all__ = ["ALLOW_FAULTS", "PREFIX", "SettingError", "Variable", "VARIABLES", "boolean", "check", "check_or_exit",
           "faults", "one_of", "path", "positive_int", "text", "value"]

PREFIX = "SEAL_"
#: the consent that lets a fault-injection variable act (set by the test suite)
ALLOW_FAULTS = "SEAL_ALLOW_FAULTS"


class SettingError(ValueError):
    """A ``SEAL_`` variable with a value its parser refuses, an unknown one, or a fault without consent; the
    message is one line that names the variable."""


# ------------------------------------------------------------------------------------------------ parsers

def positive_int(raw: str) -> int:
    try:
        number = int(raw)
    except ValueError:
        number = 0
    if number <= 0:
        raise ValueError("must be a positive whole number")
    return number


_TRUE = {"1", "true", "yes", "on", "y"}
_FALSE = {"0", "false", "no", "off", "n"}


def boolean(raw: str) -> bool:
    low = raw.strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise ValueError("must be a boolean: 1/true/yes/on or 0/false/no/off")


def path(raw: str) -> str:
    if "\x00" in raw:
        raise ValueError("holds a NUL character")
    if len(raw) > 4096:
        raise ValueError(f"has {len(raw)} characters; a path has at most 4096")
    return raw


def text(raw: str) -> str:
    return raw


def one_of(*choices: str) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        if raw not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}")
        return raw

    parse.__name__ = "one of " + ", ".join(choices)
    return parse


@dataclass(frozen=True)
class Variable:
    """One environment variable of the project.

    Attributes:
        name: the variable (``SEAL_...``).
        parse: the text -> the value, or ``ValueError`` saying what it must be; ``"module:function"`` is imported
            when the variable is set (a parser that lives with the code it configures).
        default: the value when it is unset or empty.
        doc: what it does, one line.
        fault: a fault-injection hook: refused without ``SEAL_ALLOW_FAULTS=1``, announced and recorded with it.
        test: read by the test suite only (an opt-in or a test's own knob).
    """

    name: str
    parse: Union[Callable[[str], Any], str]
    default: Any
    doc: str
    fault: bool = False
    test: bool = False

    def parser(self) -> Callable[[str], Any]:
        if callable(self.parse):
            return self.parse
        module, _, function = self.parse.partition(":")
        return getattr(importlib.import_module(module), function)


VARIABLES: dict[str, Variable] = {v.name: v for v in (
    # the tool sandbox (env_wrappers/bfcl/sandbox; docs/gpu_training.md, "Tool workers")
    Variable("SEAL_BFCL_FAULTS", "env_wrappers.bfcl.sandbox.faults:parse_spec", None,
             "faults injected into the tool and judge workers (point=kind@place[#selector], ...)", fault=True),
    Variable("SEAL_FAULT", "seal_verl.verl_glue.compat:parse_faults", None,
             "faults planted in the trainer on purpose (skip_weight_sync: the check must fail the run)", fault=True),
    Variable("SEAL_BFCL_MAX_TOOL_WORKERS", positive_int, None, "tool workers one process runs at once, at most"),
    Variable("SEAL_BFCL_IDLE_POOL_MB", positive_int, None, "MiB all idle tool workers together may hold"),
    Variable("SEAL_BFCL_TOOL_THREADS", positive_int, None, "threads that step rollouts' tools in one process"),
    Variable("SEAL_BFCL_RAISE_NOFILE", boolean, True, "raise the soft open-files limit when the sandbox starts"),
    # the CPU runs (recipes/bfcl_v3/cpu, recipes/ledger_cpu)
    Variable("SEAL_CPU_PLATFORM", boolean, False, "apply the CPU platform's patches to verl and vLLM"),
    Variable("SEAL_CPU_MODEL", path, None, "the model folder a CPU run uses (verified, never written)"),
    Variable("SEAL_CPU_MODELS", path, None, "the cache of the CPU runs' models (default runs/cpu/models)"),
    Variable("SEAL_CPU_VENV", path, None, "the training virtual environment (default .venv-cpu-train)"),
    Variable("SEAL_CPU_ENV_MODE", one_of("locked", "resolve"), "locked",
             "how setup_cpu_train_env.sh installs: from the lock file, or resolved again"),
    Variable("SEAL_CPU_FORCE", boolean, False, "setup_cpu_train_env.sh rebuilds the venv from nothing"),
    Variable("SEAL_TAU2_VENV", path, None, "the tau2-bench virtual environment (default .venv-tau2)"),
    Variable(ALLOW_FAULTS, boolean, False, "let a fault-injection variable act (the test suite sets it)", test=True),
    # the test suite's opt-ins and knobs
    Variable("SEAL_CPU_TRAINING", boolean, False, "run the real main_ppo tests", test=True),
    Variable("SEAL_CPU_TRAIN_VENV", path, None, "the venv of the real main_ppo tests", test=True),
    Variable("SEAL_CPU_TRAINING_OUT", path, None, "keep the main_ppo tests' run folders here", test=True),
    Variable("SEAL_LEARNING_BENCH_OUT", path, None, "keep the learning-benchmark test's run here", test=True),
    Variable("SEAL_EVAL_MODEL_DIR", path, None, "the checkpoint the served-model tests serve", test=True),
    Variable("SEAL_BFCL_VENV", path, None, "the official bfcl-eval venv of the pipeline test", test=True),
    Variable("SEAL_REQUIRE_BACKBONES", boolean, False, "fail, not skip, without the backbones' files", test=True),
    Variable("SEAL_TAU2", boolean, False, "run the tau2-bench tests", test=True),
    Variable("SEAL_LORA_TEST_OUT", path, None, "keep the LoRA main_ppo tests' run folders here", test=True),
    Variable("SEAL_EXPORT_RUN", path, None, "the run folder the export-and-evaluate test exports", test=True),
    Variable("SEAL_NETWORK_LOG", path, None, "where the loopback guard logs connections", test=True),
    Variable("SEAL_RECORDED_ARGV", path, None, "where a test's stand-in launcher records its arguments", test=True),
    Variable("SEAL_SMOKE_DIR", path, None, "smoke_main_ppo.sh's run folder", test=True),
    Variable("SEAL_SMOKE_STEPS", positive_int, 3, "smoke_main_ppo.sh's steps", test=True),
    Variable("SEAL_SMOKE_USE_V1", boolean, True, "smoke_main_ppo.sh on the V1 trainer", test=True),
)}


def _environ(environ: Optional[Mapping[str, str]]) -> Mapping[str, str]:
    return os.environ if environ is None else environ


def _parse(var: Variable, raw: str) -> Any:
    try:
        return var.parser()(raw)
    except (ValueError, TypeError) as exc:
        raise SettingError(f"{var.name}={raw!r:.120}: {exc}") from None


def value(name: str, environ: Optional[Mapping[str, str]] = None) -> Any:
    """The parsed value of the registered variable ``name``, or its default when unset or empty.

    Raises:
        SettingError: a value its parser refuses (the message names the variable), or a fault without consent.
        KeyError: ``name`` is not registered.
    """
    var = VARIABLES[name]
    env = _environ(environ)
    raw = env.get(name, "")
    if not raw.strip():
        return var.default
    if var.fault and not _consent(env):
        raise SettingError(_refusal(name, raw))
    return _parse(var, raw.strip())


def _consent(env: Mapping[str, str]) -> bool:
    raw = env.get(ALLOW_FAULTS, "").strip()
    try:
        return bool(raw) and boolean(raw)
    except ValueError:
        return False


def _refusal(name: str, raw: str) -> str:
    return (f"{name}={raw!r:.120} injects faults (results change on purpose); it acts only in the test suite "
            f"({ALLOW_FAULTS}=1): unset it")


def faults(environ: Optional[Mapping[str, str]] = None) -> dict[str, str]:
    """The fault-injection variables that are set (name -> value as given), for the records of a run."""
    env = _environ(environ)
    return {v.name: env[v.name] for v in VARIABLES.values() if v.fault and env.get(v.name, "").strip()}


def check(environ: Optional[Mapping[str, str]] = None) -> dict[str, Any]:
    """Parse every ``SEAL_`` variable that is set; returns name -> value.

    Raises:
        SettingError: the first variable (in name order) with a bad value, an unknown ``SEAL_`` variable, or a
            fault-injection variable without ``SEAL_ALLOW_FAULTS=1``; one line naming it.
    """
    env = _environ(environ)
    out: dict[str, Any] = {}
    for name in sorted(k for k in env if k.startswith(PREFIX)):
        if name not in VARIABLES:
            close = difflib.get_close_matches(name, list(VARIABLES), n=1, cutoff=0.8)
            hint = f"; did you mean {close[0]}?" if close else "; unset it, or register it in seal_verl/env_vars.py"
            raise SettingError(f"{name}: not a setting of this project{hint}")
        out[name] = value(name, env)
    return out


def announcements(environ: Optional[Mapping[str, str]] = None) -> list[str]:
    """One line per fault-injection variable that is set (with consent): said on every start of every command."""
    return [f"fault injection on: {name}={raw} (results are changed on purpose; not a model's numbers)"
            for name, raw in faults(environ).items()]


def check_or_exit(program: str, environ: Optional[Mapping[str, str]] = None, err=None) -> dict[str, Any]:
    """:func:`check` for an entry point: on a bad setting, ``program: error: <line>`` on stderr and exit status 2;
    otherwise the fault announcements, then the parsed values."""
    err = sys.stderr if err is None else err
    try:
        values = check(environ)
    except SettingError as exc:
        print(f"{program}: error: {exc}", file=err, flush=True)
        raise SystemExit(2) from None
    for line in announcements(environ):
        print(f"{program}: warning: {line}", file=err, flush=True)
    return values


def main(argv: Optional[list[str]] = None) -> int:
    """``python -m seal_verl.env_vars PROGRAM``: exit 0 if every ``SEAL_`` variable is good (faults announced),
    else the line and exit 2 (for shell scripts, before any work)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    check_or_exit(argv[0] if argv else "seal-verl")
    return 0


if __name__ == "__main__":
    sys.exit(main())
