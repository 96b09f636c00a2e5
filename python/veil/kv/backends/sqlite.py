"""SQLite as a MiniCrypt store: the embedded default (``sqlite:///path``).

Each table is a ``WITHOUT ROWID`` table clustered on ``(part, key)`` with BLOB
keys, which SQLite compares with ``memcmp`` -- exactly the byte order the
MiniCrypt core relies on for floor lookups and ranges. The two conditional
writes map onto single statements whose row counts say whether they happened:

* insert-if-not-exists = ``INSERT OR IGNORE`` (1 row changed = inserted),
* update-if = ``UPDATE ... WHERE part = ? AND key = ? AND tag = ?``.

A single statement in autocommit mode is atomic against every other
connection, so these are linearizable per row across processes.

Several processes may share one file: the database runs in WAL mode (readers
never block the writer) with a busy timeout, so a writer waits for the lock
instead of failing. One backend object holds one connection; a lock serialises
its use, so the store's own thread and its background merge thread can share
it safely.

On-disk layout (issue 14: the file should be within ~10% of the bytes of the
packs it holds, for small tables as for large ones). A pack is one row of a
few to a few dozen kilobytes. In the original layout (``WITHOUT ROWID``
tables, 4 KiB pages) a row past ~1 KB kept only ~490 bytes in its B-tree leaf
and spilled the rest into an overflow page of its own, so a 2.4 KB pack took
two pages: half the file was waste. New files use

* rowid tables (rows stored in the table B-tree, whose cells may be almost as
  large as the page) with a unique index on ``(part, key)`` for the floor
  lookups and scans. A row larger than a page overflows into *full* pages and
  leaves only its remainder (at most a page) in the leaf, so what a pack wastes
  is bounded by the page size, not by the pack's;
* 1 KiB pages. Leaves hold whole cells, so each page ends in slack of about
  half a cell, and every table pays a few pages of its own (the table's root,
  its index, the last leaf). With 64 KiB pages (the first round) that fixed
  cost was ~3 pages, 190 KB: 35% of a 0.54 MB table, and a 35 KB table took
  two pages (3.4x its packs). Measured on real packs of 16 KB (the store's
  blocked packs), table and index pages after ``VACUUM`` over the packs'
  bytes: 1.01-1.02x for 0.5-4 MB tables and 1.05-1.08x for a 31 KB one with
  1 KiB pages; 2 KiB pages 1.02-1.03x and 1.08-1.18x; 4 KiB 1.03-1.06x and
  1.3x; 512-byte pages 1.02x and 1.03x (but rows of the size a per-row store
  keeps, 0.5-1 KB, would overflow them). A floor lookup that returns a 16 KB
  pack costs the same through 8 or 16 overflow pages (5.7 us on
  debian-packages packs with 1, 2 or 4 KiB pages, 7.2 us with 64 KiB pages:
  memory-mapped pages are followed, not read);
* incremental auto-vacuum, run after an epoch is deleted (APPEND merges), so
  freed pages go back to the file system; and a WAL kept short
  (``journal_size_limit``) and truncated by a checkpoint when the store closes;
* memory-mapped reads.

Files and tables created before keep their layout and are read the same way
(the SQL is identical); :meth:`SQLiteBackend.compact` (``VACUUM``) rewrites a
file densely, and :meth:`SQLiteBackend.compact_if_sparse` does so only when
free pages and the unused bytes inside pages exceed ``SPARSE_SHARE`` of a file
of at least ``SPARSE_MIN_BYTES`` (stores call it after bulk loads and APPEND
merges: page splits of out-of-order writes leave leaves half full).
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from veil.errors import ParameterError
from veil.kv.backends.base import Row

BUSY_TIMEOUT_MS = 60_000
SCAN_PAGE_ROWS = 512
PAGE_SIZE = 1_024  # for new files (fixed when SQLite creates the file)
# update_if moves a row whose size changes by more than this to the table's end.
MOVE_BYTES = 16 * 1024
MMAP_BYTES = 1 << 30
WAL_LIMIT_BYTES = 16 << 20
SPARSE_SHARE = 0.15  # compact_if_sparse: VACUUM past this share of waste
SPARSE_MIN_BYTES = 4 << 20  # smaller files waste pages VACUUM cannot give back
_TABLE_NAME = re.compile(r"^[a-z][a-z0-9_]{0,47}$")


def open_backend(url: str) -> SQLiteBackend:
    """Open ``sqlite:///absolute/path.db`` (the file is created if missing)."""
    parts = urlsplit(url)
    if parts.scheme != "sqlite" or parts.netloc or not parts.path or parts.path == "/":
        raise ParameterError(f"bad SQLite URL {url!r}; write sqlite:///path/to/file.db")
    return SQLiteBackend(parts.path)


