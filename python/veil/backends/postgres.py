"""PostgreSQL 15 as Veil's server (``postgresql://user@host:port/db``), through psycopg 3.

Statements run on a raw cursor, so ``$1``-style placeholders go to the server
unchanged (no client-side interpolation, and ``%`` needs no escaping). Queries
(``SELECT``/``WITH``) outside a transaction are read straight into Arrow by
ADBC's PostgreSQL driver on a second connection (``veil.backends.pg_read``);
the rest, and results ADBC cannot give in Veil's types, come back in
PostgreSQL's binary format through psycopg's C loaders and are turned into
Arrow column by column. Bulk loads stream Arrow batches
as ``COPY ... FROM STDIN (FORMAT BINARY)`` (``veil.backends.pg_copy``) into a
staging table that replaces the target in one transaction.

A statement run again with parameters (a cached plan's, filled with each
run's ciphertexts: issue 41) whose last run returned few rows is prepared on
the server (psycopg's ``prepare=True``): PostgreSQL parses and plans it once
per connection, and each later run is one round trip of Bind/Execute. Its
text names only opaque tables and columns and its parameters are
ciphertexts, as before; a design change writes other text, so another
statement (``_Repeated``).

Veil's server functions come from the ``veil`` C extension
(``veil/backends/pgext``); the backend creates it in each database it opens.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import itertools
import json
import re
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from decimal import Decimal
from typing import Any

import psycopg
import pyarrow as pa
import sqlglot
from psycopg.types.numeric import Int8BinaryDumper, Int8Dumper
from sqlglot import exp

from veil._native import ServerStatements
from veil.backends import pg_copy, pg_read
from veil.backends.base import (
    OLD_KEY,
    ArrowData,
    BackendError,
    DuplicateKeyError,
    Estimate,
    Operator,
    Params,
    ServerUnavailableError,
    WriteConflictError,
    quote,
)
from veil.backends.pg_plan import plan_operators, relations
from veil.backends.staged import StagedBackend, index_pairs, update_statement

HOM_SUM = "veil_hom_sum"
WRAPPING_SUM = "veil_wrap_sum"  # the extension's BIGINT sum mod 2**64
SEARCH_MATCH = "veil_search_match"

# PostgreSQL type OID -> Arrow type of the column Veil reads it into.
_ARROW_OF_OID: dict[int, pa.DataType] = {
    16: pa.bool_(),
    17: pa.binary(),
    19: pa.string(),  # name
    20: pa.int64(),
    21: pa.int16(),
    23: pa.int32(),
    25: pa.string(),
    26: pa.int64(),  # oid
    700: pa.float32(),
    701: pa.float64(),
    1042: pa.string(),  # char(n)
    1043: pa.string(),  # varchar
    1082: pa.date32(),
    1114: pa.timestamp("us"),
    1184: pa.timestamp("us", tz="UTC"),
}
_NUMERIC_OID = 1700
_FETCH_ROWS = 65536
_CONNECT_SECONDS = 10
_JSON_OIDS = (114, 3802)
_QUERY_WORDS = ("SELECT", "WITH")
_SETTING_WORDS = ("SET", "RESET")
# serialization_failure, deadlock_detected: the transaction collided with another
# (psycopg reports both as OperationalError, which would read as a lost server)
_CONFLICT_STATES = ("40001", "40P01")


# a statement with parameters whose last run returned at most this many rows runs as
# a server-side prepared statement (larger results read faster through ADBC's COPY)
_PREPARED_ROWS = 1024
_REPEATED_TEXTS = 512  # statements remembered for that, least recently run out
_PREPARED_MAX = 256  # psycopg's prepared statements per connection (it deallocates the rest)
# cached plan must not change result type: a prepared statement over a table another
# connection altered since
_STALE_PREPARED = "0A000"
# statements after which psycopg sends DEALLOCATE ALL (psycopg/_preparing.py's own list,
# matched anywhere in the text: a statement that only names one costs a re-prepare)
_DEALLOCATING = re.compile(r"\b(?:DROP|ALTER|ROLLBACK|DISCARD|DEALLOCATE)\b", re.IGNORECASE)

# ``update_rows``: up to this many rows go as array parameters, more through COPY
_UNNEST_ROWS = 512
_FEW_ROWS = 16  # rows appended by one INSERT statement rather than COPY
_CHANGED = "__veil_changed_rows"


class PostgresBackend(StagedBackend):
    """A PostgreSQL database as Veil's server."""

    dialect = "postgres"
    compresses_repeated_bytes = False  # a bytea takes a header byte more than a BIGINT
    skips_row_blocks = False  # heap pages carry no min/max (no BRIN indexes here)
    load_in_one_transaction = True
    hashes_not_in = False
    correlates_deeply = True
    semi_joins_by_exists = True
    scanned_rows_per_byte = 0.2
    rewrites_by_copy = True

    def __init__(self, url: str) -> None:
        super().__init__()
        self.url = url
        try:
            self._con = psycopg.connect(url, autocommit=True, connect_timeout=_CONNECT_SECONDS)
        except psycopg.Error as exc:
            raise ServerUnavailableError(
                f"cannot connect to the PostgreSQL server {_without_password(url)}: "
                f"{str(exc).strip()}; check that it is running and the URL is right"
            ) from exc
        # Send Python ints as bigint: psycopg would pick the smallest integer type,
        # and `$1 * 1000` with a smallint parameter overflows on the server.
        self._con.adapters.register_dumper(int, Int8Dumper)
        self._con.adapters.register_dumper(int, Int8BinaryDumper)
        self._con.prepared_max = _PREPARED_MAX
        self._repeated = _Repeated()
        # the named statements native point runs keep on this connection (``veil.serve.native``)
        self.server_statements = ServerStatements()
        self._arrow = pg_read.ArrowReader(url, _CONNECT_SECONDS) if pg_read.available() else None
        self.has_wrapping_sum = False
        self.has_extension = self._create_extension()

    def _create_extension(self) -> bool:
        available = self.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'veil'")
        if available.num_rows == 0:
            return False
        self._run_quiet("CREATE EXTENSION IF NOT EXISTS veil")
        # an older version created by an earlier Veil: add what it lacks (unless
        # not the extension's owner: then what is missing falls back)
        with contextlib.suppress(BackendError):
            self._run_quiet("ALTER EXTENSION veil UPDATE")
        found = self.execute(f"SELECT 1 FROM pg_proc WHERE proname = '{WRAPPING_SUM}'")
        self.has_wrapping_sum = found.num_rows > 0
        return True

    # -- statements ---------------------------------------------------------

    def execute(self, sql: str, params: Params = None) -> pa.Table:
        prepare = bool(params) and self._repeated.small(sql)
        arrow = None if prepare else self._arrow_reader(sql, params)
        if arrow is not None:
            self._log.emit(sql, params)
            try:
                table = arrow.read(sql, params)
            except pg_read.NotPlainArrow:
                pass  # a column type ADBC gives differently: read it again through psycopg
            else:
                self._repeated.ran(sql, params, table.num_rows)
                return table
        table = self._execute_rows(sql, params, prepare=prepare)
        self._repeated.ran(sql, params, table.num_rows)
        return table

    def _execute_rows(self, sql: str, params: Params, *, prepare: bool = False) -> pa.Table:
        with self._cursor(sql, params, prepare=prepare) as cursor:
            description = cursor.description
            if description is None:
                return pa.table({})
            batches = []
            while rows := cursor.fetchmany(_FETCH_ROWS):
                batches.append(_to_batch(description, rows))
        return _concatenated(batches, _schema(description))

    def execute_batches(
        self, sql: str, params: Params = None, *, batch_rows: int = 65536
    ) -> Iterator[pa.RecordBatch]:
        arrow = self._arrow_reader(sql, params)
        if arrow is not None:
            self._log.emit(sql, params)
            try:
                return arrow.read_batches(sql, params, batch_rows)
            except pg_read.NotPlainArrow:
                pass
        return self._execute_row_batches(sql, params, batch_rows)

    def _arrow_reader(self, sql: str, params: Params) -> pg_read.ArrowReader | None:
        """The ADBC reader if it may run this statement: a query, outside any transaction.

        Inside ``transaction()`` only the psycopg connection sees the
        transaction's own writes; other statements may change session state.
        """
        if self._arrow is None or self._transactions.active:
            return None
        first = _first_word(sql)
        if first in _SETTING_WORDS:
            self._arrow.remember_setting(sql)
            return None
        if first not in _QUERY_WORDS or not pg_read.bindable(params):
            return None
        return self._arrow

    def _execute_row_batches(
        self, sql: str, params: Params, batch_rows: int
    ) -> Iterator[pa.RecordBatch]:
        cursor = self._raw_cursor(sql, params)
        try:
            rows = cursor.stream(sql, params, binary=True, size=batch_rows)
            first = list(itertools.islice(rows, batch_rows))
        except psycopg.Error as exc:
            cursor.close()
            raise _backend_error(exc) from exc
        return self._stream(cursor, rows, first, batch_rows)

    def _stream(
        self, cursor: Any, rows: Iterator[Any], first: list[Any], batch_rows: int
    ) -> Iterator[pa.RecordBatch]:
        with cursor:
            description = cursor.description
            if description is None:
                return
            chunk = first
            while chunk:
                yield _to_batch(description, chunk)
                del chunk  # let the rows' objects go before the next chunk arrives
                try:
                    chunk = list(itertools.islice(rows, batch_rows))
                except psycopg.Error as exc:
                    raise _backend_error(exc) from exc

    def _cursor(self, sql: str, params: Params, *, prepare: bool = False) -> Any:
        """``sql`` run on a new cursor (``prepare``: as the connection's prepared statement,
        planned by the server once; None lets psycopg prepare what runs five times)."""
        cursor = self._raw_cursor(sql, params)
        try:
            return cursor.execute(sql, params, binary=True, prepare=True if prepare else None)
        except psycopg.Error as exc:
            if not (exc.sqlstate == _STALE_PREPARED and prepare) or self._transactions.active:
                raise _backend_error(exc) from exc
        # another connection changed a table under the prepared statement: psycopg
        # forgets its statements when it sees DEALLOCATE ALL; run this one afresh
        self._repeated.forget(sql)
        self._run_quiet("DEALLOCATE ALL")
        return self._cursor(sql, params)

    def _raw_cursor(self, sql: str, params: Params) -> Any:
        """A cursor for sending ``sql`` on the session's connection, the statement logged and,
        if psycopg may DEALLOCATE ALL after it, the native statements told first (it may
        clear them even if ``sql`` fails)."""
        self._log.emit(sql, params)
        if _DEALLOCATING.search(sql):
            self.server_statements.dropped()
        return psycopg.RawCursor(self._con)

    def _run_quiet(self, sql: str) -> None:
        self._cursor(sql, None).close()

    def bulk_load(self, table: str, data: ArrowData, *, schema: pa.Schema | None = None) -> int:
        """The staged load, then ANALYZE: the optimizer (and ``estimate``) needs statistics."""
        rows = super().bulk_load(table, data, schema=schema)
        self._run_quiet(f"ANALYZE {quote(table)}")
        return rows

    def _indexes(self, table: str) -> list[tuple[str, str]]:
        found = self.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema() "
            "AND tablename = $1 ORDER BY indexname",
            [table],
        )
        return index_pairs(found)

    def _lock_writers(self, table: str) -> None:
        self._run_quiet(f"LOCK TABLE {quote(table)} IN SHARE MODE")

    def refresh_statistics(self, table: str) -> None:
        """ANALYZE: a peeled column's values went from all distinct to a few (TPC-H Q9 took
        minutes on the old statistics' nested loops). VACUUM too, where it may run: a peel
        rewrote every row, and the next one can reuse the old rows' space instead of
        doubling the table again."""
        work = "ANALYZE" if self._transactions.active else "VACUUM (ANALYZE)"
        self._run_quiet(f"{work} {quote(table)}")

    # -- loading hooks ------------------------------------------------------

    def _create_table(self, table: str, schema: pa.Schema) -> None:
        packed = pa.schema(sorted(schema, key=_alignment, reverse=True))
        self._run_quiet(f"CREATE TABLE {quote(table)} ({_column_definitions(packed)})")

    def _insert(self, table: str, schema: pa.Schema, batches: Iterator[pa.RecordBatch]) -> int:
        batches = iter(batches)
        head = list(itertools.islice(batches, 2))
        if len(head) == 1 and 0 < head[0].num_rows <= _FEW_ROWS and schema.names:
            # one round trip (a COPY takes two): a transaction's INSERT of a row or two
            types = [pg_copy.postgres_type(f.type) for f in schema]
            arrays = ", ".join(f"${i}::{t}[]" for i, t in enumerate(types, 1))
            names = ", ".join(quote(name) for name in schema.names)
            sql = f"INSERT INTO {quote(table)} ({names}) SELECT * FROM unnest({arrays})"
            self.execute(sql, [column.to_pylist() for column in head[0].columns])
            return head[0].num_rows
        batches = itertools.chain(head, batches)
        names = ", ".join(quote(name) for name in schema.names)
        sql = f"COPY {quote(table)} ({names}) FROM STDIN (FORMAT BINARY)"
        self._log.emit(sql, None)
        rows = 0
        try:
            with self._con.cursor().copy(sql) as copy:
                copy.write(pg_copy.HEADER)
                for batch in batches:
                    copy.write(pg_copy.encode_batch(batch))
                    rows += batch.num_rows
                copy.write(pg_copy.TRAILER)
        except psycopg.Error as exc:
            raise _backend_error(exc) from exc
        return rows

    def _update_from(self, table: str, key: str, data: pa.Table) -> int:
        """A few rows as array parameters of one statement; more through COPY into a
        temporary table (its rows never leave the transaction)."""
        names = data.column_names
        if len(data) == 1:
            return self._update_one(table, key, data)
        if len(data) <= _UNNEST_ROWS:
            types = [pg_copy.postgres_type(f.type) for f in data.schema]
            arrays = ", ".join(f"${i}::{t}[]" for i, t in enumerate(types, 1))
            source = f"unnest({arrays}) AS s({', '.join(quote(n) for n in names)})"
            params = [column.to_pylist() for column in data.columns]
            return self.execute(update_statement(table, key, names, source), params).num_rows
        self._run_quiet(f"DROP TABLE IF EXISTS pg_temp.{quote(_CHANGED)}")
        columns = _column_definitions(data.schema)
        self._run_quiet(f"CREATE TEMP TABLE {quote(_CHANGED)} ({columns}) ON COMMIT DROP")
        self._insert(_CHANGED, data.schema, iter(data.to_batches()))
        statement = update_statement(table, key, names, f"{quote(_CHANGED)} AS s")
        updated = self.execute(statement).num_rows
        self._run_quiet(f"DROP TABLE {quote(_CHANGED)}")
        return updated

    def _update_one(self, table: str, key: str, data: pa.Table) -> int:
        """One row (a point UPDATE's, issue 41): ``UPDATE ... WHERE key = $n``, its values
        typed as the arrays above; a plain equality on the key, not a join."""
        sql = _update_one_statement(table, key, data.schema)
        columns = [c for c in data.column_names if c != OLD_KEY]
        values = [data.column(c)[0].as_py() for c in [*columns, OLD_KEY]]
        # prepared at once (it runs for every point UPDATE of the table); its row count
        # read from the cursor, without building a result table
        with self._cursor(sql, values, prepare=True) as cursor:
            return int(cursor.rowcount)

    # -- catalogue ----------------------------------------------------------

    def table_names(self) -> list[str]:
        names = self.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY 1"
        )
        return [str(name) for name in names.column(0).to_pylist()]

    def table_bytes(self, table: str) -> int:
        size = self.execute("SELECT pg_total_relation_size($1::regclass)", [quote(table)])
        return int(size.column(0)[0].as_py())

    # -- planning help --------------------------------------------------------

    def estimate(self, sql: str, params: Params = None) -> Estimate:
        """The top node's rows and cost, and each node's own cost (``pg_plan``)."""
        plan = self.execute(f"EXPLAIN (VERBOSE, FORMAT JSON) {sql}", params).column(0)[0].as_py()
        explained = (json.loads(plan) if isinstance(plan, str) else plan)[0]
        top = explained["Plan"]
        operators = plan_operators(top, self._table_rows(relations(top)))
        jit = explained.get("JIT") or {}
        return Estimate(
            rows=float(top["Plan Rows"]),
            cost=float(top["Total Cost"]),
            operators=operators,
            costed_operators=True,
            jit_functions=int(jit.get("Functions") or 0),
            jit_optimized=bool((jit.get("Options") or {}).get("Optimization")),
        )

    def profile(self, sql: str, params: Params = None) -> Operator:
        """Run ``sql`` under ``EXPLAIN ANALYZE``: its operators with the rows each returned
        and the time each took (``veil.cost.calibration`` prices each kind of cost from such
        runs)."""
        found = self.execute(f"EXPLAIN (ANALYZE, VERBOSE, FORMAT JSON) {sql}", params)
        plan = found.column(0)[0].as_py()
        top = (json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]
        return plan_operators(top, self._table_rows(relations(top)), counted=True)

    def _table_rows(self, tables: set[str]) -> dict[str, float]:
        """Each table's rows as its statistics have them (``pg_class.reltuples``)."""
        if not tables:
            return {}
        found = self.execute(
            "SELECT n, (SELECT greatest(reltuples, 0) FROM pg_class WHERE oid = to_regclass(n)) "
            "FROM unnest($1::text[]) AS n",
            [sorted(tables)],
        )
        names, rows = found.column(0).to_pylist(), found.column(1).to_pylist()
        return {name: float(count or 0.0) for name, count in zip(names, rows, strict=True)}

    def inline_parameters(
        self, statement: exp.Expression, params: list[object]
    ) -> tuple[exp.Expression, list[object]]:
        """Ciphertext parameters written into the statement as literals.

        A statement without parameters is read through ADBC's COPY BINARY
        path, about 3x faster than a prepared statement's rows
        (docs/backends.md). Every parameter Veil sends is a ciphertext or a
        public value (integers: DET / OPE ciphertexts; bytes: DET, SEARCH
        tokens, n^2), so the text shows nothing more than the parameters did.
        """
        if not params or not all(_inlinable(p) for p in params):
            return statement, params

        def literal(node: exp.Expression) -> exp.Expression:
            if not isinstance(node, exp.Placeholder) or node.args.get("this") is None:
                return node
            value = params[int(node.name) - 1]
            if isinstance(value, int):
                return exp.Literal.number(value)
            if isinstance(value, bytes):
                return exp.cast(exp.Literal.string("\\x" + value.hex()), "BYTEA")
            assert isinstance(value, list)
            return _array_literal(value)

        return statement.transform(literal), []

    def hom_sum(self, ciphertexts: exp.Expression, n_square: exp.Expression) -> exp.Expression:
        self._need_extension()
        return exp.Anonymous(this=HOM_SUM, expressions=[ciphertexts, n_square])

    def id_bit(self, position: exp.Expression) -> exp.Expression:
        # PostgreSQL shifts BIGINT bits without an overflow check: 1 << 63 is the sign bit
        one = exp.cast(exp.Literal.number(1), "BIGINT")
        return exp.BitwiseLeftShift(this=one, expression=exp.cast(position, "INT"))

    def hash_aggregation(self) -> contextlib.AbstractContextManager[None]:
        return self.settings({"enable_sort": "off"})  # a penalty, not a ban: ORDER BY sorts

    @contextlib.contextmanager
    def settings(self, values: Mapping[str, str]) -> Iterator[None]:
        """This session's settings ``values`` (name: value) for the block, reset after it
        (those set, when one fails)."""
        applied = []
        try:
            for name, value in values.items():
                self.execute(f"SET {name} = {value}")
                applied.append(name)
            yield
        finally:
            for name in applied:
                self.execute(f"RESET {name}")

    def extreme(self, kind: str, value: exp.Expression, binary: bool) -> exp.Expression:
        if not binary:
            return exp.Min(this=value) if kind == "MIN" else exp.Max(this=value)
        # PostgreSQL has no MIN/MAX of bytea, but orders bytea: the first non-NULL in order
        order = "DESC" if kind == "MAX" else "ASC"
        template = sqlglot.parse_one(
            f"(ARRAY_AGG(v ORDER BY v {order}) FILTER (WHERE NOT v IS NULL))[1]", read="postgres"
        )
        return template.transform(
            lambda node: value.copy() if isinstance(node, exp.Column) and node.name == "v" else node
        )

    def wrapping_sum(self, value: exp.Expression) -> exp.Expression:
        if not self.has_wrapping_sum:
            return exp.Sum(this=value)  # numeric: exact, and several times slower
        return exp.Anonymous(this=WRAPPING_SUM, expressions=[value])

    def search_match(self, ciphertexts: exp.Expression, token: exp.Expression) -> exp.Expression:
        self._need_extension()
        return exp.Anonymous(this=SEARCH_MATCH, expressions=[ciphertexts, token])

    def _need_extension(self) -> None:
        if not self.has_extension:
            raise BackendError(
                "the PostgreSQL server lacks Veil's extension; install it with `make pgext` "
                "on the server machine (builds python/veil/backends/pgext)"
            )

    def connection_pointer(self) -> int:
        """The address of the connection's libpq ``PGconn`` (``veil.serve.native`` runs
        statements on it between the session's own)."""
        return int(self._con.pgconn.pgconn_ptr)  # type: ignore[attr-defined]  # binary/C impl

    def statement_listeners(self) -> bool:
        """Whether anything listens to the statements sent (``StatementLog``)."""
        return bool(self._log)

    def close(self) -> None:
        self._close_autonomous()
        if self._arrow is not None:
            self._arrow.close()
        self._con.close()


