"""Pack splits (Figures 5-6): determinism, concurrent splitters, crashes."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from clients import run_client

from conftest import StoreFactory
from veil.kv import Store
from veil.kv.hooks import SPLIT_AFTER_FIRST_PIECE, SPLIT_BEFORE_LEFT
from veil.kv.packs import split_points


def pack_contents(store: Store) -> dict[bytes, list[bytes]]:
    """packID -> sorted keys held, over every partition."""
    table = store.packs
    contents = {}
    for partition in range(store.layout.partitions):
        for row in store.backend.scan(table.table, partition):
            contents[row.key] = sorted(table.open_pack(partition, row).items)
    return contents


def visible(store: Store, low: int = -(10**6), high: int = 10**6) -> dict[int, bytes]:
    return dict(store.range(low, high))


def test_split_points_are_halves_for_puts() -> None:
    assert split_points(7, 4) == [(0, 4), (4, 7)]  # left rounded up, as in Figure 6
    assert split_points(76, 50) == [(0, 38), (38, 76)]
    assert split_points(10, 3) == [(0, 3), (3, 5), (5, 8), (8, 10)]


def test_puts_split_packs_past_max_keys(open_store: StoreFactory) -> None:
    store = open_store(pack_rows=4)
    for key in range(100):
        store.put(key, b"v")
    sizes = [len(keys) for keys in pack_contents(store).values()]
    assert max(sizes) <= store.config.max_keys
    assert sum(sizes) == 100
    assert visible(store) == dict.fromkeys(range(100), b"v")


def test_two_clients_splitting_the_same_pack_agree(open_store: StoreFactory) -> None:
    a, b = open_store(pack_rows=4), open_store(pack_rows=4)
    for key in range(7):  # 7 > max_keys = 6: the next write splits
        a.put(key * 10, b"v%d" % key)
    part = 0
    row = a.backend.floor(a.packs.table, part, b"\xff")
    assert row is not None
    pack_a = a.packs.open_pack(part, row)
    pack_b = b.packs.open_pack(part, row)
    a.packs.split(part, row, pack_a)
    after_one = pack_contents(a)
    b.packs.split(part, row, pack_b)  # same stale pack: its writes must all fail
    assert pack_contents(a) == after_one
    assert after_one[b"\x00"] == sorted(a.layout.position(k) for k in pack_a.items)[:4]
    assert len(after_one) == 2
    assert visible(b) == {k * 10: b"v%d" % k for k in range(7)}


def test_delayed_splitter_does_not_undo_later_writes(open_store: StoreFactory) -> None:
    a, b = open_store(pack_rows=4), open_store(pack_rows=4)
    for key in range(7):  # one pack of 7 > max_keys = 6 keys
        a.put(key, b"x")
    row = a.backend.floor(a.packs.table, 0, b"\xff")
    assert row is not None
    stale = a.packs.open_pack(0, row)  # A reads the oversized pack, then stalls
    b.put(1, b"left half, after the split")  # B splits, then writes both halves
    b.put(6, b"right half, after the split")
    settled = pack_contents(b)
    a.packs.split(0, row, stale)  # A wakes up: insert and update-if both fail
    assert pack_contents(a) == settled
    assert visible(a)[1] == b"left half, after the split"
    assert visible(a)[6] == b"right half, after the split"


@pytest.mark.parametrize("crash_at", [SPLIT_AFTER_FIRST_PIECE, SPLIT_BEFORE_LEFT])
def test_client_dies_mid_split(
    open_store: StoreFactory, kv_url: str, key_file: Path, kv_table: str, crash_at: str
) -> None:
    store = open_store(pack_rows=4)
    for key in range(7):
        store.put(key, b"old")
    code = "store.put(3, b'new')"  # the pack holds 7 > 6 keys: this put splits first
    assert run_client(kv_url, key_file, kv_table, code, crash_at=crash_at) == -signal.SIGKILL
    assert visible(store) == dict.fromkeys(range(7), b"old")
    # Keys in the orphaned right half are served by the new pack; update one.
    store.put(6, b"six")
    store.put(0, b"zero")  # touches the original pack: replays the same split
    store.delete(5)
    expected = {k: b"old" for k in range(7) if k != 5} | {6: b"six", 0: b"zero"}
    assert visible(store) == expected
    assert all(len(keys) <= store.config.max_keys for keys in pack_contents(store).values())


def test_client_dies_mid_bulk_split(
    open_store: StoreFactory, kv_url: str, key_file: Path, kv_table: str
) -> None:
    store = open_store(pack_rows=4)
    code = "store.put_many({k: b'bulk' for k in range(40)})"
    crash = SPLIT_AFTER_FIRST_PIECE
    assert run_client(kv_url, key_file, kv_table, code, crash_at=crash) == -signal.SIGKILL
    assert visible(store) == dict.fromkeys(range(40), b"bulk")
    store.put(39, b"updated in the orphan piece")
    store.put(1, b"replays the split")
    store.put(1000, b"later")
    expected = dict.fromkeys(range(40), b"bulk") | {
        39: b"updated in the orphan piece",
        1: b"replays the split",
        1000: b"later",
    }
    assert visible(store) == expected
    assert all(len(keys) <= store.config.max_keys for keys in pack_contents(store).values())


def test_emptied_packs_stay_and_keep_working(open_store: StoreFactory) -> None:
    store = open_store(pack_rows=2)
    for key in range(12):
        store.put(key, b"v")
    before = set(pack_contents(store))
    for key in range(12):
        store.delete(key)
    assert before <= set(pack_contents(store))  # packs are never removed (§5.3)
    assert all(keys == [] for keys in pack_contents(store).values())
    assert list(store.range(-5, 20)) == [] and store.get(5) is None
    store.put(5, b"back")
    store.put(-1, b"below every packID but the root")
    assert list(store.range(-5, 20)) == [(-1, b"below every packID but the root"), (5, b"back")]
