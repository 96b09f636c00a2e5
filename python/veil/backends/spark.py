"""Apache Spark SQL as Veil's server (``spark-local[N]?warehouse=PATH``, ``spark://HOST:PORT?...``).

Spark holds the encrypted tables as Parquet files in a warehouse directory
(``veil.backends.spark_warehouse``), each registered in the backend's Spark session as a
temporary view of its current version. RemoteSQL arrives in Spark's dialect with every
parameter written in as a literal (``inline_parameters``); queries come back as Arrow
(``toArrow``). Veil's server functions are Arrow UDFs (``veil.backends.spark_functions``).

Spark SQL cannot change Parquet files, so UPDATE, DELETE and INSERT become queries whose
rows are written as the table's next version or appended as a new file
(``veil.backends.spark_dml``), and ``transaction()`` is the warehouse's journal. Every
failure reaches Veil as ``BackendError`` with Spark's first line, never a raw Spark or
Py4J exception.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path

import pyarrow as pa
from sqlglot import exp

from veil.backends import spark_dml, spark_functions
from veil.backends.base import (
    ArrowData,
    Backend,
    BackendError,
    Estimate,
    Params,
    StatementListener,
    StatementLog,
    as_batches,
    check_identifier,
)
from veil.backends.spark_files import Files, HadoopFiles, LocalFiles, is_hadoop_url, storable
from veil.backends.spark_session import parse_url, session_for
from veil.backends.spark_warehouse import Warehouse

_PLACEHOLDER = re.compile(r"('(?:[^'\\]|\\.)*')|\$(\d+)")
_DML_WORDS = ("UPDATE", "DELETE", "INSERT")
_SIZE = re.compile(r"sizeInBytes=([\d.]+)\s*([KMGTPE]i)?B")
_ROWS = re.compile(r"rowCount=([\d.E+]+)")
_UNITS = {None: 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
# the bytes EXPLAIN's size stands for one row, when Spark has no row count (no statistics)
_ROW_BYTES_GUESS = 64


class SparkBackend:
    """A Spark application and a warehouse directory as Veil's server."""

    dialect = "spark"
    # Parquet dictionary-encodes repeated values: few distinct blobs are stored small
    compresses_repeated_bytes = True
    skips_row_blocks = True  # Parquet row groups, each with min/max per column
    # a table changes only by writing a new version, so a peel copies the table anyway
    hashes_not_in = True
    semi_joins_by_exists = False
    scanned_rows_per_byte = 2.0
    correlates_deeply = False  # UNRESOLVED_COLUMN for a reference two subqueries out
    rewrites_by_copy = True
    updates_in_place = False  # a table changes only by a new version of its files
    locates_rows = False

    def __init__(self, url: str) -> None:
        self.url = url
        parsed = parse_url(url)
        with _server_errors():
            self._spark = session_for(parsed)
            self._jvm_hom_sum = spark_functions.register(self._spark)
            files: Files = (
                HadoopFiles(self._spark, parsed.warehouse)
                if is_hadoop_url(parsed.warehouse)
                else LocalFiles(Path(parsed.warehouse))
            )
        self._warehouse = Warehouse(files)
        self._log = StatementLog()
        self._views: dict[str, tuple[str, int]] = {}  # table -> (version, its stamp) viewed

    # -- statements -------------------------------------------------------------------

    def execute(self, sql: str, params: Params = None) -> pa.Table:
        self._log.emit(sql, params)
        text = with_literals(sql, params) if params else sql
        word = text.lstrip().split(None, 1)[0].upper() if text.strip() else ""
        if word in _DML_WORDS:
            return self._dml(text)
        if _is_index_statement(text):
            return pa.table({})  # Spark has no indexes: Parquet row groups keep min/max
        return self._query(text)

    def execute_batches(
        self, sql: str, params: Params = None, *, batch_rows: int = 65536
    ) -> Iterator[pa.RecordBatch]:
        return iter(self.execute(sql, params).to_batches(max_chunksize=batch_rows))

    def _query(self, text: str) -> pa.Table:
        self._sync()
        with _server_errors():
            return _conformed(self._spark.sql(text).toArrow())

    def _dml(self, text: str) -> pa.Table:
        tree = spark_dml.parse(text)
        table = tree.this.this if isinstance(tree.this, exp.Schema) else tree.this
        rewrite = spark_dml.rewrite(tree, self._column_types(table.name))
        with self.transaction(), _server_errors():  # one statement: all of it or nothing
            returned = (
                _conformed(self._spark.sql(rewrite.returning).toArrow())
                if rewrite.returning
                else pa.table({})
            )
            if rewrite.appends:
                added = _conformed(self._spark.sql(rewrite.rows).toArrow())
                self._warehouse.append(rewrite.table, added.schema, iter(added.to_batches()))
            else:
                self._write_version(rewrite.table, rewrite.rows)
        return returned

    def _write_version(self, table: str, select: str) -> None:
        """Make the rows of ``select`` the table's new version (Spark writes them)."""
        version = self._warehouse.new_version(table)
        try:
            self._spark.sql(select).write.mode("overwrite").parquet(version)
        except BaseException:
            self._warehouse.discard(version)
            raise
        self._warehouse.publish(table, version)

    # -- loading ------------------------------------------------------------------------

    def bulk_load(self, table: str, data: ArrowData, *, schema: pa.Schema | None = None) -> int:
        """Write a new version of ``table`` with the rows, then point the table at it."""
        check_identifier(table)
        arrow_schema, batches = as_batches(data, schema)
        self._log.emit(f"LOAD PARQUET INTO {table}", None)
        with self.transaction(), _server_errors():
            version, rows = self._warehouse.write_version(table, arrow_schema, batches)
            self._warehouse.publish(table, version)
        return rows

    def append(self, table: str, data: ArrowData) -> int:
        arrow_schema, batches = as_batches(data, pa.schema([]))
        self._log.emit(f"APPEND PARQUET TO {check_identifier(table)}", None)
        with self.transaction(), _server_errors():
            return self._warehouse.append(table, arrow_schema, batches)

    def update_rows(self, table: str, key: str, data: pa.Table) -> int:
        raise BackendError(
            "a Spark warehouse cannot update rows in place; Veil rewrites them as a delete "
            "and an append there"
        )

    # -- catalogue ------------------------------------------------------------------------

    def drop_table(self, table: str, *, if_exists: bool = True) -> None:
        self._log.emit(f"DROP TABLE {check_identifier(table)}", None)
        with self.transaction():
            if self._warehouse.version(table) is None:
                if if_exists:
                    return
                raise BackendError(f"the Spark server has no table {table}")
            self._warehouse.drop(table)

    def rename_table(self, old: str, new: str) -> None:
        self._log.emit(f"RENAME TABLE {check_identifier(old)} TO {check_identifier(new)}", None)
        with self.transaction():
            self._warehouse.rename(old, new)

    def table_names(self) -> list[str]:
        return self._warehouse.names()

    def table_bytes(self, table: str) -> int:
        return self._warehouse.bytes(table)

    def refresh_statistics(self, table: str) -> None:
        """Nothing: Spark plans from file sizes and Parquet footers."""

    def column_names(self, table: str) -> list[str]:
        return list(self._column_types(table))

    def _column_types(self, table: str) -> dict[str, str]:
        self._sync()
        with _server_errors():
            fields = self._spark.table(check_identifier(table)).schema.fields
        return {f.name: f.dataType.simpleString() for f in fields}

    def replace_rows(self, table: str, select: str, params: Params = None) -> None:
        if not self._warehouse.in_transaction:
            raise BackendError("replace_rows runs inside a transaction")
        self._log.emit(select, params)
        text = with_literals(select, params) if params else select
        self._sync()
        with _server_errors():
            self._write_version(table, text)

    def indexes(self, table: str) -> list[tuple[str, str]]:
        return []  # no indexes

    def indexes_to_rebuild(self, table: str, columns: list[str]) -> list[tuple[str, str]]:
        return []  # no indexes

    # -- planning help --------------------------------------------------------------------

    def estimate(self, sql: str, params: Params = None) -> Estimate:
        """Spark's optimized plan's size of the result; its rows where statistics give them."""
        plan = self.execute(f"EXPLAIN COST {sql}", params).column(0)[0].as_py()
        rows = _ROWS.search(plan)
        if rows:
            return Estimate(rows=float(rows.group(1)), cost=None)
        size = _SIZE.search(plan)
        if size is None:
            raise BackendError("Spark's EXPLAIN COST gave no size estimate")
        return Estimate(float(size.group(1)) * _UNITS[size.group(2)] / _ROW_BYTES_GUESS, None)

    def inline_parameters(
        self, statement: exp.Expression, params: list[object]
    ) -> tuple[exp.Expression, list[object]]:
        """Every parameter written in as a literal: Spark SQL takes no ``$n`` markers.

        They are ciphertexts or public values either way (as PostgreSQL's, ``docs/backends.md``).
        """
        if not params:
            return statement, params

        def literal(node: exp.Expression) -> exp.Expression:
            if isinstance(node, exp.Placeholder) and node.args.get("this") is not None:
                return literal_of(params[int(node.name) - 1])
            return node

        return statement.transform(literal), []

    def hom_sum(self, ciphertexts: exp.Expression, n_square: exp.Expression) -> exp.Expression:
        if self._jvm_hom_sum:
            jvm = spark_functions.HOM_SUM_JVM
            return exp.Anonymous(this=jvm, expressions=[ciphertexts, n_square])
        listed = exp.Anonymous(this="collect_list", expressions=[ciphertexts])
        return exp.Anonymous(this=spark_functions.HOM_SUM, expressions=[listed, n_square])

    def search_match(self, ciphertexts: exp.Expression, token: exp.Expression) -> exp.Expression:
        return exp.Anonymous(this=spark_functions.SEARCH_MATCH, expressions=[ciphertexts, token])

    def id_bit(self, position: exp.Expression) -> exp.Expression:
        # Spark shifts a BIGINT without an overflow check: 1 << 63 is the sign bit
        one = exp.cast(exp.Literal.number(1), "BIGINT")
        return exp.BitwiseLeftShift(this=one, expression=exp.cast(position, "INT"))

    def hash_aggregation(self) -> AbstractContextManager[None]:
        return nullcontext()  # Spark hashes where the aggregates allow

    def wrapping_sum(self, value: exp.Expression) -> exp.Expression:
        """The exact sum, as DECIMAL(38, 0): Spark 4's ANSI mode fails a BIGINT SUM that
        overflows, and ASHE words are random 64-bit values that do. 38 digits hold the sum
        of 10^19 such words."""
        return exp.Sum(this=exp.cast(value, exp.DataType.build("DECIMAL(38, 0)")))

    def extreme(self, kind: str, value: exp.Expression, binary: bool) -> exp.Expression:
        # Spark orders BINARY byte-wise, unsigned: OPE byte strings need nothing more
        return exp.Min(this=value) if kind == "MIN" else exp.Max(this=value)

    # -- the rest of the protocol -----------------------------------------------------------

    def add_statement_listener(self, listener: StatementListener) -> Callable[[], None]:
        return self._log.add(listener)

    @contextmanager
    def transaction(self) -> Iterator[None]:
        if self._explicit:
            raise BackendError(
                "a Spark warehouse has no transactions spanning statements: write outside "
                "BEGIN ... COMMIT (each INSERT, UPDATE and DELETE is atomic on its own)"
            )
        if self._warehouse.in_transaction:  # nested: the outer block decides
            yield
            return
        self._warehouse.begin()  # takes the warehouse's write lock
        try:
            self._sync()  # what other writers committed before: no one changes it now
            yield
        except BaseException:
            self._warehouse.rollback()
            raise
        self._warehouse.commit()

    @property
    def in_transaction(self) -> bool:
        return self._warehouse.in_transaction

    # A session's BEGIN ... COMMIT on Spark reads only: the warehouse's commit protocol
    # makes each write atomic, not several.
    savepoints = False
    _explicit = False

    def begin(self) -> None:
        self._explicit = True

    def commit(self) -> None:
        self._explicit = False

    def rollback(self) -> None:
        self._explicit = False

    def savepoint(self, name: str, verb: str = "SAVEPOINT") -> None:
        raise BackendError(f"a Spark warehouse has no savepoints ({verb})")

    def autonomous(self) -> Backend:
        return self  # its writes take the warehouse's lock one at a time anyway

    def cancel(self) -> None:
        """Cancel the Spark jobs running now (a benchmark's time limit)."""
        with _server_errors():
            self._spark.sparkContext.cancelAllJobs()

    def close(self) -> None:
        for table in list(self._views):
            self._forget(table)

    # -- views of the warehouse's tables ----------------------------------------------------

    def _sync(self) -> None:
        """Point each table's view at its current files (another backend may have changed
        them, and Spark keeps a view's file listing)."""
        present = set()
        for table in self._warehouse.names():
            present.add(table)
            stamp = self._warehouse.stamp(table)
            if stamp is not None and self._views.get(table) != stamp:
                self._view(table, stamp)
        for table in [t for t in self._views if t not in present]:
            self._forget(table)

    def _view(self, table: str, stamp: tuple[str, int]) -> None:
        # the files by name: a transaction's own appends wait outside the version's listing
        files = [location for location, _ in self._warehouse.files_of(table)] or [stamp[0]]
        with _server_errors():
            self._spark.read.parquet(*files).createOrReplaceTempView(table)
        self._views[table] = stamp

    def _forget(self, table: str) -> None:
        self._views.pop(table, None)
        with _server_errors():
            self._spark.catalog.dropTempView(table)


