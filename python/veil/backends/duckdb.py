"""The embedded default server: a DuckDB database file (``duckdb:///path/server.duckdb``).

DuckDB runs in Veil's process but plays the untrusted server: it only ever sees
ciphertexts under opaque names. Veil's server functions are registered on each
database as vectorised Arrow UDFs (see ``veil.backends.duckdb_functions``).

A DuckDB file is one database instance per process, and Veil's functions
belong to that instance's catalogue. So backends opened on the same file share
one instance (``_Databases``: opened with the first backend, closed with the
last, the functions registered once); each backend gets a cursor of its own
(a separate connection with its own transaction state).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
from sqlglot import exp

from veil.backends import duckdb_functions
from veil.backends.base import (
    LOCATOR,
    OLD_KEY,
    BackendError,
    DuplicateKeyError,
    Estimate,
    Operator,
    Params,
    ServerUnavailableError,
    WriteConflictError,
    quote,
)
from veil.backends.duckdb_arrow import query_arrow
from veil.backends.duckdb_rows import RowReads, plain_kind
from veil.backends.staged import StagedBackend, index_pairs, update_statement

_SCHEME = "duckdb://"
_VIEW = "__veil_arrow_input"
# rows ``update_rows`` writes one parameterised UPDATE each (``_update_by_key``); more are
# joined from a registered Arrow view
_ROWS_BY_KEY = 4


def database_path(url: str) -> str:
    """The file a DuckDB URL names; ``duckdb://:memory:`` is an in-memory server.

    ``duckdb:///abs/server.duckdb`` names an absolute path; ``duckdb:server.duckdb``
    (or ``duckdb://server.duckdb``) one relative to the current directory, which
    ``veil load`` stores resolved (``veil.backends.canonical_url``).
    """
    if not url.startswith("duckdb:"):
        raise BackendError(f"{url!r} is not a DuckDB URL; write duckdb:///path/server.duckdb")
    rest = url[len("duckdb:") :]
    rest = rest[2:] if rest.startswith("//") else rest
    return ":memory:" if rest in ("", ":memory:", "/:memory:") else rest


_WRAPPING_SUM = "sum_no_overflow"


_CREATE_INDEX = re.compile(r"^\s*(CREATE\s+(?:UNIQUE\s+)?INDEX)\s+", re.IGNORECASE)


class DuckDBBackend(StagedBackend):
    """A DuckDB file as Veil's server."""

    dialect = "duckdb"
    # DuckDB stores BIGINTs of random bits uncompressed (8 bytes a row) but
    # dictionary-compresses BLOB segments: 2,400 distinct values in 6M rows
    # take 13 MB as 8-byte blobs against 51 MB as BIGINT, and group and join
    # as fast (measured here on DuckDB 2.0).
    compresses_repeated_bytes = True
    skips_row_blocks = True  # row groups of 122,880 rows, each with min/max per column
    savepoints = False  # DuckDB has no SAVEPOINT
    hashes_not_in = True
    correlates_deeply = True
    semi_joins_by_exists = False  # TPC-H Q7: EXISTS on several keys 30x the row-id form
    scanned_rows_per_byte = 2.0
    rewrites_by_copy = False  # an UPDATE without indexes over its columns is as fast
    locates_rows = True  # its row ids have no index: a DET key's finds the row
    # A load's INSERTs in one transaction: DuckDB then writes full row groups to the file
    # as they fill (no WAL, no checkpoint re-reading them) and compresses them better.
    # TPC-DS SF 1's encrypted tables copied batch by batch (65,536 rows): store_sales
    # 31.9 s -> 10.7 s, inventory 87.3 -> 75.5 MB (its dictionaries of 8-byte blobs);
    # DuckDB's buffer pool holds more meanwhile (inventory's resident peak 0.36 -> 1.2
    # GB), within its memory limit.
    load_in_one_transaction = True

    def __init__(self, url: str) -> None:
        super().__init__()
        self.url = url
        self._path = database_path(url)
        self._con = _DATABASES.open(self._path)
        self._closed = False
        self._row_reads = RowReads()
        self._wrapping_sum: bool | None = None
        # EXPLAIN's seconds, by statement text, least recently asked first
        self._planning: OrderedDict[str, float] = OrderedDict()

    # -- statements ---------------------------------------------------------

    def execute(self, sql: str, params: Params = None) -> pa.Table:
        values = list(params) if params is not None else None
        with _server_errors():  # a few rows read again: without a relation (``duckdb_rows``)
            if self._row_reads.knows(sql):
                self._log.emit(sql, params)
                table = self._row_reads.run(self._con, sql, values)
                if table is not None:
                    return table
        self._log.emit(sql, params)
        with _server_errors():  # a query bound once (``duckdb_arrow``)
            table = query_arrow(self._con, sql, values)
        if table is None:
            relation = self._run(sql, params, logged=True)
            if relation is None:
                return pa.table({})
            with _server_errors():  # a read runs (and may fail) only when fetched
                table = relation.to_arrow_table()
        if self._row_reads.wants(sql, table):
            with _server_errors():  # its DuckDB types: described, not run
                self._row_reads.learn(sql, table, self._con.sql(sql, params=values).types)
        else:
            self._row_reads.forget(sql)
        return table

    def execute_batches(
        self, sql: str, params: Params = None, *, batch_rows: int = 65536
    ) -> Iterator[pa.RecordBatch]:
        relation = self._run(sql, params)
        if relation is None:
            return iter(())
        with _server_errors():
            reader = relation.to_arrow_reader(batch_rows)
        return _checked_batches(reader)

    def _run(self, sql: str, params: Params, *, logged: bool = False) -> Any:
        if not logged:
            self._log.emit(sql, params)
        with _server_errors():
            return self._con.sql(sql, params=list(params) if params is not None else None)

    def _run_quiet(self, sql: str) -> None:
        """Run bookkeeping SQL of our own (logged like any other statement).

        Through the DB-API, which binds a statement once: a relation binds it
        before running it and again to run it (~0.2 ms of a BEGIN or COMMIT).
        """
        self._log.emit(sql, None)
        with _server_errors():
            self._con.execute(sql)

    # -- loading hooks ------------------------------------------------------

    def _create_table(self, table: str, schema: pa.Schema) -> None:
        with self._registered(pa.Table.from_batches([], schema)):
            self._run_quiet(f"CREATE TABLE {quote(table)} AS SELECT * FROM {_VIEW}")

    def _insert(self, table: str, schema: pa.Schema, batches: Iterator[pa.RecordBatch]) -> int:
        """One INSERT per run of batches of one schema, reading them as a stream: DuckDB
        then writes row groups on all its threads, where an INSERT per 65,536-row batch
        wrote them one at a time (TPC-DS SF 1's inventory, 11.7M encrypted rows: 5.7-6.0 s
        against 2.5-2.8 s, in the same order)."""
        runs = _Runs(batches)
        while (reader := runs.next_run()) is not None:
            try:
                with self._registered(reader):
                    self._run_quiet(f"INSERT INTO {quote(table)} BY NAME SELECT * FROM {_VIEW}")
            except Exception:
                if runs.error is not None:  # the batches' own error (a refused value), not
                    raise runs.error from None  # DuckDB's report of the stream it broke
                raise
        return runs.rows

    def _update_from(self, table: str, key: str, data: pa.Table) -> int:
        if len(data) <= _ROWS_BY_KEY and all(plain_kind(f.type) for f in data.schema):
            return self._update_by_key(table, key, data)
        data = data.drop_columns([c for c in data.column_names if c.startswith(LOCATOR)])
        with self._registered(data):
            # DuckDB counts the rows it updated; its RETURNING of every row took 182 s for
            # 600,000 rows where the same UPDATE took 1.3 s (a peel building a layer of
            # TPC-H SF 0.1's lineitem, load average ~12)
            counted = update_statement(
                table, key, data.column_names, f"{_VIEW} AS s", returning=False
            )
            return int(self.execute(counted).column(0)[0].as_py())

    def _update_by_key(self, table: str, key: str, data: pa.Table) -> int:
        """A few rows, each one ``UPDATE ... WHERE key = $n`` with its values as parameters
        (issue 41): an UPDATE by key's write joined a registered Arrow view against the
        whole table (~2-3 ms of a ~1 ms plaintext UPDATE on TPC-H SF 0.1 orders)."""
        located = next((c for c in data.column_names if c.startswith(LOCATOR)), None)
        columns = [c for c in data.column_names if c != OLD_KEY and not c.startswith(LOCATOR)]
        locator = located[len(LOCATOR) :] if located is not None else ""
        updated = 0
        arrays = [data.column(c).to_pylist() for c in [*columns, OLD_KEY]]
        places = data.column(located).to_pylist() if located is not None else [None] * len(data)
        for values, place in zip(zip(*arrays, strict=True), places, strict=True):
            sent = list(values) if place is None else [*values, place]
            statement = _update_by_key_statement(
                table, key, tuple(columns), "" if place is None else locator
            )
            self._log.emit(statement, sent)
            with _server_errors():
                self._con.execute(statement, sent)
                updated += len(self._con.fetchall())
        return updated

    @contextmanager
    def _registered(self, arrow: pa.Table | pa.RecordBatch) -> Iterator[None]:
        self._con.register(_VIEW, arrow)
        try:
            yield
        except BaseException:
            # a failed statement aborted the transaction, whose ROLLBACK drops the view;
            # unregistering now would fail and hide the statement's own error
            with contextlib.suppress(duckdb.TransactionException):
                self._con.unregister(_VIEW)
            raise
        self._con.unregister(_VIEW)

    # -- catalogue ----------------------------------------------------------

    def table_names(self) -> list[str]:
        names = self.execute("SELECT table_name FROM duckdb_tables() ORDER BY table_name")
        return [str(name) for name in names.column(0).to_pylist()]

    def table_bytes(self, table: str) -> int:
        """Bytes of the storage blocks the table's columns occupy after a checkpoint.

        A segment's own block, and the blocks holding its strings too long to
        sit in it (``additional_block_ids``: a blocks table's sealed blocks).
        """
        self._run_quiet("CHECKPOINT")
        blocks = self.execute(
            "SELECT count(DISTINCT b) FROM (SELECT unnest(list_append(additional_block_ids, "
            "block_id)) AS b FROM pragma_storage_info($1) WHERE persistent) WHERE b >= 0",
            [table],
        ).column(0)[0]
        return int(blocks.as_py() or 0) * self._block_size()

    def _block_size(self) -> int:
        return int(self.execute("SELECT block_size FROM pragma_database_size()")[0][0].as_py())

    def column_bytes(self, table: str) -> dict[str, float]:
        """Each column's share of ``table_bytes``: its segments' extents within their blocks
        (a segment runs to the next one's offset), scaled to the table's whole blocks.

        What the designer sizes a stored encryption by (``veil.designer.candidates``):
        DuckDB bit-packs a narrow DET column's small integers to a few bits a row and
        cannot compress RND's random bytes, so TPC-H's lineitem takes 333 MB where 8
        bytes a ciphertext would be 1.4 GB.
        """
        total = self.table_bytes(table)
        block_size = self._block_size()
        found = self.execute(
            "SELECT column_name, block_id, block_offset, len(additional_block_ids) "
            "FROM pragma_storage_info($1) WHERE persistent AND block_id >= 0",
            [table],
        )
        extents: dict[str, float] = {}
        by_block: dict[int, list[tuple[int, str, int]]] = {}
        for name, block, offset, extra in zip(*(c.to_pylist() for c in found.columns), strict=True):
            by_block.setdefault(block, []).append((offset, name, extra or 0))
        for segments in by_block.values():
            segments.sort()
            ends = [offset for offset, _, _ in segments[1:]] + [block_size]
            for (offset, name, extra), end in zip(segments, ends, strict=True):
                extents[name] = extents.get(name, 0.0) + end - offset + extra * block_size
        spread = sum(extents.values())
        return {name: total * size / spread for name, size in extents.items()} if spread else {}

    def _indexes(self, table: str) -> list[tuple[str, str]]:
        found = self.execute(
            "SELECT index_name, sql FROM duckdb_indexes() WHERE table_name = $1 "
            "AND sql IS NOT NULL ORDER BY index_name",
            [table],
        )
        return index_pairs(found)

    def indexes_to_rebuild(self, table: str, columns: list[str]) -> list[tuple[str, str]]:
        """DuckDB moves a row's index entries one by one when an UPDATE changes an indexed
        column, even with the index dropped earlier in the same transaction: a peel of one
        lineitem column took 15 minutes with its index, 2 s dropped and built again."""
        # server column names are random (``opaque_name``): a name in the SQL is that column
        return [
            (name, _CREATE_INDEX.sub(r"\1 IF NOT EXISTS ", sql, count=1))
            for name, sql in self._indexes(table)
            if any(column in sql for column in columns)
        ]

    # -- planning help --------------------------------------------------------

    def estimate(self, sql: str, params: Params = None) -> Estimate:
        """The top node's rows; as cost, the rows all nodes handle (DuckDB reports no cost):
        a table scan's are the table's, whatever its filters keep (it reads them all)."""
        started = time.perf_counter()
        plan = self.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
        planning = self._planning_of(sql, time.perf_counter() - started)
        nodes = json.loads(plan.column(1)[0].as_py())
        scanned: dict[str, float] = {}
        sizes: dict[str, float] = {}  # each table's rows, asked once per statement
        cost = self._handled(nodes, scanned, sizes)
        operators = self._operator(nodes[0], False, sizes) if len(nodes) == 1 else None
        top = _top_cardinality(nodes)
        return Estimate(top, cost, scanned, ROW_GROUP_ROWS, operators, planning)

    def _planning_of(self, sql: str, measured: float) -> float:
        """The first time measured for this text stands: an estimate must not change from
        one call to the next (a slower link priced a plan cheaper by a faster EXPLAIN, and
        the ILP designer's two designs of one workload priced one plan apart). The least
        recently asked text goes first: forgetting them all at once re-timed a design's
        statements half-way through it when earlier queries had filled the cache."""
        kept = self._planning.get(sql)
        if kept is not None:
            self._planning.move_to_end(sql)
            return kept
        self._planning[sql] = measured
        if len(self._planning) > _PLANNING_KEPT:
            self._planning.popitem(last=False)
        return measured

    def profile(self, sql: str, params: Params = None) -> Operator:
        """Run ``sql`` under DuckDB's profiler: its operators with the rows they returned
        (``veil.cost.calibration`` prices each kind of operator from such runs)."""
        plan = self.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}", params)
        root = json.loads(plan.column(1)[0].as_py())
        nodes = root.get("operator", root.get("children", []))
        node = nodes[0] if isinstance(nodes, list) else nodes
        while node.get("name") in _PROFILER_NODES and node.get("children"):
            node = node["children"][0]
        return self._operator(node, True, {})

    def _operator(self, node: dict[str, Any], counted: bool, sizes: dict[str, float]) -> Operator:
        info = node.get("extra_info", {})
        info = info if isinstance(info, dict) else {}
        name = str(node.get("name", ""))
        children = tuple(self._operator(c, counted, sizes) for c in node.get("children", []))
        if counted:
            rows = float(node.get("intermediate_rows") or node.get("operator_cardinality") or 0)
            spent = float(node.get("timing") or node.get("operator_timing") or 0.0)
        else:
            rows, spent = float(info.get("Estimated Cardinality") or 0), 0.0
        table = info.get("Table")
        if isinstance(table, str) and name.endswith("_SCAN") and name != "CTE_SCAN":
            server = table.rsplit(".", 1)[-1]
            filters, columns = _items(info.get("Filters")), _items(info.get("Projections"))
            size = self._table_rows(server, sizes)
            on_bytes = _items_with(info.get("Filters"), "::BLOB")
            return Operator(
                "scan",
                rows,
                filters,
                (),
                server,
                size,
                columns=columns,
                seconds=spent,
                byte_filters=min(on_bytes, filters),
            )
        if "JOIN" in name:
            joined = str(info.get("Join Type", "INNER")).upper()
            bounded = joined in ("SEMI", "ANTI", "MARK", "RIGHT_SEMI", "RIGHT_ANTI")
            keys = max(1, _items(info.get("Conditions")))
            marks = joined in ("ANTI", "MARK", "RIGHT_ANTI")
            return Operator(
                "join", rows, keys, children, bounded=bounded, marks=marks, seconds=spent
            )
        if name in ("HASH_GROUP_BY", "PERFECT_HASH_GROUP_BY"):
            aggregates, keys = _items(info.get("Aggregates")), _items(info.get("Groups"))
            return Operator("group", rows, aggregates, children, columns=keys, seconds=spent)
        if name in ("ORDER_BY", "TOP_N", "WINDOW"):
            return Operator("sort", rows, 1, children, seconds=spent)
        computed = sum(_computed(info.get(key)) for key in _WORK_KEYS)
        return Operator("other", rows, computed, children, seconds=spent)

    def _handled(
        self, nodes: list[dict[str, Any]], scanned: dict[str, float], sizes: dict[str, float]
    ) -> float:
        total = 0.0
        for node in nodes:
            info = node.get("extra_info", {})
            table = info.get("Table") if isinstance(info, dict) else None
            estimate = info.get("Estimated Cardinality") if isinstance(info, dict) else None
            name = table.rsplit(".", 1)[-1] if isinstance(table, str) else None
            rows = self._table_rows(name, sizes) if name is not None else float(estimate or 0)
            # each row costs per expression the node computes (columns, aggregates, filters)
            handled = rows * max(1, sum(_items(info.get(k)) for k in _WORK_KEYS))
            if name is not None:
                scanned[name] = scanned.get(name, 0.0) + handled
            total += handled + self._handled(node.get("children", []), scanned, sizes)
        return total

    def _table_rows(self, table: str, sizes: dict[str, float]) -> float:
        if table not in sizes:
            found = self.execute(
                "SELECT estimated_size FROM duckdb_tables() WHERE table_name = $1", [table]
            )
            sizes[table] = float(found.column(0)[0].as_py() or 0) if found.num_rows else 0.0
        return sizes[table]

    def hom_sum(self, ciphertexts: exp.Expression, n_square: exp.Expression) -> exp.Expression:
        listed = exp.Anonymous(this="list", expressions=[ciphertexts])
        return exp.Anonymous(this=duckdb_functions.HOM_SUM, expressions=[listed, n_square])

    def id_bit(self, position: exp.Expression) -> exp.Expression:
        # an unsigned shift: BIGINT's 1 << 63 overflows in DuckDB
        one = exp.cast(exp.Literal.number(1), exp.DataType.build("UBIGINT", dialect="duckdb"))
        return exp.BitwiseLeftShift(this=one, expression=exp.cast(position, "INT"))

    def search_match(self, ciphertexts: exp.Expression, token: exp.Expression) -> exp.Expression:
        return exp.Anonymous(this=duckdb_functions.SEARCH_MATCH, expressions=[ciphertexts, token])

    def hash_aggregation(self) -> AbstractContextManager[None]:
        return nullcontext()  # DuckDB always hashes

    def extreme(self, kind: str, value: exp.Expression, binary: bool) -> exp.Expression:
        return exp.Min(this=value) if kind == "MIN" else exp.Max(this=value)  # BLOBs too

    def wrapping_sum(self, value: exp.Expression) -> exp.Expression:
        if not self._wraps():
            return exp.Sum(this=value)
        # in one run, 6M rows in 375k groups, 10 sums: 0.30 s against SUM's 0.47 s
        wrapped = exp.Anonymous(this=_WRAPPING_SUM, expressions=[value])
        return exp.cast(wrapped, "BIGINT")

    def _wraps(self) -> bool:
        """Does this DuckDB's ``sum_no_overflow`` add BIGINTs modulo 2**64?

        It is an internal aggregate (the optimizer's, for sums statistics
        prove cannot overflow): checked once, so a DuckDB that drops or
        changes it gets the exact SUM instead.
        """
        if self._wrapping_sum is None:
            probe = (
                f"SELECT {_WRAPPING_SUM}(x) = -9223372036854775807 - 1 "
                "FROM (VALUES (9223372036854775807::BIGINT), (1::BIGINT)) AS t(x)"
            )
            try:
                self._wrapping_sum = self.execute(probe).column(0)[0].as_py() is True
            except BackendError:
                self._wrapping_sum = False
        return self._wrapping_sum

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._close_autonomous()
            _DATABASES.release(self._path, self._con)


