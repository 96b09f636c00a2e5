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
next statement as a serialization failure instead (``check_snapshot``), as
PostgreSQL's REPEATABLE READ fails one that would write rows changed since.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator

from veil.crypto.keys import KeyLabel, MasterKey
from veil.design.model import JOIN, PhysicalDesign, TableDesign
from veil.errors import SerializationError
from veil.exec.server import FetchStats, run_remote
from veil.session.ashe_build import ashe_layer
from veil.session.context import SessionContext
from veil.session.table_locks import lock_file
from veil.sql.remote import layer_states_statement

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
    current = design.tables.get(table.name)
    if current is not None and current.server_name == table.server_name:
        current.peeling = False


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
        current = design.tables.get(table.name)
        if current is None or current.server_name != table.server_name:
            return False
        if current.peeling != on:
            current.peeling = on
            design.save(client.design_path)
    return True


def join_key_id(master: MasterKey, scope: str) -> str:
    """An opaque name of a JOIN key, for the server's layers table (reveals nothing)."""
    return master.derive(KeyLabel("join-key-id-v1", scope), 8).hex()


def check_snapshot(session: SessionContext, before: PhysicalDesign, after: PhysicalDesign) -> None:
    """Inside a transaction reading one snapshot: fail (40001) if ``after`` records a peel,
    a sums build or a JOIN re-key that the snapshot does not hold (it began before)."""
    for name, table in after.tables.items():
        old = before.tables.get(name)
        if old is None or old.server_name != table.server_name or not table.layers_table:
            continue
        wanted = _adjusted(session.master, old, table)
        if not wanted:
            continue
        states = run_remote(layer_states_statement(table), session.backend, FetchStats())
        rows = zip(*(states.column(i).to_pylist() for i in range(3)), strict=True)
        behind = {
            n
            for n, peeled, key in rows
            if (n in wanted and not peeled) or wanted.get(n) not in (None, key)
        }
        if behind:
            raise SerializationError(
                f"another client peeled an onion layer of {name!r} after this transaction "
                "began, which reads the table as it was: roll the transaction back and run "
                "it again"
            )


def _adjusted(master: MasterKey, old: TableDesign, new: TableDesign) -> dict[str, str | None]:
    """The layers ``new`` records adjusted since ``old`` (same copy): layer name -> the key
    id the server's layers row must hold (None: any), its row peeled."""
    before = {e.name: e for e in old.encryptions}
    found: dict[str, str | None] = {}
    for enc in new.encryptions:
        was = before.get(enc.name)
        if was is None:
            continue
        if (was.outer is not None or was.params.get("lazy")) and not (
            enc.outer is not None or enc.params.get("lazy")
        ):
            found[enc.name] = None
        if enc.scheme == JOIN and was.key_scope != enc.key_scope:
            found[enc.name] = join_key_id(master, enc.key_scope)
    if old.sums is not None and new.sums is not None and old.sums.lazy and not new.sums.lazy:
        found[ashe_layer(new.sums).name] = None
    return found
