"""The one small interface every server backend offers Veil's query path.

A backend is an untrusted server holding only ciphertexts under opaque names.
It knows nothing of keys, plaintexts or the physical design: it runs the
RemoteSQL statements it is given, bulk-loads Arrow data, and offers Veil's
server functions (HOM sum, SEARCH match).

Conventions shared by every backend:

- SQL text is in the backend's ``dialect`` (a sqlglot dialect name). Query
  parameters are positional and written ``$1``, ``$2`` ... on every backend;
  ``render`` turns a sqlglot expression into such text (sqlglot itself would
  write ``%(1)s`` for PostgreSQL).
- Results are Arrow: ``execute`` returns a ``pa.Table``, ``execute_batches``
  streams ``pa.RecordBatch`` es (consume or close the stream before the next
  statement: the connection serves one statement at a time). Integer SUMs come back as decimal128(38, 0)
  on both backends (DuckDB's HUGEINT and PostgreSQL's NUMERIC).
- Table and column names must be plain identifiers (letters, digits, ``_``);
  backends quote them, so their case is kept.
- ``bulk_load`` is atomic per table: data goes into a staging table that
  replaces the target in one transaction, so a failed load leaves the old table
  (or none) and can simply be run again. Create indexes after loading.
- Every statement the server receives, with its parameters, is passed to the
  statement listeners first, so tests can check that no plaintext leaves.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Protocol, TypeAlias, runtime_checkable

import pyarrow as pa
from sqlglot import exp

from veil.errors import OperationalError, SerializationError

# Arrow data for a bulk load: a whole table, a reader, or any iterable of batches.
ArrowData: TypeAlias = pa.Table | pa.RecordBatchReader | Iterable[pa.RecordBatch]
Params = Sequence[object] | None
StatementListener = Callable[[str, Params], None]

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
STAGING_SUFFIX = "__veil_staging"
# ``update_rows``'s column of the ids the rows had before (the data's row id column
# holds the new ones)
OLD_KEY = "__veil_old_key"
# ``update_rows``'s columns naming, after this prefix, a server column whose stored value
# each row still holds (a DET key the write keeps): where a backend ``locates_rows``, it
# finds the rows by that column's index and checks ``OLD_KEY`` among them
LOCATOR = "__veil_locator:"
REWRITE_SUFFIX = "__veil_rewrite"  # a table's copy being made by ``replace_rows``


class BackendError(OperationalError):
    """The server refused a statement or failed while running it."""

    anchor = "backend"


class ServerUnavailableError(BackendError):
    """The server could not be reached (down, wrong URL, wrong credentials)."""

    anchor = "server-unavailable"


class DuplicateKeyError(BackendError):
    """A write would give two rows one key: the server's unique index refused it.

    The server's message names opaque columns and ciphertexts; the client says
    it in the user's terms (``veil.session.constraints``). Nothing was written.
    """


class WriteConflictError(BackendError, SerializationError):
    """The server rolled back a transaction whose writes collided with another's.

    DuckDB's optimistic MVCC aborts the second of two transactions that change
    one row ("Conflict on tuple deletion!"); PostgreSQL reports a serialization
    failure or a deadlock. Nothing of the transaction was written.
    """

    anchor = "serialization"


@dataclass(frozen=True)
class Operator:
    """One node of the server's plan as its optimizer describes it (``Estimate.operators``)."""

    # "scan", "join", "group" (hash aggregate), "sort", or "other" (projection, filter,
    # an aggregate without groups, a limit: each row through its expressions)
    kind: str
    rows: float  # the rows it returns: the optimizer's estimate, or counted (``profile``)
    # the expressions it computes per row (a scan: its filters, on every row it reads; a
    # join: its conditions)
    expressions: int
    children: tuple[Operator, ...] = ()
    table: str | None = None  # a scan's server table ...
    table_rows: float = 0.0  # ... and that table's rows
    # a join that returns at most its first input's rows (semi, anti, mark) ...
    bounded: bool = False
    # ... and one that keeps every row of its first input, marked (anti, mark)
    marks: bool = False
    columns: int = 0  # a scan's columns returned on the rows its filters keep; a group's keys
    # of a scan's filters (``expressions``), those comparing bytes: a ciphertext of text
    # tested byte by byte costs about twice a 64-bit integer's comparison (DuckDB)
    byte_filters: int = 0
    # a join that builds a hash table of its inner input (every DuckDB join; PostgreSQL's
    # Hash Join, not its nested loops or merge joins)
    hashed: bool = True
    seconds: float = 0.0  # profiled: the time spent in it, summed over the server's threads
    # its own part of the optimizer's cost (its total less its inputs'), where the
    # optimizer prices its plan (PostgreSQL)
    cost: float = 0.0
    # its rows and cost are one run's of many (a nested loop's inner side, PostgreSQL)
    per_loop: bool = False
    # an inner join on several keys whose optimizer multiplied their selectivities as if
    # independent (PostgreSQL): TPC-H Q9's lineitem and partsupp on (partkey, suppkey), a
    # foreign key, returns every lineitem row, where PostgreSQL guessed 129 of 6M
    composite: bool = False