@dataclass
class _Database:
    con: duckdb.DuckDBPyConnection  # the instance's first connection: owns its lifetime
    users: int = 0


class _Databases:
    """The process's open DuckDB server files, each shared by the backends opened on it."""

    def __init__(self) -> None:
        self._open: dict[str, _Database] = {}
        self._lock = threading.Lock()

    def open(self, path: str) -> duckdb.DuckDBPyConnection:
        """A new connection (cursor) to the file's database, opening the database if need be."""
        if path == ":memory:":  # every in-memory server is a database of its own
            return _connect(path)
        key = os.path.realpath(path)
        with self._lock:
            database = self._open.get(key)
            if database is None:
                database = self._open[key] = _Database(_connect(path))
            database.users += 1
            return database.con.cursor()

    def release(self, path: str, con: duckdb.DuckDBPyConnection) -> None:
        """Close a backend's connection; the database closes with its last user."""
        con.close()
        if path == ":memory:":
            return
        key = os.path.realpath(path)
        with self._lock:
            database = self._open[key]
            database.users -= 1
            if database.users == 0:
                del self._open[key]
                database.con.close()


def _connect(path: str) -> duckdb.DuckDBPyConnection:
    try:
        con = duckdb.connect(path)
    except duckdb.Error as exc:
        holder = _lock_holder(str(exc))
        if holder is not None:
            through = "psql or any PostgreSQL client against it" if "serve" in holder else "it"
            raise ServerUnavailableError(
                f"the DuckDB server file {path} is open in another process ({holder}): an "
                f"embedded DuckDB server is opened by one process at a time. Query through "
                f"{through}, or stop it first; a server many processes share is PostgreSQL "
                "(`veil load --server postgresql://...`)"
            ) from exc
        raise ServerUnavailableError(f"cannot open DuckDB server {path}: {exc}") from exc
    duckdb_functions.register(con)
    return con


