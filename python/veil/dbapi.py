"""DB-API 2.0 (PEP 249) over Veil: ``veil.connect(client_dir)``.

Parameters use the ``qmark`` style::

    con = veil.connect("client")
    cur = con.cursor()
    cur.execute("SELECT o_orderkey FROM orders WHERE o_custkey = ?", [42])
    cur.fetchall()

Parameters are bound on the client and, where a predicate runs on the server,
sent only as ciphertexts. ``Cursor.fetch_arrow_table()`` returns the whole
result as a ``pyarrow.Table``.

Transactions: a connection starts in autocommit mode (each statement commits
on its own, atomically; Veil's behaviour before transactions, kept so that
existing code keeps its writes). With ``autocommit=False`` (as in psycopg) the
first statement opens a transaction that ``commit()`` ends or ``rollback()``
undoes; ``with con.transaction():`` is one transaction whatever the mode, and
``BEGIN``/``COMMIT``/``ROLLBACK`` statements work too. A transaction is one
server transaction: reads see its own writes, a failed statement fails it
(25P02 until ``rollback()``), and a conflict with another client's writes is a
``SerializationError`` (40001) to retry. DDL commits an open transaction
first and runs on its own (docs/sql.md, Transactions).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import getpass
import json
import os
import re
import uuid
import zoneinfo
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import duckdb
import pyarrow as pa
import sqlglot

from veil.errors import (
    InterfaceError,
    ParameterError,
    ProgrammingError,
    VeilError,
)
from veil.exec.rows import column_values
from veil.session.result import Result
from veil.session.session import Session
from veil.sql import pg_types
from veil.sql.errors import InFailedTransactionError
from veil.sqlstates import sqlstate

if TYPE_CHECKING:
    from veil.audit.observe import Observer

apilevel = "2.0"
threadsafety = 1  # threads may share the module, not connections
paramstyle = "qmark"

Error = VeilError


def connect(
    client_dir: str | os.PathLike[str],
    *,
    external_access: bool = False,
    autocommit: bool = True,
    audit: bool = False,
    memory_limit: str | None = None,
) -> Connection:
    """Open the Veil client directory ``client_dir`` and its server.

    ``external_access=True`` lets this application's own SQL read files on its
    machine through DuckDB's table functions (``read_csv``, ``read_parquet``...),
    as plaintext DuckDB would. It is off by default: statements then reach only
    the tables of the client directory, as they do through ``veil serve``.

    ``audit=True`` logs each statement to the client directory's audit log
    (``audit.jsonl``, read with ``veil audit``; ``veil.audit``), under this
    process's user name: its shape without values, the tables and columns it
    decrypted, its rows, outcome and duration.

    ``memory_limit`` (``4GB``, ``25%``): what the client's local DuckDB may use to
    finish queries, by default ``VEIL_MEMORY_LIMIT`` or half the machine's memory;
    past it DuckDB spills to disk, and what cannot spill raises ``OutOfMemoryError``
    (docs/sql.md, "The client's memory").
    """
    if not audit:
        session = Session(client_dir, external_access=external_access, memory_limit=memory_limit)
        connection = Connection(session)
    else:
        from veil.audit.log import AuditLog
        from veil.audit.observe import ObservedSession, Observer

        session = ObservedSession(
            client_dir, external_access=external_access, memory_limit=memory_limit
        )
        log = AuditLog(session.client.path)
        connection = Connection(session, Observer([log], "duckdb"), log)
    connection.autocommit = autocommit
    return connection


class Connection:
    def __init__(self, session: Session, observer: Observer | None = None, log: Any = None):
        self._session: Session | None = session
        self._autocommit = True
        self._observer = observer  # the audit log's, with ``audit=True``
        self._audit_log = log
        self._user = _user_name() if observer is not None else ""
        # PostgreSQL's TimeZone setting: timestamptz values come back as aware
        # datetimes in it (``SET TimeZone = '...'``, ``SHOW TimeZone``)
        self.timezone = "UTC"

    @property
    def autocommit(self) -> bool:
        """Whether each statement commits on its own (else the first one opens a transaction)."""
        return self._autocommit

    @autocommit.setter
    def autocommit(self, value: bool) -> None:
        if self.session.in_transaction:
            raise ProgrammingError(
                "autocommit cannot change while a transaction is open: commit() or rollback() first"
            )
        self._autocommit = bool(value)

    @property
    def session(self) -> Session:
        if self._session is None:
            raise InterfaceError("the connection is closed")
        return self._session

    def cursor(self) -> Cursor:
        return Cursor(self)

    def execute(self, sql: str, params: Sequence[Any] | None = None) -> Cursor:
        return self.cursor().execute(sql, params)

    def commit(self) -> None:
        """Make the open transaction's writes permanent (nothing to do in autocommit)."""
        if not self.session.commit():
            raise InFailedTransactionError(
                "the transaction had failed, so COMMIT rolled it back: none of its writes "
                "were kept; run it again"
            )

    def rollback(self) -> None:
        """Undo every write of the open transaction (nothing to do in autocommit)."""
        self.session.rollback()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Connection]:
        """A block that is one transaction: committed at its end, rolled back if it raises."""
        self.session.begin()
        try:
            yield self
        except BaseException:
            self.session.rollback()
            raise
        self.commit()

    def close(self) -> None:
        """Close the connection; an open transaction is rolled back."""
        if self._session is not None:
            try:
                self._session.rollback()
            finally:
                self._session.close()
                self._session = None
                if self._audit_log is not None:
                    self._audit_log.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        """As psycopg: a transaction still open is committed, or rolled back on an error."""
        try:
            if kind is None and self._session is not None and self._session.in_transaction:
                self.commit()
        finally:
            self.close()


