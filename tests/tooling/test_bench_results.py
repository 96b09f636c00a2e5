"""bench/RESULTS.md is generated from bench/<area>/meta.toml and the files beside it."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_results", ROOT / "tools/bench_results.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_results_are_what_the_generator_writes() -> None:
    committed = (ROOT / "bench/RESULTS.md").read_text()
    assert committed == _generator().render(), "run python tools/bench_results.py (make results)"


def test_results_fit_on_a_few_screens() -> None:
    assert len((ROOT / "bench/RESULTS.md").read_text().splitlines()) < 250


def test_every_benchmark_file_is_named_by_some_meta() -> None:
    named = _generator().referenced()
    on_disk = {p for p in (ROOT / "bench").rglob("*") if p.suffix in (".json", ".png")}
    assert sorted(p.relative_to(ROOT) for p in on_disk - named) == []
    assert sorted(p.relative_to(ROOT) for p in named - on_disk) == []


def test_paths_pick_items_and_fold_them() -> None:
    generator = _generator()
    document = {"runs": [{"side": "a", "tps": 1.0}, {"side": "b", "tps": 3.0}]}
    assert generator.resolve(document, "runs[side=b].tps") == (3.0, False)
    figure = {"label": "tps", "path": "runs[*].tps", "agg": "range", "format": "{:.0f}-{:.0f}"}
    assert generator.figure_text([document], figure) == "tps 1-3"
    assert format(generator.Number(50_787_184.0), "si") == "50.8M"


def test_lists_of_queries_read_as_words() -> None:
    generator = _generator()
    document = {"summary": {"timeouts": [], "plaintext_timeouts": ["q01", "q54"]}}
    figure = {"label": "timeouts", "path": ["summary.timeouts", "summary.plaintext_timeouts"],
              "format": "{} (plaintext: {})"}  # fmt: skip
    assert generator.figure_text([document], figure) == "timeouts none (plaintext: q01, q54)"