_LOCK_HELD = re.compile(r"Conflicting lock is held in (.*?) \(PID (\d+)\)")


def _lock_holder(message: str) -> str | None:
    """Who holds a DuckDB file's lock, from DuckDB's message: a ``veil serve`` and its
    address where /proc shows its command line, else the program and PID."""
    found = _LOCK_HELD.search(message)
    if found is None:
        return None
    program, pid = found.groups()
    try:
        arguments = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:  # not Linux, or the process has just ended
        return f"{program}, PID {pid}"
    if "serve" not in arguments or not any(a.endswith("veil") for a in arguments[:3]):
        return f"{program}, PID {pid}"
    listen = "127.0.0.1:5433"  # veil serve's default
    for i, argument in enumerate(arguments):
        if argument == "--listen" and i + 1 < len(arguments):
            listen = arguments[i + 1]
        elif argument.startswith("--listen="):
            listen = argument.split("=", 1)[1]
    return f"`veil serve`, PID {pid}, listening on {listen}"


_DATABASES = _Databases()


@functools.lru_cache(maxsize=256)
def _update_by_key_statement(
    table: str, key: str, columns: tuple[str, ...], locator: str = ""
) -> str:
    """``_update_by_key``'s statement: ``columns`` as parameters, then the old key (and
    the ``locator`` column's stored value).

    The row id has no index (every write changes it) and its blocks' min/max
    widen as rows are written, so finding a row by its id alone reads most of
    the table (~120,000 ids of TPC-H SF 0.1 orders, ~0.5 ms). A ``locator``,
    an indexed column the row keeps, is found by its index instead; the row id
    is then checked among its rows. The check is written with a volatile
    disjunct that is always false (``random()`` is in [0, 1)): DuckDB pushes a
    plain second filter into the scan, where it takes the index scan's place.
    """
    sets = ", ".join(f"{quote(c)} = ${i}" for i, c in enumerate(columns, 1))
    old = f"{quote(key)} = ${len(columns) + 1}"
    if not locator:
        return f"UPDATE {quote(table)} SET {sets} WHERE {old} RETURNING 1"
    place = f"{quote(locator)} = ${len(columns) + 2}"
    return f"UPDATE {quote(table)} SET {sets} WHERE {place} AND ({old} OR random() < 0) RETURNING 1"


