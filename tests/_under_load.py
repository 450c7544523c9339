"""Run pytest on the given test files while every core is kept busy, so that paths reached only on a slow
machine (a call over its limit, a judgement restarted, a worker replaced) are reached in CI as well.

    python tests/_under_load.py [--burners N] TEST_FILE... [-- PYTEST_ARGS...]

One burner process per core (``--burners`` to change) spins at the same priority as the tests for as long
as pytest runs; they are stopped however pytest ends. The exit status is pytest's.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys

#: A burner: pure-Python arithmetic in a loop, which holds its core without touching memory or the disk.
_BURN = "x = 0\nwhile True:\n    x = (x * 1103515245 + 12345) & 0xFFFFFFFF\n"


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, extra = argv[:at], argv[at + 1:]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--burners", type=int, default=_cores(), help="busy processes (default: one per core)")
    parser.add_argument("files", nargs="+", help="test files to run under load")
    args = parser.parse_args(argv)
    if args.burners < 0:
        parser.error("--burners must be >= 0")
    burners = [subprocess.Popen([sys.executable, "-c", _BURN], stdin=subprocess.DEVNULL)
               for _ in range(args.burners)]
    print(f"under load: {len(burners)} busy process(es) on {_cores()} core(s)", file=sys.stderr, flush=True)
    try:
        return subprocess.call([sys.executable, "-m", "pytest", *extra, *args.files])
    finally:
        for p in burners:
            p.send_signal(signal.SIGKILL)
        for p in burners:
            p.wait()


if __name__ == "__main__":
    sys.exit(main())
