"""PostgreSQL runs a repeated statement with parameters as a server-side prepared one
(issue 41): planned once per connection, each run one round trip; a table changed under
it by another connection is read afresh."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pyarrow as pa
import pytest

from veil.backends.postgres import PostgresBackend

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

SQL = "SELECT b, c FROM t WHERE a = $1"


@pytest.fixture
def server(postgres_url: str) -> Iterator[PostgresBackend]:
    backend = PostgresBackend(postgres_url)
    backend.bulk_load(
        "t",
        pa.table(
            {
                "a": pa.array(range(2000), pa.int64()),
                "b": [bytes([i % 256]) * 16 for i in range(2000)],
                "c": pa.array(range(0, 14000, 7), pa.int64()),
            }
        ),
    )
    yield backend
    backend.close()


def _prepared(server: PostgresBackend) -> list[str]:
    """The statements prepared on the backend's own connection (they are per connection)."""
    rows = server._con.execute("SELECT statement FROM pg_prepared_statements").fetchall()
    return [str(row[0]) for row in rows]


def test_a_repeated_point_read_runs_prepared(server: PostgresBackend) -> None:
    for key in (3, 5, 8, 13):
        table = server.execute(SQL, [key])
        assert table.to_pylist() == [{"b": bytes([key]) * 16, "c": key * 7}]
    assert SQL in _prepared(server)
    # inside a transaction too (the same connection)
    with server.transaction():
        assert server.execute(SQL, [21]).column("c").to_pylist() == [147]
    # a large result (2,000 rows) is read through ADBC again, not prepared
    whole = "SELECT a FROM t WHERE a >= $1"
    server.execute(whole, [0])
    server.execute(whole, [0])
    assert whole not in _prepared(server)


def test_a_table_changed_under_it_is_read_afresh(
    server: PostgresBackend, postgres_url: str
) -> None:
    for key in (1, 2):
        server.execute(SQL, [key])
    assert SQL in _prepared(server)
    with psycopg.connect(postgres_url, autocommit=True) as other:  # another client's DDL
        other.execute("ALTER TABLE t ALTER COLUMN c TYPE text")
    assert server.execute(SQL, [4]).to_pylist() == [{"b": bytes([4]) * 16, "c": "28"}]
    assert server.execute(SQL, [6]).to_pylist() == [{"b": bytes([6]) * 16, "c": "42"}]
