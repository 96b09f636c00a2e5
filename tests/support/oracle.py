"""Oracle helpers: fixture files and Veil-versus-plaintext assertions."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
import sqlglot

from tests.conftest import SPARK_CORES
from veil.load.loader import load
from veil.session.session import Session
from veil.sql import fallbacks
from veil.sql.plan import SplitPlan
from veil.sql.state import Pass
from veil_dev.bench.compare import difference
from veil_dev.servers.spark import local_url

FIXTURES = Path(__file__).parent / "fixtures"


def read_fixture(name: str) -> list[tuple[str, str]]:
    """``(title, sql)`` pairs from a fixture file of ``-- title:`` blocks."""
    cases: list[tuple[str, str]] = []
    title, lines = None, []
    for line in (FIXTURES / name).read_text().splitlines():
        if line.startswith("-- title:"):
            if title:
                cases.append((title, "\n".join(lines).strip().rstrip(";")))
            title, lines = line.removeprefix("-- title:").strip(), []
        elif line.strip():
            lines.append(line)
    if title:
        cases.append((title, "\n".join(lines).strip().rstrip(";")))
    return cases


def assert_same(
    veil: pa.Table, expected: list[tuple[object, ...]], ordered: bool, sql: str
) -> None:
    problem = difference(veil, expected, ordered)
    assert problem is None, f"{problem}\n{sql}"


def check_query(session: Session, plain: duckdb.DuckDBPyConnection, sql: str) -> None:
    """Veil's answer to ``sql`` is plaintext DuckDB's (in order if the query orders)."""
    ordered = sqlglot.parse_one(sql, read="duckdb").args.get("order") is not None
    assert_same(session.run(sql).table, plain.execute(sql).fetchall(), ordered, sql)


def check_writes(
    session: Session, plain: duckdb.DuckDBPyConnection, statements: list[str], queries: list[str]
) -> None:
    """``statements`` run on both sides, then every one of ``queries`` answers alike."""
    for statement in statements:
        session.run(statement)
        plain.execute(statement)
    for sql in queries:
        check_query(session, plain, sql)


def checked_plan(session: Session, plain: duckdb.DuckDBPyConnection, sql: str) -> SplitPlan:
    """The split plan of ``sql``, after checking its answer and that nothing fell back."""
    before = fallbacks.counts()
    check_query(session, plain, sql)
    assert fallbacks.since(before) == []
    plan = session.run(sql).plan
    assert plan is not None and plan.pushdown and plan.fallback is None
    return plan


def server_url(request: pytest.FixtureRequest, root: Path, schema: str) -> str:
    """The fixture's server: an embedded DuckDB file, a schema of the test cluster, or a
    warehouse on the run's local Spark."""
    if request.param == "duckdb":
        return f"duckdb:///{root}/server.duckdb"
    if request.param == "spark":
        request.getfixturevalue("spark_local")
        return local_url(root / "warehouse", SPARK_CORES)
    return str(request.getfixturevalue("postgres_cluster").create_schema(schema))


def load_tables(
    request: pytest.FixtureRequest,
    root: Path,
    tables: dict[str, str],
    workload: list[str],
) -> tuple[Session, duckdb.DuckDBPyConnection]:
    """Small tables (name -> DuckDB query) through Veil on the fixture's backend, and in plain DuckDB.

    The server's schema is named after the test module, so modules never share one.
    """
    source = root / "source"
    source.mkdir()
    plain = duckdb.connect()
    for name, sql in tables.items():
        plain.execute(f"CREATE TABLE {name} AS {sql}")
        plain.table(name).write_parquet(str(source / f"{name}.parquet"))
    schema = "veil_" + request.module.__name__.rsplit(".", 1)[-1]
    load(
        str(source),
        server_url(request, root, schema),
        str(root / "client"),
        workload,
        lambda _: None,
    )
    return Session(root / "client"), plain


@contextmanager
def loaded_tables(
    request: pytest.FixtureRequest, root: Path, tables: dict[str, str], workload: list[str]
) -> Iterator[tuple[Session, duckdb.DuckDBPyConnection]]:
    """``load_tables``'s session and plaintext connection, both closed on the way out."""
    session, plain = load_tables(request, root, tables, workload)
    try:
        yield session, plain
    finally:
        session.close()
        plain.close()


def without(passes: tuple[Pass, ...], dropped: Pass) -> tuple[Pass, ...]:
    """The planner's passes less one (to compare a plan with and without it)."""
    assert dropped in passes
    return tuple(p for p in passes if p is not dropped)
