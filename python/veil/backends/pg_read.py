"""Query results straight into Arrow through ADBC's PostgreSQL driver.

psycopg hands each value over as a Python object, which costs more than the
server takes to send it: reading millions of ciphertexts that way is the
client's bottleneck. ``adbc-driver-postgresql`` (Apache Arrow ADBC) runs a
query as ``COPY (query) TO STDOUT (FORMAT BINARY)`` — or, with bound
parameters, as a prepared statement with binary results — and parses the
rows into Arrow columns in C++.

The reader keeps its own autocommitted connection next to the backend's
psycopg one, so it only serves reads that need no transaction state: the
backend sends everything else (DML, DDL, reads inside ``transaction()``,
parameters ADBC cannot bind) through psycopg. Session settings (``SET``) are
replayed on this connection so both run queries alike.

Results are conformed to the types the psycopg path gives (see
``veil.backends.postgres``): NUMERIC, which ADBC returns as text, becomes
``decimal128(38, s)``; a column of any other type ADBC cannot represent as
plain Arrow makes ``read`` return ``None`` and the caller reads the statement
again through psycopg.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from veil.backends.base import BackendError, Params, ServerUnavailableError

_INT64 = (-(2**63), 2**63 - 1)
_PLAIN_TYPES = (
    pa.bool_(),
    pa.int16(),
    pa.int32(),
    pa.int64(),
    pa.float32(),
    pa.float64(),
    pa.binary(),
    pa.string(),
    pa.date32(),
    pa.timestamp("us"),
    pa.timestamp("us", tz="UTC"),
)
_PG_TYPE = b"POSTGRESQL:type"
_PG_TYPMOD = b"POSTGRESQL:typmod"
# Types whose Arrow form differs from what the psycopg path gives (oid is int64 there).
_READ_ELSEWHERE = {b"oid"}


class NotPlainArrow(Exception):
    """A result column ADBC cannot give in Veil's Arrow types; read it through psycopg."""


def available() -> bool:
    try:
        import adbc_driver_postgresql.dbapi  # noqa: F401
    except ImportError:
        return False
    return True


def bindable(params: Params) -> bool:
    """Parameters ADBC binds exactly as the psycopg path would (bigint and bytea)."""
    for value in params or ():
        if isinstance(value, bool) or not isinstance(value, int | bytes):
            return False
        if isinstance(value, int) and not _INT64[0] <= value <= _INT64[1]:
            return False
    return True


class ArrowReader:
    """An autocommitted ADBC connection, opened on first use, that reads queries as Arrow."""

    def __init__(self, url: str, connect_seconds: int) -> None:
        self._url = _with_timeout(url, connect_seconds)
        self._con: Any = None
        self._settings: dict[str, str] = {}  # the last SET/RESET of each parameter

    def remember_setting(self, sql: str) -> None:
        """A ``SET``/``RESET`` the psycopg connection ran: apply it here too.

        Only the last statement per parameter is kept for a reconnect, so a
        setting toggled around every statement does not pile up.
        """
        words = sql.replace("=", " ").split()
        name = words[1].lower() if len(words) > 1 else sql
        if name in ("local", "session") and len(words) > 2:
            name = words[2].lower()
        self._settings.pop(name, None)
        self._settings[name] = sql
        if self._con is not None:
            self._run(sql)

    def read(self, sql: str, params: Params) -> pa.Table:
        """The query's rows as one table; raises ``NotPlainArrow`` for unusual types."""
        with _adbc_errors():
            cursor = self._connection().cursor()
            try:
                cursor.execute(sql, _bound(params))
                table = cursor.fetch_arrow_table()
            finally:
                cursor.close()
        return conform(table)

    def read_batches(self, sql: str, params: Params, batch_rows: int) -> Iterator[pa.RecordBatch]:
        """Start the query; its rows as batches of at most ``batch_rows`` (lazily fetched).

        The first batch is fetched before returning, so that a rejected
        statement or an unusual column type is reported here, not mid-stream.
        """
        with _adbc_errors():
            cursor = self._connection().cursor()
            try:
                cursor.execute(sql, _bound(params))
                reader = cursor.fetch_record_batch()
                conform_schema(reader.schema)  # raises NotPlainArrow before any row is read
                batches = iter(reader)
                first = next(batches, None)
            except BaseException:
                cursor.close()
                raise
        return _stream(cursor, first, batches, batch_rows)

    def close(self) -> None:
        if self._con is not None:
            con, self._con = self._con, None
            con.close()

    def _connection(self) -> Any:
        if self._con is None:
            import adbc_driver_postgresql.dbapi as adbc

            try:
                self._con = adbc.connect(self._url, autocommit=True)
            except adbc.Error as exc:
                raise ServerUnavailableError(
                    f"cannot open a second connection to the PostgreSQL server: {_message(exc)}"
                ) from exc
            for setting in self._settings.values():
                self._run(setting)
        return self._con

    def _run(self, sql: str) -> None:
        with _adbc_errors():
            cursor = self._connection().cursor()
            try:
                cursor.execute(sql)
            finally:
                cursor.close()