class _Repeated:
    """How many rows each statement with parameters returned when it last ran."""

    def __init__(self) -> None:
        self._rows: OrderedDict[str, int] = OrderedDict()

    def small(self, sql: str) -> bool:
        """Has ``sql`` run before and returned few rows (then it runs prepared)?"""
        rows = self._rows.get(sql)
        return rows is not None and rows <= _PREPARED_ROWS

    def ran(self, sql: str, params: Params, rows: int) -> None:
        if not params:
            return  # its text holds its values: it rarely runs again as it is
        self._rows[sql] = rows
        self._rows.move_to_end(sql)
        if len(self._rows) > _REPEATED_TEXTS:
            self._rows.popitem(last=False)

    def forget(self, sql: str) -> None:
        self._rows.pop(sql, None)


def _inlinable(value: object) -> bool:
    if isinstance(value, list):  # a bind filter's key list: all integers or all byte strings
        return all(isinstance(v, int) for v in value) or all(isinstance(v, bytes) for v in value)
    return isinstance(value, int | bytes)


def _array_literal(values: list[int] | list[bytes]) -> exp.Expression:
    """One array literal: PostgreSQL parses it far faster than a list of constants."""
    if values and isinstance(values[0], bytes):
        items = ",".join(f'"\\\\x{v.hex()}"' for v in values)
        return exp.cast(exp.Literal.string("{" + items + "}"), "BYTEA[]")
    return exp.cast(exp.Literal.string("{" + ",".join(map(str, values)) + "}"), "BIGINT[]")


