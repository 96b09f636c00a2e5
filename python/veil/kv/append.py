"""APPEND mode (paper §6): puts are single inserts, merged into packs later.

A put writes one sealed row under ``(c_epoch, key)`` in the epochs table (the
epoch is the partition, as in Cassandra). Deletes write a tombstone row the
same way. Clients merge closed epochs into packs in epoch 0 (the GENERIC pack
table) in the background, deterministically (§6.1.4):

1. read every row of epochs e-1, e and e+1;
2. keep those with ``kmin_e <= key < kmin_{e+1}`` (kmin = smallest key of an
   epoch; an empty e+1 means no upper bound), the newest epoch's version of
   each key, minus tombstones;
3. cut them, in key order per hash partition, into packs of ``pack_rows`` and
   insert each with insert-if-not-exists;
4. move rows of e-1 that neither e-1's range nor e's holds (possible when
   epochs do not start in increasing key order) into the current epoch,
   where a later merge takes them (Veil's addition; see ``_carry_orphans``);
5. set the epoch's status to MERGED (update-if).

The epoch-deletion rule: e is deleted once it is MERGED and e-1 and e+1 are
MERGED or DELETED; its status becomes DELETED *before* its rows go.

A get reads the floor pack; on a miss it reads the stats, looks the key up in
every epoch not yet merged (newest first), and on a second miss re-reads the
floor pack (a merge may have moved the key meanwhile, §6.1.3).

Contract (§6): keys arrive in roughly increasing order: no key smaller than k
is written more than T_delta after k, and a key is updated or deleted only
within T_delta of its first insert; ``epoch_seconds`` must exceed T_delta plus
client clock drift. Veil adds one safe path outside the paper: a put or delete
of a key at or below the *merged frontier* (the largest key of the longest
run of merged epochs, which no later merge can touch) goes through the GENERIC
protocol on its pack, so late overwrites and deletes of old keys are correct.
Late writes above the frontier but older than T_delta break the contract.

Deviation: the paper's get picks at most two candidate epochs from per-epoch
minimum keys; Veil probes every unmerged epoch (a handful: the current one,
the previous one and those waiting to be merged), which needs no minimum-key
bookkeeping on the write path and is never wrong.
"""

from __future__ import annotations

import contextlib
import heapq
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping

from veil.crypto.keys import MasterKey
from veil.kv import catalog
from veil.kv.backends.base import KVBackend, Row
from veil.kv.em import (
    DELETED,
    FIRST_EPOCH,
    MERGE_LAG,
    MERGED,
    NOT_MERGED,
    EpochManager,
    EpochStat,
)
from veil.kv.envelope import Envelope
from veil.kv.hooks import (
    DELETE_AFTER_STATUS,
    MERGE_AFTER_FIRST_PACK,
    MERGE_BEFORE_STATUS,
    crash_point,
)
from veil.kv.keys import Key
from veil.kv.packs import Batch, batched
from veil.kv.store import Store, checked_value

ROW_KIND = b"row"
LIVE, TOMBSTONE = b"\x00", b"\x01"
log = logging.getLogger(__name__)


