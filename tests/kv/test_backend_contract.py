"""The KVBackend contract, checked directly on every backend."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from veil.errors import ParameterError
from veil.kv.backends import KVBackend, Row, open_backend


@pytest.fixture
def backend(kv_url: str, kv_table: str) -> Iterator[KVBackend]:
    store = open_backend(kv_url)
    store.ensure_table(kv_table)
    store.ensure_table(kv_table)  # idempotent
    yield store
    store.drop_table(kv_table)
    store.close()


def test_backend_is_a_kvbackend(backend: KVBackend) -> None:
    assert isinstance(backend, KVBackend)
    assert backend.default_partitions >= 1


def test_floor_get_and_scan_follow_byte_order(backend: KVBackend, kv_table: str) -> None:
    for key in [b"\x02b", b"\x01", b"\x02", b"\x02a\xff", b"\xff"]:
        backend.upsert(kv_table, 0, key, b"v" + key, b"t")
    backend.upsert(kv_table, 1, b"\x02a", b"other partition", b"t")
    assert backend.get(kv_table, 0, b"\x02") == Row(b"\x02", b"v\x02", b"t")
    assert backend.get(kv_table, 0, b"\x03") is None
    assert backend.floor(kv_table, 0, b"\x02a") == Row(b"\x02", b"v\x02", b"t")
    assert backend.floor(kv_table, 0, b"\x00") is None
    assert backend.floor(kv_table, 0, b"\xff\xff").key == b"\xff"
    keys = [r.key for r in backend.scan(kv_table, 0)]
    assert keys == [b"\x01", b"\x02", b"\x02a\xff", b"\x02b", b"\xff"]
    assert [r.key for r in backend.scan(kv_table, 0, b"\x02", b"\x02b")] == keys[1:4]
    assert [r.key for r in backend.scan(kv_table, 0, b"\x02", None, limit=2)] == keys[1:3]


def test_conditional_writes(backend: KVBackend, kv_table: str) -> None:
    assert backend.insert_if_not_exists(kv_table, 0, b"k", b"v1", b"h1")
    assert not backend.insert_if_not_exists(kv_table, 0, b"k", b"v2", b"h2")
    assert not backend.update_if(kv_table, 0, b"k", b"v3", b"h3", b"wrong")
    assert not backend.update_if(kv_table, 0, b"missing", b"v3", b"h3", b"h1")
    assert backend.update_if(kv_table, 0, b"k", b"v3", b"h3", b"h1")
    assert backend.get(kv_table, 0, b"k") == Row(b"k", b"v3", b"h3")


def test_deletes_and_sizes(backend: KVBackend, kv_table: str) -> None:
    for i in range(3):
        backend.upsert(kv_table, 5, bytes([i + 1]), b"x" * 10, b"t")
    backend.upsert(kv_table, 6, b"\x01", b"y", b"t")
    assert backend.stored_bytes(kv_table) == 3 * 12 + 3
    backend.delete(kv_table, 5, b"\x01")
    assert backend.get(kv_table, 5, b"\x01") is None
    backend.delete_partition(kv_table, 5)
    assert list(backend.scan(kv_table, 5)) == []
    assert backend.get(kv_table, 6, b"\x01") is not None


def test_long_scans_page_correctly(backend: KVBackend, kv_table: str) -> None:
    keys = [i.to_bytes(4, "big") for i in range(1300)]
    for key in keys:
        backend.upsert(kv_table, 0, key, b"", b"t")
    assert [r.key for r in backend.scan(kv_table, 0)] == keys
    assert [r.key for r in backend.scan(kv_table, 0, keys[10], None, limit=600)] == keys[10:610]


def test_unknown_url_scheme_is_rejected() -> None:
    with pytest.raises(ParameterError, match="sqlite:///"):
        open_backend("redis://localhost/0")