@contextmanager
def _server_errors() -> Iterator[None]:
    try:
        yield
    except duckdb.TransactionException as exc:
        # another connection changed the same rows (or catalogue entry) first, or
        # committed a declared key first (found when this transaction commits)
        kind: type[BackendError] = BackendError
        if "UNIQUE constraint violation" in str(exc):
            kind = DuplicateKeyError
        elif "onflict" in str(exc):
            kind = WriteConflictError
        raise kind(f"the DuckDB server rejected a statement: {exc}") from exc
    except duckdb.ConstraintException as exc:  # a declared key's unique index
        raise DuplicateKeyError(f"the DuckDB server refused a duplicate key: {exc}") from exc
    except (duckdb.Error, pa.ArrowException) as exc:  # a reader reports UDF errors as Arrow's
        raise BackendError(f"the DuckDB server rejected a statement: {exc}") from exc


def _checked_batches(reader: pa.RecordBatchReader) -> Iterator[pa.RecordBatch]:
    with _server_errors():
        yield from reader


_WORK_KEYS = ("Projections", "Aggregates", "Filters", "Groups", "Conditions")
# statements whose planning time an estimate keeps (``estimate``), at the most
_PLANNING_KEPT = 4096
# a projection's item that only passes a column on: ``#3`` or a column's name
_PASSED_ON = re.compile(r"(#\d+|[A-Za-z_][A-Za-z0-9_.]*)\Z")
# the nodes the profiler puts above a statement's own plan
_PROFILER_NODES = ("RESULT_COLLECTOR", "EXPLAIN_ANALYZE", "QUERY")
# DuckDB's row group: the rows a table scan skips at once by the group's min/max
ROW_GROUP_ROWS = 122_880


