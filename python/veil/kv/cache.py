"""A client-side cache of recently opened packs.

Opening a pack (decrypt, inflate, parse) costs far more than fetching it, and
hot packs are read again and again. The cache keys each opened pack by
(partition, packID, SHA-256 of the stored bytes), hashed here rather than
taken from the server's tag column, so a hit means "these exact bytes were
authenticated before": a tampered pack never hits, it fails authentication as
usual. Any write changes the stored bytes, so a stale entry can never be
returned for a newer pack; it just ages out. Plaintext stays in client memory,
which the threat model trusts; ``pack_cache=0`` turns the cache off.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict

Entry = tuple[list[bytes], list[bytes], dict[bytes, bytes]]  # keys, values, index


class PackCache:
    """A thread-safe LRU of parsed packs, at most ``capacity`` of them."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._entries: OrderedDict[tuple[int, bytes, bytes], Entry] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def key(partition: int, pack_id: bytes, stored: bytes) -> tuple[int, bytes, bytes]:
        return partition, pack_id, hashlib.sha256(stored).digest()[:16]

    def get(self, key: tuple[int, bytes, bytes]) -> Entry | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
            return entry

    def put(self, key: tuple[int, bytes, bytes], entry: Entry) -> None:
        if self.capacity <= 0:
            return
        with self._lock:
            self._entries[key] = entry
            self._entries.move_to_end(key)
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)