@dataclass(frozen=True)
class Estimate:
    """What the server's optimizer expects of a statement (from EXPLAIN)."""

    rows: float
    # in the optimizer's own units (PostgreSQL's cost; DuckDB: the rows all its plan's
    # nodes handle); ``veil.cost.calibration`` measures seconds per unit
    cost: float | None
    # the part of ``cost`` each server table's scans make, where the server reads a
    # table in blocks of ``block_rows`` rows and skips the blocks whose min/max no
    # filter can match (DuckDB's row groups) but its estimate prices them all: a
    # caller that knows the table is ordered by a filtered column takes off the rest
    # (``veil.cost.model``). Empty: the optimizer prices that itself (PostgreSQL).
    scanned: dict[str, float] = field(default_factory=dict)
    block_rows: int = 0
    # the plan's operators, where the optimizer lists them with their rows (DuckDB):
    # ``veil.cost.server_time`` prices each kind from its own calibration
    operators: Operator | None = None
    # the seconds the EXPLAIN itself took: parsing, binding and optimizing the statement,
    # which running it pays again (DuckDB: ~1 ms a join, TPC-H Q2's two statements 15 ms)
    planning: float = 0.0
    # each operator carries its own part of the optimizer's cost (``Operator.cost``:
    # PostgreSQL), which the planner's rows then scale
    costed_operators: bool = False
    # the functions the server compiles before running it (PostgreSQL's JIT, past its
    # ``jit_above_cost``), and whether it optimizes them (past ``jit_optimize_above_cost``)
    jit_functions: int = 0
    jit_optimized: bool = False


