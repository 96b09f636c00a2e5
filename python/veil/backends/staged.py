"""What the SQL backends share: staged atomic loads, catalogue DDL, listeners, transactions.

A subclass supplies ``_run_quiet`` (run one statement of Veil's own, through
the statement log), ``_create_table`` (an empty table for an Arrow schema),
``_insert`` (append Arrow batches to a table), ``_indexes`` (a table's indexes)
and the protocol's ``execute``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import cast

import pyarrow as pa
from sqlglot import exp

from veil.backends.base import (
    OLD_KEY,
    REWRITE_SUFFIX,
    STAGING_SUFFIX,
    ArrowData,
    Backend,
    BackendError,
    Params,
    StatementListener,
    StatementLog,
    TransactionScope,
    as_batches,
    quote,
)


class StagedBackend:
    """Backend methods written once in terms of three dialect-specific hooks."""

    # Load the staging table inside the swap's transaction too. PostgreSQL then
    # skips WAL for the COPY (wal_level=minimal), DuckDB writes row groups straight
    # to its file, and a crash leaves nothing (both backends set it).
    load_in_one_transaction = False

    def __init__(self) -> None:
        self._log = StatementLog()
        self._transactions = TransactionScope(self._run_quiet)

    # -- hooks ----------------------------------------------------------------

    def _run_quiet(self, sql: str) -> None:
        raise NotImplementedError

    def _create_table(self, table: str, schema: pa.Schema) -> None:
        raise NotImplementedError

    def _insert(self, table: str, schema: pa.Schema, batches: Iterator[pa.RecordBatch]) -> int:
        raise NotImplementedError

    def execute(self, sql: str, params: Params = None) -> pa.Table:
        raise NotImplementedError

    def inline_parameters(
        self, statement: exp.Expression, params: list[object]
    ) -> tuple[exp.Expression, list[object]]:
        return statement, params  # parameters as they are, unless a backend prefers literals

    # -- loading ----------------------------------------------------------------

    def bulk_load(self, table: str, data: ArrowData, *, schema: pa.Schema | None = None) -> int:
        """Load into ``<table>__veil_staging``, then swap it in within one transaction."""
        staging = table + STAGING_SUFFIX
        arrow_schema, batches = as_batches(data, schema)
        outer = self.transaction() if self.load_in_one_transaction else contextlib.nullcontext()
        with outer:
            self._run_quiet(f"DROP TABLE IF EXISTS {quote(staging)}")
            try:
                self._create_table(staging, arrow_schema)
                rows = self._insert(staging, arrow_schema, batches)
                with self.transaction():
                    self._run_quiet(f"DROP TABLE IF EXISTS {quote(table)}")
                    self._run_quiet(f"ALTER TABLE {quote(staging)} RENAME TO {quote(table)}")
            except BaseException:
                self._drop_quietly(staging)
                raise
        return rows

    def append(self, table: str, data: ArrowData) -> int:
        arrow_schema, batches = as_batches(data, pa.schema([]))
        with self.transaction():
            return self._insert(table, arrow_schema, batches)

    updates_in_place = True
    locates_rows = False  # PostgreSQL finds a row by its row id's index

    def update_rows(self, table: str, key: str, data: pa.Table) -> int:
        if not len(data):
            return 0
        if len(data) == 1:  # one statement, which commits alone (a point UPDATE, issue 41)
            return self._update_from(table, key, data)
        with self.transaction():
            return self._update_from(table, key, data)

    def _update_from(self, table: str, key: str, data: pa.Table) -> int:
        """``update_rows`` in the dialect: ``data``'s rows as a relation to join."""
        raise NotImplementedError

    def _drop_quietly(self, table: str) -> None:
        if self._transactions.active:
            return  # the enclosing transaction's rollback removes it
        with contextlib.suppress(BackendError):  # the load's own error is the one to report
            self._run_quiet(f"DROP TABLE IF EXISTS {quote(table)}")

    # -- catalogue ----------------------------------------------------------------

    def refresh_statistics(self, table: str) -> None:
        """Nothing by default: DuckDB keeps its statistics as it writes."""

    def indexes(self, table: str) -> list[tuple[str, str]]:
        return self._indexes(table)

    def indexes_to_rebuild(self, table: str, columns: list[str]) -> list[tuple[str, str]]:
        return []  # PostgreSQL writes every index of a row it rewrites anyway

    def column_names(self, table: str) -> list[str]:
        found = self.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = $1 "
            "AND table_schema = current_schema() ORDER BY ordinal_position",
            [table],
        )
        return [str(name) for name in found.column(0).to_pylist()]

    def replace_rows(self, table: str, select: str, params: Params = None) -> None:
        """A copy made by ``CREATE TABLE ... AS``, swapped in, its indexes built again."""
        if not self._transactions.active:
            raise BackendError("replace_rows runs inside a transaction")  # or a crash loses it
        copy = table + REWRITE_SUFFIX
        indexes = [create for _, create in self._indexes(table)]
        self._lock_writers(table)
        self._run_quiet(f"DROP TABLE IF EXISTS {quote(copy)}")
        self.execute(f"CREATE TABLE {quote(copy)} AS {select}", params)
        self._run_quiet(f"DROP TABLE {quote(table)}")
        self._run_quiet(f"ALTER TABLE {quote(copy)} RENAME TO {quote(table)}")
        for create in indexes:  # the old table's names, free again with it dropped
            self._run_quiet(create)

    def _indexes(self, table: str) -> list[tuple[str, str]]:
        """``(name, CREATE INDEX statement)`` of each of the table's indexes."""
        raise NotImplementedError

    def _lock_writers(self, table: str) -> None:
        """Make writers of ``table`` wait until the transaction ends (readers go on)."""

    def drop_table(self, table: str, *, if_exists: bool = True) -> None:
        self._run_quiet(f"DROP TABLE {'IF EXISTS ' if if_exists else ''}{quote(table)}")

    def rename_table(self, old: str, new: str) -> None:
        self._run_quiet(f"ALTER TABLE {quote(old)} RENAME TO {quote(new)}")

    # -- the rest of the protocol ---------------------------------------------------

    def add_statement_listener(self, listener: StatementListener) -> Callable[[], None]:
        return self._log.add(listener)

    def transaction(self) -> AbstractContextManager[None]:
        return self._transactions.block()

    @property
    def in_transaction(self) -> bool:
        return self._transactions.active

    savepoints = True
    url: str
    _autonomous: Backend | None = None

    def autonomous(self) -> Backend:
        """A second connection to the server, whose statements commit on their own."""
        if self._autonomous is None:
            self._autonomous = cast("Backend", type(self)(self.url))  # type: ignore[call-arg]
        return self._autonomous

    def _close_autonomous(self) -> None:
        if self._autonomous is not None:
            self._autonomous.close()
            self._autonomous = None

    def begin(self) -> None:
        self._transactions.begin()

    def commit(self) -> None:
        self._transactions.end("COMMIT")

    def rollback(self) -> None:
        self._transactions.end("ROLLBACK")

    def savepoint(self, name: str, verb: str = "SAVEPOINT") -> None:
        if not self.savepoints:
            raise BackendError(f"this server has no savepoints ({verb})")
        self._run_quiet(f"{verb} {quote(name)}")


def update_statement(
    table: str, key: str, columns: list[str], source: str, *, returning: bool = True
) -> str:
    """``UPDATE table`` setting ``columns`` from the relation ``source`` (aliased ``s``,
    with the column ``OLD_KEY``) where ``key`` is the source's old key; with ``returning``,
    one row back for each row set."""
    assignments = ", ".join(f"{quote(c)} = s.{quote(c)}" for c in columns if c != OLD_KEY)
    return (
        f"UPDATE {quote(table)} SET {assignments} FROM {source} "
        f"WHERE {quote(table)}.{quote(key)} = s.{quote(OLD_KEY)}"
        + (" RETURNING 1" if returning else "")
    )


def index_pairs(found: pa.Table) -> list[tuple[str, str]]:
    """A catalogue query's ``(index name, CREATE statement)`` rows as pairs of strings."""
    names, statements = (found.column(i).to_pylist() for i in range(2))
    return [(str(n), str(s)) for n, s in zip(names, statements, strict=True)]
