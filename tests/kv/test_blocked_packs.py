"""Blocked packs (issue 14, envelope version 3): blocks sealed and inflated one by one."""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import StoreFactory
from veil.errors import AuthenticationError, MalformedCiphertextError
from veil.kv import Store
from veil.kv.backends.base import Row
from veil.kv.envelope import ENVELOPE_BLOCKED, ENVELOPE_DICTIONARY, Envelope
from veil.kv.keys import decode_key, encode_key
from veil.kv.packs import PACK_KIND
from veil.kv.packsize import choose_blocked


def _records(count: int) -> dict[int, bytes]:
    return {
        i: json.dumps({"id": i, "name": f"pkg{i % 97}", "size": i * 37 % 1000}).encode()
        for i in range(count)
    }


def _rows(store: Store) -> list[tuple[int, Row]]:
    return [
        (partition, row)
        for partition in range(store.layout.partitions)
        for row in store.backend.scan(store.packs.table, partition)
    ]


def test_blocked_store_round_trips(open_store: StoreFactory) -> None:
    store = open_store(compression="zstd-dict", pack_rows=64, block_rows=8, pack_cache=0)
    records = _records(1500)
    store.put_many(records)
    assert {row.value[0] for _, row in _rows(store)} == {ENVELOPE_BLOCKED}
    assert all(store.get(key) == value for key, value in records.items())
    assert dict(store.range(100, 900)) == {k: records[k] for k in range(100, 901)}
    store.put(5, b"five")
    store.delete(6)
    store.put(10_000, b"new")
    assert (store.get(5), store.get(6), store.get(10_000)) == (b"five", None, b"new")


def test_point_reads_of_blocked_packs_skip_the_pack_cache(open_store: StoreFactory) -> None:
    """A one-block lookup costs less than hashing the stored pack for the cache."""
    store = open_store(compression="zstd-dict", pack_rows=64, block_rows=8, pack_cache=16)
    records = _records(600)
    store.put_many(records)
    cached = len(store.packs.cache._entries)  # what the writes left there
    assert all(store.get(key) == value for key, value in records.items())
    assert store.get(10_000) is None
    assert len(store.packs.cache._entries) == cached
    assert dict(store.range(0, 99)) == {k: records[k] for k in range(100)}
    assert len(store.packs.cache._entries) > cached  # ranges still use it
    partition, row = _rows(store)[0]
    tampered = row.value[:-1] + bytes([row.value[-1] ^ 0x01])
    store.backend.update_if(store.packs.table, partition, row.key, tampered, row.tag, row.tag)
    last = max(decode_key(k) for k in store.packs.open_sorted(partition, row)[0])
    with pytest.raises(AuthenticationError):
        store.get(last)  # its block is the damaged one, whatever the cache holds


def test_reads_open_only_the_blocks_they_meet(open_store: StoreFactory) -> None:
    # Damage the last block of a pack: point reads and ranges that stop
    # before it still read (theirs are the only blocks opened); those that
    # reach it fail authentication (never a wrong value).
    store = open_store(compression="zstd-dict", pack_rows=64, block_rows=8, pack_cache=0)
    records = _records(600)
    store.put_many(records)
    partition, row = _rows(store)[0]
    keys, values = store.packs.open_sorted(partition, row)
    assert len(keys) > 8
    damaged = bytearray(row.value)
    damaged[-1] ^= 1
    store.backend.update_if(
        store.packs.table, partition, row.key, bytes(damaged), os.urandom(16), row.tag
    )
    assert store.packs.get(keys[0]) == values[0]
    with pytest.raises(AuthenticationError):
        store.packs.get(keys[-1])
    first_block, last_block = decode_key(keys[7]), decode_key(keys[-1])
    assert isinstance(first_block, int) and isinstance(last_block, int)
    assert dict(store.range(0, first_block)) == {k: records[k] for k in range(first_block + 1)}
    with pytest.raises(AuthenticationError):
        dict(store.range(0, last_block))


def test_ranges_that_start_and_stop_inside_blocks(open_store: StoreFactory) -> None:
    store = open_store(compression="zstd-dict", pack_rows=64, block_rows=8, pack_cache=0)
    records = _records(300)
    store.put_many(records)
    for low, high in [(0, 0), (7, 8), (8, 15), (9, 70), (63, 64), (-5, 3), (250, 400), (5, 4)]:
        assert dict(store.range(low, high)) == {
            k: v for k, v in records.items() if low <= k <= high
        }, (low, high)


