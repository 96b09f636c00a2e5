"""API semantics of veil.kv stores, on every backend and in both modes."""

from __future__ import annotations

import os

import pytest

from conftest import StoreFactory
from veil.errors import ParameterError
from veil.kv import Store

MODES = ["generic", "append"]


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def settle(store: Store) -> None:
    """In APPEND mode, move every epoch into packs (no-op in GENERIC mode)."""
    settle_all = getattr(store, "settle", None)
    if settle_all is not None:
        settle_all()


def test_empty_store(open_store: StoreFactory, mode: str) -> None:
    store = open_store(mode)
    assert store.get(1) is None
    assert store.get(b"x") is None
    assert list(store.range(0, 100)) == []
    store.delete(5)  # deleting a missing key is not an error


def test_put_get_overwrite_delete(open_store: StoreFactory, mode: str) -> None:
    store = open_store(mode, pack_rows=4)
    for key in range(20):
        store.put(key, b"v%d" % key)
    store.put(7, b"seven")
    store.delete(8)
    for check in range(2):
        assert store.get(7) == b"seven"
        assert store.get(8) is None
        assert store.get(9) == b"v9"
        assert store.get(100) is None
        if check == 0:
            settle(store)
    store.put(9, b"nine")  # overwrite and delete after the data is packed
    store.delete(10)
    settle(store)
    assert store.get(9) == b"nine"
    assert store.get(10) is None
    expected = [(k, b"v%d" % k) for k in range(20) if k not in (7, 8, 9, 10)]
    expected += [(7, b"seven"), (9, b"nine")]
    assert list(store.range(0, 19)) == sorted(expected)


def test_ranges_cross_pack_borders(open_store: StoreFactory, mode: str) -> None:
    store = open_store(mode, pack_rows=3)
    data = {k: os.urandom(k % 5) for k in range(-40, 41, 2)}
    for key, value in data.items():
        store.put(key, value)
    settle(store)
    for low, high in [(-40, 40), (-39, -1), (-3, 3), (5, 5), (6, 6), (40, 100), (-100, -41)]:
        assert list(store.range(low, high)) == sorted(
            (k, v) for k, v in data.items() if low <= k <= high
        )
    assert list(store.range(10, 0)) == []


def test_negative_and_extreme_int_keys(open_store: StoreFactory, mode: str) -> None:
    store = open_store(mode, pack_rows=2)
    keys = [-(2**63), -1, 0, 1, 2**63 - 1, -5, 12345678901]
    for key in keys:
        store.put(key, str(key).encode())
    settle(store)
    assert [k for k, _ in store.range(-(2**63), 2**63 - 1)] == sorted(keys)
    assert all(store.get(k) == str(k).encode() for k in keys)
    with pytest.raises(ParameterError, match="64-bit"):
        store.put(2**63, b"")


def test_binary_keys_and_value_sizes(open_store: StoreFactory, mode: str) -> None:
    store = open_store(mode, pack_rows=3)
    data = {
        b"": b"empty key",
        b"\x00": b"",
        b"\x00\x00": b"x",
        b"a": os.urandom(200_000),
        b"a\xff": b"tiny",
        b"b": b"\x00" * 1000,
        b"\xff\xff": b"top",
    }
    for key, value in data.items():
        store.put(key, value)
    settle(store)
    assert all(store.get(k) == v for k, v in data.items())
    assert list(store.range(b"", b"\xff\xff\xff")) == sorted(data.items())
    assert [k for k, _ in store.range(b"\x00", b"a")] == [b"\x00", b"\x00\x00", b"a"]


def test_one_key_type_per_table(open_store: StoreFactory, mode: str) -> None:
    store = open_store(mode)
    store.put(1, b"int")
    with pytest.raises(ParameterError, match="holds int keys"):
        store.put(b"bytes", b"x")
    with pytest.raises(ParameterError, match="holds int keys"):
        store.get(b"bytes")
    with pytest.raises(ParameterError, match="must be an int"):
        store.put("text", b"x")
    with pytest.raises(ParameterError, match="must be bytes"):
        store.put(2, "text")


def test_put_many_bulk_load_then_updates(open_store: StoreFactory, mode: str) -> None:
    store = open_store(mode, pack_rows=5)
    data = {k: b"row %d" % k for k in range(0, 600, 3)}
    store.put_many(data.items())
    store.put_many({1: b"one", 3: b"three"})
    data.update({1: b"one", 3: b"three"})
    settle(store)
    assert list(store.range(-1, 1000)) == sorted(data.items())
    assert store.get(300) == b"row 300"


def test_context_manager_closes(open_store: StoreFactory) -> None:
    with open_store() as store:
        store.put(1, b"x")
    reopened = open_store()
    assert reopened.get(1) == b"x"


def test_all_codecs_read_each_other(open_store: StoreFactory) -> None:
    for number, codec in enumerate(["zlib", "zstd", "lz4"]):
        store = open_store(compression=codec)
        store.put(number, codec.encode() * 50)
    reader = open_store(compression="lz4")
    assert [v[:4] for _, v in reader.range(0, 2)] == [b"zlib", b"zstd", b"lz4l"]


def test_options_are_checked(open_store: StoreFactory) -> None:
    with pytest.raises(ParameterError, match="unknown mode"):
        open_store("fast")
    with pytest.raises(ParameterError, match="compression"):
        open_store(compression="bz2")
    with pytest.raises(ParameterError, match="GENERIC"):
        open_store("append", prf_pack_ids=True)
    open_store(pack_rows=10)
    with pytest.raises(ParameterError, match="pack_rows=10"):
        open_store(pack_rows=20)
    with pytest.raises(ParameterError, match="mode='generic'"):
        open_store("append")
    with pytest.raises(ParameterError, match="epoch_seconds=10"):
        open_store(epoch_seconds=3)


@pytest.mark.parametrize("partitions", [1, 4])
def test_hash_partitions(open_store: StoreFactory, mode: str, partitions: int) -> None:
    store = open_store(mode, pack_rows=3, partitions=partitions, table=f"p{partitions}")
    data = {key: b"%d" % key for key in range(0, 200, 3)}
    store.put_many(data)
    store.delete(3)
    del data[3]
    settle(store)
    assert list(store.range(-5, 500)) == sorted(data.items())
    assert list(store.range(10, 20)) == [(k, v) for k, v in sorted(data.items()) if 10 <= k <= 20]
    assert store.get(9) == b"9" and store.get(3) is None
