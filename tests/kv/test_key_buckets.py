"""Key buckets: integer keys share a hash partition per run of 2**bits keys (issue 14)."""

from __future__ import annotations

import itertools
import json
import os
import threading
from typing import Any

import pytest

from conftest import StoreFactory
from veil.errors import ParameterError
from veil.kv import catalog
from veil.kv.keys import decode_keys, encode_key
from veil.kv.layout import BUCKET_PACKS, MAX_BUCKET_BITS, Layout, bucket_bits_for
from veil.kv.store import Store


def _layout(bits: int | None, partitions: int = 8, prf: bytes | None = None) -> Layout:
    return Layout(partitions, b"k" * 32, prf, bits)


def test_a_bucket_of_consecutive_keys_shares_a_partition() -> None:
    layout = _layout(4)
    for start in (0, 16, 160, -32):
        assert len({layout.partition(encode_key(k)) for k in range(start, start + 16)}) == 1
    assert len({layout.partition(encode_key(k)) for k in range(0, 16 * 64, 16)}) == 8


def test_byte_keys_prf_and_one_partition_hash_key_by_key() -> None:
    per_key = _layout(None)
    for key in (b"alpha", b"beta", b"gamma"):
        assert _layout(4).partition(encode_key(key)) == per_key.partition(encode_key(key))
    assert _layout(4, prf=b"p" * 32).bucket_bits is None
    assert _layout(4, partitions=1).bucket_bits is None
    assert _layout(4, partitions=1).partitions_between(encode_key(0), encode_key(99)) == [0]


def test_partitions_between_names_only_the_buckets_met() -> None:
    layout = _layout(4)
    assert layout.partitions_between(encode_key(3), encode_key(12)) == [
        layout.partition(encode_key(3))
    ]
    wide = layout.partitions_between(encode_key(0), encode_key(8 * 16))
    assert wide == list(range(8))
    two = layout.partitions_between(encode_key(10), encode_key(20))
    assert two == sorted({layout.partition(encode_key(10)), layout.partition(encode_key(20))})
    assert _layout(None).partitions_between(encode_key(0), encode_key(1)) == list(range(8))


def test_bucket_width_follows_pack_size_and_key_gaps() -> None:
    dense = [encode_key(k) for k in range(1000)]
    assert bucket_bits_for(50, dense) == (BUCKET_PACKS * 50 - 1).bit_length()
    sparse = [encode_key(10 * k) for k in range(1000)]
    assert 2 ** bucket_bits_for(50, sparse) >= BUCKET_PACKS * 50 * 10
    assert bucket_bits_for(50, list(reversed(sparse))) == bucket_bits_for(50, sparse)
    assert bucket_bits_for(50) == bucket_bits_for(50, [encode_key(7)])
    assert bucket_bits_for(50, [encode_key(b"x"), encode_key(b"y")]) == bucket_bits_for(50)
    scattered = [encode_key(k * 2**49 - 2**63) for k in range(1000)]  # like random keys
    assert bucket_bits_for(600, scattered) == MAX_BUCKET_BITS


def _packs(store: Store) -> list[list[int]]:
    """The integer keys of every stored pack (tests only: reads the backend directly)."""
    out = []
    for partition in range(store.layout.partitions):
        for row in store.backend.scan(store.packs.table, partition):
            keys = decode_keys(store.packs.open_sorted(partition, row)[0])
            out.append([k for k in keys if isinstance(k, int)])
    return out


def test_new_tables_pack_consecutive_keys(open_store: StoreFactory) -> None:
    store = open_store(pack_rows=10, partitions=4)
    bits = store.config.bucket_bits
    assert bits == (BUCKET_PACKS * 10 - 1).bit_length()
    data = {k: b"value %d" % k for k in range(1000)}
    store.put_many(data)
    packs = _packs(store)
    assert sorted(k for pack in packs for k in pack) == list(range(1000))
    for pack in packs:  # a pack is a run of keys, broken only where a bucket ends
        for a, b in itertools.pairwise(pack):
            assert b == a + 1 or a >> bits != b >> bits
    assert [store.get(k) for k in range(1000)] == list(data.values())
    assert list(store.range(250, 700)) == [(k, data[k]) for k in range(250, 701)]