@pytest.mark.parametrize("partitions", [1, 3])
def test_ranges_cut_natively_match_the_cached_reading(
    open_store: StoreFactory, partitions: int
) -> None:
    # Without a cache a blocked pack's slice is cut (and an integer key
    # decoded) natively; the cached path cuts and decodes in Python.
    records = {k - 700: v for k, v in _records(1400).items()}
    kwargs = dict(compression="zstd-dict", pack_rows=64, block_rows=8, partitions=partitions)
    uncached = open_store(pack_cache=0, table=open_store.table + "u", **kwargs)
    cached = open_store(pack_cache=64, table=open_store.table + "c", **kwargs)
    for store in (uncached, cached):
        store.put_many(records)
    for low, high in [(-700, 699), (-9, 9), (-64, -1), (0, 63), (100, 100), (650, 900), (3, 2)]:
        expected = [(k, v) for k, v in sorted(records.items()) if low <= k <= high]
        got = list(uncached.range(low, high))
        assert got == expected == list(cached.range(low, high)), (low, high)
        assert all(type(key) is int for key, _ in got)


def test_byte_string_keys_are_cut_natively_too(open_store: StoreFactory) -> None:
    store = open_store(compression="zstd-dict", pack_rows=64, block_rows=8, pack_cache=0)
    records = {b"key%05d" % i: b"value %d" % i for i in range(600)}
    store.put_many(records)
    assert dict(store.range(b"key00100", b"key00450")) == {
        k: v for k, v in records.items() if b"key00100" <= k <= b"key00450"
    }
    (partition, row), *_ = _rows(store)
    with pytest.raises(MalformedCiphertextError, match="not an integer key"):
        store.packs.envelope.open_range(
            PACK_KIND,
            partition.to_bytes(8, "big") + row.key,
            row.value,
            (b"", b"\xff", None),
            int_keys=True,
        )


def test_a_blocked_pack_moved_to_another_pack_id_fails(open_store: StoreFactory) -> None:
    store = open_store(compression="zstd-dict", pack_rows=64, block_rows=8, pack_cache=0)
    store.put_many(_records(600))
    (_, first), (p2, second) = _rows(store)[:2]
    store.backend.update_if(store.packs.table, p2, second.key, first.value, b"x" * 16, second.tag)
    moved = store.backend.get(store.packs.table, p2, second.key)
    assert moved is not None
    with pytest.raises(AuthenticationError):
        store.packs.open_sorted(p2, moved)


def test_dictionary_packs_of_version_2_stay_readable(open_store: StoreFactory) -> None:
    # Padded dictionary packs are written as version 2; a client without
    # padding reads them and rewrites the packs it changes as version 3.
    records = _records(1200)
    old = open_store(compression="zstd-dict", pack_rows=50, padding="pow2", pack_cache=0)
    old.put_many(records)
    assert {row.value[0] for _, row in _rows(old)} == {ENVELOPE_DICTIONARY}
    new = open_store(compression="zstd-dict", pack_cache=0)
    assert all(new.get(key) == value for key, value in records.items())
    new.put(3, b"three")
    assert {row.value[0] for _, row in _rows(new)} == {ENVELOPE_DICTIONARY, ENVELOPE_BLOCKED}
    assert dict(new.range(0, 2000)) == records | {3: b"three"}


def test_an_unknown_envelope_version_is_a_clear_error() -> None:
    envelope = Envelope(os.urandom(32), "t", "zstd-dict", ())
    stored = bytes([ENVELOPE_BLOCKED + 1]) + bytes(60)
    with pytest.raises(MalformedCiphertextError, match="upgrade Veil"):
        envelope.open_records(PACK_KIND, b"loc", stored)


def test_truncated_blocked_pack_is_malformed() -> None:
    envelope = Envelope(os.urandom(32), "t", "zstd-dict", ())
    entries = [(encode_key(i), b"v%d" % i) for i in range(30)]
    stored = envelope.seal_blocked(PACK_KIND, b"loc", entries, [k for k, _ in entries], 4)
    with pytest.raises((MalformedCiphertextError, AuthenticationError)):
        envelope.open_records(PACK_KIND, b"loc", stored[:-20])


