"""Sizes on disk: the plaintext's, measured at load, and each stored column's on DuckDB."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from veil.backends.duckdb import DuckDBBackend
from veil.design.model import TableDesign
from veil.load import plain_size
from veil.load.sources import SourceTable

pytestmark = pytest.mark.unit

_ROWS = 400_000  # past the sample: the measure is scaled to the table's rows


def _table() -> TableDesign:
    return TableDesign("t", "t_t", "c_id", [], [])


def test_the_plaintext_is_measured_on_a_sample_scaled_to_its_rows(tmp_path: Path) -> None:
    con = duckdb.connect(str(tmp_path / "source.duckdb"))
    con.execute(
        f"CREATE TABLE t AS SELECT range AS k, range % 7 AS g, 'text ' || (range % 100) AS s "
        f"FROM range({_ROWS})"
    ).fetchall()
    con.execute("CHECKPOINT").fetchall()
    table = _table()
    plain_size.measure(SourceTable("t", "t"), con, table, _ROWS)
    whole = DuckDBBackend(f"duckdb://{tmp_path / 'source.duckdb'}")
    con.close()
    try:
        stored = whole.table_bytes("t")
    finally:
        whole.close()
    assert table.plain_bytes == pytest.approx(stored, rel=0.25)
    # a CSV's rows are counted where the load does not know them
    csv = tmp_path / "t.csv"
    duckdb.sql(f"COPY (SELECT range AS k FROM range(1000)) TO '{csv}'")
    counted = _table()
    plain_size.measure(SourceTable("t", f"read_csv('{csv}')"), duckdb.connect(), counted, None)
    assert counted.plain_bytes > 0


def test_each_columns_share_of_its_tables_blocks(tmp_path: Path) -> None:
    backend = DuckDBBackend(f"duckdb://{tmp_path / 'server.duckdb'}")
    try:
        backend.execute(
            f"CREATE TABLE t AS SELECT range AS id, range % 3 AS few, "
            f"hash(range) AS scattered FROM range({_ROWS})"
        )
        columns = backend.column_bytes("t")
        assert sum(columns.values()) == pytest.approx(backend.table_bytes("t"))
        # three values bit-pack to two bits a row; a hash's 64 bits do not compress
        assert columns["few"] < columns["scattered"] / 10
    finally:
        backend.close()


def test_tables_measured_together_as_apart(tmp_path: Path) -> None:
    """A load measures all its tables in one scratch file: each as it measures alone."""
    con = duckdb.connect()
    con.execute(f"CREATE TABLE a AS SELECT range AS k, range % 7 AS g FROM range({_ROWS})")
    con.execute("CREATE TABLE b AS SELECT 'word ' || (range % 50) AS s FROM range(3000)")
    con.execute("CREATE TABLE e AS SELECT 1 AS k WHERE false")
    together = [_table(), _table(), _table()]
    sources = [SourceTable("a", "a"), SourceTable("b", "b"), SourceTable("e", "e")]
    plain_size.measure_all(
        [(s, t, n) for s, t, n in zip(sources, together, [_ROWS, 3000, 0], strict=True)], con
    )
    for source, measured, rows in zip(sources, together, [_ROWS, 3000, 0], strict=True):
        alone = _table()
        plain_size.measure(source, con, alone, rows)
        assert measured.plain_bytes == pytest.approx(alone.plain_bytes, rel=0.25)
    assert together[2].plain_bytes == 0.0
    con.close()
