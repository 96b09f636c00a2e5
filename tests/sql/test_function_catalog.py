"""DuckDB's function catalog as the planner reads it, and its cache file per version."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from veil.sql import functions


@pytest.fixture
def fresh_catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("VEIL_CACHE_DIR", str(tmp_path))
    cached = (functions._catalog, functions.aggregate_names, functions.varying_names)
    for function in cached:
        function.cache_clear()
    yield tmp_path
    for function in cached:
        function.cache_clear()


def test_the_cache_file_gives_what_the_catalog_gives(fresh_catalog: Path) -> None:
    computed = functions.aggregate_names(), functions.varying_names()
    (written,) = fresh_catalog.glob("functions-*.json")
    functions._catalog.cache_clear()
    functions.aggregate_names.cache_clear()
    functions.varying_names.cache_clear()
    assert (functions.aggregate_names(), functions.varying_names()) == computed
    # a macro over an aggregate counts as one; a volatile call varies between runs
    assert {"geomean", "sum", "histogram"} <= computed[0]
    assert {"random", "now", "read_csv"} <= computed[1]
    assert written.stat().st_mode & 0o077 == 0


def test_a_damaged_cache_file_is_computed_again(fresh_catalog: Path) -> None:
    expected = functions.aggregate_names()
    (written,) = fresh_catalog.glob("functions-*.json")
    written.write_text("[[1, 2]")
    functions._catalog.cache_clear()
    functions.aggregate_names.cache_clear()
    assert functions.aggregate_names() == expected


def test_an_unwritable_cache_directory_costs_only_the_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("")
    monkeypatch.setenv("VEIL_CACHE_DIR", str(blocked / "below"))
    functions._catalog.cache_clear()
    try:
        assert "sum" in {f.name for f in functions._catalog()}
    finally:
        functions._catalog.cache_clear()
