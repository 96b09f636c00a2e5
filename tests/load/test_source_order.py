"""A Parquet source's rows in a load's order (``SourceTable.batches`` with ``order``).

Rows the ORDER BY ranks equal keep their source order: a Parquet file's by
the reader's own row numbers (``file_row_number``), anything else's by a
window's, and both give the same rows in the same order, also where the
source has a column of that name.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from veil.load.sources import SourceTable, open_source

ROWS = 50_000  # several row groups and batches, read on every thread


def _ordered(source: SourceTable, con: duckdb.DuckDBPyConnection, order: str) -> pa.Table:
    return pa.Table.from_batches(list(source.batches(con, 4096, order)))


@pytest.mark.parametrize("position", ["k", "file_row_number"])
def test_ties_keep_the_source_order_as_a_window_keeps_it(tmp_path: Path, position: str) -> None:
    path = tmp_path / "t.parquet"
    duckdb.sql(
        f"SELECT (i * 7919) % {ROWS} AS {position}, i % 3 AS g, "
        f"CASE WHEN i % 11 = 0 THEN NULL ELSE i % 5 END AS d FROM range({ROWS}) AS t(i)"
    ).write_parquet(str(path), row_group_size=8192)
    con, [source] = open_source(str(path))
    assert source.positioned_sql is not None
    windowed = SourceTable(source.name, source.relation_sql)  # no reader positions
    order = 'md5(CAST("g" AS VARCHAR)), "d"'
    found = _ordered(source, con, order)
    assert found.column_names == [position, "g", "d"]
    assert found.equals(_ordered(windowed, con, order))
    expected = con.sql(
        f"SELECT * FROM (SELECT *, row_number() OVER () AS p FROM {source.relation_sql}) "
        f"ORDER BY {order}, p"
    ).to_arrow_table()
    assert found.equals(expected.drop_columns(["p"]))
