"""The Spark backend's tables: Parquet files in a warehouse, changed by one writer at a time.

Layout (a local directory, or a Hadoop URL: ``veil.backends.spark_files``)::

    WAREHOUSE/.veil-write.lock                  the write lock
    WAREHOUSE/<table>/CURRENT                   the name of the table's current version
    WAREHOUSE/<table>/v<random>/part-*.parquet  one version of the table's rows
    WAREHOUSE/<table>/v<random>/_pending-<hex>/ rows appended by a transaction not yet committed
    WAREHOUSE/<table>/v<random>/_RETIRED        a replaced version, deleted GRACE_SECONDS later

A table exists once its ``CURRENT`` file does. Every change happens inside a transaction,
and a transaction holds the warehouse's write lock from its start to its end, so writers
from any number of processes and machines take turns: an UPDATE's read of the current
version and its write of the next one see no other writer between them (nor does the
row-id counter's UPDATE ... RETURNING, which ASHE's one-time pads rely on).

Nothing a transaction writes is visible to other readers before it commits: a rewrite
(load, UPDATE, DELETE) writes a new version beside the current one, an append writes its
files into a ``_pending-`` directory (Spark skips names starting ``_`` or ``.``), and the
commit moves appended files into place and points ``CURRENT`` at new versions with one
atomic replacing rename per table. A rollback deletes what the transaction wrote. The
backend's own reads inside a transaction see its writes (``files``). A version that was
current stays on disk GRACE_SECONDS after being replaced, so another client's query that
is still scanning it finishes; a later commit deletes it.

Limits: a commit changing several tables points them one after another, so a reader may
see some of them changed and others not yet for that moment; dropping or renaming a
table is seen at once.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import IO

import pyarrow as pa

from veil.backends.base import BackendError
from veil.backends.spark_files import LEASE_SECONDS, Files, LocalFiles

CURRENT = "CURRENT"
LOCK = ".veil-write.lock"
RETIRED = "_RETIRED"
PENDING = "_pending-"
GRACE_SECONDS = 600.0
_LOCK_WAIT_SECONDS = float(os.environ.get("VEIL_SPARK_LOCK_TIMEOUT", "600"))


@dataclass
class _Append:
    """Rows an uncommitted transaction appended to a version of a table."""

    table: str
    version: str  # the version's name
    directory: str  # where its files wait


@dataclass
class _Journal:
    """A transaction's changes: applied on commit, undone on rollback."""

    pointers: dict[str, str] = field(default_factory=dict)  # table -> its new version
    pending: list[_Append] = field(default_factory=list)
    created: list[str] = field(default_factory=list)  # versions written
    undo: list[Callable[[], None]] = field(default_factory=list)  # drops, renames
    garbage: list[str] = field(default_factory=list)  # dropped tables