def literal_of(value: object) -> exp.Expression:
    """A parameter's value as a Spark SQL literal."""
    if value is None:
        return exp.null()
    if isinstance(value, bool):
        return exp.Boolean(this=value)
    if isinstance(value, int | float):
        return exp.Literal.number(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return exp.HexString(this=bytes(value).hex())
    if isinstance(value, str):
        return exp.Literal.string(value)
    if isinstance(value, list | tuple):
        return exp.Array(expressions=[literal_of(v) for v in value])
    raise BackendError(f"the Spark backend cannot send a parameter of type {type(value).__name__}")


def with_literals(sql: str, params: Params) -> str:
    """``sql`` with each ``$n`` outside string literals replaced by parameter n's literal."""
    values = list(params or ())

    def replace(match: re.Match[str]) -> str:
        if match.group(1) is not None:
            return match.group(1)
        return literal_of(values[int(match.group(2)) - 1]).sql(spark_dml.DIALECT)

    return _PLACEHOLDER.sub(replace, sql)


def _is_index_statement(sql: str) -> bool:
    words = sql.split(None, 4)[:4]
    upper = [w.upper() for w in words]
    return upper[:1] in (["CREATE"], ["DROP"]) and "INDEX" in upper


def _conformed(table: pa.Table) -> pa.Table:
    """Results in the Arrow types the other backends give (plain binary and string)."""
    schema = storable(table.schema)
    return table if schema.equals(table.schema) else table.cast(schema)


@contextmanager
def _server_errors() -> Iterator[None]:
    """Spark's and Py4J's exceptions as BackendError, with Spark's own first line."""
    try:
        yield
    except BackendError:
        raise
    except Exception as exc:
        if not _from_spark(exc):
            raise
        text = (str(exc).strip() or type(exc).__name__).splitlines()[0][:1000]
        raise BackendError(f"the Spark server rejected a statement: {text}") from exc


def _from_spark(exc: BaseException) -> bool:
    module = type(exc).__module__
    return module.startswith(("pyspark", "py4j"))
