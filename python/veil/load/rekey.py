"""``veil rotate --rekey``: a new master key, every table re-encrypted under it, online.

The steps, each of which a crash may cut and a second run finishes:

1. ``veil.keys.begin_rekey`` adds the next generation's key to the key file,
   beside the current one (kept as it is: same passphrase or KEK). From then
   on every session opens both (``veil.keys.ring``).
2. Table by table, as ``veil redesign`` rebuilds one: the table is read back
   through Veil and loaded under fresh server names with its scopes marked
   for the new key (``veil.keys.generations``) while its writers go on; then
   a catch-up with what they wrote, its last round under the table's lock
   held alone (``veil.load.rekey_copy``, ``veil.session.table_locks``), and
   the swap by the design file, atomically; then the old server tables are
   dropped. Sessions follow the design file; one whose query lost its tables
   to the swap plans it again on the new design (``Session._answer``).
3. Once no table is under the old key, the *final switch*: the design's
   markers come off and the new key becomes its base (one atomic design
   write, no data touched), and ``veil.keys.finish_rekey`` rewrites the key
   file with the new key alone: the old key is destroyed. It is made under
   ``veil.keys.generations.switching``, which waits for DDL still encrypting
   a table under the keys it began with (``generations.writing``); a table
   such a statement saved under the old key is moved like the others first.

Which tables are done is read from the design itself, so a second run
simply continues; a table created meanwhile is re-keyed too. The server
tables a killed run was writing (or had not yet dropped) are listed in
``rekey.json`` in the client directory before they exist, and dropped by the
next run.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from veil.design.fresh import fresh_design
from veil.design.model import PhysicalDesign, TableDesign, write_private
from veil.exec.local_duckdb import source_duckdb
from veil.keys import begin_rekey, finish_rekey
from veil.keys.generations import mark_table, switching, table_keys, unmark_design
from veil.load import keys as declared
from veil.load.loader import load_into
from veil.load.progress import Reporter
from veil.load.rekey_copy import CatchUp, TableRebuilt, read_table
from veil.load.server_indexes import copy_indexes
from veil.load.sources import SourceTable
from veil.session.clientdir import KEY_FILE, open_client_dir
from veil.session.session import Session
from veil.session.table_locks import exclusive
from veil.sql.errors import ClientDirectoryError

_SOURCE = "__veil_rekey_source"
PENDING_FILE = "rekey.json"
LOCK_FILE = "rekey.lock"


@dataclass
class RekeyReport:
    old: str  # fingerprints
    new: str
    generation: int  # the new key's
    tables: list[str]  # re-encrypted by this run
    seconds: float


def rekey(
    client_dir: str | os.PathLike[str],
    progress: Callable[[str], None] | None = None,
    *,
    passphrase: str | None = None,
    bars: bool = False,
) -> RekeyReport:
    """Move every table of ``client_dir`` to a new master key, then destroy the old one.

    Resumes a re-key a crash cut short. Sessions may query and write all along.
    """
    client = open_client_dir(client_dir)
    if not client.has_design():
        raise ClientDirectoryError(
            f"{client.path} holds no table yet (no design.json): nothing is encrypted under its "
            "key, so there is nothing to re-key; `veil keygen` makes a new key"
        )
    cdir = client.path
    with _alone(cdir):
        return _rekey(cdir, Reporter(progress or (lambda _: None), bars=bars), passphrase)


def _rekey(cdir: Path, say: Reporter, passphrase: str | None) -> RekeyReport:
    started = time.perf_counter()
    keys = begin_rekey(cdir / KEY_FILE, passphrase)
    new = keys.new.fingerprint()
    done: list[str] = []
    session = Session(cdir)
    try:
        _clear_leftovers(session)
        while True:
            base = session.design.key_fingerprint
            todo = [n for n, t in sorted(session.design.tables.items()) if _on_old(t, base, new)]
            for number, name in enumerate(todo, 1):
                say.say(f"re-key: {name} ({number} of {len(todo)} under the old key)")
                if _rekey_table(session, name, new, say):
                    done.append(name)
            session.follow_design()
            if _switched(session, new, passphrase, say):
                break
    finally:
        session.close()
    (cdir / PENDING_FILE).unlink(missing_ok=True)
    seconds = time.perf_counter() - started
    return RekeyReport(keys.old.fingerprint(), new, keys.generation, done, seconds)


def _on_old(table: TableDesign, base: str, new: str) -> bool:
    return table_keys(table, base) != {new}


def _rekey_table(session: Session, name: str, new: str, say: Reporter) -> bool:
    """Re-encrypt table ``name`` under the key ``new``; False if it needed none any more
    (or a statement rebuilt it meanwhile: the next pass does it again).

    Copied without the table's lock, then caught up with its writers' changes and
    swapped in under it (``veil.load.rekey_copy``): its writers wait for the
    catch-up, not the copy.
    """
    client = session.client
    session.follow_design()
    found = session.design.tables.get(name)
    if found is None or not _on_old(found, session.design.key_fingerprint, new):
        return False  # dropped, or re-keyed by another run, meanwhile
    try:
        table, data, ids = read_table(session, name)
    except TableRebuilt:  # dropped since
        return False
    base = session.design.key_fingerprint
    fresh = fresh_design(PhysicalDesign(base, {name: table}), base)
    rebuilt = fresh.tables[name]
    mark_table(rebuilt, new)
    _note_pending(session, name, table, rebuilt)
    source = source_duckdb()
    try:
        source.register(_SOURCE, data)
        with contextlib.ExitStack() as held:

            def catch_up(loaded: TableDesign) -> None:  # before the design names ``loaded``
                def lock() -> None:
                    held.enter_context(exclusive(client.path, [name]))
                    copy_indexes(session.backend, table, loaded)  # made while it was copied

                indexes = copy_indexes(session.backend, table, loaded)  # CREATE INDEX's
                if indexes:
                    say.say(f"re-key: {name}: {len(indexes)} indexes made again")
                rounds = CatchUp(session, table, loaded, ids).rounds(lock)
                moved = sum(r.rows for r in rounds)
                say.say(f"re-key: {name} caught up ({moved:,} rows written meanwhile)")

            try:
                load_into(
                    source,
                    [SourceTable(name, _SOURCE)],
                    fresh,
                    client,
                    session.master,
                    session.backend,
                    say,
                    in_source_order=True,
                    before_swap=catch_up,
                )
            except TableRebuilt:
                say.say(f"re-key: {name} was rebuilt meanwhile; copying it again")
                _clear_leftovers(session)
                return False
            session.follow_design()
            _install_keys(session, table)  # writers wait until it has its keys again
            (client.path / PENDING_FILE).unlink(missing_ok=True)
    finally:
        source.close()
    session.reload_design()
    return True


def _switched(session: Session, new: str, passphrase: str | None, say: Reporter) -> bool:
    """The final switch: the new key the design's base, the old key destroyed (False: a
    table under the old key appeared, which must be re-keyed first)."""
    path = session.client.path

    def waiting() -> None:
        say.say("re-key: waiting for DDL statements still writing under the old key")

    with switching(path, waiting):
        if session.design.key_fingerprint != new and not _finish_design(session, new):
            return False
        finish_rekey(path / KEY_FILE, passphrase)  # a second run may find it done already
    return True


def _finish_design(session: Session, new: str) -> bool:
    """With every table under ``new``: make it the design's base key (False: a table
    under the old key appeared meanwhile)."""
    client = session.client
    with client.design_lock():
        design = client.design(session.master)
        base = design.key_fingerprint
        if any(_on_old(t, base, new) for t in design.tables.values()):
            return False
        unmark_design(design, new)
        design.save(client.design_path)
    session.reload_design()
    return True


def _note_pending(session: Session, name: str, old: TableDesign, new: TableDesign) -> None:
    """Name the server tables this table's rebuild makes and drops, before it starts."""
    pending = {
        "table": name,
        "new": [new.server_name, *new.side_tables()],
        "old": [old.server_name, *old.side_tables()],
        "new_main": new.server_name,
    }
    write_private(session.client.path / PENDING_FILE, json.dumps(pending) + "\n")


