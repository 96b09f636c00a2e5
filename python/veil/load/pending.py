"""Server tables a load is making or about to drop, so that a killed load leaves none behind.

A load (and the DDL, ``veil redesign`` and re-key that rebuild tables through
it) creates its server tables under fresh random names and lets the design
file name them only once they are complete (``veil.load.loader``). A process
killed before that leaves tables no design names; one killed after the design
switch but before dropping the old tables leaves those. Nothing would ever
find them again: their names are random, and the server's bytes grow.

So before it creates anything, a load writes the names it will create into a
*pending* record in the client directory (``pending/<id>.json``) and holds an
exclusive ``flock`` on it for its whole life; after the switch it records the
old tables it is about to drop beside it (``<id>.drop.json``), and removes
both when done. A record whose lock can be taken belongs to a dead process:
``sweep`` drops the tables it lists that the current design does not name
(the dead load may have switched the design before it died) and removes the
record. Every load sweeps before it starts; ``veil status`` counts what is
left. The records hold only the server's opaque names.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

from veil.backends import Backend
from veil.backends.staged import STAGING_SUFFIX
from veil.design.model import PhysicalDesign, TableDesign
from veil.session.clientdir import ClientDir

PENDING_DIR = "pending"
_DROP = ".drop.json"
_VERSION = 1


class PendingTables:
    """One live load's record: held locked until ``done``."""

    def __init__(self, client: ClientDir, names: list[str]) -> None:
        folder = client.path / PENDING_DIR
        folder.mkdir(mode=0o700, exist_ok=True)
        self.path = folder / f"{uuid.uuid4().hex}.json"
        # written and locked under another name first: a sweep never sees it unlocked
        scratch = self.path.with_suffix(".new")
        self._fd = os.open(scratch, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        os.write(self._fd, _record(names))
        os.fsync(self._fd)
        os.replace(scratch, self.path)

    def dropping(self, names: list[str]) -> None:
        """Record the old tables this load drops next, in case it dies while dropping them."""
        drop = self.path.with_suffix(_DROP)
        scratch = drop.with_name(drop.name + ".new")
        fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, _record(names))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(scratch, drop)

    def abandon(self) -> None:
        """Release the lock and keep the record: a sweep finishes the work."""
        os.close(self._fd)

    def done(self) -> None:
        """Forget the record: its tables are named by the design or dropped."""
        with contextlib.suppress(FileNotFoundError):
            self.path.with_suffix(_DROP).unlink()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        os.close(self._fd)


@contextlib.contextmanager
def creating(client: ClientDir, table: TableDesign) -> Iterator[PendingTables]:
    """Hold a pending record of ``table``'s server tables while they are made and swapped in.

    If the body raises, the record is left unlocked, so the next sweep (the next load's,
    in this process or another) drops what was made and the design does not name; not
    here, where the server may be what failed.
    """
    counters = [c.sequence for c in table.columns if c.sequence]  # made just before, by DDL
    pending = PendingTables(client, [table.server_name, *table.side_tables(), *counters])
    try:
        yield pending
    except BaseException:
        pending.abandon()
        raise
    pending.done()


def orphans(client: ClientDir) -> list[Path]:
    """The records of loads that died: nobody holds their lock."""
    folder = client.path / PENDING_DIR
    if not folder.is_dir():
        return []
    found = []
    for path in sorted(folder.glob("*.json")):
        if path.name.endswith(_DROP) or not _unheld(path):
            continue
        found.append(path)
    return found


def sweep(client: ClientDir, backend: Backend, design: PhysicalDesign) -> int:
    """Drop the server tables dead loads left that ``design`` does not name; how many names
    were cleared. ``design`` must be the client directory's current one (read under its lock).
    """
    named = in_use(design)
    cleared = 0
    for path in orphans(client):
        names = _names(path) + _names(path.with_suffix(_DROP))
        for name in names:
            if name in named:
                continue
            for stored in (name, name + STAGING_SUFFIX):
                backend.drop_table(stored, if_exists=True)
            cleared += 1
        with contextlib.suppress(FileNotFoundError):
            path.with_suffix(_DROP).unlink()
        path.unlink(missing_ok=True)
    return cleared


def in_use(design: PhysicalDesign) -> set[str]:
    """Every server table ``design`` names: main tables, side tables, column sequences."""
    names: set[str] = set()
    for table in design.tables.values():
        names.add(table.server_name)
        names.update(table.side_tables())
        names.update(c.sequence for c in table.columns if c.sequence)
    return names


def _unheld(path: Path) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False  # finished meanwhile
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)  # also releases a lock just taken: the sweep needs only to know
    return True


def _record(names: list[str]) -> bytes:
    return json.dumps({"version": _VERSION, "tables": sorted(set(names))}).encode()


def _names(path: Path) -> list[str]:
    """A record's names; an unreadable one (cut while written) names nothing."""
    try:
        data = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return []
    tables = data.get("tables") if isinstance(data, dict) else None
    return [str(t) for t in tables] if isinstance(tables, list) else []
