"""The three clients ``veil kv bench`` compares, over the same backend.

* :class:`PackClient` -- Veil: MiniCrypt packs (a :class:`veil.kv.Store`).
* :class:`RowClient` with an envelope -- the paper's encrypted baseline (§8):
  every row compressed and encrypted on its own (same codec and AES-GCM
  envelope as Veil's packs), one server row per key.
* :class:`RowClient` without one -- vanilla: plaintext rows, no encryption.

Row clients spread keys over the backend's hash partitions exactly like the
packs (HMAC of the key mod N), so a range query costs both kinds of client one
scan per partition; only the packing differs.
"""

from __future__ import annotations

import heapq
import os
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import cast

from veil.kv import Store
from veil.kv.backends.base import KVBackend
from veil.kv.envelope import Envelope
from veil.kv.keys import decode_key, encode_key
from veil.kv.layout import Layout

ROW_KIND = b"row"
LOAD_THREADS = 32
EMPTY_TAG = b""


class RowClient:
    """One server row per key; sealed by ``envelope`` or stored in plaintext."""

    def __init__(
        self,
        name: str,
        backend: KVBackend,
        table: str,
        partitions: int,
        envelope: Envelope | None,
    ):
        self.name = name
        self.backend = backend
        self.table = table
        self.layout = Layout(partitions, os.urandom(32), None)
        self.envelope = envelope
        self.tables = [table]
        backend.ensure_table(table)

    def _seal(self, encoded: bytes, value: bytes) -> bytes:
        return value if self.envelope is None else self.envelope.seal(ROW_KIND, encoded, value)

    def _open(self, encoded: bytes, stored: bytes) -> bytes:
        return stored if self.envelope is None else self.envelope.open(ROW_KIND, encoded, stored)

    def get(self, key: int) -> bytes | None:
        encoded = encode_key(key)
        row = self.backend.get(self.table, self.layout.partition(encoded), encoded)
        return None if row is None else self._open(encoded, row.value)

    def put(self, key: int, value: bytes) -> None:
        encoded = encode_key(key)
        part = self.layout.partition(encoded)
        self.backend.upsert(self.table, part, encoded, self._seal(encoded, value), EMPTY_TAG)

    def put_many(self, items: Iterable[tuple[int, bytes]]) -> None:
        # Blind writes of independent rows: issue them from a few threads, as
        # a loader would, so a networked server is not idle between round trips.
        with ThreadPoolExecutor(LOAD_THREADS) as pool:
            for _ in pool.map(lambda item: self.put(*item), items):
                pass
        # As Veil's store does after a bulk load (Store._auto_compact): without
        # it SQLite's WAL still held most of the rows (~17 MB for 20,000 APT
        # stanzas), and a get that reads its row from the WAL costs a system
        # call per page: per-row gets measured 10 or 14 us from one process to
        # the next depending on how much a checkpoint had moved.
        settle = getattr(self.backend, "compact_if_sparse", None)
        if settle is not None:
            settle()

    def range(self, low: int, high: int) -> Iterator[tuple[int, bytes]]:
        lo, hi = encode_key(low), encode_key(high)
        streams = [
            self.backend.scan(self.table, part, lo, hi) for part in range(self.layout.partitions)
        ]
        for row in heapq.merge(*streams, key=lambda r: r.key):
            key = decode_key(row.key)
            assert isinstance(key, int)
            yield key, self._open(row.key, row.value)

    def stored_bytes(self) -> int:
        return self.backend.stored_bytes(self.table)

    def close(self) -> None:
        self.backend.close()


class PackClient:
    """Veil's MiniCrypt store, with the same small interface as :class:`RowClient`."""

    def __init__(self, name: str, store: Store):
        self.name = name
        self.store = store
        extra = getattr(store, "epochs_table", None)
        self.tables = [store.packs.table, *([extra] if extra else [])]

    def get(self, key: int) -> bytes | None:
        return self.store.get(key)

    def put(self, key: int, value: bytes) -> None:
        self.store.put(key, value)

    def put_many(self, items: Iterable[tuple[int, bytes]]) -> None:
        self.store.put_many(items)

    def range(self, low: int, high: int) -> Iterator[tuple[int, bytes]]:
        # The store's own iterator, as an application gets it (pairs from C-level
        # zips), not a generator resumed per pair; an int-keyed table's keys are ints.
        return cast(Iterator[tuple[int, bytes]], self.store.range(low, high))

    def stored_bytes(self) -> int:
        """Packs (and epochs) plus the table's dictionaries, which live in the catalogue."""
        tables = sum(self.store.backend.stored_bytes(t) for t in self.tables)
        return tables + self.store.dictionary_bytes()

    def close(self) -> None:
        self.store.close()