@runtime_checkable
class Backend(Protocol):
    """An untrusted SQL server that stores ciphertexts and runs RemoteSQL."""

    url: str
    dialect: str  # sqlglot dialect name: "duckdb" or "postgres"
    # Whether the server dictionary-compresses repeated binary values: then a
    # DET integer column with few distinct values is stored smaller as bytes.
    compresses_repeated_bytes: bool
    # Whether a table scan skips blocks of rows by their stored min/max (DuckDB's row
    # groups, Parquet's): then loading rows in the order of a range-filtered column pays
    # (``veil.load.clusters``). PostgreSQL reads every heap page, and its index probes by
    # another key would land on scattered pages instead.
    skips_row_blocks: bool
    # Whether a change to every row of a table is faster as a copy of the table
    # (``replace_rows``) than as an UPDATE (PostgreSQL: an UPDATE writes each row again
    # with its MVCC header and every index entry, and leaves the old rows to VACUUM).
    rewrites_by_copy: bool
    # Whether ``col NOT IN (subquery)`` runs as one hash anti-join (DuckDB, Spark), not
    # as a subplan per row where the planner cannot hash it (PostgreSQL: TPC-H Q16 took
    # 1.8 times as long with its NOT IN on the server)
    hashes_not_in: bool
    # Whether a semi-join reduction's branch joined on several columns of its target is
    # sent as a correlated EXISTS (``veil.sql.remote.reduction_filter``): PostgreSQL pulls
    # it up into a hash semi-join, where the row-id form ``rid IN (SELECT r0.rid ...)``
    # probed TPC-DS q24's store_sales by row id 287k times; DuckDB ran TPC-H Q7's EXISTS
    # thirty times slower than the row-id form
    semi_joins_by_exists: bool
    # The partner rows a semi-join reduction's server join reads in the time the client
    # fetches and decrypts one byte it saves (``trim_reductions``): DuckDB scans a
    # vector of rows in what a fetched byte costs; PostgreSQL's row-at-a-time joins
    # read TPC-DS q24's 3.2M store_sales and store_returns rows in 1.1 s to keep 31
    # customers, whose 100,000 rows (8.5 MB) came whole in 0.24 s (0.08 rows a byte),
    # while q80's returns reduced by the sales of 30 days pay their way (over 0.16)
    scanned_rows_per_byte: float
    # Whether a subquery may refer to a scope more than one level out (DuckDB,
    # PostgreSQL); Spark's analyser resolves outer references one level out only
    correlates_deeply: bool
    # Whether ``update_rows`` changes rows where they are (DuckDB, PostgreSQL): a table
    # keeps its size, row order and indexes. Spark's Parquet tables change only by new
    # versions, so Veil rewrites a row there as a delete and an append.
    updates_in_place: bool
    # Whether ``update_rows`` finds its rows by a ``LOCATOR`` column's index (DuckDB, whose
    # row ids have none) rather than by their ids alone
    locates_rows: bool

    def execute(self, sql: str, params: Params = None) -> pa.Table:
        """Run one statement; a query's rows as a table, an empty table otherwise."""
        ...

    def execute_batches(
        self, sql: str, params: Params = None, *, batch_rows: int = 65536
    ) -> Iterator[pa.RecordBatch]:
        """Run one query and stream its rows in batches of at most ``batch_rows``."""
        ...

    def bulk_load(self, table: str, data: ArrowData, *, schema: pa.Schema | None = None) -> int:
        """Create or replace ``table`` with ``data`` atomically; returns the row count.

        ``schema`` is needed only when ``data`` is an iterable that may be empty.
        """
        ...

    def append(self, table: str, data: ArrowData) -> int:
        """Append rows (columns matched by name) to an existing table; returns the count."""
        ...

    def update_rows(self, table: str, key: str, data: pa.Table) -> int:
        """Set each row of ``table`` whose ``key`` equals a row's ``OLD_KEY`` to that row's
        other columns (``key`` among them, with its new value); returns how many rows it
        set. Runs in the caller's transaction."""
        ...

    def drop_table(self, table: str, *, if_exists: bool = True) -> None: ...

    def rename_table(self, old: str, new: str) -> None: ...

    def table_names(self) -> list[str]: ...

    def refresh_statistics(self, table: str) -> None:
        """Let the optimizer see ``table``'s values again after an in-place rewrite (a peel)."""
        ...

    def column_names(self, table: str) -> list[str]:
        """The table's columns, in order."""
        ...

    def replace_rows(self, table: str, select: str, params: Params = None) -> None:
        """Within the current transaction, make ``table`` hold the rows ``select`` returns
        (its columns in order), keeping its name and indexes; writers wait meanwhile."""
        ...

    def indexes(self, table: str) -> list[tuple[str, str]]:
        """``(name, CREATE statement)`` of each index on ``table``, read from the server's
        catalogue (none where the server has no indexes)."""
        ...

    def indexes_to_rebuild(self, table: str, columns: list[str]) -> list[tuple[str, str]]:
        """``(name, CREATE statement)`` of each index on ``table`` over any of ``columns`` that
        an in-place rewrite of those columns should drop first and build again after (none
        where the server maintains indexes well through a rewrite of every row)."""
        ...

    def table_bytes(self, table: str) -> int:
        """Space the server uses for ``table`` (for the space-overhead figure)."""
        ...

    def estimate(self, sql: str, params: Params = None) -> Estimate:
        """The server optimizer's row count and cost for a statement (EXPLAIN)."""
        ...

    def inline_parameters(
        self, statement: exp.Expression, params: list[object]
    ) -> tuple[exp.Expression, list[object]]:
        """``statement`` and ``params`` as this backend reads their results fastest.

        A backend may write the parameters (always ciphertexts or public
        values) into the statement as literals; the result is then rendered
        and sent with the parameters left over.
        """
        ...

    def hom_sum(self, ciphertexts: exp.Expression, n_square: exp.Expression) -> exp.Expression:
        """Aggregate expression: the Paillier sum (product mod n^2) of a ciphertext column.

        ``n_square`` is a BLOB/bytea expression holding n^2 as unsigned big-endian
        bytes (see ``n_square_bytes``), usually a query parameter. The result is a
        ciphertext in the column's format; NULLs are skipped; no rows -> NULL.
        """
        ...

    def search_match(self, ciphertexts: exp.Expression, token: exp.Expression) -> exp.Expression:
        """Boolean expression: does a SEARCH ciphertext contain the token's word."""
        ...

    def id_bit(self, position: exp.Expression) -> exp.Expression:
        """64-bit integer expression ``1 << position`` for positions 0..63 (bit 63 too).

        ``BIT_OR`` of it over a block's rows is the block's mask of row ids.
        """
        ...

    def hash_aggregation(self) -> AbstractContextManager[None]:
        """Statements run inside it group by hashing rather than sorting, where that is a choice.

        An ASHE statement groups by (keys, block of row ids): PostgreSQL
        estimates a group per row and sorts 6M rows to disk (TPC-H Q1: 12 s),
        where hashing its 300k groups takes 2.9 s.
        """
        ...

    def wrapping_sum(self, value: exp.Expression) -> exp.Expression:
        """Aggregate expression: a BIGINT column's sum; only its value mod 2**64 counts.

        ASHE sums need nothing more, and a machine addition that wraps is
        several times cheaper than the exact 128-bit or numeric SUM. Where the
        server has no such aggregate it is the exact SUM.
        """
        ...

    def extreme(self, kind: str, value: exp.Expression, binary: bool) -> exp.Expression:
        """Aggregate expression: ``kind`` (MIN or MAX) of OPE ciphertexts.

        ``binary``: the ciphertexts are byte strings (OPE over more than 32
        bits), ordered byte-wise, which not every server can aggregate.
        """
        ...

    def add_statement_listener(self, listener: StatementListener) -> Callable[[], None]:
        """Call ``listener(sql, params)`` for every statement sent; returns its remover."""
        ...

    def transaction(self) -> AbstractContextManager[None]:
        """Run the statements inside the ``with`` block atomically."""
        ...

    @property
    def in_transaction(self) -> bool:
        """Whether a ``transaction()`` block is open: a statement run now commits with it."""
        ...

    # An explicit transaction (a session's BEGIN ... COMMIT): every ``transaction()``
    # block inside it joins it. ``savepoints``: whether the server has SAVEPOINT.
    savepoints: bool

    def begin(self) -> None:
        """Open an explicit transaction; the statements until ``commit``/``rollback`` join it."""
        ...

    def commit(self) -> None: ...

    def rollback(self) -> None: ...

    def savepoint(self, name: str, verb: str = "SAVEPOINT") -> None:
        """``SAVEPOINT name``, ``ROLLBACK TO SAVEPOINT name`` or ``RELEASE SAVEPOINT name``."""
        ...

    def autonomous(self) -> Backend:
        """A connection to the same server whose statements commit on their own.

        A row-id counter is advanced there from inside a transaction, so that
        concurrent transactions writing one table do not collide on it (ids a
        rolled-back transaction took are skipped, never reused).
        """
        ...

    def close(self) -> None: ...


