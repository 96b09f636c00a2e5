"""``measure_query`` when plaintext runs past the deadline: Veil still runs, plaintext's
time is recorded as a lower bound and the ratio as an upper bound (issue 40: TPC-DS SF 1's
q01 on PostgreSQL), and the summary, table and plot take the bound."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest

from veil.exec.server import FetchStats
from veil_dev.bench import analytic
from veil_dev.bench.analytic_report import Bench, plot, summarise, summary_line, table_rows
from veil_dev.bench.limits import QueryTimeout
from veil_dev.bench.suite import Suite
from veil_dev.bench.worker import VeilRun

pytestmark = pytest.mark.unit

SQL = "SELECT 42 AS x"


class _Plain:
    dialect = "duckdb"


class _Worker:
    def __init__(self) -> None:
        self.runs = 0

    def run(self, sql: str) -> VeilRun:
        self.runs += 1
        stats = FetchStats(statements=1, bytes_received=100, server_seconds=0.1)
        return VeilRun(0.5, pa.table({"x": [42]}), stats, None, 2**20)


def _bench(link: str | None = None) -> Bench:
    suite = Suite("tpcds", "TPC-DS", (), lambda sf, path: None, {"q01": SQL, "q02": SQL})
    return Bench(suite, "postgres", 1.0, runs=3, bandwidth_mbit=10.0, timeout=120.0, link=link)


def _measure(
    monkeypatch: pytest.MonkeyPatch, bench: Bench, plain: Any, name: str = "q01"
) -> tuple[Any, int]:
    calls = []

    def timed_plain(bench: Bench, backend: Any, sql: str) -> tuple[float, int]:
        calls.append(sql)
        return plain()

    monkeypatch.setattr(analytic, "_timed_plain", timed_plain)
    worker = _Worker()
    figures = analytic.measure_query(bench, name, _Plain(), worker, duckdb.connect())  # type: ignore[arg-type]
    assert worker.runs == bench.runs
    return figures, len(calls)


def _timeout() -> tuple[float, int]:
    raise QueryTimeout("over 120 s")


def test_a_plaintext_timeout_still_measures_veil(monkeypatch: pytest.MonkeyPatch) -> None:
    bench = _bench()
    figures, plain_runs = _measure(monkeypatch, bench, _timeout)
    assert plain_runs == 1  # one timeout is enough: not three times the deadline
    assert figures.status == "timeout (plaintext, over 120 s)"
    assert figures.correct is True and figures.veil_seconds == 0.5
    assert figures.plain_seconds is None and figures.plain_seconds_at_least == 120.0
    assert figures.ratio is None and figures.ratio_at_most == pytest.approx(0.5 / 120)
    assert figures.link_ratio is None and figures.link_ratio_at_most is not None
    measured, _ = _measure(monkeypatch, bench, lambda: (1.0, 10), "q02")
    assert measured.status == "ok" and measured.ratio == 0.5 and measured.ratio_at_most is None
    bench.figures = [figures, measured]
    summary = summarise(bench)
    assert summary["timeouts"] == [] and summary["plaintext_timeouts"] == ["q01"]
    assert summary["ratio_bounds"] == ["q01"] and summary["measured"] == 2
    assert summary["median_ratio"] == pytest.approx((0.5 / 120 + 0.5) / 2)  # an upper bound
    assert summary["worst_ratio"] == {"query": "q02", "value": 0.5}
    assert "plaintext_timeouts ['q01']" in summary_line(summary, {"overhead": 2.0})


def test_the_table_and_plot_mark_the_bound(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    bench = _bench(link="cloud")
    figures, _ = _measure(monkeypatch, bench, _timeout)
    assert figures.link_ratio_at_most is None  # over a real link nothing is computed
    bench.figures = [figures]
    _, rows = table_rows(bench)
    assert rows[0][1] == "> 120" and str(rows[0][3]).startswith("≤ ")
    plot(str(tmp_path / "r.png"), bench)
    assert (tmp_path / "r.png").stat().st_size > 0


def test_a_plaintext_error_records_nothing_for_veil(monkeypatch: pytest.MonkeyPatch) -> None:
    def fails() -> tuple[float, int]:
        raise RuntimeError("syntax error")

    monkeypatch.setattr(analytic, "_timed_plain", lambda *args: fails())
    worker = _Worker()
    figures = analytic.measure_query(_bench(), "q01", _Plain(), worker, duckdb.connect())  # type: ignore[arg-type]
    assert figures.status.startswith("error (plaintext)") and worker.runs == 0
