"""Cassandra-specific behaviour of the backend (the shared contract runs via kv_url)."""

from __future__ import annotations

import socket
import statistics
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from cassandra import WriteTimeout

from veil.errors import ParameterError
from veil.kv.backends import cassandra as cassandra_backend
from veil.kv.backends import open_backend
from veil.kv.backends.cassandra import CassandraBackend, CassandraBackendError


@pytest.mark.parametrize(
    "url", ["cassandra:///ks", "cassandra://h:1/", "cassandra://h:1/Bad-Name", "cassandra://h/a/b"]
)
def test_bad_urls_are_rejected(url: str) -> None:
    with pytest.raises(ParameterError, match="cassandra://host:port/keyspace"):
        open_backend(url)


def test_unreachable_server_says_how_to_start_one() -> None:
    with pytest.raises(CassandraBackendError, match="veil kv cassandra start"):
        open_backend("cassandra://127.0.0.1:1/ks")


def test_sessions_turn_nagle_off(monkeypatch: pytest.MonkeyPatch) -> None:
    # Nagle's algorithm held every request of 4 KB or more (every pack) for
    # the server's delayed ACK: ~45 ms a write.
    made: dict[str, Any] = {}

    class FakeCluster:
        def __init__(self, **options: Any):
            made.update(options)

        def connect(self) -> str:
            return "session"

    monkeypatch.setattr(cassandra_backend, "Cluster", FakeCluster)
    assert cassandra_backend._new_session(["127.0.0.1"], 9042) == "session"  # type: ignore[comparison-overlap]
    assert (socket.IPPROTO_TCP, socket.TCP_NODELAY, 1) in made["sockopts"]


@pytest.fixture
def backend(cassandra_url: str) -> Iterator[CassandraBackend]:
    store = open_backend(cassandra_url)
    assert isinstance(store, CassandraBackend)
    table = f"c{uuid.uuid4().hex[:12]}"
    store.ensure_table(table)
    store.table = table  # type: ignore[attr-defined]
    yield store
    store.drop_table(table)
    store.close()


@pytest.mark.cassandra
def test_one_of_many_racing_inserts_wins(backend: Any) -> None:
    def attempt(i: int) -> bool:
        return bool(backend.insert_if_not_exists(backend.table, 3, b"pack", b"v%d" % i, b"t%d" % i))

    with ThreadPoolExecutor(8) as pool:
        outcomes = list(pool.map(attempt, range(16)))
    assert outcomes.count(True) == 1
    winner = outcomes.index(True)
    assert backend.get(backend.table, 3, b"pack").tag == b"t%d" % winner


@pytest.mark.cassandra
def test_racing_update_ifs_on_one_tag_apply_once(backend: Any) -> None:
    backend.insert_if_not_exists(backend.table, 0, b"k", b"v", b"h0")

    def attempt(i: int) -> bool:
        return bool(backend.update_if(backend.table, 0, b"k", b"v%d" % i, b"h%d" % i, b"h0"))

    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(attempt, range(1, 9))).count(True) == 1


@pytest.mark.cassandra
def test_timed_out_lwt_is_resolved_by_a_serial_read(
    backend: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend.insert_if_not_exists(backend.table, 0, b"k", b"v", b"h0")
    real = backend._execute

    def applied_then_timed_out(table: str, name: str, params: tuple, **kw: Any) -> Any:
        result = real(table, name, params, **kw)
        if name == "update_if":
            raise WriteTimeout("simulated CAS timeout", write_type=5)
        return result

    monkeypatch.setattr(backend, "_execute", applied_then_timed_out)
    assert backend.update_if(backend.table, 0, b"k", b"v1", b"h1", b"h0")  # it did apply
    assert not backend.update_if(backend.table, 0, b"k", b"v2", b"h2", b"h0")  # it did not


@pytest.mark.cassandra
def test_closed_backend_refuses_work(cassandra_url: str) -> None:
    store = open_backend(cassandra_url)
    store.close()
    store.close()  # idempotent
    with pytest.raises(ParameterError, match="closed"):
        store.get("t", 0, b"k")


@pytest.mark.cassandra
def test_a_pack_sized_write_is_not_held_for_a_delayed_ack(backend: Any) -> None:
    connection = backend._live().cluster.control_connection._connection
    assert connection._socket.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    value = bytes(range(256)) * 64  # 16 KiB, a blocked pack's size
    backend.insert_if_not_exists(backend.table, 0, b"k", value, b"t0")
    took = []
    for i in range(9):
        began = time.perf_counter()
        assert backend.update_if(backend.table, 0, b"k", value, b"t%d" % (i + 1), b"t%d" % i)
        took.append(time.perf_counter() - began)
    # With Nagle on, each took the delayed ACK's 40 ms or more (49-51 ms here).
    assert statistics.median(took) < 0.040