def _items(value: object) -> int:
    """How many expressions an EXPLAIN field lists (a list, or lines of text)."""
    if isinstance(value, list):
        return len(value)
    return (
        len([line for line in value.splitlines() if line.strip()]) if isinstance(value, str) else 0
    )


def _items_with(value: object, text: str) -> int:
    """How many of an EXPLAIN field's expressions mention ``text``."""
    items = value if isinstance(value, list) else str(value or "").splitlines()
    return sum(1 for item in items if text in str(item))


def _computed(value: object) -> int:
    """How many of an EXPLAIN field's expressions compute something (not a column passed on)."""
    if isinstance(value, list):
        items = [str(v) for v in value]
    elif isinstance(value, str):
        items = [line for line in value.splitlines() if line.strip()]
    else:
        return 0
    return sum(1 for item in items if not _PASSED_ON.match(item.strip()))


def _top_cardinality(nodes: list[dict[str, Any]]) -> float:
    """The estimated rows of the topmost plan node that has an estimate (breadth first)."""
    while nodes:
        for node in nodes:
            estimate = node.get("extra_info", {}).get("Estimated Cardinality")
            if estimate is not None:
                return float(estimate)
        nodes = [child for node in nodes for child in node.get("children", [])]
    return 0.0


class _Runs:
    """A load's batches as streams of one schema each (``DuckDBBackend._insert``).

    Counts the rows streamed, and keeps the error the batches' producer raised,
    which DuckDB reports only as a failed Arrow stream.
    """

    def __init__(self, batches: Iterator[pa.RecordBatch]):
        self._batches = batches
        self._next: pa.RecordBatch | None = None  # the first batch of the next run
        self.rows = 0
        self.error: BaseException | None = None

    def next_run(self) -> pa.RecordBatchReader | None:
        first = self._next if self._next is not None else self._pull()
        self._next = None
        if first is None:
            return None
        return pa.RecordBatchReader.from_batches(first.schema, self._run(first))

    def _run(self, first: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
        batch: pa.RecordBatch | None = first
        while batch is not None:
            self.rows += batch.num_rows
            yield batch
            batch = self._pull()
            if batch is not None and not batch.schema.equals(first.schema):
                self._next = batch
                return

    def _pull(self) -> pa.RecordBatch | None:
        try:
            return next(self._batches, None)
        except BaseException as exc:
            self.error = exc
            raise
