"""Docs and comments that name a file of the repository name one that exists, and the layout table of
docs/internals.md names every folder of the package and the environments.

A path written ``COMMIT:path`` (git's notation for a file of a commit, as a shipped model's record names the code
that built it) is history and is not checked.
"""

from __future__ import annotations

import os
import re
import subprocess

from _paths import REPO

#: Where a path is looked for: the docs, the READMEs, configs and records, and the sources' docstrings and comments.
SUFFIXES = (".md", ".py", ".sh", ".yaml", ".yml", ".json", ".toml", ".cfg")
EXTRA = ("Makefile", ".ci/run")
#: A repository path: one of the top-level folders, then a path; not part of a longer path, a URL, a variable or a
#: ``COMMIT:path``.
PATH = re.compile(r"(?<![\w/.$<{:-])((?:seal_verl|env_wrappers|reward_fns|recipes|bench|docs|tests)/[\w./-]*\w)")
#: Folders of the package and the environments whose Python files docs/internals.md's layout table describes.
PACKAGES = ("seal_verl", "env_wrappers")


def _files(root: str) -> list[str]:
    """The repository's text files that may name a path (tests/ left out: they build paths of their own)."""
    listed = subprocess.run(["git", "-C", root, "ls-files"], capture_output=True, text=True, check=True).stdout
    names = [n for n in listed.splitlines() if n.endswith(SUFFIXES) or n in EXTRA]
    return [n for n in names if not n.startswith("tests/") and os.path.isfile(os.path.join(root, n))]


def missing_paths(root: str = REPO) -> list[str]:
    """``file: path`` for every repository path named in a file that does not exist."""
    out = []
    for name in _files(root):
        try:
            with open(os.path.join(root, name), encoding="utf-8") as fh:
                text = fh.read()
        except UnicodeDecodeError:
            continue
        for path in sorted(set(PATH.findall(text))):
            path = path.rstrip(".")
            if "*" in path or "<" in path:
                continue
            if not os.path.exists(os.path.join(root, path)) and not os.path.exists(os.path.join(root, path + ".py")):
                out.append(f"{name}: {path}")
    return out


def unlisted_folders(root: str = REPO) -> list[str]:
    """Folders with Python files under :data:`PACKAGES` that docs/internals.md's layout section never names (as
    ``a/b/c/`` or, inside a room, ``b/c/``)."""
    with open(os.path.join(root, "docs", "internals.md"), encoding="utf-8") as fh:
        text = fh.read()
    layout = text[text.index("## Layout"):text.index("## Data")]
    out = []
    for package in PACKAGES:
        for base, dirs, files in os.walk(os.path.join(root, package)):
            dirs[:] = [d for d in dirs if d != "__pycache__" and not d.startswith(".")]
            if base == os.path.join(root, package) or not any(f.endswith(".py") for f in files):
                continue
            rel = os.path.relpath(base, root).replace(os.sep, "/")
            short = "/".join(rel.split("/")[-2:])
            if f"`{rel}/" not in layout and f"`{short}/" not in layout and f"({rel}/" not in layout \
                    and f"(`{rel}/" not in layout:
                out.append(rel)
    return out


def test_every_path_named_exists():
    assert missing_paths() == []


def test_the_layout_table_names_every_folder():
    assert unlisted_folders() == []


def test_the_checks_find_a_stale_path_and_an_unlisted_folder(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "internals.md").write_text("## Layout\n| `seal_verl/core/` | |\n## Data\n")
    for folder in ("seal_verl/core", "seal_verl/gone_from_docs"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "m.py").write_text('"""See seal_verl/core/m.py, 1a2b3c4:recipes/old.py."""\n')
    (tmp_path / "notes.md").write_text("run recipes/old.py, then bench/bench_x.py\n")
    subprocess.run(["git", "-C", str(tmp_path), "add", "."], check=True)
    assert missing_paths(str(tmp_path)) == ["notes.md: bench/bench_x.py", "notes.md: recipes/old.py"]
    assert unlisted_folders(str(tmp_path)) == ["seal_verl/gone_from_docs"]
