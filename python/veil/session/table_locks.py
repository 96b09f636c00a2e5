"""Table locks among the sessions of one client directory: writers share, rebuilds exclude.

A rebuild (ALTER TABLE, TRUNCATE, DROP TABLE, ``veil redesign``, a re-key)
reads a table whole, loads it under new server tables and then swaps the
design to them. A row written to the old tables between the read and the
swap would be lost with them. So, as PostgreSQL's ALTER TABLE waits for the
transactions writing the table, a rebuild holds the table's lock exclusively
and every write holds it shared from its write until its transaction ends
(the statement's end in autocommit). A writer that gets the lock after a
rebuild swapped the design wrote nothing yet: it sees the new design and
runs its statement again (``veil.session.dml``).

The locks are advisory file locks (``flock``) in the client directory, so
they order every process and thread using it (``veil serve`` connections, the
DB-API, the CLI); each session holds its own open file per locked table.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import weakref
from collections.abc import Iterator
from pathlib import Path

_FOLDER = "locks"


def lock_file(client_dir: Path, table: str) -> int:
    """The open lock file of ``table`` (or any name: ``veil.session.peel_marks``'s)."""
    folder = client_dir / _FOLDER
    folder.mkdir(mode=0o700, exist_ok=True)
    name = hashlib.sha256(table.encode()).hexdigest()[:24]  # any table name: a file name
    return os.open(folder / f"{name}.lock", os.O_RDWR | os.O_CREAT, 0o600)


@contextlib.contextmanager
def exclusive(client_dir: Path, tables: list[str]) -> Iterator[None]:
    """Hold ``tables``' locks alone (waiting for their writers' transactions to end)."""
    held = []
    try:
        for table in sorted(set(tables)):  # one order: two rebuilds never wait in a circle
            fd = lock_file(client_dir, table)
            held.append(fd)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        for fd in held:
            os.close(fd)


class SharedLocks:
    """The table locks one session holds shared, until its transaction ends.

    Each table's lock file stays open between its writes (unlocked): opening it
    (the folder made, the name hashed, the file opened and closed) cost every
    point write ~30-50 us (issue 41). A lock is a property of the open file, so
    an unlocked one held open excludes nobody; the files close with the session.
    """

    def __init__(self, client_dir: Path):
        self.client_dir = client_dir
        self.held: dict[str, int] = {}
        self._open: dict[str, int] = {}  # every table's open lock file, held or not
        self._closer = weakref.finalize(self, _close_all, self._open)

    def take(self, table: str) -> bool:
        """Hold ``table``'s lock shared (waiting for a rebuild of it); False if held already."""
        if table in self.held:
            return False
        fd = self._open.get(table)
        if fd is None:
            if len(self._open) >= _KEPT_OPEN:
                self._forget_unheld()
            fd = self._open[table] = lock_file(self.client_dir, table)
        fcntl.flock(fd, fcntl.LOCK_SH)
        self.held[table] = fd
        return True

    def release(self, table: str | None = None) -> None:
        """Release ``table``'s lock (every one: None)."""
        for name in [table] if table is not None else list(self.held):
            fd = self.held.pop(name, None)
            if fd is not None:
                fcntl.flock(fd, fcntl.LOCK_UN)

    def close(self) -> None:
        """Release every lock and close the files."""
        self.release()
        self._closer()

    def _forget_unheld(self) -> None:
        for name in [n for n in self._open if n not in self.held]:
            os.close(self._open.pop(name))


_KEPT_OPEN = 64  # lock files a session keeps open; the unheld ones close past it


def _close_all(files: dict[str, int]) -> None:
    for fd in files.values():
        with contextlib.suppress(OSError):
            os.close(fd)
    files.clear()