class SQLiteBackend:
    """A :class:`~veil.kv.backends.base.KVBackend` over one SQLite file."""

    default_partitions = 1

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._lock = threading.RLock()
        self._rowid: dict[str, bool] = {}
        self._conn: sqlite3.Connection | None = sqlite3.connect(
            self.path,
            timeout=BUSY_TIMEOUT_MS / 1000,
            isolation_level=None,
            check_same_thread=False,
        )
        self._conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        # Page size and auto-vacuum only take effect on a file with no table
        # yet (before WAL mode writes its header); on older files they are no-ops.
        self._conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")
        self._conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
        self._conn.execute("PRAGMA journal_mode = WAL")
        self._conn.execute("PRAGMA synchronous = NORMAL")
        self._conn.execute(f"PRAGMA journal_size_limit = {WAL_LIMIT_BYTES}")
        self._conn.execute(f"PRAGMA wal_autocheckpoint = {WAL_LIMIT_BYTES // PAGE_SIZE}")
        self._conn.execute(f"PRAGMA mmap_size = {MMAP_BYTES}")

    # -- tables ---------------------------------------------------------
    def ensure_table(self, table: str) -> None:
        name = _name(table)
        with self._lock:
            conn = self._connection()
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {name} (part INTEGER NOT NULL, "
                "key BLOB NOT NULL, tag BLOB NOT NULL, value BLOB NOT NULL)"
            )
            if self._has_rowid(name):  # tables of the old layout are keyed (part, key)
                conn.execute(f"CREATE UNIQUE INDEX IF NOT EXISTS {name}_k ON {name} (part, key)")

    def drop_table(self, table: str) -> None:
        self._execute(f"DROP TABLE IF EXISTS {_name(table)}")
        self._rowid.pop(table, None)

    def _has_rowid(self, name: str) -> bool:
        """False for a table of the original layout (``WITHOUT ROWID``, keyed (part, key))."""
        known = self._rowid.get(name)
        if known is None:
            row = self._one_raw("SELECT sql FROM sqlite_master WHERE name = ?", (name,))
            known = self._rowid[name] = not (row and "WITHOUT ROWID" in row[0].upper())
        return known

    # -- reads ----------------------------------------------------------
    def get(self, table: str, partition: int, key: bytes) -> Row | None:
        return self._one(
            f"SELECT key, value, tag FROM {_name(table)} WHERE part = ? AND key = ?",
            (partition, key),
        )

    def floor(self, table: str, partition: int, key: bytes) -> Row | None:
        return self._one(
            f"SELECT key, value, tag FROM {_name(table)} WHERE part = ? AND key <= ? "
            "ORDER BY key DESC LIMIT 1",
            (partition, key),
        )

    def scan(
        self,
        table: str,
        partition: int,
        low: bytes | None = None,
        high: bytes | None = None,
        *,
        limit: int | None = None,
    ) -> Iterator[Row]:
        # Page through the range so the connection lock is never held while
        # the caller works on the rows (it may write to the same table).
        remaining = limit
        inclusive = True
        while remaining is None or remaining > 0:
            page = SCAN_PAGE_ROWS if remaining is None else min(SCAN_PAGE_ROWS, remaining)
            rows = self._page(table, partition, low, high, page, inclusive)
            yield from rows
            if len(rows) < page:
                return
            low, inclusive = rows[-1].key, False
            if remaining is not None:
                remaining -= len(rows)

    def _page(
        self,
        table: str,
        partition: int,
        low: bytes | None,
        high: bytes | None,
        count: int,
        inclusive: bool,
    ) -> list[Row]:
        where, params = ["part = ?"], [partition]
        if low is not None:
            where.append("key >= ?" if inclusive else "key > ?")
            params.append(low)  # type: ignore[arg-type]
        if high is not None:
            where.append("key <= ?")
            params.append(high)  # type: ignore[arg-type]
        sql = (
            f"SELECT key, value, tag FROM {_name(table)} WHERE {' AND '.join(where)} "
            f"ORDER BY key LIMIT {int(count)}"
        )
        with self._lock:
            return [Row(*r) for r in self._connection().execute(sql, params).fetchall()]

    # -- writes ---------------------------------------------------------
    def insert_if_not_exists(
        self, table: str, partition: int, key: bytes, value: bytes, tag: bytes
    ) -> bool:
        changed = self._execute(
            f"INSERT OR IGNORE INTO {_name(table)} (part, key, value, tag) VALUES (?, ?, ?, ?)",
            (partition, key, value, tag),
        )
        return changed == 1

    def update_if(
        self,
        table: str,
        partition: int,
        key: bytes,
        value: bytes,
        tag: bytes,
        expected_tag: bytes,
    ) -> bool:
        name = _name(table)
        if self._has_rowid(name):
            # A value whose size changes by more than MOVE_BYTES (a bulk load's
            # oversized pack, and that pack cut down by its split) moves to the
            # end of the table: in a file of large pages, growing in place
            # would split its leaf and shrinking would leave a nearly empty one.
            sql = (
                f"UPDATE {name} SET value = ?1, tag = ?2, rowid = CASE WHEN "
                f"abs(length(?1) - length(value)) > {MOVE_BYTES} "
                f"THEN (SELECT max(rowid) + 1 FROM {name}) ELSE rowid END "
                "WHERE part = ?3 AND key = ?4 AND tag = ?5"
            )
        else:
            sql = (
                f"UPDATE {name} SET value = ?1, tag = ?2 WHERE part = ?3 AND key = ?4 AND tag = ?5"
            )
        return self._execute(sql, (value, tag, partition, key, expected_tag)) == 1

    def upsert(self, table: str, partition: int, key: bytes, value: bytes, tag: bytes) -> None:
        self._execute(
            f"INSERT OR REPLACE INTO {_name(table)} (part, key, value, tag) VALUES (?, ?, ?, ?)",
            (partition, key, value, tag),
        )

    def delete(self, table: str, partition: int, key: bytes) -> None:
        self._execute(f"DELETE FROM {_name(table)} WHERE part = ? AND key = ?", (partition, key))

    def delete_partition(self, table: str, partition: int) -> None:
        with self._lock:
            conn = self._connection()
            conn.execute(f"DELETE FROM {_name(table)} WHERE part = ?", (partition,))
            _release_free_pages(conn)

    def disk_bytes(self) -> int:
        """Bytes of the database file and its WAL, after a checkpoint truncates the WAL."""
        with self._lock:
            conn = self._connection()
            _release_free_pages(conn)
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        wal = self.path.with_name(self.path.name + "-wal")
        return self.path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)

    def table_disk_bytes(self, table: str) -> int:
        """Bytes of the pages holding ``table`` and its index (SQLite's dbstat)."""
        name = _name(table)
        row = self._one_raw(
            "SELECT COALESCE(SUM(pgsize), 0) FROM dbstat WHERE name IN (?, ?)", (name, name + "_k")
        )
        return int(row[0]) if row else 0

    def compact(self) -> None:
        """Rewrite the file densely (``VACUUM``): after many GENERIC updates or splits."""
        with self._lock:
            conn = self._connection()
            conn.execute("VACUUM")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def compact_if_sparse(self) -> bool:
        """``VACUUM`` if free pages and unused page bytes exceed SPARSE_SHARE; True if it did.

        Measured with SQLite's dbstat (one pass over the file's pages), so
        callers run it after work of the same order: a bulk load, merges. A
        file left as it is still gets its WAL checkpointed: only the database
        file is memory-mapped, and a pack still in the WAL is read with one
        system call per 1 KiB page (a point read into a 16 KB pack took 14 us
        against 7 us once checkpointed).
        """
        with self._lock:
            conn = self._connection()
            if not _sparse(conn):
                conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
                return False
        self.compact()
        return True

    def stored_bytes(self, table: str) -> int:
        row = self._one_raw(
            f"SELECT COALESCE(SUM(length(key) + length(value) + length(tag)), 0) "
            f"FROM {_name(table)}",
            (),
        )
        return int(row[0]) if row else 0

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                # Best effort: another process may hold the file (it checkpoints later).
                with contextlib.suppress(sqlite3.OperationalError):
                    self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                self._conn.close()
                self._conn = None

    # -- helpers --------------------------------------------------------
    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise ParameterError(f"the SQLite store {self.path} is closed")
        return self._conn

    def _execute(self, sql: str, params: tuple[object, ...] = ()) -> int:
        with self._lock:
            return self._connection().execute(sql, params).rowcount

    def _one_raw(self, sql: str, params: tuple[object, ...]) -> tuple[Any, ...] | None:
        with self._lock:
            row: tuple[Any, ...] | None = self._connection().execute(sql, params).fetchone()
            return row

    def _one(self, sql: str, params: tuple[object, ...]) -> Row | None:
        row = self._one_raw(sql, params)
        return None if row is None else Row(*row)


def _sparse(conn: sqlite3.Connection) -> bool:
    """Whether free pages and unused bytes in pages exceed SPARSE_SHARE of a large file."""
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    free = conn.execute("PRAGMA freelist_count").fetchone()[0]
    if pages * page_size < SPARSE_MIN_BYTES:
        return False
    unused = conn.execute(
        "SELECT COALESCE(SUM(unused), 0) FROM dbstat WHERE aggregate = TRUE"
    ).fetchone()[0]
    return bool(free * page_size + unused > SPARSE_SHARE * pages * page_size)


def _release_free_pages(conn: sqlite3.Connection) -> None:
    """Give the file's free pages back to the file system (incremental auto-vacuum).

    Through ``execute`` the pragma frees one page per step; a script runs it to the end.
    """
    conn.executescript("PRAGMA incremental_vacuum;")


def _name(table: str) -> str:
    # Names are spliced into SQL, so accept only the opaque identifiers the
    # core derives; anything else is a programming error, not user input.
    if not _TABLE_NAME.match(table):
        raise ParameterError(f"invalid backend table name {table!r}")
    return table
