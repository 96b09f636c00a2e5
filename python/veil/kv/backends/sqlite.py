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
"""

from __future__ import annotations

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
        self._conn: sqlite3.Connection | None = sqlite3.connect(
            self.path,
            timeout=BUSY_TIMEOUT_MS / 1000,
            isolation_level=None,
            check_same_thread=False,
        )
        self._conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        self._conn.execute("PRAGMA journal_mode = WAL")
        self._conn.execute("PRAGMA synchronous = NORMAL")

    # -- tables ---------------------------------------------------------
    def ensure_table(self, table: str) -> None:
        self._execute(
            f"CREATE TABLE IF NOT EXISTS {_name(table)} (part INTEGER NOT NULL, "
            "key BLOB NOT NULL, value BLOB NOT NULL, tag BLOB NOT NULL, "
            "PRIMARY KEY (part, key)) WITHOUT ROWID"
        )

    def drop_table(self, table: str) -> None:
        self._execute(f"DROP TABLE IF EXISTS {_name(table)}")

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
        changed = self._execute(
            f"UPDATE {_name(table)} SET value = ?, tag = ? WHERE part = ? AND key = ? AND tag = ?",
            (value, tag, partition, key, expected_tag),
        )
        return changed == 1

    def upsert(self, table: str, partition: int, key: bytes, value: bytes, tag: bytes) -> None:
        self._execute(
            f"INSERT OR REPLACE INTO {_name(table)} (part, key, value, tag) VALUES (?, ?, ?, ?)",
            (partition, key, value, tag),
        )

    def delete(self, table: str, partition: int, key: bytes) -> None:
        self._execute(f"DELETE FROM {_name(table)} WHERE part = ? AND key = ?", (partition, key))

    def delete_partition(self, table: str, partition: int) -> None:
        self._execute(f"DELETE FROM {_name(table)} WHERE part = ?", (partition,))

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


def _name(table: str) -> str:
    # Names are spliced into SQL, so accept only the opaque identifiers the
    # core derives; anything else is a programming error, not user input.
    if not _TABLE_NAME.match(table):
        raise ParameterError(f"invalid backend table name {table!r}")
    return table