def _user_name() -> str:
    """This process's user, as the audit log names the DB-API's statements."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container)
        return f"uid {os.getuid()}"


class Cursor:
    arraysize = 1

    def __init__(self, connection: Connection):
        self.connection = connection
        self._result: Result | None = None
        self._rows: list[tuple[Any, ...]] = []
        self._position = 0

    @property
    def description(self) -> list[tuple[str, str, None, None, None, None, bool]] | None:
        if self._result is None or not self._result.table.num_columns:
            return None
        return [
            (f.name, str(f.type), None, None, None, None, f.nullable)
            for f in self._result.table.schema
        ]

    @property
    def rowcount(self) -> int:
        return -1 if self._result is None else self._result.rowcount

    def execute(self, sql: str, params: Sequence[Any] | None = None) -> Cursor:
        observer = self.connection._observer
        if observer is None:
            return self._execute(sql, params)
        watch = observer.watch(self.connection.session, self.connection._user, "dbapi", sql, None)
        try:
            self._execute(sql, params)
        except VeilError as exc:
            watch.failed(sqlstate(exc))
            raise
        except BaseException:
            watch.failed("XX000")
            raise
        watch.done(self.rowcount)
        return self

    def _execute(self, sql: str, params: Sequence[Any] | None) -> Cursor:
        from veil.statements import run

        connection = self.connection
        setting = _time_zone_statement(connection, sql)
        if setting is not None:
            self._result = Result(setting, -1)
        else:
            if connection.timezone != "UTC":
                sql = _zoned(connection.session, sql, connection.timezone)
            self._result = run(connection.session, sql, params, begin=not connection.autocommit)
        table = self._result.table
        kinds = _declared(connection.session, sql, params, table) if setting is None else []
        self._rows = python_rows(table, kinds, connection.timezone)
        self._position = 0
        return self

    def executemany(self, sql: str, seq_of_params: Sequence[Sequence[Any]]) -> Cursor:
        total = 0
        for params in seq_of_params:
            total += max(self.execute(sql, params).rowcount, 0)
        if self._result is not None:
            self._result.rowcount = total
        return self

    def _need_result(self) -> Result:
        if self._result is None:
            raise InterfaceError("no statement has been executed on this cursor")
        return self._result

    def fetchone(self) -> tuple[Any, ...] | None:
        self._need_result()
        if self._position >= len(self._rows):
            return None
        self._position += 1
        return self._rows[self._position - 1]

    def fetchmany(self, size: int | None = None) -> list[tuple[Any, ...]]:
        self._need_result()
        count = self.arraysize if size is None else size
        rows = self._rows[self._position : self._position + count]
        self._position += len(rows)
        return rows

    def fetchall(self) -> list[tuple[Any, ...]]:
        self._need_result()
        rows = self._rows[self._position :]
        self._position = len(self._rows)
        return rows

    def fetch_arrow_table(self) -> pa.Table:
        return self._need_result().table

    def setinputsizes(self, sizes: object) -> None:
        """Accepted and ignored, as PEP 249 allows."""

    def setoutputsize(self, size: object, column: object = None) -> None:
        """Accepted and ignored, as PEP 249 allows."""

    def close(self) -> None:
        self._result, self._rows = None, []

    def __iter__(self) -> Cursor:
        return self

    def __next__(self) -> tuple[Any, ...]:
        row = self.fetchone()
        if row is None:
            raise StopIteration
        return row


# -- PostgreSQL's TimeZone and the Python values psycopg gives ------------------------

_SET_ZONE = re.compile(
    r"^\s*(?:SET\s+(?:SESSION\s+)?(?:TIME\s+ZONE\s+|TimeZone\s*(?:=|\s+TO\s+)\s*)"
    r"(?P<value>.*?)|RESET\s+(?P<reset>TimeZone|ALL)|SHOW\s+(?P<show>TimeZone|TIME\s+ZONE))"
    r"\s*;?\s*$",
    re.IGNORECASE | re.DOTALL,
)


def _time_zone_statement(connection: Connection, sql: str) -> pa.Table | None:
    """``SET TimeZone``, ``SET TIME ZONE``, ``RESET TimeZone`` and ``SHOW TimeZone``:
    the connection's setting (None: ``sql`` is another statement)."""
    found = _SET_ZONE.match(sql)
    if found is None:
        return None
    if found["show"]:
        return pa.table({"TimeZone": [connection.timezone]})
    value = (found["value"] or "").strip()
    if found["reset"] or value.upper() in ("DEFAULT", "LOCAL"):
        connection.timezone = "UTC"
        return pa.table({})
    if len(value) >= 2 and value[0] == value[-1] == "'":
        value = value[1:-1].replace("''", "'")
    try:
        zoneinfo.ZoneInfo(value)
    except (ValueError, zoneinfo.ZoneInfoNotFoundError):
        raise ParameterError(f'invalid value for parameter "TimeZone": "{value}"') from None
    connection.timezone = value
    return pa.table({})


