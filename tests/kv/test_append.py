"""APPEND mode (§6): merges, the deletion rule, EM failover, crashes."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
from clients import run_client

from conftest import StoreFactory
from veil.kv.append import AppendStore
from veil.kv.em import DELETED, MERGED, NOT_MERGED
from veil.kv.hooks import DELETE_AFTER_STATUS, MERGE_AFTER_FIRST_PACK, MERGE_BEFORE_STATUS
from veil.kv.keys import encode_key


class Clock:
    """A clock the test moves by hand, shared by several clients."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def append_store(open_store: StoreFactory, **options: object) -> AppendStore:
    store = open_store("append", **options)
    assert isinstance(store, AppendStore)
    return store


def packed(store: AppendStore) -> dict[bytes, bytes]:
    out: dict[bytes, bytes] = {}
    for partition in range(store.layout.partitions):
        for row in store.backend.scan(store.packs.table, partition):
            out.update(store.packs.open_pack(partition, row).items)
    return out


def statuses(store: AppendStore) -> dict[int, str]:
    return {s.epoch: s.status for s in store.em.stats()}


def test_puts_are_single_inserts_until_merged(open_store: StoreFactory) -> None:
    store = append_store(open_store, pack_rows=4)
    for key in range(10):
        store.put(key, b"v%d" % key)
    assert packed(store) == {}
    epoch = store.current_epoch()
    assert len(list(store.backend.scan(store.epochs_table, epoch))) == 10
    for _ in range(3):
        store.advance_epoch()
    assert store.merge(epoch) == [epoch]
    assert len(packed(store)) == 10
    assert dict(store.range(0, 9)) == {k: b"v%d" % k for k in range(10)}


def test_merge_uses_neighbour_epochs_for_late_keys(open_store: StoreFactory) -> None:
    store = append_store(open_store, pack_rows=3)
    for key in [10, 11, 13]:
        store.put(key, b"e1")
    store.advance_epoch()
    for key in [12, 14, 20, 21]:  # 12 arrives late, inside T_delta
        store.put(key, b"e2")
    store.put(11, b"e2 overwrite")
    store.advance_epoch()
    for key in [30, 19, 31]:  # 19 arrives late in epoch 3
        store.put(key, b"e3")
    store.settle()
    expected = {10: b"e1", 11: b"e2 overwrite", 12: b"e2", 13: b"e1", 14: b"e2"}
    expected |= {20: b"e2", 21: b"e2", 19: b"e3", 30: b"e3", 31: b"e3"}
    assert dict(store.range(0, 100)) == expected
    assert all(statuses(store)[e] == DELETED for e in (1, 2, 3))
    assert list(store.backend.scan(store.epochs_table, 1)) == []


def test_tombstones_hide_keys_before_and_after_merge(open_store: StoreFactory) -> None:
    store = append_store(open_store)
    for key in range(5):
        store.put(key, b"x")
    store.delete(2)
    assert store.get(2) is None and 2 not in dict(store.range(0, 9))
    store.settle()
    assert store.get(2) is None and sorted(dict(store.range(0, 9))) == [0, 1, 3, 4]
    store.delete(3)  # below the merged frontier: GENERIC delete on the pack
    store.put(4, b"late overwrite")
    assert dict(store.range(0, 9)) == {0: b"x", 1: b"x", 4: b"late overwrite"}


def test_two_clients_merging_one_epoch_agree(open_store: StoreFactory) -> None:
    a, b = append_store(open_store, pack_rows=4), append_store(open_store, pack_rows=4)
    for key in range(0, 30, 2):
        a.put(key, b"a%d" % key)
    epoch = a.current_epoch()
    for _ in range(3):
        a.advance_epoch()
    rows = {e: list(a.backend.scan(a.epochs_table, e)) for e in (epoch, epoch + 1)}
    entries_a, _ = a._merged_entries(epoch, rows)
    entries_b, _ = b._merged_entries(epoch, rows)
    assert entries_a == entries_b
    assert a.merge(epoch) == [epoch]
    after_a = packed(a)
    a.put(4, b"GENERIC update after the merge")  # below the frontier now
    b._insert_packs(entries_b)  # a slow second merger: every insert must fail
    assert b.merge(epoch) == []  # already MERGED
    assert packed(b) == after_a | {encode_key(4): b"GENERIC update after the merge"}
    assert b.get(4) == b"GENERIC update after the merge"


def test_deletion_rule_waits_for_neighbours(open_store: StoreFactory) -> None:
    store = append_store(open_store)
    for epoch in range(1, 6):
        store.put(epoch * 100, b"x")
        store.advance_epoch()
    store.advance_epoch()
    assert store.merge(3) == [3]
    assert store.delete_merged_epochs() == []  # 2 and 4 are not merged yet
    assert store.merge(2) == [2] and store.merge(4) == [4]
    assert store.delete_merged_epochs() == [3]  # 1 still unmerged blocks 2
    assert statuses(store)[2] == MERGED and statuses(store)[1] == NOT_MERGED
    assert dict(store.range(0, 1000)) == {e * 100: b"x" for e in range(1, 6)}


def test_em_failover(open_store: StoreFactory) -> None:
    clock = Clock()
    a = append_store(open_store, clock=clock, epoch_seconds=10, client_id="a")
    b = append_store(open_store, clock=clock, epoch_seconds=10, client_id="b")
    assert a.em.tick() is True
    assert b.em.tick() is False and a.em.master() == "a"
    clock.now += 11
    assert a.em.tick() is True  # master renews and advances the epoch
    assert a.em.global_epoch()[0] == 2
    clock.now += 31  # a falls silent for more than em_timeout
    assert b.em.tick() is True and b.em.master() == "b"
    assert b.em.global_epoch()[0] == 3
    assert a.em.tick() is False  # the old master finds itself replaced


