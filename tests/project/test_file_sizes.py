"""No Python file of the package, the environments or the reward functions is over 500 lines: a file that long
holds several jobs, and each job gets a module of its own."""

from __future__ import annotations

import os

from _paths import REPO

#: The folders whose Python files are held to the bound.
FOLDERS = ("seal_verl", "env_wrappers", "reward_fns")
MAX_LINES = 500
#: Files being split by job on another branch while it lands; empty (the last splits landed with issue 44).
BEING_SPLIT: set[str] = set()


def _line_counts(root: str) -> dict[str, int]:
    """``{path relative to root: lines}`` of every ``.py`` file under :data:`FOLDERS`."""
    out = {}
    for folder in FOLDERS:
        for base, dirs, files in os.walk(os.path.join(root, folder)):
            dirs[:] = [d for d in dirs if d != "__pycache__" and not d.startswith(".")]
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(base, name)
                    with open(path, encoding="utf-8") as fh:
                        out[os.path.relpath(path, root).replace(os.sep, "/")] = sum(1 for _ in fh)
    return out


def too_long(root: str = REPO) -> dict[str, int]:
    """The files over :data:`MAX_LINES`, except those :data:`BEING_SPLIT`."""
    return {p: n for p, n in sorted(_line_counts(root).items()) if n > MAX_LINES and p not in BEING_SPLIT}


def test_no_python_file_is_over_500_lines():
    counts = _line_counts(REPO)
    assert len(counts) > 50, "suspiciously few files: were the folders found?"
    assert too_long() == {}


def test_the_files_being_split_exist():
    """An entry of :data:`BEING_SPLIT` whose file is gone (renamed, or split already) is stale: drop it."""
    assert sorted(p for p in BEING_SPLIT if not os.path.isfile(os.path.join(REPO, p))) == []


def test_the_bound_finds_a_long_file(tmp_path):
    package = tmp_path / "env_wrappers" / "thing"
    package.mkdir(parents=True)
    (package / "short.py").write_text("x = 1\n" * MAX_LINES)
    (package / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    assert too_long(str(tmp_path)) == {"env_wrappers/thing/long.py": MAX_LINES + 1}
