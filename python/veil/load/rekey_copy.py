"""A table's re-key while its writers keep writing: copy without their lock, catch up with it.

A re-key (``veil.load.rekey``) copies a table under the new key into new
server tables. Holding the table's lock (``veil.session.table_locks``) all
along would make its writers wait for the whole copy (TPC-H SF 1's lineitem:
minutes). Instead the copy runs without it, and only a catch-up with what the
writers changed meanwhile runs under it, just before the swap.

That catch-up is a difference of row ids, because a row id's content never
changes: INSERT writes rows under fresh ids, UPDATE writes its new rows under
fresh ids (deleting the old ones, or, where the server updates in place,
setting each row's id to its fresh one with its new ciphertexts: the old id
is gone either way), DELETE deletes ids (``veil.session.dml``,
``veil.session.row_ids``). Every table has row ids. A peel rewrites a
column's ciphertexts in place, but not the plaintext the copy reads (and the
new copy keeps its own layers). So, with ``copied`` the old ids the new copy
holds, each mapped to its new id:

- the old ids no longer in the old table were deleted or updated since: their
  rows are deleted from the new copy;
- the old table's ids not in ``copied`` were written since: their rows are
  read through the old key, encrypted under the new one (fresh ids of the new
  table's counter, as an INSERT would) and appended.

Rounds repeat without the lock while their change is large; the last one runs
under it, and the swap follows before the lock is released. A statement that
rebuilt the table meanwhile (ALTER, TRUNCATE, DROP: other server tables) makes
the copy void (``TableRebuilt``): the re-key drops it and starts the table
again. The copy's rows are numbered in old-id order, so the new table keeps the
old one's row order (its clustering), and new id ``i`` is the ``i``-th old id.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from veil.design.model import TableDesign
from veil.distinct import distinct
from veil.exec.fetch import run_scan
from veil.exec.server import FetchStats, run_remote
from veil.session.dml import _write_rows as write_rows
from veil.session.row_ids import allocate
from veil.session.session import Session
from veil.sql.plan import ROW_ID, Scan
from veil.sql.remote import delete_rows_statement

# a catch-up round without the lock is followed by another while it changed more rows
SMALL_DELTA = 1000
UNLOCKED_ROUNDS = 5
_IDS_PER_READ = 2000  # row ids (as ranges) in one read's filter
_DELETE_CHUNK = 1000

# Called at the copy's stages (``stage``, table name): "copied" before the first
# catch-up round (no lock held), "deleted" in each round between its deletes and its
# appends, "locked" once the lock is held, before the last round. For tests: they
# write or stop the process there, to show who waits and what a crash leaves.
Hook = Callable[[str, str], None]
hook: Hook = lambda stage, name: None  # noqa: E731


class TableRebuilt(Exception):
    """The table was rebuilt (other server tables) while its copy ran: the copy is void."""


@dataclass
class Delta:
    deleted: int = 0
    appended: int = 0

    @property
    def rows(self) -> int:
        return self.deleted + self.appended


def read_table(session: Session, name: str) -> tuple[TableDesign, pa.Table, np.ndarray]:
    """The table's design now, its rows (decrypted, in old-id order) and their old ids."""
    while True:
        table = _current(session, name)
        found = _read(session, table, None)
        if _current(session, name) == table:  # no peel meanwhile (else read again)
            break
    ids = found.column(ROW_ID).to_numpy()
    order = np.argsort(ids, kind="stable")
    plain = found.drop_columns([ROW_ID]).take(pa.array(order))
    return table, plain, ids[order]