def render(expression: exp.Expression, dialect: str, *, copy: bool = True) -> str:
    """SQL text for ``expression`` in ``dialect``, placeholders written ``$1``, ``$2``...

    Numbered placeholders (``exp.Placeholder(this="1")``) keep their number;
    anonymous ones (``?``) are numbered in order of appearance. ``copy=False``
    changes ``expression`` in place (for a large statement built for one use).
    """
    counter = iter(range(1, 1_000_000))

    def numbered(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Placeholder):
            number = node.args.get("this")
            return exp.var(f"${number if number is not None else next(counter)}")
        return node

    return expression.transform(numbered, copy=copy).sql(dialect=dialect)


def n_square_bytes(n_square: int) -> bytes:
    """n^2 as the unsigned big-endian bytes the server functions take."""
    return n_square.to_bytes((n_square.bit_length() + 7) // 8, "big")


def check_identifier(name: str) -> str:
    """Reject names that are not plain identifiers, so quoting is always safe."""
    if not _IDENTIFIER.match(name):
        raise BackendError(
            f"{name!r} is not a plain identifier; server table and column names "
            "must be letters, digits and underscores"
        )
    return name


def quote(name: str) -> str:
    return f'"{check_identifier(name)}"'


def as_batches(
    data: ArrowData, schema: pa.Schema | None = None
) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
    """The schema and batches of any accepted bulk-load input."""
    if isinstance(data, pa.Table):
        return data.schema, iter(data.to_batches())
    if isinstance(data, pa.RecordBatchReader):
        return data.schema, iter(data)
    batches: Iterator[pa.RecordBatch] = iter(data)
    first = next(batches, None)
    if first is None:
        if schema is None:
            raise BackendError("bulk load got no batches and no schema; pass schema=")
        return schema, iter(())
    return first.schema, _chain(first, batches)


def _chain(first: pa.RecordBatch, rest: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield first
    yield from rest


class StatementLog:
    """The listeners of one backend; backends call ``emit`` before sending a statement."""

    def __init__(self) -> None:
        self._listeners: list[StatementListener] = []

    def add(self, listener: StatementListener) -> Callable[[], None]:
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def emit(self, sql: str, params: Params) -> None:
        for listener in list(self._listeners):
            listener(sql, params)

    def __bool__(self) -> bool:
        return bool(self._listeners)


class TransactionScope:
    """BEGIN ... COMMIT around a block, ROLLBACK if it raises; nested blocks join the outer one.

    A session's explicit transaction (``begin`` ... ``commit`` or ``rollback``)
    is the outer block of every statement run inside it: their blocks join it,
    and a failing one leaves the rollback to the transaction's owner.
    """

    def __init__(self, run: Callable[[str], object]) -> None:
        self._run = run
        self.active = False
        self.explicit = False

    @contextmanager
    def block(self) -> Iterator[None]:
        if self.active:  # nested: the outer block decides
            yield
            return
        self._run("BEGIN")
        self.active = True
        try:
            yield
        except BaseException:
            self.active = False
            self._run("ROLLBACK")
            raise
        self.active = False
        self._run("COMMIT")

    def begin(self) -> None:
        if self.active:
            raise BackendError("a transaction is already open on this connection")
        self._run("BEGIN")
        self.active = self.explicit = True

    def end(self, verb: str) -> None:
        """COMMIT or ROLLBACK the explicit transaction (closed even if the server refuses)."""
        if not self.explicit:
            return
        self.active = self.explicit = False
        self._run(verb)
