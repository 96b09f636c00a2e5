"""docs/ARCHITECTURE.md matches the tree: its package list, test folders and pass list are checked.

The source tree block names every package (a folder with ``__init__.py``)
and every top-level module of each Python root it lists, and every folder it
names exists; the tests block names exactly the folders of ``tests/``; the
pass list is ``PASSES``, in order.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from veil.sql.passes import PASSES
from veil.sql.planner import pass_name

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "ARCHITECTURE.md"


def _block(marker: str) -> list[str]:
    """The lines of the fenced block after the HTML comment ``<!-- marker...``."""
    text = DOC.read_text()
    at = text.index(f"<!-- {marker}")
    opening = text.index("```\n", at) + 4
    return text[opening : text.index("```", opening)].splitlines()


def _tree(marker: str = "tree") -> dict[str, set[str]]:
    """Each root of a tree block (``python/veil/``, ``rust/``) -> the names listed under it
    (``sql/passes/``, ``cli.py``): the first words of entry lines, which sit two spaces in."""
    roots: dict[str, set[str]] = {}
    root = ""
    for line in _block(marker):
        found = re.match(r"^(\S+/)(\s|$)", line)
        if found:
            root = found.group(1)
            roots[root] = set()
        elif re.match(r"^  \S", line):
            words = line.split("  ")[1].split()  # the names, before the description
            roots[root].update(w for w in words if w.endswith(("/", ".py")))
    return roots


def test_the_tree_names_every_package_and_top_level_module() -> None:
    roots = _tree()
    python_roots = [r for r in roots if r.startswith("python/")]
    assert "python/veil/" in python_roots
    for root in python_roots:
        base = REPO / root
        packages = {
            f"{p.parent.relative_to(base).as_posix()}/"
            for p in base.rglob("__init__.py")
            if p.parent != base
        }
        modules = {p.name for p in base.glob("*.py")}
        missing = sorted((packages | modules) - roots[root])
        assert not missing, f"docs/ARCHITECTURE.md's tree lacks, under {root}: {missing}"


def test_every_folder_the_tree_names_exists() -> None:
    stale = [
        f"{root}{name}"
        for root, names in _tree().items()
        for name in names
        if not (REPO / root / name).exists()
    ]
    assert not stale, f"docs/ARCHITECTURE.md names what is not in the tree: {stale}"


def test_the_tests_block_names_every_test_folder() -> None:
    listed = _tree("tests")["tests/"]
    folders = {
        f"{p.name}/"
        for p in (REPO / "tests").iterdir()
        if p.is_dir() and not p.name.startswith((".", "__"))
    }
    assert listed == folders, (
        f"docs/ARCHITECTURE.md's tests block lacks {sorted(folders - listed)} "
        f"and names what is not in tests/: {sorted(listed - folders)}"
    )


def test_the_pass_list_is_passes_in_order() -> None:
    listed = [line.split()[0] for line in _block("passes") if line.strip()]
    assert listed == [pass_name(p) for p in PASSES]