class AppendStore(Store):
    """An APPEND-mode MiniCrypt table (see the module docstring)."""

    def __init__(
        self,
        backend: KVBackend,
        master: MasterKey,
        table: str,
        config: catalog.TableConfig,
        envelope: Envelope,
        *,
        background: bool,
        pack_cache: int,
        auto_compact: bool = True,
        clock: Callable[[], float] | None,
        client_id: str | None,
    ):
        super().__init__(
            backend,
            master,
            table,
            config,
            envelope,
            pack_cache=pack_cache,
            auto_compact=auto_compact,
        )
        self.envelope = envelope
        self.clock = clock or time.time
        self.epochs_table = self._base + "e"
        backend.ensure_table(self.epochs_table)
        self.em = EpochManager(
            backend,
            self._base + "m",
            self._base + "s",
            client_id or uuid.uuid4().hex,
            config.epoch_seconds,
            self.clock,
        )
        self._c_epoch, self._c_epoch_read = FIRST_EPOCH, float("-inf")
        self._frontier: bytes | None = None  # keys <= this go the GENERIC way
        self._oldest_live = FIRST_EPOCH  # every epoch below it is DELETED and purged
        self._carried = 0  # rows this client's merges moved into a later epoch
        self.em.heartbeat()
        self.refresh()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if background:
            self._thread = threading.Thread(target=self._run, name="veil-kv-merge", daemon=True)
            self._thread.start()

    # -- writes ---------------------------------------------------------------
    def put(self, key: Key, value: bytes) -> None:
        self._append(self._encode_for_write(key), LIVE + checked_value(value))

    def delete(self, key: Key) -> None:
        encoded = self._encode(key, writing=False)
        if encoded is not None:
            self._append(encoded, TOMBSTONE)

    def put_many(self, items: Iterable[tuple[Key, bytes]] | Mapping[Key, bytes]) -> None:
        """Append every pair (one insert each: APPEND mode has no bulk path).

        A table with no pack size yet takes it from this batch (merges need it).
        """
        pairs = list(items.items() if isinstance(items, Mapping) else items)
        encoded = [(self._encode_for_write(key), checked_value(value)) for key, value in pairs]
        self._prepare_batch(sorted(dict(encoded).items()))
        for key, value in encoded:
            self._append(key, LIVE + value)

    def _append(self, encoded: bytes, record: bytes) -> None:
        if self._frontier is not None and encoded <= self._frontier:
            self._settled().write(encoded, None if record == TOMBSTONE else record[1:])
            return
        epoch = self.current_epoch()
        location = epoch.to_bytes(8, "big") + encoded
        stored = self.envelope.seal(ROW_KIND, location, record)
        # Epoch rows are never updated-if; their GCM tag serves as row tag.
        self.backend.upsert(self.epochs_table, epoch, encoded, stored, stored[-16:])

    # -- reads ----------------------------------------------------------------
    def get(self, key: Key) -> bytes | None:
        encoded = self._encode(key, writing=False)
        if encoded is None:
            return None
        # Recent keys are in epochs: a miss here re-reads the catalogue (when
        # the pack size is unchosen) only after the epochs missed too.
        value = self.packs.get(encoded)
        if value is not None:
            return value
        epochs, frontier = self._epoch_view()
        if frontier is None or encoded > frontier:
            for epoch in reversed(epochs):
                row = self.backend.get(self.epochs_table, epoch, encoded)
                if row is not None:
                    return self._open_row(epoch, row)
        return self._get_packed(encoded)  # a merge may have moved it meanwhile

    def _pairs(self, low: bytes, high: bytes) -> Iterator[tuple[Key, bytes]]:
        # Epochs and packs merge on encoded keys, decoded afterwards.
        return self._decoded(self._range_batches(low, high))

    def _range_batches(self, low: bytes, high: bytes) -> Iterator[Batch]:
        return batched(self._range(low, high), self.packs.pack_rows)

    def _range(self, low: bytes, high: bytes) -> Iterator[tuple[bytes, bytes]]:
        # Epochs first, packs second: a merge that runs in between has put
        # its keys into packs before its epoch can be deleted.
        epochs, frontier = self._epoch_view()
        recent: dict[bytes, bytes | None] = {}
        for epoch in epochs:
            for row in self.backend.scan(self.epochs_table, epoch, low, high):
                if frontier is None or row.key > frontier:
                    recent[row.key] = self._open_row(epoch, row)
        packed = self.packs.range(low, high)
        tagged = heapq.merge(
            ((k, 0, v) for k, v in packed),
            ((k, 1, v) for k, v in sorted(recent.items())),
        )
        previous = None
        for key, source, value in tagged:
            if key != previous and value is not None:
                yield key, value
            if source == 0 or value is not None:
                previous = key

    def _open_row(self, epoch: int, row: Row) -> bytes | None:
        location = epoch.to_bytes(8, "big") + row.key
        record = self.envelope.open(ROW_KIND, location, row.value)
        return None if record[:1] == TOMBSTONE else record[1:]

    def _epoch_view(self) -> tuple[list[int], bytes | None]:
        """Epochs whose rows may hold keys not yet in packs (oldest first), and
        the merged frontier: every key at or below it is in packs, which are
        then the only truth (a GENERIC delete may have removed it there while
        a merged epoch still holds the row).

        A MERGED epoch still counts: its keys at or above the next epoch's
        minimum wait for that epoch's merge; the deletion rule removes an
        epoch only once both neighbours are merged.
        """
        stats = self.em.stats(self._oldest_live)
        live = [s.epoch for s in stats if s.status != DELETED]
        first_open = stats[-1].epoch + 1 if stats else self._oldest_live
        global_epoch = self.em.global_epoch()[0]
        return live + list(range(first_open, global_epoch + 1)), merged_frontier(stats)

    # -- epochs -----------------------------------------------------------------
    def current_epoch(self) -> int:
        """c_epoch, re-read from g_epoch at least four times per epoch (§6.1.2)."""
        if self.clock() - self._c_epoch_read > self.em.epoch_seconds / 4:
            self.refresh()
        return self._c_epoch

    def refresh(self) -> None:
        """Re-read g_epoch and the merged frontier from the store."""
        self._c_epoch = self.em.global_epoch()[0]
        self._c_epoch_read = self.clock()
        stats = self.em.stats(self._oldest_live)
        oldest = self._oldest_live
        for stat in stats:
            if stat.status != DELETED or stat.epoch != oldest or not self._purged(stat.epoch):
                break
            oldest += 1
        self._oldest_live = oldest
        frontier = merged_frontier(stats)
        if frontier is not None and (self._frontier is None or frontier > self._frontier):
            self._frontier = frontier

    def _purged(self, epoch: int) -> bool:
        return not list(self.backend.scan(self.epochs_table, epoch, None, None, limit=1))

    def advance_epoch(self) -> int:
        """Start the next epoch now (EM master's job; tests and tools call it)."""
        self.em.advance(force=True)
        self.refresh()
        return self._c_epoch

    # -- merge (§6.1.4) -----------------------------------------------------------
    def merge(self, epoch: int | None = None) -> list[int]:
        """Merge ``epoch``, or every mergeable epoch assigned to this client.

        Any client may merge any closed epoch (the result is deterministic);
        assignment only avoids duplicated work. Returns the epochs merged.
        """
        global_epoch = self.em.global_epoch()[0]
        if epoch is not None:
            candidates = [epoch]
        else:
            candidates = [
                s.epoch
                for s in self.em.stats(self._oldest_live)
                if s.status == NOT_MERGED and s.client == self.em.client_id
            ]
        done = [e for e in candidates if e <= global_epoch - MERGE_LAG and self._merge_epoch(e)]
        if done:
            self.refresh()
        return done

    def _merge_epoch(self, epoch: int) -> bool:
        stat = self.em.stat(epoch)
        if stat is None or stat.status != NOT_MERGED:
            return False
        neighbours = [e for e in (epoch - 1, epoch, epoch + 1) if e >= FIRST_EPOCH]
        rows = {e: list(self.backend.scan(self.epochs_table, e)) for e in neighbours}
        # Re-check after reading: an epoch is marked DELETED before its rows go,
        # so if none of the three is DELETED now, the rows read were complete.
        latest = {e: self.em.stat(e) for e in neighbours}
        if any(s is not None and s.status == DELETED for s in latest.values()):
            return False
        entries, max_key = self._merged_entries(epoch, rows)
        self._insert_packs(entries)
        self._carry_orphans(epoch, rows)
        crash_point(MERGE_BEFORE_STATUS)
        current = self.em.stat(epoch)
        if current is None or current.status != NOT_MERGED:
            return False
        return self.em.update_stat(current, status=MERGED, max_key=max_key)

    def _merged_entries(
        self, epoch: int, rows: dict[int, list[Row]]
    ) -> tuple[list[tuple[bytes, bytes]], str | None]:
        own = rows.get(epoch, [])
        if not own:
            return [], None
        low = own[0].key  # scans are ordered: the first row holds kmin_e
        following = rows.get(epoch + 1, [])
        high = following[0].key if following else None
        newest: dict[bytes, bytes | None] = {}
        for source in sorted(rows):
            for row in rows[source]:
                if row.key >= low and (high is None or row.key < high):
                    newest[row.key] = self._open_row(source, row)
        entries = sorted((k, v) for k, v in newest.items() if v is not None)
        # Empty when the next epoch starts at or below this one's smallest key
        # (a late writer); those rows fall in the next epoch's merge range.
        return entries, max(newest).hex() if newest else None

    def _carry_orphans(self, epoch: int, rows: dict[int, list[Row]]) -> None:
        """Move rows of epoch e-1 that no merge range holds into the current epoch.

        The merge of e is the last to read e-1. A row of e-1 is merged by e-1
        (keys in [kmin_e-1, kmin_e)) or by e ([kmin_e, kmin_e+1)); when epochs
        do not start in increasing key order (two writers of different key
        ranges, a late writer) a key of e-1 can lie outside both, above the
        second following epoch's start, and would be lost with e-1. Unless a
        later epoch holds a newer version, it is written again as a fresh row
        of the current epoch (insert-if-not-exists: a concurrent put wins, and
        a merge retried after a crash adds nothing), where a later merge takes
        it; at or below the merged frontier it goes into its pack instead.
        """
        previous = rows.get(epoch - 1, [])
        if not previous:
            return
        bounds = [
            r[0].key if r else None
            for r in (previous, rows.get(epoch, []), rows.get(epoch + 1, []))
        ]
        newer = {row.key for e in (epoch, epoch + 1) for row in rows.get(e, [])}
        orphans = [
            row for row in previous if row.key not in newer and not _covered(row.key, bounds)
        ]
        for row in orphans:
            self._carry(epoch - 1, row, epoch + 2)

    def _carry(self, source: int, row: Row, first_unread: int) -> None:
        record = self.envelope.open(ROW_KIND, source.to_bytes(8, "big") + row.key, row.value)
        if self._frontier is not None and row.key <= self._frontier:
            self._settled().write(row.key, None if record[:1] == TOMBSTONE else record[1:])
            return
        target = self.em.global_epoch()[0]
        for later in range(first_unread, target + 1):
            if self.backend.get(self.epochs_table, later, row.key) is not None:
                return  # a newer version (or an earlier carry) is there
        location = target.to_bytes(8, "big") + row.key
        stored = self.envelope.seal(ROW_KIND, location, record)
        self.backend.insert_if_not_exists(self.epochs_table, target, row.key, stored, stored[-16:])
        self._carried += 1

    def _insert_packs(self, entries: list[tuple[bytes, bytes]]) -> None:
        self._prepare_batch(entries)  # before a first merge cuts packs
        by_partition: dict[int, list[tuple[bytes, bytes]]] = {}
        for key, value in entries:
            by_partition.setdefault(self.layout.partition(key), []).append((key, value))
        first = True
        for partition, part_entries in sorted(by_partition.items()):
            self.packs.insert_new_packs(partition, part_entries)
            if first:
                crash_point(MERGE_AFTER_FIRST_PACK)
                first = False

    # -- epoch deletion --------------------------------------------------------------
    def delete_merged_epochs(self) -> list[int]:
        """Apply the deletion rule to every epoch it allows; returns them."""
        stats = {s.epoch: s for s in self.em.stats(self._oldest_live)}
        deleted = []
        for epoch, stat in sorted(stats.items()):
            if stat.status == DELETED:
                self.backend.delete_partition(self.epochs_table, epoch)  # finish a crashed one
            elif self._deletable(stat, stats) and self.em.update_stat(stat, status=DELETED):
                crash_point(DELETE_AFTER_STATUS)
                self.backend.delete_partition(self.epochs_table, epoch)
                deleted.append(epoch)
        self.refresh()
        if deleted:
            self._auto_compact()
        return deleted

    def _deletable(self, stat: EpochStat, stats: dict[int, EpochStat]) -> bool:
        """§6.1.4: MERGED, and both neighbours MERGED or DELETED."""
        settled = (MERGED, DELETED)
        below, above = stats.get(stat.epoch - 1), stats.get(stat.epoch + 1)
        below_ok = stat.epoch - 1 < self._oldest_live or (
            below is not None and below.status in settled
        )
        above_ok = above is not None and above.status in settled
        return stat.status == MERGED and below_ok and above_ok

    # -- background work -----------------------------------------------------------
    def maintain(self) -> None:
        """One round of background work: EM tick, merges, deletions."""
        self.em.tick()
        self.refresh()
        self.merge()
        self.delete_merged_epochs()

    def settle(self) -> None:
        """Close the current epoch and merge and delete everything (tests, tools).

        Rows a merge carried into the current epoch are merged by another round.
        """
        carried = True
        while carried:
            for _ in range(MERGE_LAG + 1):
                self.advance_epoch()
            before = self._carried
            for stat in self.em.stats(self._oldest_live):
                if stat.status == NOT_MERGED:
                    self._merge_epoch(stat.epoch)
            carried = self._carried > before
        self.refresh()
        while self.delete_merged_epochs():
            pass

    def _run(self) -> None:
        pause = min(1.0, self.em.epoch_seconds / 4)
        while not self._stop.wait(pause):
            try:
                self.maintain()
            except Exception:  # keep merging after a transient store error
                log.exception("veil.kv background maintenance failed; retrying")

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if not self._closed:
            with contextlib.suppress(Exception):  # best effort: the row times out anyway
                self.em.leave()
        super().close()


def _covered(key: bytes, bounds: list[bytes | None]) -> bool:
    """Whether ``key`` (a row of epoch e-1) is in the merge range of e-1 or of e.

    ``bounds`` are kmin of epochs e-1, e and e+1 (None: the epoch is empty).
    Epoch e-1's range is [kmin_e-1, kmin_e); e's is [kmin_e, kmin_e+1), none
    when e is empty; a missing upper bound is no bound.
    """
    low, middle, high = bounds
    assert low is not None
    if low <= key and (middle is None or key < middle):
        return True
    return middle is not None and middle <= key and (high is None or key < high)


def merged_frontier(stats: list[EpochStat]) -> bytes | None:
    """The largest key merged by the leading run of MERGED/DELETED epochs.

    Under the APPEND contract no later merge can add a key at or below it.
    """
    frontier = None
    for stat in stats:
        if stat.status == NOT_MERGED:
            break
        if stat.max_key is not None:
            frontier = bytes.fromhex(stat.max_key)
    return frontier
