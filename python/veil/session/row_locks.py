"""Row locks in a transaction: what SELECT ... FOR UPDATE and foreign keys take.

The server has no statement that locks a row without changing it that both
engines honour alike, so an exclusive lock rewrites the rows' public row ids
(negated, then restored) in the transaction. PostgreSQL then holds the rows'
locks until commit (a concurrent writer of them waits), and DuckDB aborts one
of two transactions that write one row (the statement or transaction runs
again, as a serialization failure).

A foreign key's hold on its parent rows (``hold_keys``) only has to keep them
from being deleted or re-keyed. On PostgreSQL that is ``SELECT ... FOR KEY
SHARE`` of the parent's server rows by row id, the lock PostgreSQL's own
foreign-key triggers take: children of one parent inserted at once do not
wait for each other, while a delete of the parent (or an update of its key's
DET column, which has a unique index) waits for them to commit. DuckDB has no
row locks, so there the hold is the exclusive rewrite.

A row deleted meanwhile is missing from the lock's answer: the lock then
fails with ``RowsLockedError`` (SQLSTATE 40001).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from veil.design.model import TableDesign
from veil.errors import SerializationError
from veil.exec.server import FetchStats, run_remote
from veil.session.context import SessionContext
from veil.session.matching import with_row_ids
from veil.sql.errors import QueryError, UnsupportedStatementError
from veil.sql.remote import flip_row_ids_statement, param

Locks = list[tuple[TableDesign, pa.Array]]  # rows to lock: their table, their row ids


class RowsLockedError(SerializationError):
    """Rows a statement read were deleted or rewritten before it could lock them."""


def lock_rows(session: SessionContext, table: TableDesign, row_ids: pa.Array) -> None:
    """Lock the rows ``row_ids`` of ``table`` exclusively until the current transaction ends."""
    listed = pc.unique(row_ids).to_pylist()
    if not listed:
        return
    _check_found(
        table,
        run_remote(flip_row_ids_statement(table, listed), session.backend, FetchStats()),
        listed,
    )
    back = flip_row_ids_statement(table, [-i - 1 for i in listed])
    run_remote(back, session.backend, FetchStats())


def hold_keys(session: SessionContext, locks: Locks) -> None:
    """Keep the rows ``locks`` names from being deleted or re-keyed until the current
    transaction ends: FOR KEY SHARE on PostgreSQL, else an exclusive lock."""
    for table, row_ids in locks:
        if session.backend.dialect != "postgres":
            lock_rows(session, table, row_ids)
            continue
        listed = pc.unique(row_ids).to_pylist()
        if listed:
            _check_found(
                table, run_remote(_key_share(table, listed), session.backend, FetchStats()), listed
            )


def _key_share(table: TableDesign, row_ids: list[object]) -> exp.Select:
    """``SELECT row_id FROM server_table WHERE row_id IN (...) FOR KEY SHARE``."""
    row_id = exp.column(table.row_id)
    query = exp.select(row_id.copy()).from_(exp.to_table(table.server_name))
    query = query.where(row_id.isin(*[param(r) for r in row_ids]))
    query.set("locks", [exp.Lock(update=False, key=True)])
    return query


def _check_found(table: TableDesign, found: pa.Table, listed: list[object]) -> None:
    if found.num_rows < len(listed):
        raise RowsLockedError(
            f"another client deleted or changed rows of {table.name!r} this statement read "
            "before it could lock them; run it (or the transaction) again"
        )


def lock_selected(session: SessionContext, tree: exp.Select) -> exp.Select:
    """``SELECT ... FOR UPDATE / FOR SHARE``: lock the rows it selects (inside a
    transaction), then return the query without its locking clause, to run."""
    query = tree.copy()
    query.set("locks", None)
    if not session.in_transaction:
        return query  # a lock would end with the statement: nothing to hold
    for clause in tree.args.get("locks") or []:
        if clause.args.get("wait") is not None:
            raise UnsupportedStatementError("FOR UPDATE NOWAIT / SKIP LOCKED is not supported")
    source = tree.args.get("from_")
    target = source.this if source is not None else None
    if (
        not isinstance(target, exp.Table)
        or tree.args.get("joins")
        or target.name.lower() not in session.design.tables
    ):
        raise UnsupportedStatementError(
            "FOR UPDATE / FOR SHARE locks rows of one table: select from a single table"
        )
    for clause, name in (("group", "GROUP BY"), ("having", "HAVING"), ("distinct", "DISTINCT")):
        if tree.args.get(clause):
            raise QueryError(f"FOR UPDATE is not allowed with {name}")
    probe = query.copy()
    probe.set("expressions", [exp.Literal.number(1)])
    table = session.design.table(target.name)
    found = with_row_ids(session, probe, target.alias_or_name)
    lock_rows(session, table, found.column(found.num_columns - 1).combine_chunks())
    return query
