"""Row ids: sequential, taken from a counter on the server, never used twice.

ASHE's pads are one-time (two values under one id leak their difference), and
its sums telescope over runs of consecutive ids, so every row of a table gets
the next ids in load (and insert) order, and an UPDATE writes its new rows
under fresh ids. The server learns the order rows were written in, which the
sequence of statements shows it anyway.

The counter is a one-row table (``TableDesign.id_counter``) that ``allocate``
advances with one atomic ``UPDATE ... RETURNING``: PostgreSQL locks the row
until the statement commits, and DuckDB aborts the second of two concurrent
updates, which ``allocate`` retries. So several clients writing the same table
at once always get disjoint ranges. Ids taken by a statement that then fails
are skipped, never handed out again.

A write of a few rows (an UPDATE by key) would pay a server round trip, and a
commit of its own, for its ids alone: a process takes them ``_BLOCK`` at a
time instead and hands them out itself (``_Pool``), to every session of the
process writing that table on that server. Ids stay fresh and disjoint (each
block comes from the counter); the ones a process never hands out are
skipped, as a failed statement's are, and rows of several processes
writing at once interleave by blocks, not by write.
"""

from __future__ import annotations

import random
import threading
import time

import pyarrow as pa

from veil.backends import Backend
from veil.backends.base import BackendError, WriteConflictError
from veil.design.model import TableDesign
from veil.exec.server import FetchStats, run_remote
from veil.sql.remote import ID_COUNTER_COLUMN, allocate_ids_statement

# DuckDB reports a concurrent update of the counter row as a conflict: retry.
_ATTEMPTS = 200
# ids a process takes from a counter at once for writes of fewer rows (``_Pool``)
_BLOCK = 64


class _Pool:
    """Row ids taken from counters and not handed out yet, by server and counter."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.free: dict[tuple[str, str], tuple[int, int]] = {}  # next id, end

    def take(self, backend: Backend, table: TableDesign, count: int) -> int:
        key = (backend.url, table.id_counter)
        with self.lock:
            start, end = self.free.get(key, (0, 0))
            if end - start < count:
                start = _from_counter(backend, table, _BLOCK, table.id_counter)
                end = start + _BLOCK
            self.free[key] = (start + count, end)
        return start


_POOL = _Pool()


def counter_table(next_id: int) -> pa.Table:
    """The counter's contents when the table's rows hold ids ``0 .. next_id - 1``."""
    return pa.table({ID_COUNTER_COLUMN: pa.array([next_id], pa.int64())})


def allocate(
    backend: Backend, table: TableDesign, count: int, *, align: int = 1, counter: str = ""
) -> int:
    """The first of ``count`` fresh consecutive row ids, a multiple of ``align``.

    ``align`` > 1 takes ``align - 1`` ids more, so the range can start on a
    boundary (a new Paillier pack of ``align`` rows); the ids before it are
    never used. ``counter``: another counter table than the row ids' (an
    identity column's, ``Column.sequence``).
    """
    if count <= 0:
        return 0
    if align == 1 and not counter and count < _BLOCK:
        return _POOL.take(backend, table, count)
    first = _from_counter(backend, table, count + align - 1, counter or table.id_counter)
    return -(-first // align) * align


def _from_counter(backend: Backend, table: TableDesign, taken: int, counter: str) -> int:
    """The first of ``taken`` ids advanced past on the server's counter table ``counter``."""
    if backend.in_transaction:  # a transaction would hold the counter row until it ends
        backend = backend.autonomous()
    for attempt in range(_ATTEMPTS):
        try:
            statement = allocate_ids_statement(counter, taken)
            result = run_remote(statement, backend, FetchStats())
            break
        except WriteConflictError:
            # inside a transaction the conflict aborted all of it: only its caller can retry
            if attempt == _ATTEMPTS - 1 or backend.in_transaction:
                raise
            time.sleep(random.uniform(0, 0.002 * (attempt + 1)))
    if result.num_rows != 1:
        raise BackendError(
            f"a counter of table {table.name!r} (row ids, identity) is missing or damaged on the server "
            f"({result.num_rows} rows); reload the table with `veil load`"
        )
    return int(result.column(0)[0].as_py())
