"""The embedded default server: a DuckDB database file (``duckdb:///path/server.duckdb``).

DuckDB runs in Veil's process but plays the untrusted server: it only ever sees
ciphertexts under opaque names. Veil's server functions are registered on each
connection as vectorised Arrow UDFs (see ``veil.backends.duckdb_functions``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import duckdb
import pyarrow as pa
from sqlglot import exp

from veil.backends import duckdb_functions
from veil.backends.base import (
    STAGING_SUFFIX,
    ArrowData,
    BackendError,
    Estimate,
    Params,
    ServerUnavailableError,
    StatementListener,
    StatementLog,
    as_batches,
    quote,
)

_SCHEME = "duckdb://"
_VIEW = "__veil_arrow_input"


def database_path(url: str) -> str:
    """The file a ``duckdb://`` URL names; ``duckdb://:memory:`` is an in-memory server."""
    if not url.startswith(_SCHEME):
        raise BackendError(f"{url!r} is not a DuckDB URL; write duckdb:///path/server.duckdb")
    rest = url[len(_SCHEME) :]
    return ":memory:" if rest in ("", ":memory:", "/:memory:") else rest


class DuckDBBackend:
    """A DuckDB file as Veil's server."""

    dialect = "duckdb"

    def __init__(self, url: str) -> None:
        self.url = url
        try:
            self._con = duckdb.connect(database_path(url))
        except duckdb.Error as exc:
            raise ServerUnavailableError(f"cannot open DuckDB server {url}: {exc}") from exc
        self._log = StatementLog()
        self._in_transaction = False
        duckdb_functions.register(self._con)

    # -- statements ---------------------------------------------------------

    def execute(self, sql: str, params: Params = None) -> pa.Table:
        relation = self._run(sql, params)
        return relation.to_arrow_table() if relation is not None else pa.table({})

    def execute_batches(
        self, sql: str, params: Params = None, *, batch_rows: int = 65536
    ) -> Iterator[pa.RecordBatch]:
        relation = self._run(sql, params)
        if relation is None:
            return iter(())
        return iter(relation.to_arrow_reader(batch_rows))

    def _run(self, sql: str, params: Params) -> Any:
        self._log.emit(sql, params)
        try:
            return self._con.sql(sql, params=list(params) if params is not None else None)
        except duckdb.Error as exc:
            raise BackendError(f"the DuckDB server rejected a statement: {exc}") from exc

    def _run_quiet(self, sql: str) -> None:
        """Run bookkeeping SQL of our own (logged like any other statement)."""
        self._run(sql, None)

    # -- loading ------------------------------------------------------------

    def bulk_load(self, table: str, data: ArrowData, *, schema: pa.Schema | None = None) -> int:
        staging = table + STAGING_SUFFIX
        arrow_schema, batches = as_batches(data, schema)
        self._run_quiet(f"DROP TABLE IF EXISTS {quote(staging)}")
        try:
            self._create_from_arrow(staging, pa.Table.from_batches([], arrow_schema))
            rows = self._insert_batches(staging, batches)
            with self.transaction():
                self._run_quiet(f"DROP TABLE IF EXISTS {quote(table)}")
                self._run_quiet(f"ALTER TABLE {quote(staging)} RENAME TO {quote(table)}")
        except BaseException:
            self._drop_quietly(staging)
            raise
        return rows

    def append(self, table: str, data: ArrowData) -> int:
        _, batches = as_batches(data, pa.schema([]))
        with self.transaction():
            return self._insert_batches(table, batches)

    def _create_from_arrow(self, table: str, empty: pa.Table) -> None:
        with self._registered(empty):
            self._run_quiet(f"CREATE TABLE {quote(table)} AS SELECT * FROM {_VIEW}")

    def _insert_batches(self, table: str, batches: Iterator[pa.RecordBatch]) -> int:
        rows = 0
        for batch in batches:
            with self._registered(batch):
                self._run_quiet(f"INSERT INTO {quote(table)} BY NAME SELECT * FROM {_VIEW}")
            rows += batch.num_rows
        return rows

    @contextmanager
    def _registered(self, arrow: pa.Table | pa.RecordBatch) -> Iterator[None]:
        self._con.register(_VIEW, arrow)
        try:
            yield
        finally:
            self._con.unregister(_VIEW)

    def _drop_quietly(self, table: str) -> None:
        try:
            if self._in_transaction:
                return  # the enclosing transaction's rollback removes it
            self._run_quiet(f"DROP TABLE IF EXISTS {quote(table)}")
        except BackendError:
            pass  # the load already failed; that error is the one to report

    # -- catalogue ----------------------------------------------------------

    def drop_table(self, table: str, *, if_exists: bool = True) -> None:
        self._run_quiet(f"DROP TABLE {'IF EXISTS ' if if_exists else ''}{quote(table)}")

    def rename_table(self, old: str, new: str) -> None:
        self._run_quiet(f"ALTER TABLE {quote(old)} RENAME TO {quote(new)}")

    def table_names(self) -> list[str]:
        names = self.execute("SELECT table_name FROM duckdb_tables() ORDER BY table_name")
        return [str(name) for name in names.column(0).to_pylist()]

    def table_bytes(self, table: str) -> int:
        """Bytes of the storage blocks the table's columns occupy after a checkpoint."""
        self._run_quiet("CHECKPOINT")
        block_size = self.execute("SELECT block_size FROM pragma_database_size()").column(0)[0]
        blocks = self.execute(
            "SELECT count(DISTINCT block_id) FROM pragma_storage_info($1) WHERE persistent",
            [table],
        ).column(0)[0]
        return int(blocks.as_py() or 0) * int(block_size.as_py())

    # -- planning help --------------------------------------------------------

    def estimate(self, sql: str, params: Params = None) -> Estimate:
        plan = self.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
        nodes = json.loads(plan.column(1)[0].as_py())
        cardinality = nodes[0].get("extra_info", {}).get("Estimated Cardinality", "0")
        return Estimate(rows=float(cardinality), cost=None)

    def hom_sum(self, ciphertexts: exp.Expression, n_square: exp.Expression) -> exp.Expression:
        listed = exp.Anonymous(this="list", expressions=[ciphertexts])
        return exp.Anonymous(this=duckdb_functions.HOM_SUM, expressions=[listed, n_square])

    def search_match(self, ciphertexts: exp.Expression, token: exp.Expression) -> exp.Expression:
        return exp.Anonymous(this=duckdb_functions.SEARCH_MATCH, expressions=[ciphertexts, token])

    # -- the rest of the protocol ---------------------------------------------

    def add_statement_listener(self, listener: StatementListener) -> Callable[[], None]:
        return self._log.add(listener)

    def transaction(self) -> AbstractContextManager[None]:
        return self._transaction()

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        if self._in_transaction:  # nested: the outer block decides
            yield
            return
        self._run_quiet("BEGIN TRANSACTION")
        self._in_transaction = True
        try:
            yield
        except BaseException:
            self._in_transaction = False
            self._run_quiet("ROLLBACK")
            raise
        self._in_transaction = False
        self._run_quiet("COMMIT")

    def close(self) -> None:
        self._con.close()