class Warehouse:
    """Tables as versioned Parquet directories under ``files.root``."""

    def __init__(self, files: Files) -> None:
        self.files = files
        self.root = files.root
        self._journal: _Journal | None = None
        self._lock = _WriteLock(files)

    # -- reading --------------------------------------------------------------------

    def names(self) -> list[str]:
        committed = {
            name
            for name, is_dir, _ in self.files.list(self.root)
            if is_dir and name[0] not in "._" and self._committed(name) is not None
        }
        return sorted(committed | set(self._journal.pointers if self._journal else ()))

    def version(self, table: str) -> str | None:
        """The location of the table's current version (this transaction's, if it wrote one)."""
        if self._journal is not None and table in self._journal.pointers:
            return self.files.join(self.root, table, self._journal.pointers[table])
        name = self._committed(table)
        return None if name is None else self.files.join(self.root, table, name)

    def _committed(self, table: str) -> str | None:
        text = self.files.read_text(self.files.join(self.root, table, CURRENT))
        return text.strip() if text else None

    def files_of(self, table: str) -> list[tuple[str, int]]:
        """The Parquet files (location, bytes) holding the table's rows, as this transaction sees them."""
        version = self.version(table)
        if version is None:
            return []
        found = self._parquet_files(version)
        for append in self._journal.pending if self._journal else []:
            if self.files.join(self.root, append.table, append.version) == version:
                found += self._parquet_files(append.directory)
        return found

    def _parquet_files(self, directory: str) -> list[tuple[str, int]]:
        return [
            (self.files.join(directory, name), size)
            for name, is_dir, size in self.files.list(directory)
            if not is_dir and name[0] not in "._"
        ]

    def stamp(self, table: str) -> tuple[str, int] | None:
        """The current version and its number of files: changes with every write (a version
        only ever gains files; file times are too coarse to tell two quick appends apart)."""
        version = self.version(table)
        if version is None:
            return None
        return version, len(self.files_of(table))

    def bytes(self, table: str) -> int:
        return sum(size for _, size in self.files_of(table))

    # -- writing (inside a transaction) ----------------------------------------------------

    def new_version(self, table: str) -> str:
        """The location for a new version of ``table`` (not yet current, not yet created)."""
        journal = self._open_journal()
        version = self.files.join(self.root, table, f"v{secrets.token_hex(8)}")
        journal.created.append(version)
        return version

    def write_version(
        self, table: str, schema: pa.Schema, batches: Iterator[pa.RecordBatch]
    ) -> tuple[str, int]:
        """A new version holding ``batches``; returns its location and its rows."""
        version = self.new_version(table)
        return version, self.files.write_parquet(version, schema, batches)

    def publish(self, table: str, version: str) -> None:
        """Make ``version`` the table's current one when the transaction commits."""
        self._open_journal().pointers[table] = version.rstrip("/").rsplit("/", 1)[-1]

    def append(self, table: str, schema: pa.Schema, batches: Iterator[pa.RecordBatch]) -> int:
        """Add rows to the table's current version when the transaction commits."""
        journal = self._open_journal()
        version = self.version(table)
        if version is None:
            raise FileNotFoundError(table)
        pending = self.files.join(version, f"{PENDING}{secrets.token_hex(8)}")
        journal.pending.append(_Append(table, version.rsplit("/", 1)[-1], pending))
        return self.files.write_parquet(pending, schema, batches)

    def drop(self, table: str) -> None:
        journal = self._open_journal()
        directory = self.files.join(self.root, table)
        hidden = self.files.join(self.root, f".dropped-{table}-{secrets.token_hex(4)}")
        self.files.rename(directory, hidden)  # gone for readers now, back on rollback
        journal.pointers.pop(table, None)
        journal.undo.append(lambda: self.files.rename(hidden, directory))
        journal.garbage.append(hidden)

    def rename(self, old: str, new: str) -> None:
        journal = self._open_journal()
        if old in journal.pointers:
            journal.pointers[new] = journal.pointers.pop(old)
        source, target = self.files.join(self.root, old), self.files.join(self.root, new)
        self.files.rename(source, target)  # one rename: old and new never both
        for append in journal.pending:
            if append.table == old:
                append.table = new
                append.directory = target + append.directory[len(source) :]
        journal.undo.append(lambda: self.files.rename(target, source))

    def discard(self, version: str) -> None:
        self.files.delete(version)

    def _open_journal(self) -> _Journal:
        if self._journal is None:
            raise BackendError("the Spark warehouse changes only inside a transaction")
        return self._journal

    # -- transactions -------------------------------------------------------------------

    @property
    def in_transaction(self) -> bool:
        return self._journal is not None

    def begin(self) -> None:
        self._lock.acquire()
        self._journal = _Journal()

    def commit(self) -> None:
        journal, self._journal = self._journal, None
        try:
            if journal is not None:
                self._apply(journal)
        finally:
            self._lock.release()

    def rollback(self) -> None:
        journal, self._journal = self._journal, None
        try:
            if journal is not None:
                for undo in reversed(journal.undo):
                    undo()
                for append in journal.pending:
                    self.files.delete(append.directory)
                for version in journal.created:
                    self.files.delete(version)
        finally:
            self._lock.release()

    def _apply(self, journal: _Journal) -> None:
        # each table's version once the commit is done: the new one, else the committed one
        finals: dict[str, str | None] = dict(journal.pointers)
        for append in journal.pending:
            if append.table not in finals:  # read once per table, not once per append
                finals[append.table] = self._committed(append.table)
            if (
                append.version == finals[append.table]
            ):  # else an UPDATE rewrote the version meanwhile
                version = self.files.join(self.root, append.table, append.version)
                for location, _ in self._parquet_files(append.directory):
                    target = self.files.join(version, f"part-{secrets.token_hex(8)}.parquet")
                    self.files.rename(location, target)
            self.files.delete(append.directory)
        for table, name in journal.pointers.items():
            previous = self._committed(table)
            self.files.replace_text(self.files.join(self.root, table, CURRENT), name + "\n")
            if previous is not None and previous != name:
                retired = self.files.join(self.root, table, previous)
                if self.files.exists(retired):
                    self.files.replace_text(self.files.join(retired, RETIRED), f"{time.time()}\n")
        final_locations = {self.files.join(self.root, t, v) for t, v in journal.pointers.items()}
        for version in journal.created:
            if version not in final_locations:  # written, then replaced within the transaction
                self.files.delete(version)
        for path in journal.garbage:
            self.files.delete(path)
        for table in journal.pointers:
            self._sweep(table)

    def _sweep(self, table: str) -> None:
        """Delete the table's versions replaced (or left by a crash) GRACE_SECONDS ago."""
        current = self._committed(table)
        directory = self.files.join(self.root, table)
        for name, is_dir, _ in self.files.list(directory):
            if not is_dir or name == current or not name.startswith("v"):
                continue
            version = self.files.join(directory, name)
            age = self.files.age(self.files.join(version, RETIRED))
            if age is None:  # never current, or its marker not written: a crash's leftover
                age = self.files.age(version)
            if age is not None and age > GRACE_SECONDS:
                self.files.delete(version)


