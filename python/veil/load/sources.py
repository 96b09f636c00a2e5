"""Plaintext sources for ``veil load``: Parquet or CSV files, a DuckDB database, or a
live PostgreSQL database (``veil.load.pg_source``).

A directory holds one file per table (the file's stem names the table); a
single file is one table; a ``.duckdb``/``.db`` file contributes all its
tables. The source is read by an in-process DuckDB, so its types are DuckDB's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow as pa

from veil.design.model import Column
from veil.encoding import LOSSLESS_KINDS, SqlType, normalize_type
from veil.exec.local_duckdb import source_duckdb
from veil.load.pg_source import open_postgres_source
from veil.sql.errors import ClientDirectoryError

_DATABASES = (".duckdb", ".db")
_POSITION = "file_row_number"  # the column of a row's position read_parquet can add
_SOURCE_DB = "veil_source"


@dataclass
class SourceTable:
    name: str
    relation_sql: str  # a FROM item the source connection can read
    # the same rows with their position in the source as a last column, ``file_row_number``
    # (a Parquet file's), where the reader gives it for free
    positioned_sql: str | None = None

    def columns(self, con: duckdb.DuckDBPyConnection) -> list[Column]:
        described = con.sql(f"DESCRIBE SELECT * FROM {self.relation_sql}").fetchall()
        return [
            Column(str(row[0]).lower(), normalize_type(str(row[1])), label=label_of(str(row[0])))
            for row in described
        ]

    def row_count(self, con: duckdb.DuckDBPyConnection) -> int | None:
        """The number of rows, where knowing it is cheap (not for CSV: that takes a scan)."""
        if self.relation_sql.startswith("read_csv"):
            return None
        [(count,)] = con.sql(f"SELECT count(*) FROM {self.relation_sql}").fetchall()
        return int(count)

    def batches(
        self, con: duckdb.DuckDBPyConnection, batch_rows: int, order: str | None = None
    ) -> Iterator[pa.RecordBatch]:
        """The rows in batches: in source order, or grouped by ``order`` (an ORDER BY list).

        Rows ``order`` ranks equal keep their source order (the scan's
        position breaks ties: DuckDB's sort alone is not stable).
        """
        replace = self._as_text(con)
        if order is None:
            query = f"SELECT *{replace} FROM {self.relation_sql}"
        elif self.positioned_sql and _POSITION not in {c.name for c in self.columns(con)}:
            # the reader's row numbers: no window over the whole scan (TPC-DS SF 1's
            # store_sales came ordered in 5.6 s against 7.1 s)
            query = (
                f"SELECT * EXCLUDE ({_POSITION}){replace} FROM {self.positioned_sql} "
                f"ORDER BY {order}, {_POSITION}"
            )
        else:
            query = (
                f"SELECT * EXCLUDE (__veil_position){replace} FROM (SELECT *, row_number() OVER () "
                f"AS __veil_position FROM {self.relation_sql}) ORDER BY {order}, __veil_position"
            )
        reader = con.sql(query).to_arrow_reader(batch_rows)
        yield from reader

    def _as_text(self, con: duckdb.DuckDBPyConnection) -> str:
        """A ``*``'s REPLACE clause: the columns DuckDB's Arrow output would change, as text.

        A HUGEINT beyond 38 digits has no DECIMAL(38, 0), a UHUGEINT's comes out
        wrong, and a BIT's is its storage bytes; the text of each is exact, and
        DuckDB casts it back (``veil.encoding``)."""
        lossy = [c for c in self.columns(con) if SqlType(c.type).kind in LOSSLESS_KINDS]
        if not lossy:
            return ""
        names = [(c.label or c.name).replace('"', '""') for c in lossy]
        return " REPLACE (" + ", ".join(f'CAST("{n}" AS VARCHAR) AS "{n}"' for n in names) + ")"

    def profile(
        self, con: duckdb.DuckDBPyConnection, columns: list[str]
    ) -> list[tuple[pa.Array, pa.Array, int]]:
        """``(min, max, NULL rows)`` of each column or per-row expression, in one scan.

        Min and max as one-value Arrow arrays: Python's dates cannot hold
        DuckDB's extremes (``infinity`` would come back as 9999-12-31).
        """
        if not columns:
            return []
        values = self.referenced(con, columns)
        parts = ", ".join(f"min({v}), max({v}), count(*) - count({v})" for v in values)
        row = con.sql(f"SELECT {parts} FROM {self.relation_sql}").to_arrow_table()
        return [
            (
                row.column(3 * i).combine_chunks(),
                row.column(3 * i + 1).combine_chunks(),
                int(row.column(3 * i + 2)[0].as_py()),
            )
            for i in range(len(columns))
        ]

    def referenced(self, con: duckdb.DuckDBPyConnection, columns: list[str]) -> list[str]:
        """Columns quoted, expressions in parentheses: what a SELECT list can hold."""
        names = {c.name for c in self.columns(con)}
        return [f'"{c}"' if c in names else f"({c})" for c in columns]


def open_source(
    path: str, say: Callable[[str], None] = lambda _: None
) -> tuple[duckdb.DuckDBPyConnection, list[SourceTable]]:
    """A DuckDB connection that can read the source, and the tables it holds.

    ``say`` hears what a PostgreSQL source reports (its reading, lossy types)."""
    if path.startswith(("postgresql://", "postgres://")):
        con, read = open_postgres_source(path, say)
        return con, [SourceTable(name.lower(), relation) for name, relation in read]
    source = Path(path)
    con = source_duckdb()
    if source.is_dir():
        files = sorted(f for f in source.iterdir() if f.suffix.lower() in (".parquet", ".csv"))
        if not files:
            raise ClientDirectoryError(f"{source} holds no .parquet or .csv files to load")
        return con, [_file_table(f) for f in files]
    if not source.exists():
        raise ClientDirectoryError(f"source {source} does not exist")
    if source.suffix.lower() in _DATABASES:
        con.execute(f"ATTACH '{_sql_string(str(source))}' AS {_SOURCE_DB} (READ_ONLY)")
        names = con.sql(
            f"SELECT table_name FROM information_schema.tables WHERE table_catalog = '{_SOURCE_DB}'"
        ).fetchall()
        return con, [
            SourceTable(str(n[0]).lower(), f'{_SOURCE_DB}."{n[0]}"') for n in sorted(names)
        ]
    if source.suffix.lower() in (".parquet", ".csv"):
        return con, [_file_table(source)]
    raise ClientDirectoryError(
        f"cannot load {source}: give a directory of .parquet/.csv files, one such file, "
        "or a .duckdb database"
    )


def _file_table(path: Path) -> SourceTable:
    quoted = _sql_string(str(path))
    if path.suffix.lower() == ".parquet":
        positioned = f"read_parquet('{quoted}', file_row_number = true)"
        return SourceTable(path.stem.lower(), f"read_parquet('{quoted}')", positioned)
    # Types inferred over the whole file, not DuckDB's first 20,480 rows: a column whose
    # values change kind past the sample (an id that turns alphanumeric) would fail the
    # load half-way with a conversion error. One more pass over the file.
    return SourceTable(path.stem.lower(), f"read_csv_auto('{quoted}', sample_size = -1)")


def label_of(name: str) -> str | None:
    """The source's spelling of a column name, kept where lower-casing changed it."""
    return name if name != name.lower() else None


def _sql_string(text: str) -> str:
    return text.replace("'", "''")