class CatchUp:
    """The old ids the new copy holds, mapped to its ids; what moves them across."""

    def __init__(self, session: Session, old: TableDesign, new: TableDesign, ids: np.ndarray):
        self.session, self.old, self.new = session, old, new
        self.olds = ids  # sorted
        self.news = np.arange(len(ids), dtype=np.int64)

    def rounds(self, lock: Callable[[], None]) -> list[Delta]:
        """Catch up without the lock while much changed, then take it (``lock()``,
        kept by the caller until after the swap) and catch up a last time."""
        hook("copied", self.old.name)
        done = []
        for _ in range(UNLOCKED_ROUNDS):
            done.append(self.round())
            if done[-1].rows <= SMALL_DELTA:
                break
        lock()
        hook("locked", self.old.name)
        done.append(self.round())
        return done

    def round(self) -> Delta:
        old = _current(self.session, self.old.name)
        if old.server_name != self.old.server_name:
            raise TableRebuilt(self.old.name)
        current = _server_ids(self.session, old)
        gone = ~np.isin(self.olds, current, assume_unique=True)
        written = np.setdiff1d(current, self.olds, assume_unique=True)
        self._delete(self.news[gone])
        self.olds, self.news = self.olds[~gone], self.news[~gone]
        hook("deleted", self.old.name)
        if len(written):
            self._append(written)
        return Delta(int(gone.sum()), len(written))

    def _delete(self, ids: np.ndarray) -> None:
        listed = ids.tolist()
        for start in range(0, len(listed), _DELETE_CHUNK):
            statement = delete_rows_statement(self.new, listed[start : start + _DELETE_CHUNK])
            run_remote(statement, self.session.backend, FetchStats())

    def _append(self, olds: np.ndarray) -> None:
        """Read the old table's rows ``olds`` (sorted) and append them under fresh ids."""
        for chunk in _chunks(olds):
            while True:
                table = _current(self.session, self.old.name)
                found = _read(self.session, table, chunk)
                if _current(self.session, self.old.name) == table:
                    break
            ids = found.column(ROW_ID).to_numpy()
            order = np.argsort(ids, kind="stable")
            plain = found.drop_columns([ROW_ID]).take(pa.array(order))
            first = _fresh_ids(self.session, self.new, len(plain))
            write_rows(self.session, self.new, plain, first)
            news = np.arange(first, first + len(plain), dtype=np.int64)
            olds = np.concatenate([self.olds, ids[order]])
            merged = np.argsort(olds, kind="stable")
            self.olds, self.news = olds[merged], np.concatenate([self.news, news])[merged]


def _current(session: Session, name: str) -> TableDesign:
    session.follow_design()
    table = session.design.tables.get(name)
    if table is None:
        raise TableRebuilt(name)  # dropped
    return table


def _fresh_ids(session: Session, table: TableDesign, count: int) -> int:
    align = table.hom.rows_per_ciphertext if table.hom is not None else 1
    return allocate(session.backend, table, count, align=align)


def _server_ids(session: Session, table: TableDesign) -> np.ndarray:
    select = exp.select(exp.column(table.row_id)).from_(table.server_name)
    ids = run_remote(select, session.backend, FetchStats()).column(0)
    return distinct(pc.cast(ids, pa.int64()).to_numpy(zero_copy_only=False))


def _read(session: Session, table: TableDesign, ids: np.ndarray | None) -> pa.Table:
    """The table's rows (all, or those of the old ids ``ids``), decrypted, with their ids."""
    scan = Scan(table, table.name, table.name, columns={c.name for c in table.columns})
    scan.with_row_id = True
    extras = {} if ids is None else {id(scan): [_among(table, ids)]}
    found = run_scan(scan, extras, session.backend, session.ciphers, FetchStats())
    names = [c.name for c in table.columns]
    return found.rename_columns([*names, ROW_ID])


def _among(table: TableDesign, ids: np.ndarray) -> exp.Expr:
    """The server filter of the row ids ``ids`` (sorted), as ranges of consecutive ids."""
    column = exp.column(table.row_id)
    parts: list[exp.Expr] = []
    for low, high in _runs(ids):
        if low == high:
            parts.append(exp.EQ(this=column.copy(), expression=exp.Literal.number(low)))
        else:
            parts.append(
                exp.Between(
                    this=column.copy(),
                    low=exp.Literal.number(low),
                    high=exp.Literal.number(high),
                )
            )
    return exp.paren(exp.or_(*parts)) if len(parts) > 1 else parts[0]


def _runs(ids: np.ndarray) -> Iterator[tuple[int, int]]:
    """The runs of consecutive values of ``ids`` (sorted, distinct), as (first, last)."""
    if not len(ids):
        return
    breaks = np.flatnonzero(np.diff(ids) != 1)
    starts = np.concatenate([[0], breaks + 1])
    ends = np.concatenate([breaks, [len(ids) - 1]])
    for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
        yield int(ids[start]), int(ids[end])


def _chunks(ids: np.ndarray) -> Iterator[np.ndarray]:
    """``ids`` (sorted) in pieces of at most ``_IDS_PER_READ`` runs."""
    runs = list(_runs(ids))
    for start in range(0, len(runs), _IDS_PER_READ):
        low, high = runs[start][0], runs[min(start + _IDS_PER_READ, len(runs)) - 1][1]
        yield ids[(ids >= low) & (ids <= high)]
