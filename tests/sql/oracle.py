"""Oracle helpers: fixture files and Veil-versus-plaintext assertions."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa
import sqlglot

from veil.bench.compare import difference
from veil.exec.session import Session
from veil.sql.state import Pass

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


def without(passes: tuple[Pass, ...], dropped: Pass) -> tuple[Pass, ...]:
    """The planner's passes less one (to compare a plan with and without it)."""
    assert dropped in passes
    return tuple(p for p in passes if p is not dropped)
