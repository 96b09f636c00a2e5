"""The plaintext's size as a DuckDB server would store it: the unit of the design's space budget.

MONOMI's budget is S times the plaintext database. On DuckDB that is the
compressed plaintext, four times smaller than its values' widths (TPC-H SF
1: 286 MB on disk, 1.03 GB of values): a budget in widths let a design of
"1.86 x" take 2.54 times the plaintext's disk. So the load measures it, on
the client (the plaintext never leaves it): the table's first two row groups
written to a scratch DuckDB file, its blocks counted as the server's are
(``DuckDBBackend.table_bytes``), scaled to the table's rows. Lineitem's
sample gives 192.0 MB for the 190.1 MB its whole table takes.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import duckdb

from veil.backends.duckdb import DuckDBBackend
from veil.design.model import TableDesign
from veil.load.sources import SourceTable

SAMPLE_ROWS = 245_760  # two of DuckDB's row groups


def measure(
    source: SourceTable, con: duckdb.DuckDBPyConnection, table: TableDesign, rows: int | None
) -> None:
    """Set ``table.plain_bytes`` from a sample of ``source`` (read through ``con``) of
    ``rows`` rows (None: counted here, a CSV's scan)."""
    sample = con.sql(f"SELECT * FROM {source.relation_sql} LIMIT {SAMPLE_ROWS}").to_arrow_table()
    if sample.num_rows == 0:
        table.plain_bytes = 0.0
        return
    with tempfile.TemporaryDirectory(prefix="veil-plain-") as scratch:
        path = Path(scratch) / "plain.duckdb"
        written = duckdb.connect(str(path))
        try:
            written.register("sample", sample)
            written.execute("CREATE TABLE t AS SELECT * FROM sample").fetchall()
        finally:
            written.close()
        sized = DuckDBBackend(f"duckdb://{path}")
        try:
            stored = float(sized.table_bytes("t"))  # counted as the server's tables are
        finally:
            sized.close()
    if rows is None:
        rows = int(con.sql(f"SELECT count(*) FROM {source.relation_sql}").fetchall()[0][0])
    table.plain_bytes = round(stored / sample.num_rows * rows, 1)
