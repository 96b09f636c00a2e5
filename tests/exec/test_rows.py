"""Result rows as DuckDB's Python API gives them (DB-API parity)."""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pytest

from veil.exec.rows import table_rows

pytestmark = pytest.mark.unit

EDGES = (
    "SELECT * FROM (VALUES ('infinity'::DATE, '-infinity'::TIMESTAMP, DATE '1995-01-01', "
    "MAP {'a': 1}), ('-infinity'::DATE, '290000-01-01'::TIMESTAMP, NULL, NULL), "
    "(DATE '10000-01-01', TIMESTAMP '20000-01-01 10:00:00.5', DATE '0001-01-01', MAP {}), "
    "(NULL, 'infinity'::TIMESTAMP, DATE '9999-12-31', NULL))"
)


def test_rows_match_duckdb_fetchall() -> None:
    result = duckdb.sql(EDGES)
    arrow = duckdb.sql(EDGES).arrow()
    table = arrow.read_all() if isinstance(arrow, pa.RecordBatchReader) else arrow
    assert table_rows(table) == result.fetchall()


def test_repeated_column_names_keep_every_column() -> None:
    table = pa.table([pa.array([1]), pa.array([2])], names=["x", "x"])
    assert table_rows(table) == [(1, 2)]
