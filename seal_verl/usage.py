"""Checks of command-line arguments and the files they name, shared by every subcommand (and by the
environments' own subcommands): a mistake is one line on stderr and exit status 2, before any work, and an
existing output file is never replaced without ``--force``.

A module of its own, apart from ``seal_verl.cli``, so that an environment's subcommands use these checks
without importing the command line."""

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


def check_input_file(path: str, option: str) -> None:
    """Fail early, before any work, if ``path`` cannot be read as a regular file."""
    _check_input(path, option, folders=False)


def check_input_paths(paths: list[str], option: str = "") -> None:
    """Fail early if any of ``paths`` (files or folders to read) is missing, unreadable, or neither a regular
    file nor a folder (a device or a pipe could be read forever)."""
    for path in paths:
        _check_input(path, option, folders=True)


def _check_input(path: str, option: str, folders: bool) -> None:
    import stat

    where = f"{option} {path}".strip()
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise UsageError(f"{where}: {exc.strerror or exc}") from None
    if stat.S_ISDIR(mode):
        if not folders:
            raise UsageError(f"{where}: is a folder; give a file")
        if not os.access(path, os.R_OK | os.X_OK):
            raise UsageError(f"{where}: no permission to read this folder")
        return
    if not stat.S_ISREG(mode):
        raise UsageError(f"{where}: not a regular file (a device, pipe or socket is never read)")
    if not os.access(path, os.R_OK):
        raise UsageError(f"{where}: no permission to read it")


def distinct_files(paths: list[str]) -> tuple[list[str], list[tuple[str, str]]]:
    """``paths`` with every later naming of one file left out (the same path twice, a link to it, a folder that
    holds a file also named on its own), in order; and the left-out ``(path, the path kept)`` pairs."""
    kept: list[str] = []
    first: dict = {}
    repeats: list[tuple[str, str]] = []
    for path in paths:
        try:
            st = os.stat(path)
            key: tuple = (st.st_dev, st.st_ino)
        except OSError:
            key = ("path", os.path.abspath(path))
        if key in first:
            repeats.append((path, first[key]))
            continue
        first[key] = path
        kept.append(path)
    return kept, repeats


def check_not_an_input(output: str, inputs: list[str], option: str) -> None:
    """Refuse an output that is one of the files read (writing it would destroy the input before, or after,
    it is read), whether named by the same path or through a link."""
    for path in inputs:
        try:
            same = os.path.samefile(output, path)
        except (OSError, ValueError):
            same = False
        if same:
            raise UsageError(f"{option} {output}: is the input {path}; give another name")