def _zoned(session: Session, sql: str, zone: str) -> str:
    """``sql`` with its times without offsets read as timestamptz values in ``zone``
    (``veil.sql.pg_types.zoned_literals``); unchanged where it has none."""
    if "'" not in sql or _DDL.match(sql):
        return sql
    try:
        tree = sqlglot.parse_one(sql, read="duckdb")
    except sqlglot.errors.ParseError:
        return sql  # the session reports it
    schema = {
        name: {c.name: c.type for c in table.columns}
        for name, table in session.design.tables.items()
    }
    zoned = pg_types.zoned_literals(tree, schema, zone)
    return sql if zoned == tree else zoned.sql(dialect="duckdb")


_DDL = re.compile(r"^\s*(?:CREATE|DROP|ALTER|TRUNCATE)\b", re.IGNORECASE)


def _declared(
    session: Session, sql: str, params: Sequence[Any] | None, table: pa.Table
) -> list[str | None]:
    """Each result column's DuckDB type where Arrow shows strings (UUID and JSON leave
    DuckDB as text) or DECIMAL(38, 0) (a HUGEINT leaves it so), from the plaintext
    catalogue; None where Arrow's type tells."""
    shape = str(table.schema)
    textual = _TEXTUAL.get(shape)
    if textual is None:  # a point query's columns looked at once (~40 us for nine, issue 41)
        textual = [_holds_text(f.type) or _holds_whole_decimal(f.type) for f in table.schema]
        if len(_TEXTUAL) >= 256:
            _TEXTUAL.clear()
        _TEXTUAL[shape] = textual
    if not any(textual):
        return [None] * table.num_columns
    # the same statement with values of the same types is described alike: a point
    # query run again skips its DESCRIBE (~1 ms, issue 41) until the schema changes
    key = (sql, tuple(type(p) for p in params or ()), shape, session.design_file_stamp())
    found = _DESCRIBED.get(key)
    if found is not None and found[0] is session.catalog:
        return found[1]
    try:
        rows = session.catalog.execute(f"DESCRIBE {sql}", list(params or [])).fetchall()
    except (duckdb.Error, TypeError, ValueError):
        return [None] * table.num_columns
    if len(rows) != table.num_columns:
        return [None] * table.num_columns
    kinds = [str(r[1]).upper() if t else None for r, t in zip(rows, textual, strict=True)]
    if len(_DESCRIBED) >= 256:
        _DESCRIBED.clear()
    _DESCRIBED[key] = (session.catalog, kinds)
    return kinds


