"""The epoch-management (EM) service of APPEND mode (paper §6.1.1, §6.2).

Everything the EM knows lives in the store itself, in two backend tables, as
plain JSON (it is bookkeeping, not data: epoch numbers, client IDs, statuses,
and the largest key merged per epoch, which APPEND mode's plaintext packIDs
reveal anyway):

``meta`` (partition 0)
    ``g_epoch``: ``{"epoch": e, "since": t}`` -- the global epoch and when it
    began; ``em_master``: ``{"replica": id, "beat": t}`` -- which EM replica is
    master and its last heartbeat; ``client/<id>``: ``{"beat": t}`` -- client
    liveness.
``stats`` (partition 0, key = epoch as 8 bytes big-endian)
    ``{"status": NOT_MERGED|MERGED|DELETED, "client": id|null, "max_key": hex|null}``.

Every client is also an EM replica. Replicas watch the master's heartbeat; one
that finds it older than ``em_timeout`` makes itself master with an update-if
on ``em_master``, so exactly one of several contenders wins. Every change to
``g_epoch`` and ``stats`` is an update-if or insert-if-not-exists too, so even
two replicas that both believe they are master cannot advance the epoch twice
from the same value or clobber each other's stats (§6.2). Tags of these rows
are fresh random bytes per write.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from veil.kv.backends.base import KVBackend, Row

NOT_MERGED, MERGED, DELETED = "NOT_MERGED", "MERGED", "DELETED"
G_EPOCH = b"g_epoch"
EM_MASTER = b"em_master"
CLIENT_PREFIX = b"client/"
FIRST_EPOCH = 1  # epoch 0 is the packs
MERGE_LAG = 3  # merge e once g_epoch >= e + 3: epoch e + 1 then takes no more writes


@dataclass(frozen=True)
class EpochStat:
    epoch: int
    status: str
    client: str | None
    max_key: str | None
    tag: bytes


def epoch_key(epoch: int) -> bytes:
    return epoch.to_bytes(8, "big")


class EpochManager:
    """One client's view of, and its replica of, the EM service."""

    def __init__(
        self,
        backend: KVBackend,
        meta_table: str,
        stats_table: str,
        client_id: str,
        epoch_seconds: float,
        clock: Callable[[], float],
    ):
        self.backend = backend
        self.meta = meta_table
        self.stats_table = stats_table
        self.client_id = client_id
        self.epoch_seconds = epoch_seconds
        self.clock = clock
        # A client or master silent for three epochs is presumed dead.
        self.client_timeout = 3 * epoch_seconds
        self.em_timeout = 3 * epoch_seconds
        backend.ensure_table(meta_table)
        backend.ensure_table(stats_table)

    # -- g_epoch ------------------------------------------------------------
    def global_epoch(self) -> tuple[int, float, bytes]:
        """(epoch, start time, tag) of ``g_epoch``, creating epoch 1 if new."""
        while True:
            row = self.backend.get(self.meta, 0, G_EPOCH)
            if row is not None:
                doc = _doc(row)
                return int(doc["epoch"]), float(doc["since"]), row.tag
            first = {"epoch": FIRST_EPOCH, "since": self.clock()}
            self.backend.insert_if_not_exists(self.meta, 0, G_EPOCH, _dump(first), _tag())

    def advance(self, *, force: bool = False) -> bool:
        """Start the next epoch if the current one is over (or ``force``)."""
        epoch, since, tag = self.global_epoch()
        now = self.clock()
        if not force and now - since < self.epoch_seconds:
            return False
        nxt = {"epoch": epoch + 1, "since": now}
        advanced = self.backend.update_if(self.meta, 0, G_EPOCH, _dump(nxt), _tag(), tag)
        self.ensure_stats(epoch + 1 if advanced else self.global_epoch()[0])
        return advanced

    def ensure_stats(self, global_epoch: int) -> None:
        """Give every closed epoch (< g_epoch) its stats row (NOT_MERGED)."""
        last = self.backend.floor(self.stats_table, 0, b"\xff" * 8)
        start = int.from_bytes(last.key, "big") + 1 if last else FIRST_EPOCH
        for epoch in range(start, global_epoch):
            doc = {"status": NOT_MERGED, "client": None, "max_key": None}
            self.backend.insert_if_not_exists(
                self.stats_table, 0, epoch_key(epoch), _dump(doc), _tag()
            )

    # -- clients ------------------------------------------------------------
    def heartbeat(self) -> None:
        key = CLIENT_PREFIX + self.client_id.encode()
        self.backend.upsert(self.meta, 0, key, _dump({"beat": self.clock()}), _tag())

    def leave(self) -> None:
        """Deregister on a clean close, so the master reassigns our epochs at once."""
        self.backend.delete(self.meta, 0, CLIENT_PREFIX + self.client_id.encode())

    def live_clients(self, *, forget_dead: bool = False) -> list[str]:
        """Clients heard from within ``client_timeout``; optionally drop long-dead rows."""
        now, live = self.clock(), []
        for row in self.backend.scan(self.meta, 0, CLIENT_PREFIX, CLIENT_PREFIX + b"\xff"):
            silent = now - float(_doc(row)["beat"])
            if silent <= self.client_timeout:
                live.append(row.key[len(CLIENT_PREFIX) :].decode())
            elif forget_dead and silent > 10 * self.client_timeout:
                self.backend.delete(self.meta, 0, row.key)
        return sorted(live)

    # -- master election (§6.2) -------------------------------------------------
    def elect(self) -> bool:
        """Renew or take the master role; True if this replica is master now."""
        now = self.clock()
        mine = _dump({"replica": self.client_id, "beat": now})
        row = self.backend.get(self.meta, 0, EM_MASTER)
        if row is None:
            return self.backend.insert_if_not_exists(self.meta, 0, EM_MASTER, mine, _tag())
        doc = _doc(row)
        if doc["replica"] != self.client_id and now - float(doc["beat"]) <= self.em_timeout:
            return False
        return self.backend.update_if(self.meta, 0, EM_MASTER, mine, _tag(), row.tag)

    def master(self) -> str | None:
        row = self.backend.get(self.meta, 0, EM_MASTER)
        return None if row is None else str(_doc(row)["replica"])

    # -- stats ----------------------------------------------------------------
    def stats(self, since: int = FIRST_EPOCH) -> list[EpochStat]:
        rows = self.backend.scan(self.stats_table, 0, epoch_key(since), None)
        return [_stat(row) for row in rows]

    def stat(self, epoch: int) -> EpochStat | None:
        row = self.backend.get(self.stats_table, 0, epoch_key(epoch))
        return None if row is None else _stat(row)

    def update_stat(self, stat: EpochStat, **changes: Any) -> bool:
        doc = {"status": stat.status, "client": stat.client, "max_key": stat.max_key}
        doc.update(changes)
        return self.backend.update_if(
            self.stats_table, 0, epoch_key(stat.epoch), _dump(doc), _tag(), stat.tag
        )

    def assign(self) -> None:
        """Master only: give every mergeable epoch without a live owner to a live client."""
        live = self.live_clients(forget_dead=True)
        if not live:
            return
        global_epoch = self.global_epoch()[0]
        for stat in self.stats():
            mergeable = stat.epoch <= global_epoch - MERGE_LAG
            if stat.status == NOT_MERGED and mergeable and stat.client not in live:
                self.update_stat(stat, client=live[stat.epoch % len(live)])

    def tick(self) -> bool:
        """One round of the EM service as this replica; True if it acted as master."""
        self.heartbeat()
        if not self.elect():
            return False
        self.advance()
        self.ensure_stats(self.global_epoch()[0])
        self.assign()
        return True


def _doc(row: Row) -> dict[str, Any]:
    value = json.loads(row.value)
    assert isinstance(value, dict)
    return value


def _stat(row: Row) -> EpochStat:
    doc = _doc(row)
    return EpochStat(
        int.from_bytes(row.key, "big"), doc["status"], doc["client"], doc["max_key"], row.tag
    )


def _dump(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, sort_keys=True).encode()


def _tag() -> bytes:
    return os.urandom(16)
