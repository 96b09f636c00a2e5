"""GENERIC-mode protocols over a table of packs (paper §4–§5).

Invariants every operation keeps (they are what §5.4's argument rests on):

* packs are never deleted, and a packID never changes its meaning;
* the pack in charge of a key is the *floor pack*: the one with the largest
  packID <= the key's position (there is always one: the root pack, packID
  ``0x00``, is created on first use with insert-if-not-exists);
* a pack may hold stale copies of keys at or above the next packID (left by a
  client that died mid-split); they are invisible, because a get reads only
  the floor pack and a range query keeps only keys below the next packID;
* a pack holding more than ``max_keys`` keys is never modified except by a
  split, and every client splits a given pack content the same way.

put and delete (Figure 5): read the floor pack, split it first if it is too
big, change it, write it back with update-if on the tag read; retry on
conflict. split (Figure 6): cut the pack deterministically, insert the right
piece(s) with insert-if-not-exists, then update-if the original packID with
the left piece. Figure 6 cuts in two halves (left rounded up); Veil cuts into
``ceil(n / pack_rows)`` balanced pieces, which is the same two halves for
every pack that a put makes too big (n = max_keys + 1 <= 2 * pack_rows) and
only differs for the oversized packs of a bulk load. Pieces are inserted
right to left, so a client that dies after inserting some of them leaves a
store where every key is in its floor pack: keys from the lowest inserted
piece up are in the new pieces, the rest still in the original pack, whose
next writer replays the same split (insert-if-not-exists keeps pieces that
others may have updated since).
"""

from __future__ import annotations

import bisect
import random
import threading
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from veil.kv.backends.base import KVBackend, Row
from veil.kv.cache import Entry, PackCache
from veil.kv.envelope import ENVELOPE_BLOCKED, Envelope, stored_tag
from veil.kv.hooks import SPLIT_AFTER_FIRST_PIECE, SPLIT_BEFORE_LEFT, crash_point
from veil.kv.keys import ROOT_PACK_ID, decode_keys
from veil.kv.layout import Layout
from veil.kv.pack import Pack, serialize_entries

BLOCKED_PREFIX = bytes([ENVELOPE_BLOCKED])

PACK_KIND = b"pack"
Batch = tuple[list[bytes], list[bytes]]  # encoded keys and their values, ascending
# The same with the keys decoded to integers (range_batches(..., int_keys=True)).
AnyBatch = tuple[list[Any], list[bytes]]
BULK_PACKS = 64  # a bulk load merges at most this many packs' worth into one pack