# recent DESCRIBEs of ``_declared``, by statement, parameter types, result schema, design
_DESCRIBED: dict[tuple[object, ...], tuple[object, list[str | None]]] = {}
# which columns of a result schema (its text) ``_declared`` describes
_TEXTUAL: dict[str, list[bool]] = {}


def _holds_whole_decimal(kind: pa.DataType) -> bool:
    """DECIMAL(38, 0), as Arrow holds a HUGEINT too (a SUM of integers: DuckDB gives ints)."""
    while pa.types.is_list(kind) or pa.types.is_large_list(kind):
        kind = kind.value_type
    return kind == pa.decimal128(38, 0)


def _holds_text(kind: pa.DataType) -> bool:
    while pa.types.is_list(kind) or pa.types.is_large_list(kind):
        kind = kind.value_type
    return pa.types.is_string(kind) or pa.types.is_large_string(kind)


def python_rows(table: pa.Table, kinds: Sequence[str | None], zone: str) -> list[tuple[Any, ...]]:
    """Rows of Python values as psycopg gives them for the same PostgreSQL types: UUID,
    parsed JSON, aware datetimes in the session's TimeZone, lists of those."""
    tz = zoneinfo.ZoneInfo(zone)
    columns = []
    for index, column in enumerate(table.columns):
        kind = kinds[index] if index < len(kinds) else None
        convert = _converter(column.type, kind, tz)
        values = column_values(column)
        columns.append(values if convert is None else [_apply(convert, v) for v in values])
    return list(zip(*columns, strict=True))


def _converter(kind: pa.DataType, declared: str | None, tz: dt.tzinfo) -> Any:
    """The function that turns one of a column's (innermost) values into psycopg's."""
    base = (declared or "").split("[")[0].strip()
    inner = kind
    while pa.types.is_list(inner) or pa.types.is_large_list(inner):
        inner = inner.value_type
    if isinstance(inner, pa.JsonType) or base == "JSON":
        return lambda v: json.loads(v) if isinstance(v, str) else v
    if base == "HUGEINT" and pa.types.is_decimal(inner):  # an integer SUM: an int, as DuckDB's
        return int
    if isinstance(inner, pa.UuidType) or base == "UUID":
        return lambda v: uuid.UUID(v) if isinstance(v, str) else v
    if pa.types.is_timestamp(inner) and inner.tz is not None:
        return lambda v: v.astimezone(tz) if isinstance(v, dt.datetime) else v
    if pa.types.is_interval(inner) and inner != kind:  # an array's (whole columns: rows.py)
        return _timedelta
    return None


def _timedelta(value: pa.MonthDayNano) -> dt.timedelta:
    """An interval as psycopg gives it: a month counted as 30 days."""
    days = value.months * 30 + value.days
    return dt.timedelta(days=days, microseconds=value.nanoseconds // 1000)


def _apply(convert: Any, value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, list):
        return [_apply(convert, v) for v in value]
    return convert(value)
