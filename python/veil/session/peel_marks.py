"""A peel and the reads that race it: the design says a layer is coming off before it does.

A peel (``veil.session.onions``) XORs a layer off a server table, commits,
then records it in the design. A read planned on the design before that
record and fetched after the commit would decrypt the bare ciphertexts as
wrapped ones: garbage. ``Session`` already plans and runs a query again when
the design file changed while it ran (``Session._layers_moved``), but the
record comes after the commit, so a read could fall between the two unseen.

So a peel first marks its table in the design (``TableDesign.peeling``, one
save, before anything changes on the server), holding the table's peel lock
(a file lock in the client directory) until the design records what it did
and the mark is gone. Then:

- a read whose fetch could see the commit started after the mark's save,
  and sees the design file changed when its fetch ends: it runs again;
- a session that reads a design with another session's mark waits for that
  peel's lock (the peel ends, or its process died) before it plans: a mark
  left by a dead peel is cleared then, and ``reconcile`` records from the
  server's layers table whatever that peel committed.

A session inside a transaction that holds a table's layers rows (a write)
could be what the marked peel waits for on the server: it waits a while,
then fails its statement as a serialization failure, which the application
retries (as PostgreSQL does with a deadlock).

On a server whose transactions read one snapshot (DuckDB), a transaction
that began before another session's peel committed goes on reading the
layer; the design, read again, says it is off. Such a transaction fails its
next statement as a serialization failure instead (``onions.check_snapshot``), as
PostgreSQL's REPEATABLE READ fails one that would write rows changed since.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator

from veil.design.model import PhysicalDesign, TableDesign
from veil.errors import SerializationError
from veil.session.context import SessionContext
from veil.session.table_locks import lock_file

_NAMESPACE = "peel:"  # the peel locks' files, beside the table locks'
_IN_TRANSACTION_WAIT_SECONDS = 5.0
_POLL_SECONDS = 0.01


@contextlib.contextmanager
def peeling(session: SessionContext, table: TableDesign) -> Iterator[bool]:
    """Mark ``table`` as being peeled, holding its peel lock, for the block's server work
    and design record; False (nothing marked) if the design no longer names this copy of
    the table (a rebuild or re-key swapped it meanwhile: nothing to peel here)."""
    fd = lock_file(session.client.path, _NAMESPACE + table.name)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        if not _mark(session, table, True):
            yield False
            return
        session.peeling.add(table.name)
        try:
            yield True
        finally:
            session.peeling.discard(table.name)
            _mark(session, table, False)  # if the record has not cleared it (a failure)
    finally:
        os.close(fd)


def unmark(design: PhysicalDesign, table: TableDesign) -> None:
    """Clear ``table``'s mark in ``design`` (about to be saved) if it names the same copy."""
    current = _same_copy(design, table)
    if current is not None:
        current.peeling = False


def _same_copy(design: PhysicalDesign, table: TableDesign) -> TableDesign | None:
    """``design``'s entry of ``table`` if it names the same server tables (not a rebuild's)."""
    current = design.tables.get(table.name)
    return current if current is not None and current.server_name == table.server_name else None


def wait_for_peels(session: SessionContext, design: PhysicalDesign) -> bool:
    """Wait for the peels other sessions marked in ``design``; True if one was marked (the
    design has changed since: read it again)."""
    marked = [t for t in design.tables.values() if t.peeling and t.name not in session.peeling]
    for table in marked:
        fd = lock_file(session.client.path, _NAMESPACE + table.name)
        try:
            _wait(fd, table.name, session.in_transaction or session.backend.in_transaction)
            _mark(session, table, False)  # still marked: its peel died (else it cleared it)
        finally:
            os.close(fd)
    return bool(marked)


def _wait(fd: int, name: str, in_transaction: bool) -> None:
    if not in_transaction:
        fcntl.flock(fd, fcntl.LOCK_EX)
        return
    deadline = time.monotonic() + _IN_TRANSACTION_WAIT_SECONDS
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise SerializationError(
                    f"another client is peeling an onion layer of {name!r} and may be "
                    "waiting for this transaction's writes; nothing more was done: roll "
                    "the transaction back and run it again"
                ) from None
            time.sleep(_POLL_SECONDS)


def _mark(session: SessionContext, table: TableDesign, on: bool) -> bool:
    """Set or clear ``table``'s mark in the design on disk; False if the design names
    another copy of it (or none)."""
    client = session.client
    with client.design_lock():
        _, design = client.following(session.master)
        current = _same_copy(design, table)
        if current is None:
            return False
        if current.peeling != on:
            current.peeling = on
            design.save(client.design_path)
    return True