def test_block_size_choice_is_deterministic() -> None:
    entries = [(encode_key(k), v) for k, v in sorted(_records(3000).items())]
    first = choose_blocked(entries, lambda data: data[: len(data) // 4])
    assert first == choose_blocked(entries, lambda data: data[: len(data) // 4])
    assert first.block_rows is not None and first.pack_rows % first.block_rows == 0


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(st.binary(max_size=300), min_size=0, max_size=60),
    block_rows=st.integers(min_value=1, max_value=20),
    dense=st.booleans(),
)
def test_blocked_packs_round_trip_any_rows(
    values: list[bytes], block_rows: int, dense: bool
) -> None:
    envelope = Envelope(b"k" * 32, "t", "zstd-dict", ())
    entries = [(encode_key(i * 7 - 100), value) for i, value in enumerate(values)]
    positions = [key for key, _ in entries]
    stored = envelope.seal_blocked(PACK_KIND, b"loc", entries, positions, block_rows, dense=dense)
    assert envelope.open_records(PACK_KIND, b"loc", stored) == (positions, values)
    for key, value in entries:
        assert envelope.lookup(PACK_KIND, b"loc", stored, key) == value
    assert envelope.lookup(PACK_KIND, b"loc", stored, encode_key(10**6)) is None
    assert envelope.lookup(PACK_KIND, b"loc", stored, encode_key(-(10**6))) is None


def test_a_short_last_block_joins_the_one_before(open_store: StoreFactory) -> None:
    # 19 rows in blocks of 8: the 3-row tail joins the second block, so a
    # read of the last keys opens one 11-row block (rows 8..18), and every
    # read, range and later put still finds every row.
    envelope = Envelope(b"k" * 32, "t", "zstd-dict", ())
    entries = [(encode_key(i), f"value {i}".encode()) for i in range(19)]
    positions = [key for key, _ in entries]
    stored = envelope.seal_blocked(PACK_KIND, b"loc", entries, positions, 8, dense=True)
    keys, values = envelope.open_records(PACK_KIND, b"loc", stored, (positions[17], positions[18]))
    assert keys == positions[8:] and values == [v for _, v in entries[8:]]
    assert envelope.lookup(PACK_KIND, b"loc", stored, positions[18]) == b"value 18"
    # 20 rows: a tail of half a block stays a block of its own.
    entries.append((encode_key(19), b"value 19"))
    positions.append(entries[-1][0])
    stored = envelope.seal_blocked(PACK_KIND, b"loc", entries, positions, 8, dense=True)
    keys, _ = envelope.open_records(PACK_KIND, b"loc", stored, (positions[17], positions[18]))
    assert keys == positions[16:]
    store = open_store(compression="zstd-dict", pack_rows=19, block_rows=8, pack_cache=0)
    records = _records(400)
    store.put_many(records)
    assert all(store.get(key) == value for key, value in records.items())
    assert dict(store.range(9, 390)) == {k: records[k] for k in range(9, 391)}
    store.put(400, b"appended")
    store.put(17, b"changed")
    assert (store.get(400), store.get(17)) == (b"appended", b"changed")
    assert dict(store.range(0, 400)) == {**records, 17: b"changed", 400: b"appended"}


def test_a_put_recompresses_only_the_blocks_it_changes(open_store: StoreFactory) -> None:
    # Bulk-loaded blocks are compressed at zstd 19, a put's at 9: a pack whose
    # blocks were all compressed again would change size. Rewriting a value
    # with itself keeps every block's compressed form, so the stored pack has
    # the same length (a fresh nonce, the same index and blocks).
    store = open_store(compression="zstd-dict", pack_rows=64, block_rows=8, pack_cache=0)
    records = _records(600)
    store.put_many(records)
    partition, before = _rows(store)[1]
    key = store.packs.open_sorted(partition, before)[0][20]
    number = int.from_bytes(key[1:], "big") ^ (1 << 63)
    store.put(number, records[number])
    after = store.backend.get(store.packs.table, partition, before.key)
    assert after is not None and after.value != before.value
    assert len(after.value) == len(before.value)
    store.put(number, b"a new value")  # one block changes, the others stay readable
    assert store.get(number) == b"a new value"
    assert all(store.get(k) == v for k, v in records.items() if k != number)
    assert dict(store.range(0, 599)) == {**records, number: b"a new value"}


@pytest.mark.parametrize("prf_pack_ids", [False, True])
def test_point_reads_find_every_key_and_no_absent_one(
    open_store: StoreFactory, prf_pack_ids: bool
) -> None:
    # The point read walks the index and one block's record list without
    # parsing them (rust/veil-kernels/src/kvpack/blocks.rs, ``lookup``); with
    # pseudorandom packIDs a block is chosen by the key's position, not the key.
    store = open_store(
        compression="zstd-dict",
        pack_rows=64,
        block_rows=8,
        pack_cache=0,
        prf_pack_ids=prf_pack_ids,
    )
    records = {k: v for k, v in _records(1200).items() if k % 3}
    store.put_many(records)
    assert all(store.get(key) == records.get(key) for key in range(-5, 1210))