class _WriteLock:
    """The warehouse's one write lock, shared by every process and machine that writes it.

    On a local directory, ``flock`` on the lock file: the system releases it when its
    holder dies. On a Hadoop file system, the lock is the file's exclusive creation; its
    holder renews it every LEASE_SECONDS / 4 from a thread, and a lock file not renewed
    for LEASE_SECONDS is a dead writer's, which the next writer removes.
    """

    def __init__(self, files: Files) -> None:
        self._files = files
        self._path = files.join(files.root, LOCK)
        self._handle: IO[str] | None = None
        self._renewing: threading.Event | None = None

    def acquire(self) -> None:
        deadline = time.monotonic() + _LOCK_WAIT_SECONDS
        pause = 0.01
        while not self._try():
            if time.monotonic() > deadline:
                raise BackendError(
                    f"another Veil client has been writing to the Spark warehouse {self._files.root} "
                    f"for over {_LOCK_WAIT_SECONDS:.0f} s; try again when it is done "
                    "(VEIL_SPARK_LOCK_TIMEOUT sets how long to wait)"
                )
            time.sleep(pause)
            pause = min(pause * 2, 0.5)

    def _try(self) -> bool:
        if isinstance(self._files, LocalFiles):
            handle = open(self._path, "a+")  # noqa: SIM115 - held until release
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                return False
            self._handle = handle
            return True
        owner = f"{socket.gethostname()} {os.getpid()} {time.time()}\n"
        if not self._files.create_exclusive(self._path, owner):
            age = self._files.age(self._path)
            if age is not None and age > LEASE_SECONDS:
                self._files.delete(self._path)  # its writer died: the lease ran out
            return False
        self._renewing = threading.Event()
        threading.Thread(target=self._renew, args=(self._renewing,), daemon=True).start()
        return True

    def _renew(self, stop: threading.Event) -> None:
        while not stop.wait(LEASE_SECONDS / 4):
            self._files.touch(self._path)

    def release(self) -> None:
        if self._handle is not None:
            fcntl.flock(self._handle, fcntl.LOCK_UN)
            self._handle.close()
            self._handle = None
        if self._renewing is not None:
            self._renewing.set()
            self._renewing = None
            self._files.delete(self._path)