def test_replicas_that_both_think_they_are_master_advance_once(
    open_store: StoreFactory,
) -> None:
    clock = Clock()
    a = append_store(open_store, clock=clock, epoch_seconds=10)
    b = append_store(open_store, clock=clock, epoch_seconds=10)
    epoch, _, tag = a.em.global_epoch()
    clock.now += 11
    assert a.em.advance() is True
    # b read g_epoch before a's advance; its update-if on the old tag fails.
    assert not b.backend.update_if(b.em.meta, 0, b"g_epoch", b"{}", b"x" * 16, tag)
    assert b.em.advance() is False
    assert b.em.global_epoch()[0] == epoch + 1


def test_dead_clients_epochs_are_reassigned(open_store: StoreFactory) -> None:
    clock = Clock()
    a = append_store(open_store, clock=clock, epoch_seconds=10, client_id="a")
    append_store(open_store, clock=clock, epoch_seconds=10, client_id="b")  # registers b
    a.put(1, b"one")
    for _ in range(4):
        a.advance_epoch()
    a.em.tick()
    assert a.em.stat(1).client == "b"  # epoch 1 -> live[1 % 2]
    clock.now += 25  # b silent for 25 s: still within the 30 s timeout
    a.em.tick()
    assert a.em.stat(1).client == "b"
    clock.now += 10  # now b is dead (35 s without a heartbeat)
    a.em.tick()
    assert a.em.stat(1).client == "a"
    a.maintain()
    assert statuses(a)[1] in (MERGED, DELETED)
    assert a.get(1) == b"one"


def test_background_thread_merges(kv_url: str, key_file: Path, kv_table: str) -> None:
    import veil.kv

    with veil.kv.open(kv_url, key_file, "append", table=kv_table, epoch_seconds=0.05) as store:
        assert isinstance(store, AppendStore)
        for key in range(20):
            store.put(key, b"bg")
            time.sleep(0.01)
        deadline = time.monotonic() + 30
        while len(packed(store)) < 20 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(packed(store)) == 20
        assert dict(store.range(0, 100)) == dict.fromkeys(range(20), b"bg")


@pytest.mark.parametrize("crash_at", [MERGE_AFTER_FIRST_PACK, MERGE_BEFORE_STATUS])
def test_client_dies_mid_merge(
    open_store: StoreFactory, kv_url: str, key_file: Path, kv_table: str, crash_at: str
) -> None:
    store = append_store(open_store, pack_rows=2, partitions=3)
    data = {key: b"v%d" % key for key in range(25)}
    for key, value in data.items():
        store.put(key, value)
    epoch = store.current_epoch()
    for _ in range(3):
        store.advance_epoch()
    code = f"store.merge({epoch})"
    exit_code = run_client(kv_url, key_file, kv_table, code, mode="append", crash_at=crash_at)
    assert exit_code == -signal.SIGKILL
    assert 0 < len(packed(store)) <= 25
    assert statuses(store)[epoch] == NOT_MERGED
    assert dict(store.range(0, 100)) == data
    assert store.merge(epoch) == [epoch]
    store.settle()
    assert dict(store.range(0, 100)) == data and len(packed(store)) == 25


def test_client_dies_between_deleted_status_and_deletion(
    open_store: StoreFactory, kv_url: str, key_file: Path, kv_table: str
) -> None:
    store = append_store(open_store)
    store.put(1, b"x")
    for _ in range(4):
        store.advance_epoch()
    store.merge(1)
    store.merge(2)
    code = "store.delete_merged_epochs()"
    crash = DELETE_AFTER_STATUS
    assert run_client(kv_url, key_file, kv_table, code, mode="append", crash_at=crash) == -9
    assert statuses(store)[1] == DELETED
    assert store.get(1) == b"x"
    store.delete_merged_epochs()  # finishes the interrupted deletion
    assert list(store.backend.scan(store.epochs_table, 1)) == []
    assert store.get(1) == b"x"


def test_an_epoch_starting_below_the_previous_one_merges(open_store: StoreFactory) -> None:
    # A late writer: epoch e holds only key 100, epoch e+1 starts at key 50.
    # Merging e finds nothing in [kmin_e, kmin_e+1); the merge of e+1 takes both.
    store = append_store(open_store, pack_rows=4)
    first = store.current_epoch()
    store.put(100, b"hundred")
    store.advance_epoch()
    store.put(50, b"fifty")
    for _ in range(4):
        store.advance_epoch()
    store.settle()
    assert statuses(store)[first] in (MERGED, DELETED)
    assert dict(store.range(0, 200)) == {50: b"fifty", 100: b"hundred"}
    assert packed(store) == {encode_key(50): b"fifty", encode_key(100): b"hundred"}


def test_a_late_epoch_key_above_the_second_following_epoch_survives(
    open_store: StoreFactory,
) -> None:
    # Two writers of different key ranges (what the concurrent writers test
    # does under load): epoch e holds key 100, epoch e+1 starts at 50 and
    # epoch e+2 at 60. Merging e takes [100, 50): nothing; merging e+1 takes
    # [50, 60); merging e+2 takes [60, ...) but reads only e+1..e+3. Key 100
    # must not be lost when epoch e is deleted.
    store = append_store(open_store, pack_rows=4)
    store.put(100, b"hundred")
    store.advance_epoch()
    store.put(50, b"fifty")
    store.advance_epoch()
    store.put(60, b"sixty")
    store.settle()
    expected = {50: b"fifty", 60: b"sixty", 100: b"hundred"}
    assert dict(store.range(0, 200)) == expected
    assert store.get(100) == b"hundred"
    assert packed(store) == {encode_key(k): v for k, v in expected.items()}