def test_a_short_range_asks_one_partition(
    open_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(pack_rows=10, partitions=8)
    store.put_many({k: b"v%d" % k for k in range(2000)})
    asked: list[int] = []
    scan = store.backend.scan

    def counting_scan(table: str, partition: int, *args: Any, **kw: Any) -> Any:
        asked.append(partition)
        return scan(table, partition, *args, **kw)

    monkeypatch.setattr(store.backend, "scan", counting_scan)
    assert [k for k, _ in store.range(130, 150)] == list(range(130, 151))
    assert len(asked) == 1


def test_the_first_bulk_load_chooses_buckets_from_the_data(open_store: StoreFactory) -> None:
    store = open_store(partitions=8, compression="zstd")
    records = {
        3 * k: b"2026-11-26 status installed libfoo%d:amd64 1.%d" % (k, k) for k in range(4000)
    }
    store.put_many(records)
    config = store.config
    assert config.pack_rows is not None and config.bucket_bits is not None
    assert 2**config.bucket_bits >= BUCKET_PACKS * config.pack_rows * 3
    assert store.get(2997) == records[2997] and store.get(2998) is None
    assert list(store.range(10, 40)) == [(k, records[k]) for k in range(12, 40, 3)]


def test_a_reader_opened_before_the_first_write_finds_every_key(
    open_store: StoreFactory,
) -> None:
    reader, deleter = open_store(partitions=8), open_store(partitions=8)
    assert reader.get(5) is None  # opened and read while the table is empty
    writer = open_store(partitions=8)
    data = {k: b"v%d" % k for k in range(3000)}
    writer.put_many(data)
    assert writer.config.bucket_bits is not None and reader.config.bucket_bits is None
    assert [reader.get(k) for k in range(0, 3000, 7)] == [data[k] for k in range(0, 3000, 7)]
    assert reader.layout.bucket_bits == writer.config.bucket_bits
    deleter.delete(11)  # a delete from a client that never wrote finds the key's pack
    assert writer.get(11) is None and writer.get(12) == data[12]
    late = open_store(partitions=8)
    assert list(late.range(2990, 5000)) == [(k, data[k]) for k in range(2990, 3000)]


def test_a_reader_opened_before_the_first_merge_finds_merged_keys(
    open_store: StoreFactory,
) -> None:
    now = [1000.0]
    reader = open_store("append", partitions=4, clock=lambda: now[0], epoch_seconds=1.0)
    writer = open_store("append", partitions=4, clock=lambda: now[0], epoch_seconds=1.0)
    data = {k: b"v%d" % k for k in range(500)}
    writer.put_many(data)
    for _ in range(6):
        now[0] += 1.5
        writer.maintain()
    assert writer.config.bucket_bits is not None
    assert [reader.get(k) for k in range(0, 500, 13)] == [data[k] for k in range(0, 500, 13)]


def test_concurrent_first_writers_agree_on_buckets(open_store: StoreFactory) -> None:
    stores = [open_store(partitions=8) for _ in range(3)]
    errors: list[BaseException] = []

    def load(store: Store, start: int) -> None:
        try:
            store.put_many({k: b"w%d" % k for k in range(start, 3000, 3)})
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=load, args=(s, i)) for i, s in enumerate(stores)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert len({s.config.bucket_bits for s in stores}) == 1
    assert list(open_store(partitions=8).range(0, 2999)) == [(k, b"w%d" % k) for k in range(3000)]


def _rewrite_entry(store: Store, change: dict[str, object], drop: tuple[str, ...] = ()) -> None:
    key = f"table/{store._base}".encode()
    row = store.backend.get(catalog.CATALOG_TABLE, 0, key)
    assert row is not None
    entry = {k: v for k, v in json.loads(row.value).items() if k not in drop} | change
    data = json.dumps(entry).encode()
    assert store.backend.update_if(catalog.CATALOG_TABLE, 0, key, data, os.urandom(16), row.tag)


def test_tables_from_before_buckets_stay_readable(
    open_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A table written by the sixth round's code: keys hashed one by one, and
    # no bucket_bits in its catalogue entry at all.
    for module in ("veil.kv.open_store", "veil.kv.store"):  # a new table's and a batch's
        monkeypatch.setattr(f"{module}.bucket_bits_for", lambda *a, **k: None)
    old = open_store(pack_rows=10, partitions=4)
    data = {k: b"old %d" % k for k in range(600)}
    old.put_many(data)
    _rewrite_entry(old, {}, drop=("bucket_bits",))
    monkeypatch.undo()
    reopened = open_store(partitions=4)
    assert reopened.config.bucket_bits is None and reopened.layout.bucket_bits is None
    assert [reopened.get(k) for k in range(600)] == list(data.values())
    reopened.put(600, b"new")
    assert list(reopened.range(595, 700))[-2:] == [(599, data[599]), (600, b"new")]


def test_a_catalogue_entry_from_a_newer_veil_is_refused(open_store: StoreFactory) -> None:
    store = open_store(pack_rows=10, partitions=4)
    store.put(1, b"x")
    _rewrite_entry(store, {"layout_from_the_future": 2})
    with pytest.raises(ParameterError, match="newer Veil"):
        open_store(partitions=4)


def test_recent_append_reads_do_not_reread_the_catalogue(
    open_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store("append", partitions=4)
    store.put(1, b"recent")  # in an epoch; no merge has chosen a pack size yet
    assert store.config.pack_rows is None
    reloads: list[str] = []
    reload = catalog.reload
    monkeypatch.setattr(catalog, "reload", lambda *a: reloads.append("x") or reload(*a))
    assert store.get(1) == b"recent" and reloads == []
    assert store.get(2) is None and len(reloads) == 1  # a miss everywhere checks the choice