class PackTable:
    """One table of packs: get, put, delete, split, range and bulk load."""

    def __init__(
        self,
        backend: KVBackend,
        table: str,
        envelope: Envelope,
        layout: Layout,
        pack_rows: int,
        max_keys: int,
        cache: PackCache | None = None,
    ):
        self.cache = cache or PackCache(0)
        self.backend = backend
        self.table = table
        self.envelope = envelope
        self.layout = layout
        self.pack_rows = pack_rows
        self.max_keys = max_keys
        self.block_rows = pack_rows  # rows per block of a blocked pack (envelope version 3)
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    def close(self) -> None:
        """Stop the threads that scan partitions concurrently (idempotent)."""
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)

    def _scan_pool(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(
                    self.layout.partitions, thread_name_prefix="veil-kv-range"
                )
            return self._pool

    # -- pack I/O -------------------------------------------------------
    def open_entries(self, partition: int, row: Row) -> Entry:
        """(keys, values, key -> value) of a stored pack, through the cache."""
        cache_key = PackCache.key(partition, row.key, row.value)
        entry = self.cache.get(cache_key)
        if entry is None:
            location = _location(partition, row.key)
            keys, values = self.envelope.open_records(PACK_KIND, location, row.value)
            entry = (keys, values, dict(zip(keys, values, strict=True)))
            self.cache.put(cache_key, entry)
        return entry

    def open_sorted(
        self, partition: int, row: Row, between: tuple[bytes, bytes] | None = None
    ) -> tuple[list[bytes], list[bytes]]:
        """(keys, values) of a stored pack; without a cache, no key -> value index is built.

        ``between`` (low, high): the caller wants only keys in that range, so
        a blocked pack read without a cache may leave out blocks outside it.
        """
        if self.cache.capacity > 0:
            keys, values, _ = self.open_entries(partition, row)
            return keys, values
        location = _location(partition, row.key)
        return self.envelope.open_records(PACK_KIND, location, row.value, between)

    def open_pack(self, partition: int, row: Row) -> Pack:
        """A private, modifiable copy of a stored pack's plaintext."""
        return Pack(dict(self.open_entries(partition, row)[2]))

    def seal_pack(
        self,
        partition: int,
        pack_id: bytes,
        entries: Iterable[tuple[bytes, bytes]],
        *,
        dense: bool = False,
        previous: bytes | None = None,
    ) -> tuple[bytes, bytes]:
        """The stored form and tag of a pack; ``dense``: a bulk write, worth compressing hard.

        ``previous``: the stored pack this one replaces (same packID), whose
        unchanged blocks a blocked pack reuses.
        """
        location = _location(partition, pack_id)
        if self.envelope.blocked:
            pairs = list(entries)
            positions = [self.layout.position(k) for k, _ in pairs]
            stored = self.envelope.seal_blocked(
                PACK_KIND,
                location,
                pairs,
                positions,
                self.block_rows,
                dense=dense,
                previous=previous,
            )
        else:
            plaintext = serialize_entries(entries)
            stored = self.envelope.seal(PACK_KIND, location, plaintext, use_dictionary=True)
        return stored, stored_tag(stored)

    def _floor(self, partition: int, position: bytes) -> tuple[Row, Pack]:
        """The floor pack of ``position``, creating the root pack if needed."""
        while True:
            row = self.backend.floor(self.table, partition, position)
            if row is not None:
                return row, self.open_pack(partition, row)
            stored, tag = self.seal_pack(partition, ROOT_PACK_ID, [])
            self.backend.insert_if_not_exists(self.table, partition, ROOT_PACK_ID, stored, tag)

    # -- reads ----------------------------------------------------------
    def get(self, encoded: bytes) -> bytes | None:
        partition, position = self.layout.locate(encoded)
        row = self.backend.floor(self.table, partition, position)
        if row is None:
            return None
        return self.lookup(partition, row, encoded, position)

    def lookup(
        self, partition: int, row: Row, encoded: bytes, position: bytes | None = None
    ) -> bytes | None:
        """One key's value in a stored pack (without a cache: one native call).

        A blocked pack skips the cache: its one-block lookup costs less than
        the SHA-256 of the stored pack that keys the cache (dpkg-log: 13.6 µs
        a read against 15.8 with every pack cached), and a miss would open
        every block instead of one.
        """
        if self.cache.capacity > 0 and row.value[:1] != BLOCKED_PREFIX:
            return self.open_entries(partition, row)[2].get(encoded)
        location = _location(partition, row.key)
        return self.envelope.lookup(PACK_KIND, location, row.value, encoded, position)

    def range(self, low: bytes, high: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Entries with ``low <= encoded key <= high``, ascending (Figure 4)."""
        for keys, values in self.range_batches(low, high):
            yield from zip(keys, values, strict=True)

    def range_batches(
        self, low: bytes, high: bytes, *, int_keys: bool = False
    ) -> Iterator[AnyBatch]:
        """The same entries as (keys, values) lists, about one pack per batch.

        With several hash partitions, each partition's floor lookup, scan and
        pack opening run on this table's scan threads at once (round trips
        overlap, and inflation releases the GIL); the ascending per-partition
        results are then merged. A key lives in exactly one partition, so the
        merge never meets a key twice; with key buckets, only the partitions
        of the buckets the range meets are asked (one, for most short ranges).
        ``int_keys`` (an integer-keyed table): the keys come back as integers.
        """
        partitions = self.layout.partitions_between(low, high)
        if len(partitions) == 1:
            yield from self._partition_range(partitions[0], low, high, int_keys)
            return
        pool = self._scan_pool()
        futures = [
            pool.submit(_collect, self._partition_range(p, low, high, int_keys)) for p in partitions
        ]
        yield from _merged([future.result() for future in futures], self.pack_rows)

    def _partition_range(
        self, partition: int, low: bytes, high: bytes, int_keys: bool
    ) -> Iterator[AnyBatch]:
        rows: Iterable[Row] = self.backend.scan(self.table, partition, low, high)
        first = self.backend.floor(self.table, partition, low)
        if first is not None and first.key < low:
            rows = _chain(first, rows)
        previous: Row | None = None
        for row in rows:
            if previous is not None:
                yield self._pack_slice(partition, previous, (low, high, row.key), int_keys)
            previous = row
        if previous is not None:
            yield self._pack_slice(partition, previous, (low, high, None), int_keys)

    def _pack_slice(
        self, partition: int, row: Row, bounds: tuple[bytes, bytes, bytes | None], int_keys: bool
    ) -> AnyBatch:
        # Packs of an ordered layout hold their keys sorted, so the keys in
        # [low, high] below the next packID (``bound``) are one slice; keys at
        # or above the next packID are stale copies and are cut off. A blocked
        # pack read without a cache is cut natively, which makes Python
        # objects of the slice's entries only.
        low, high, bound = bounds
        stop = bound if bound is not None and bound <= high else None
        if self.cache.capacity == 0 and row.value[:1] == BLOCKED_PREFIX:
            location = _location(partition, row.key)
            return self.envelope.open_range(
                PACK_KIND, location, row.value, (low, high, stop), int_keys=int_keys
            )
        keys, values = self.open_sorted(partition, row, (low, high))
        start = bisect.bisect_left(keys, low)
        end = (
            bisect.bisect_left(keys, stop) if stop is not None else bisect.bisect_right(keys, high)
        )
        keys, values = keys[start:end], values[start:end]
        return (decode_keys(keys) if int_keys else keys), values

    # -- writes (Figure 5) ------------------------------------------------
    def write(self, encoded: bytes, value: bytes | None) -> bool:
        """Set (``value``) or delete (None) one key; True if the pack changed."""
        partition, position = self.layout.locate(encoded)
        attempt = 0
        while True:
            row, pack = self._floor(partition, position)
            if len(pack) > self.max_keys:
                self.split(partition, row, pack)
                continue
            if value is None:
                if pack.items.pop(encoded, None) is None:
                    return False
            else:
                pack.items[encoded] = value
            if self._update(partition, row, pack):
                return True
            attempt = _backoff(attempt)

    def _update(self, partition: int, row: Row, pack: Pack) -> bool:
        entries = pack.ordered(self.layout.position)
        stored, tag = self.seal_pack(partition, row.key, entries, previous=row.value)
        return self.backend.update_if(self.table, partition, row.key, stored, tag, row.tag)

    # -- split (Figure 6) -------------------------------------------------
    def split(self, partition: int, row: Row, pack: Pack, *, dense: bool = False) -> None:
        """Cut an oversized pack deterministically; ignores the outcome.

        Whether this client's writes won or another client's did, the caller
        simply re-reads its floor pack afterwards.
        """
        entries = pack.ordered(self.layout.position)
        pieces = split_points(len(entries), self.pack_rows)
        for number, (start, stop) in enumerate(reversed(pieces[1:])):
            piece = entries[start:stop]
            piece_id = self.layout.position(piece[0][0])
            stored, tag = self.seal_pack(partition, piece_id, piece, dense=dense)
            self.backend.insert_if_not_exists(self.table, partition, piece_id, stored, tag)
            if number == 0:
                crash_point(SPLIT_AFTER_FIRST_PIECE)
        crash_point(SPLIT_BEFORE_LEFT)
        start, stop = pieces[0]
        # The left piece starts with the pack's own blocks: a split after puts
        # keeps their compressed form. A bulk load's oversized pack was written
        # fast to be cut at once, so its split (dense) compresses them again.
        previous = None if dense else row.value
        left = entries[start:stop]
        stored, tag = self.seal_pack(partition, row.key, left, dense=dense, previous=previous)
        self.backend.update_if(self.table, partition, row.key, stored, tag, row.tag)

    # -- bulk load ----------------------------------------------------------
    def write_many(self, items: dict[bytes, bytes]) -> None:
        """Set many keys at once: one read-modify-write per floor pack touched."""
        by_partition: dict[int, list[tuple[bytes, bytes, bytes]]] = {}
        for encoded, value in items.items():
            partition, position = self.layout.locate(encoded)
            by_partition.setdefault(partition, []).append((position, encoded, value))
        for partition, entries in by_partition.items():
            entries.sort()
            self._write_sorted(partition, entries)

    def _write_sorted(self, partition: int, entries: list[tuple[bytes, bytes, bytes]]) -> None:
        done, attempt = 0, 0
        limit = BULK_PACKS * self.pack_rows
        while done < len(entries):
            row, pack = self._floor(partition, entries[done][0])
            if len(pack) > self.max_keys:
                self.split(partition, row, pack)
                continue
            bound = self._next_pack_id(partition, row.key)
            stop = done
            while stop < len(entries) and stop - done < limit:
                if bound is not None and entries[stop][0] >= bound:
                    break
                pack.items[entries[stop][1]] = entries[stop][2]
                stop += 1
            ordered = pack.ordered(self.layout.position)
            oversized = len(pack) > self.max_keys  # its split writes the packs that stay
            stored, tag = self.seal_pack(partition, row.key, ordered, dense=not oversized)
            if not self.backend.update_if(self.table, partition, row.key, stored, tag, row.tag):
                attempt = _backoff(attempt)
                continue
            if oversized:
                self.split(partition, Row(row.key, stored, tag), pack, dense=True)
            done, attempt = stop, 0

    def _next_pack_id(self, partition: int, pack_id: bytes) -> bytes | None:
        rows = list(self.backend.scan(self.table, partition, pack_id, None, limit=2))
        following = [r.key for r in rows if r.key > pack_id]
        return following[0] if following else None

    def insert_new_packs(self, partition: int, entries: list[tuple[bytes, bytes]]) -> int:
        """Insert ``entries`` (sorted) as fresh packs of pack_rows keys (APPEND merge).

        Each pack goes in with insert-if-not-exists, so a second client
        merging the same epoch never overwrites a pack (nor a later GENERIC
        update of it). Returns how many packs this call inserted.
        """
        inserted = 0
        for start in range(0, len(entries), self.pack_rows):
            piece = entries[start : start + self.pack_rows]
            piece_id = self.layout.position(piece[0][0])
            stored, tag = self.seal_pack(partition, piece_id, piece, dense=True)
            inserted += self.backend.insert_if_not_exists(
                self.table, partition, piece_id, stored, tag
            )
        return inserted


def split_points(count: int, pack_rows: int) -> list[tuple[int, int]]:
    """Balanced [start, stop) cuts of ``count`` entries into ceil(count/pack_rows) >= 2 pieces.

    Cut i sits at ceil(i * count / pieces), so two pieces are Figure 6's halves
    with the left half rounded up.
    """
    pieces = max(2, -(-count // pack_rows))
    cuts = [-(-i * count // pieces) for i in range(pieces + 1)]
    return [(cuts[i], cuts[i + 1]) for i in range(pieces)]


def batched(pairs: Iterable[tuple[bytes, bytes]], size: int) -> Iterator[Batch]:
    """Regroup a stream of pairs into (keys, values) lists of ``size``."""
    keys: list[bytes] = []
    values: list[bytes] = []
    for key, value in pairs:
        keys.append(key)
        values.append(value)
        if len(keys) >= size:
            yield keys, values
            keys, values = [], []
    if keys:
        yield keys, values


def _collect(batches: Iterable[AnyBatch]) -> AnyBatch:
    """All of a partition's batches as one (keys, values) pair of lists, ascending."""
    keys: list[Any] = []
    values: list[bytes] = []
    for batch_keys, batch_values in batches:
        keys += batch_keys
        values += batch_values
    return keys, values


def _merged(parts: list[AnyBatch], size: int) -> Iterator[AnyBatch]:
    """Merge ascending (keys, values) runs of distinct keys into batches of ``size``."""
    keys = [k for part_keys, _ in parts for k in part_keys]
    values = [v for _, part_values in parts for v in part_values]
    # Timsort finds the ascending runs, so this is a k-way merge in C.
    order = sorted(range(len(keys)), key=keys.__getitem__)
    for start in range(0, len(order), size):
        chunk = order[start : start + size]
        yield [keys[i] for i in chunk], [values[i] for i in chunk]


def _location(partition: int, pack_id: bytes) -> bytes:
    return partition.to_bytes(8, "big") + pack_id


def _chain(first: Row, rest: Iterable[Row]) -> Iterator[Row]:
    yield first
    yield from rest


def _backoff(attempt: int) -> int:
    """Sleep a little after a lost update-if race so contenders spread out."""
    if attempt:
        time.sleep(random.uniform(0, min(0.05, 0.0005 * 2**attempt)))
    return attempt + 1
