"""What only the PostgreSQL server offers: parallel HOM sums, row-wise HOM add, its log,
columns packed by alignment."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pytest

from veil.backends import n_square_bytes
from veil.backends.postgres import PostgresBackend
from veil.crypto import hom
from veil_dev.servers.postgres import ThrowawayCluster

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


@pytest.fixture
def server(postgres_url: str) -> Iterator[PostgresBackend]:
    backend = PostgresBackend(postgres_url)
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def paillier() -> object:
    return hom.PaillierKey.from_seed(bytes(range(32)), bits=512)


def test_parallel_hom_sum_combines_worker_states(server: PostgresBackend, paillier: object) -> None:
    values = list(range(-200, 1800))
    ciphertexts = pa.array(paillier.encrypt_ints(values), pa.binary())  # type: ignore[attr-defined]
    server.bulk_load("t_p", pa.table({"c": ciphertexts}))
    for setting in (
        "parallel_setup_cost = 0",
        "parallel_tuple_cost = 0",
        "min_parallel_table_scan_size = 0",
        "max_parallel_workers_per_gather = 2",
    ):
        server.execute(f"SET {setting}")
    plan = server.execute('EXPLAIN SELECT veil_hom_sum("c", $1) FROM "t_p"', [b"\x01"])
    assert "Partial Aggregate" in "\n".join(plan.column(0).to_pylist())
    n_square = paillier.public.n_square  # type: ignore[attr-defined]
    total = server.execute('SELECT veil_hom_sum("c", $1) FROM "t_p"', [n_square_bytes(n_square)])
    assert total.column(0)[0].as_py() == hom.sum_ciphertexts(ciphertexts, n_square)


def test_hom_add_adds_row_by_row(server: PostgresBackend, paillier: object) -> None:
    a = paillier.encrypt_ints([1, 2, 3])  # type: ignore[attr-defined]
    b = paillier.encrypt_ints([10, 20, 30])  # type: ignore[attr-defined]
    server.bulk_load("t_a", pa.table({"a": pa.array(a), "b": pa.array(b)}))
    n_square = n_square_bytes(paillier.public.n_square)  # type: ignore[attr-defined]
    sums = server.execute('SELECT veil_hom_add("a", "b", $1) FROM "t_a"', [n_square])
    assert paillier.decrypt_ints(sums.column(0).to_pylist()) == [11, 22, 33]  # type: ignore[attr-defined]


def test_server_log_records_every_statement(
    server: PostgresBackend, postgres_cluster: ThrowawayCluster
) -> None:
    server.execute("SELECT $1::bigint AS marker_4711", [4711])
    assert "marker_4711" in postgres_cluster.read_log()


def test_server_that_is_down_gives_a_clear_error() -> None:
    from veil.backends import ServerUnavailableError, connect
    from veil_dev.servers.ports import free_port

    with pytest.raises(ServerUnavailableError, match="check that it is running"):
        connect(f"postgresql://veil@127.0.0.1:{free_port()}/postgres")


def test_columns_are_created_widest_first(server: PostgresBackend) -> None:
    """A 4-byte ciphertext between two 8-byte ones would take 8 bytes with its padding."""
    data = pa.table(
        {
            "narrow": pa.array([1, None], pa.int32()),
            "wide": pa.array([2**40, 3], pa.int64()),
            "flag": pa.array([True, False]),
            "text": pa.array(["a", "b"]),
            "short": pa.array([7, 8], pa.int16()),
            "other": pa.array([-(2**31), 2**31 - 1], pa.int32()),
            "last": pa.array([5, 6], pa.int64()),
        }
    )
    server.bulk_load("t_packed", data)
    assert server.column_names("t_packed") == [
        "wide", "last", "narrow", "other", "short", "flag", "text",
    ]  # fmt: skip
    back = server.execute('SELECT * FROM "t_packed" ORDER BY "last"')
    assert back.select(data.column_names).equals(data)