def _stream(
    cursor: Any, first: pa.RecordBatch | None, rest: Iterator[pa.RecordBatch], batch_rows: int
) -> Iterator[pa.RecordBatch]:
    try:
        batch = first
        while batch is not None:
            for conformed in conform(pa.Table.from_batches([batch])).to_batches():
                for start in range(0, conformed.num_rows, batch_rows):
                    yield conformed.slice(start, batch_rows)
            with _adbc_errors():
                batch = next(rest, None)
    finally:
        cursor.close()


@contextmanager
def _adbc_errors() -> Iterator[None]:
    """Map the driver's errors to Veil's, worded as the psycopg path words them."""
    import adbc_driver_manager

    try:
        yield
    except adbc_driver_manager.OperationalError as exc:
        raise ServerUnavailableError(f"lost the PostgreSQL server: {_message(exc)}") from exc
    except adbc_driver_manager.Error as exc:
        raise BackendError(f"the PostgreSQL server rejected a statement: {_message(exc)}") from exc


def conform(table: pa.Table) -> pa.Table:
    """ADBC's table in the Arrow types Veil's PostgreSQL backend promises."""
    schema = conform_schema(table.schema)
    columns = [
        _conform_column(column, field.type)
        for column, field in zip(table.columns, schema, strict=True)
    ]
    if any(field.type == pa.null() for field in schema):  # scale known only from the values
        schema = pa.schema([pa.field(f.name, c.type) for f, c in zip(schema, columns, strict=True)])
    return pa.Table.from_arrays(columns, schema=schema)


def conform_schema(schema: pa.Schema) -> pa.Schema:
    """Plain Arrow fields (no driver metadata); NUMERIC without declared scale as null."""
    return pa.schema([pa.field(field.name, _conform_type(field)) for field in schema])


def _conform_type(field: pa.Field) -> pa.DataType:
    metadata = field.metadata or {}
    if metadata.get(_PG_TYPE) in _READ_ELSEWHERE:
        raise NotPlainArrow(field.name)
    if metadata.get(_PG_TYPE) == b"numeric":
        scale = _declared_scale(int(metadata.get(_PG_TYPMOD, b"-1")))
        return pa.null() if scale is None else pa.decimal128(38, scale)
    if isinstance(field.type, pa.BaseExtensionType) and metadata.get(_PG_TYPE) in (
        b"json",
        b"jsonb",
    ):
        return pa.string()
    if field.type in _PLAIN_TYPES:
        return field.type
    raise NotPlainArrow(field.name)


def _declared_scale(typmod: int) -> int | None:
    """NUMERIC(p, s) stores ((p << 16) | s) + 4 in its typmod; -1 means undeclared."""
    return None if typmod < 4 else (typmod - 4) & 0xFFFF


def _conform_column(column: pa.ChunkedArray, target: pa.DataType) -> pa.ChunkedArray:
    storage = _storage(column)
    if pa.types.is_null(target):  # NUMERIC without a declared scale
        return storage.cast(pa.decimal128(38, _largest_scale(storage)))
    return storage.cast(target) if storage.type != target else storage


def _storage(column: pa.ChunkedArray) -> pa.ChunkedArray:
    if isinstance(column.type, pa.BaseExtensionType):
        return pa.chunked_array(
            [chunk.storage for chunk in column.chunks], column.type.storage_type
        )
    return column


def _largest_scale(numbers: pa.ChunkedArray) -> int:
    """Most digits after the decimal point among NUMERIC values given as text (at most 38)."""
    point = pc.find_substring(numbers, ".")
    digits = pc.if_else(
        pc.less(point, 0), 0, pc.subtract(pc.subtract(pc.utf8_length(numbers), point), 1)
    )
    largest = pc.max(digits).as_py()
    return min(int(largest or 0), 38)


def _bound(params: Params) -> Sequence[object] | None:
    return list(params) if params else None


def _with_timeout(url: str, seconds: int) -> str:
    separator = "&" if "?" in url else "?"
    return f"{url}{separator}connect_timeout={seconds}"


def _message(exc: BaseException) -> str:
    """The server's own words: without the driver's prefix and its echo of the query."""
    text = str(exc)
    text = text.split("\n\nQuery was:", 1)[0]
    _, marker, server = text.partition("ERROR:  ")
    return (server if marker else text).strip()
