"""A live PostgreSQL database as the source of ``veil load``: its tables, read as Arrow.

``veil load --source postgresql://...`` moves a running plaintext database
into Veil without exporting files. Every base table of the URL's current
schema (its ``search_path``, else ``public``) is read in one REPEATABLE READ,
READ ONLY transaction, so the tables agree with each other (foreign keys hold)
while the application goes on writing. Rows stream through ADBC as Arrow
batches into the load's own DuckDB, which spills to disk past its memory
limit: the loader then reads them as it reads any source (several scans:
types, ranges, batches).

Types follow DuckDB's PostgreSQL scanner: ``numeric(p, s)`` is DECIMAL(p, s)
(exact; ADBC sends it as text, cast back here), ``numeric`` without a
precision (or above 38 digits) is DOUBLE, and the progress output says so for
each such column; uuid and json(b) arrive as text and become UUID and JSON.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import duckdb

from veil.exec.local_duckdb import source_duckdb
from veil.sql.errors import ClientDirectoryError

_CONNECT_SECONDS = 10
_BATCH_ROWS = 65536
# PostgreSQL types read as text and cast back to these in DuckDB
_AS_TEXT = {"numeric": None, "uuid": "UUID", "json": "JSON", "jsonb": "JSON"}


@dataclass
class PgColumn:
    name: str
    udt: str  # PostgreSQL's type name (int4, numeric, _text...)
    precision: int | None
    scale: int | None

    def selected(self) -> str:
        """The column in the PostgreSQL SELECT (as text where ADBC's Arrow would differ)."""
        quoted = _pg_ident(self.name)
        return f"{quoted}::text AS {quoted}" if self.udt in _AS_TEXT else quoted

    def cast(self) -> str:
        """The column in DuckDB, typed as DuckDB's PostgreSQL scanner types it."""
        quoted = _pg_ident(self.name)
        if self.udt == "numeric":
            return f"CAST({quoted} AS {self.numeric_type()}) AS {quoted}"
        target = _AS_TEXT.get(self.udt)
        return f"CAST({quoted} AS {target}) AS {quoted}" if target else quoted

    def numeric_type(self) -> str:
        if self.precision is not None and self.precision <= 38:
            return f"DECIMAL({self.precision}, {self.scale or 0})"
        return "DOUBLE"


def open_postgres_source(
    url: str, say: Callable[[str], None] = lambda _: None
) -> tuple[duckdb.DuckDBPyConnection, list[tuple[str, str]]]:
    """A DuckDB connection holding the database's tables; ``(name, relation)`` of each."""
    import adbc_driver_postgresql.dbapi as adbc

    try:
        separator = "&" if "?" in url else "?"
        timed = f"{url}{separator}connect_timeout={_CONNECT_SECONDS}"
        source = adbc.connect(timed, autocommit=True)
    except adbc.Error as exc:
        raise ClientDirectoryError(f"cannot read the source database: {_first_line(exc)}") from None
    con = source_duckdb()
    tables: list[tuple[str, str]] = []
    try:
        cursor = source.cursor()
        try:
            cursor.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            for name in _table_names(cursor):
                columns = _columns(cursor, name)
                for column in columns:
                    if column.udt == "numeric" and column.numeric_type() == "DOUBLE":
                        say(
                            f"{name}.{column.name}: numeric without a precision of at most "
                            "38 digits is loaded as DOUBLE (declare numeric(p, s) to keep it "
                            "exact)"
                        )
                say(f"reading {name} from the source database")
                _copy_table(cursor, con, name, columns)
                tables.append((name, f'main."{name.replace(chr(34), chr(34) * 2)}"'))
            cursor.execute("COMMIT")
        finally:
            cursor.close()
    except adbc.Error as exc:
        con.close()
        raise ClientDirectoryError(
            f"reading the source database failed: {_first_line(exc)}"
        ) from None
    except BaseException:
        con.close()
        raise
    finally:
        source.close()
    if not tables:
        con.close()
        raise ClientDirectoryError(
            "the source database has no tables in its schema (the URL's search_path, else "
            "public); give ?options=-csearch_path%3DSCHEMA for another schema"
        )
    return con, tables


def _table_names(cursor: Any) -> list[str]:
    cursor.execute(
        "SELECT table_name::text FROM information_schema.tables "
        "WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' ORDER BY 1"
    )
    return [str(name) for name in cursor.fetch_arrow_table().column(0).to_pylist()]


def _columns(cursor: Any, table: str) -> list[PgColumn]:
    escaped = table.replace("'", "''")
    cursor.execute(
        "SELECT column_name::text, udt_name::text, numeric_precision::int, numeric_scale::int "
        "FROM information_schema.columns WHERE table_schema = current_schema() "
        f"AND table_name = '{escaped}' ORDER BY ordinal_position"
    )
    rows = cursor.fetch_arrow_table().to_pylist()
    return [
        PgColumn(
            str(r["column_name"]),
            str(r["udt_name"]),
            r["numeric_precision"] if r["udt_name"] == "numeric" else None,
            r["numeric_scale"],
        )
        for r in rows
    ]


def _copy_table(
    cursor: Any, con: duckdb.DuckDBPyConnection, name: str, columns: list[PgColumn]
) -> None:
    """Stream the table's rows, batch by batch, into a DuckDB table of the same name."""
    selected = ", ".join(c.selected() for c in columns)
    cursor.execute(f"SELECT {selected} FROM {_pg_ident(name)}")
    incoming = cursor.fetch_record_batch()
    con.register("veil_incoming", incoming)
    try:
        casts = ", ".join(c.cast() for c in columns)
        con.execute(f"CREATE TABLE main.{_pg_ident(name)} AS SELECT {casts} FROM veil_incoming")
    finally:
        con.unregister("veil_incoming")


def _pg_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