def _first_word(sql: str) -> str:
    words = sql.lstrip(" \t\r\n(").split(None, 1)
    return words[0].upper() if words else ""


@functools.lru_cache(maxsize=256)
def _update_one_statement(table: str, key: str, schema: pa.Schema) -> str:
    """``_update_one``'s statement: the columns of ``schema`` but ``OLD_KEY``, then it."""
    types = {f.name: pg_copy.postgres_type(f.type) for f in schema}
    columns = [c for c in schema.names if c != OLD_KEY]
    sets = ", ".join(f"{quote(c)} = ${i}::{types[c]}" for i, c in enumerate(columns, 1))
    return (
        f"UPDATE {quote(table)} SET {sets} "
        f"WHERE {quote(key)} = ${len(columns) + 1}::{types[OLD_KEY]}"
    )


def _alignment(field: pa.Field) -> int:
    """The bytes PostgreSQL aligns a column of ``field``'s type to in a row (variable-width
    values of a short header: none). A table's columns are created widest first (a stable
    sort): each 4-byte INTEGER ciphertext between two BIGINTs would take 8 bytes with
    its padding. Every statement names the columns it writes, so their order is free."""
    if pa.types.is_boolean(field.type):
        return 1
    return field.type.byte_width if pa.types.is_primitive(field.type) else 0


