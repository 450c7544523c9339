"""Checks of command-line arguments and the files they name, shared by every subcommand (and by the
environments' own subcommands): a mistake is one line on stderr and exit status 2, before any work, and an
existing output file is never replaced without ``--force``."""

from __future__ import annotations

import os


class UsageError(Exception):
    """A mistake in the command line or the files it names: printed as one line, exit status 2."""


def check_output_file(path: str, force: bool, option: str) -> None:
    """Fail early, before any work, if ``path`` cannot be written as a new file (or, without ``--force``,
    already exists)."""
    if os.path.isdir(path):
        raise UsageError(f"{option} {path}: is a folder; give a file name")
    if os.path.lexists(path):
        if not force:
            raise UsageError(f"{option} {path}: already exists; pass --force to replace it")
        if not os.path.isfile(path):
            raise UsageError(f"{option} {path}: not a regular file")
        if not os.access(path, os.W_OK):
            raise UsageError(f"{option} {path}: not writable")
    check_parent(path, option)


def check_parent(path: str, option: str) -> None:
    parent = os.path.dirname(os.path.abspath(path))
    probe = parent
    while not os.path.exists(probe):  # the nearest existing ancestor decides whether it can be created
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        raise UsageError(f"{option} {path}: {probe} is a file, not a folder")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise UsageError(f"{option} {path}: no permission to write in {probe}")
