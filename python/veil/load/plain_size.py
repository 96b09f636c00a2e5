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
from concurrent.futures import ThreadPoolExecutor
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
    measure_all([(source, table, rows)], con)


def measure_all(
    tables: list[tuple[SourceTable, TableDesign, int | None]], con: duckdb.DuckDBPyConnection
) -> None:
    """``measure`` each table, their samples written to one scratch file: a DuckDB file
    opened, checkpointed and counted once for a load, not once per table (TPC-DS's 24
    tables took 5 s of a 34 s load that way). One sample is held at a time."""
    set_sizes(tables, sample_sizes([source for source, _, _ in tables], con), con)


# each table's sample: its rows and its bytes as the server stores them
Sampled = list[tuple[int, float]]


def sample_sizes(sources: list[SourceTable], con: duckdb.DuckDBPyConnection) -> Sampled:
    """Each source's first ``SAMPLE_ROWS`` rows' size as a DuckDB server stores them."""
    sampled: list[int] = []  # each table's sample rows
    with tempfile.TemporaryDirectory(prefix="veil-plain-") as scratch:
        path = Path(scratch) / "plain.duckdb"
        written = duckdb.connect(str(path))
        try:
            for at, source in enumerate(sources):
                sql = f"SELECT * FROM {source.relation_sql} LIMIT {SAMPLE_ROWS}"
                sample = con.sql(sql).to_arrow_table()
                sampled.append(sample.num_rows)
                if sample.num_rows:
                    written.register("sample", sample)
                    written.execute(f"CREATE TABLE t{at} AS SELECT * FROM sample").fetchall()
                    written.unregister("sample")
        finally:
            written.close()
        sized = DuckDBBackend(f"duckdb://{path}")
        try:  # counted as the server's tables are
            stored = [
                float(sized.table_bytes(f"t{at}")) if n else 0.0 for at, n in enumerate(sampled)
            ]
        finally:
            sized.close()
    return list(zip(sampled, stored, strict=True))


def set_sizes(
    tables: list[tuple[SourceTable, TableDesign, int | None]],
    sampled: Sampled,
    con: duckdb.DuckDBPyConnection,
) -> None:
    """Set each table's ``plain_bytes``: its sample's size scaled to its rows."""
    for (source, table, rows), (sample_rows, size) in zip(tables, sampled, strict=True):
        if sample_rows == 0:
            table.plain_bytes = 0.0
            continue
        if rows is None:
            rows = int(con.sql(f"SELECT count(*) FROM {source.relation_sql}").fetchall()[0][0])
        table.plain_bytes = round(size / sample_rows * rows, 1)


class Sampling:
    """``sample_sizes`` of a load's sources on a thread of its own, started before the
    design is made: the greedy designer is Python on one core, the sampling DuckDB's
    on the other (2.9 s of TPC-DS SF 1's load before the tables, on a busy machine)."""

    def __init__(self, sources: list[SourceTable], con: duckdb.DuckDBPyConnection) -> None:
        self.names = [source.name for source in sources]
        self._cursor = con.cursor()  # a connection of its own to the same source database
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="veil-plain-size")
        self._sampled = self._pool.submit(sample_sizes, sources, self._cursor)

    def sizes(self) -> dict[str, tuple[int, float]]:
        """Each source's sample (rows, bytes), by table name (waits for them)."""
        return dict(zip(self.names, self._sampled.result(), strict=True))

    def close(self) -> None:
        """Stop a sampling no load waits for any more (the design failed)."""
        if not self._sampled.done():
            self._cursor.interrupt()
        self._pool.shutdown(wait=True)
        self._cursor.close()