def _column_definitions(schema: pa.Schema) -> str:
    return ", ".join(f"{quote(f.name)} {pg_copy.postgres_type(f.type)}" for f in schema)


def _schema(description: Any) -> pa.Schema:
    return pa.schema([pa.field(column.name, _arrow_type(column)) for column in description])


def _arrow_type(column: Any) -> pa.DataType:
    if column.type_code == _NUMERIC_OID:
        return pa.decimal128(38, column.scale or 0)
    return _ARROW_OF_OID.get(column.type_code, pa.string())


def _to_batch(description: Any, rows: list[Any]) -> pa.RecordBatch:
    """Rows of Python values (from psycopg's binary loaders) as one Arrow batch.

    The cyclic garbage collector is paused meanwhile: transposing rows makes
    millions of short-lived tuples, none of them cyclic, and the collections
    they trigger otherwise cost several times the transposition itself.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        columns = list(zip(*rows, strict=True)) if rows else [() for _ in description]
        arrays = [_column(values, col) for values, col in zip(columns, description, strict=True)]
    finally:
        if was_enabled:
            gc.enable()
    return pa.RecordBatch.from_arrays(arrays, names=[column.name for column in description])


def _concatenated(batches: list[pa.RecordBatch], schema: pa.Schema) -> pa.Table:
    """One table from batches whose undeclared NUMERIC scales may differ."""
    if not batches:
        return schema.empty_table()
    if len(batches) == 1:  # one batch is its own schema: no cast (~8 us a column, issue 41)
        return pa.Table.from_batches(batches)
    fields = list(batches[0].schema)
    for index, field in enumerate(fields):
        if pa.types.is_decimal(field.type):
            scale = max(batch.schema.field(index).type.scale for batch in batches)
            fields[index] = pa.field(field.name, pa.decimal128(38, scale))
    unified = pa.schema(fields)
    return pa.Table.from_batches([batch.cast(unified) for batch in batches], unified)


def _column(values: tuple[Any, ...], column: Any) -> pa.Array:
    oid = column.type_code
    if oid == _NUMERIC_OID:
        return _numeric_column(values, column.scale)
    if oid in _ARROW_OF_OID:
        return pa.array(values, type=_ARROW_OF_OID[oid])
    if oid in _JSON_OIDS:
        return pa.array([None if v is None else json.dumps(v) for v in values], type=pa.string())
    return pa.array([None if v is None else str(v) for v in values], type=pa.string())


def _numeric_column(values: tuple[Decimal | None, ...], declared: int | None) -> pa.Array:
    """NUMERIC as decimal128(38, s): s declared by the column's type, else the largest present.

    (SUM of bigint has no declared scale and gives s = 0, like DuckDB's HUGEINT.)
    """
    if declared is not None:
        return pa.array(values, type=pa.decimal128(38, declared))
    scales = [-int(v.as_tuple().exponent) for v in values if v is not None and v.is_finite()]
    scale = max([0, *scales])
    return pa.array(values, type=pa.decimal128(38, min(scale, 38)))


def _backend_error(exc: psycopg.Error) -> BackendError:
    if exc.sqlstate == "23505":  # unique_violation: a declared key's index
        return DuplicateKeyError(f"the PostgreSQL server refused a duplicate key: {exc}")
    if exc.sqlstate in _CONFLICT_STATES:
        return WriteConflictError(f"the PostgreSQL server rolled back a write: {str(exc).strip()}")
    if isinstance(exc, psycopg.OperationalError):
        return ServerUnavailableError(f"lost the PostgreSQL server: {str(exc).strip()}")
    return BackendError(f"the PostgreSQL server rejected a statement: {str(exc).strip()}")


def _without_password(url: str) -> str:
    """The URL as it may appear in a message (never a password)."""
    scheme, _, rest = url.partition("://")
    credentials, at, host = rest.rpartition("@")
    return f"{scheme}://{credentials.split(':')[0]}{at}{host}" if at else url