def _clear_leftovers(session: Session) -> None:
    """Drop the server tables a killed run left: the new ones it had not swapped in, or
    the old ones it had swapped out but not dropped."""
    path = session.client.path / PENDING_FILE
    if not path.exists():
        return
    pending = json.loads(path.read_text())
    table = session.design.tables.get(pending["table"])
    swapped = table is not None and table.server_name == pending["new_main"]
    if table is None:  # dropped since: whatever the run made or left is garbage
        doomed = pending["new"] + pending["old"]
    else:
        doomed = pending["old" if swapped else "new"]
    for server_table in doomed:
        session.backend.drop_table(server_table, if_exists=True)
    if swapped and table is not None:  # killed between the swap and the unique indexes
        with exclusive(session.client.path, [table.name]):
            _install_keys(session, table)
    path.unlink()


def _install_keys(session: Session, table: TableDesign) -> None:
    """The table's PRIMARY KEY and UNIQUE indexes on its (new) server table."""
    kept = [declared.Key(k, k == table.primary_key()) for k in table.keys]
    declared.install(session, table.name, kept)


@contextlib.contextmanager
def _alone(client_dir: Path) -> Iterator[None]:
    """One re-key of a client directory at a time (across processes)."""
    fd = os.open(client_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ClientDirectoryError(
                f"another `veil rotate --rekey` is running on {client_dir}; wait for it "
                "(a killed one holds nothing: run it again)"
            ) from None
        yield
    finally:
        os.close(fd)
