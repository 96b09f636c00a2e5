"""The cost model: calibration (measured, kept, re-measured when stale), plan estimates and
``veil explain --analyze`` (estimates beside what running the plan took), on both backends."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sqlglot import exp

from veil.backends.base import Estimate
from veil.cost.calibration import CALIBRATION_FILE, Calibration, calibration_of
from veil.cost.model import _skipped, estimate_plan, parse_bandwidth, plan_steps
from veil.exec.server import FetchStats
from veil.frontend.analyze import explain_analyze
from veil.load.loader import load
from veil.session.session import Session

ROWS = 20_000
WORKLOAD = [
    "SELECT o.id, c.name FROM orders o JOIN customers c ON o.cust = c.id WHERE o.amount < 50",
    "SELECT status, count(*), sum(amount) FROM orders GROUP BY status",
    "SELECT count(*) FROM orders WHERE note LIKE '%rush%'",
]


@pytest.fixture(
    params=["duckdb", "duckdb onions", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def client(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """The data loaded for the workload, or as onions (no workload: JOIN-ADJ, wrapped layers)."""
    source = tmp_path / "source"
    source.mkdir()
    ids = list(range(ROWS))
    pq.write_table(
        pa.table(
            {
                "id": ids,
                "cust": [i % 500 for i in ids],
                "amount": pa.array([(i * 37) % 1000 for i in ids], pa.int64()),
                "status": [("open", "paid", "late")[i % 3] for i in ids],
                "note": [f"note {i % 97}{' rush' if i % 11 == 0 else ''}" for i in ids],
            }
        ),
        source / "orders.parquet",
    )
    pq.write_table(
        pa.table({"id": list(range(500)), "name": [f"customer {i}" for i in range(500)]}),
        source / "customers.parquet",
    )
    backend, _, onions = request.param.partition(" ")
    url = request.getfixturevalue(f"{backend}_url")
    load(str(source), url, str(tmp_path / "client"), [] if onions else WORKLOAD, lambda _: None)
    return tmp_path / "client"


def test_calibration_is_measured_once_and_kept(client: Path) -> None:
    session = Session(str(client))
    try:
        first = calibration_of(session)
        path = client / CALIBRATION_FILE
        assert path.exists()
        assert first.server == session.backend.dialect
        # every column a query may fetch has its own figure, and each kind a median
        fetchable = [
            e
            for t in session.design.tables.values()
            for e in t.encryptions
            if e.scheme in ("DET", "OPE", "RND", "BLOCKS") and not e.is_expression
        ]
        assert all(e.name in first.decrypt_ns for e in fetchable)
        assert first.classes() and all(v > 0 for v in first.classes().values())
        assert first.server_seconds_per_cost > 0 and first.fetch_ns_per_byte > 0
        assert 0 < first.step_seconds < 1  # the client's own work around a statement
        if first.server == "postgres":  # a row's own fetch cost, apart from its bytes
            # (measured: 10,000 rows more may time as nothing more on a busy machine,
            # but a row never costs a millisecond)
            assert 0 <= first.fetch_ns_per_row < 1e6
            # hash tables past the caches and index lookups: none in 20,000 rows to time
            assert first.build_ns == first.lookup_ns == 0
        else:  # DuckDB's whole-column fetch counts it in the bytes
            assert first.fetch_ns_per_row == 0 and "filter_bytes" in first.operator_ns
        # PostgreSQL's JIT priced per function where it compiles (both levels), else nowhere
        assert set(first.jit_seconds) in (set(), {"plain", "optimized"})
        assert first.server == "postgres" or not first.jit_seconds
        assert calibration_of(session).measured == first.measured  # read back, not re-measured
        stale = json.loads(path.read_text())
        path.write_text(json.dumps({**stale, "version": 0}))
        assert Calibration.load(str(path)) is None  # another version: measured again
        assert calibration_of(session).version == first.version
    finally:
        session.close()


def test_a_plan_is_estimated_step_by_step(client: Path) -> None:
    session = Session(str(client))
    try:
        calibration = calibration_of(session)
        for sql in WORKLOAD:
            plan = session.plan(exp.maybe_parse(sql, dialect="duckdb"))
            cost = estimate_plan(session, plan, calibration)
            assert [s.key for s in cost.steps] == [k for k, _, _ in plan_steps(plan)]
            assert all(s.rows >= 0 and s.server_seconds > 0 for s in cost.steps)
            assert any(s.rows > 0 for s in cost.steps)  # the workload's queries return rows
            assert cost.seconds >= sum(s.seconds for s in cost.steps) > 0
            slow = estimate_plan(session, plan, calibration, parse_bandwidth("monomi"))
            assert slow.seconds >= cost.seconds  # a slower link never makes a plan cheaper
    finally:
        session.close()


def test_an_ordered_table_is_priced_for_the_blocks_its_range_reads(client: Path) -> None:
    """Rows in ``amount`` order (the workload's range filter): ``amount < 50`` reads ~5%."""
    session = Session(str(client))
    try:
        table = session.design.table("orders")
        plan = session.plan(exp.maybe_parse(WORKLOAD[0], dialect="duckdb"))
        scan = next(s for s in plan.scans if s.table.name == "orders")
        if not table.sort_by:  # onions: the OPE layer is wrapped, rows keep source order
            assert scan.read_share is None
            return
        assert table.sort_by == "amount"
        assert scan.read_share == pytest.approx(0.05, abs=0.01)
        estimate = Estimate(1.0, 1000.0, {table.server_name: 800.0}, block_rows=100)
        assert table.cluster_by == ["status"]  # three stretches of ids, one per status
        read = scan.read_share + 3 * 100 / ROWS  # half a block at each end of each stretch
        assert _skipped(estimate, [scan]) == pytest.approx(800.0 * (1 - read))
        assert _skipped(Estimate(1.0, 1000.0), [scan]) == 0.0  # a server that skips nothing
        assert _skipped(estimate, [scan, scan]) == 0.0  # two scans of one table: unknown
    finally:
        session.close()


def test_explain_analyze_runs_the_query_and_shows_both_figures(client: Path) -> None:
    session = Session(str(client))
    try:
        out = explain_analyze(session, WORKLOAD[0])
        expected = session.run(WORKLOAD[0]).table.num_rows
        assert f"estimated vs actual ({expected:,} result rows" in out
        assert "RemoteSQL 1:" in out and "whole query" in out
        phases = out.split("where a statement's time goes")[1].splitlines()
        assert "plan cache | parse | plan | encrypt | server | decrypt | local" in phases[1]
        assert phases[4].split("|")[1].strip() == "hit"  # the last run found its plan cached
        plan = session.plan(exp.maybe_parse(WORKLOAD[1], dialect="duckdb"))
        stats = FetchStats()
        session.execute_plan(plan, stats)
        # each step's statements are counted where the estimate looks for them
        assert set(stats.steps) == {k for k, _, _ in plan_steps(plan)}
        assert sum(s.rows for s in stats.steps.values()) > 0
    finally:
        session.close()


def test_the_cli_calibrates_and_refuses_a_bad_bandwidth(client: Path) -> None:
    veil = [sys.executable, "-m", "veil"]
    done = subprocess.run([*veil, "calibrate", str(client)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "ns per value" in done.stdout and "round trip" in done.stdout
    sql = "SELECT count(*) FROM orders WHERE status = 'paid'"
    done = subprocess.run(
        [*veil, "explain", str(client), sql, "--analyze", "--bandwidth", "monomi"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "link: 10 Mbit/s" in done.stdout
    done = subprocess.run(
        [*veil, "explain", str(client), sql, "--analyze", "--bandwidth", "fast"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "bandwidth 'fast'" in done.stderr


@pytest.mark.postgres
def test_a_statement_past_the_jit_threshold_is_priced_for_compiling(postgres_url: str) -> None:
    from veil.backends.postgres import PostgresBackend

    backend = PostgresBackend(postgres_url)
    try:
        sql = "SELECT count(*), sum(g) FROM generate_series(1, 1000) AS g WHERE g % 7 <> 3"
        assert backend.estimate(sql).jit_functions == 0  # far under jit_above_cost
        backend.execute("SET jit_above_cost = 0")
        try:
            compiled = backend.estimate(sql)
        finally:
            backend.execute("RESET jit_above_cost")
        jit = backend.execute("SHOW jit").column(0)[0].as_py()
        if jit == "on" and compiled.jit_functions == 0:
            pytest.skip("this PostgreSQL has no LLVM to compile with")
        assert compiled.jit_functions > 0 and not compiled.jit_optimized
    finally:
        backend.close()
    seconds = Calibration(
        server="postgres",
        decrypt_ns={},
        fetch_ns_per_byte=1.0,
        statement_seconds=0.0,
        server_seconds_per_cost=1e-6,
        local_ns_per_row=1.0,
        local_statement_seconds=0.0,
        ashe_ns_per_run=1.0,
        jit_seconds={"plain": 0.001, "optimized": 0.006},
    )
    assert seconds.compile_seconds(10, optimized=False) == pytest.approx(0.01)
    assert seconds.compile_seconds(10, optimized=True) == pytest.approx(0.06)


def test_bandwidths() -> None:
    assert parse_bandwidth("local") is None
    assert parse_bandwidth("LAN") == 1e9
    assert parse_bandwidth("100") == 100e6
    with pytest.raises(ValueError, match="positive"):
        parse_bandwidth("0")


def test_spearman_ranks() -> None:
    from veil_dev.bench.cost import spearman

    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 1, 2, 3], [1, 2, 3, 4]) == pytest.approx(0.9486832980505139)
