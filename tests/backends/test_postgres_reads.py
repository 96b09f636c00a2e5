"""PostgreSQL's fast read path (ADBC -> Arrow) gives exactly what the psycopg row path gives."""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest

from veil.backends import BackendError, ServerUnavailableError, pg_read
from veil.backends.postgres import PostgresBackend

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


@pytest.fixture
def server(postgres_url: str) -> Iterator[PostgresBackend]:
    backend = PostgresBackend(postgres_url)
    yield backend
    backend.close()


def ciphertext_table(rows: int) -> pa.Table:
    """Columns shaped like Veil's: DET/OPE bigints, RND/HOM bytea, row ids, all with NULLs."""
    rng = np.random.default_rng(7)
    valid = rng.random(rows) > 0.1
    blobs = [bytes(rng.integers(0, 256, 29 + i % 17, dtype=np.uint8)) for i in range(rows)]
    return pa.table(
        {
            "id": pa.array(np.arange(rows, dtype=np.int64)),
            "det": pa.array(rng.integers(-(2**63), 2**63 - 1, rows), mask=~valid),
            "small": pa.array(rng.integers(-(2**31), 2**31 - 1, rows, dtype=np.int32)),
            "rnd": pa.array([b if ok else None for b, ok in zip(blobs, valid, strict=True)]),
        }
    )


def both_paths(server: PostgresBackend, sql: str, params: list[object] | None = None) -> pa.Table:
    """The ADBC result, after checking it equals the psycopg one value for value and type."""
    fast = server.execute(sql, params)
    rows = server._execute_rows(sql, params)
    assert fast.schema.equals(rows.schema), (fast.schema, rows.schema)
    assert fast.to_pylist() == rows.to_pylist()
    return fast


def test_every_type_veil_fetches_matches_the_row_path(server: PostgresBackend) -> None:
    server.bulk_load("t_c", ciphertext_table(500))
    table = both_paths(server, 'SELECT * FROM "t_c" ORDER BY "id"')
    assert table.schema.types == [pa.int64(), pa.int64(), pa.int32(), pa.binary()]
    assert table.column("det").null_count > 0 and table.column("rnd").null_count > 0
    aggregates = both_paths(
        server,
        'SELECT count(*) AS n, sum("det" % 1000) AS s, sum("small"::numeric(20, 3)) AS d, '
        'avg("small") AS a, bool_or("det" > 0) AS b FROM "t_c"',
    )
    assert aggregates.schema.field("s").type == pa.decimal128(38, 0)
    assert aggregates.schema.field("d").type == pa.decimal128(38, 3)


def test_plaintext_baseline_types_match_the_row_path(server: PostgresBackend) -> None:
    table = both_paths(
        server,
        "SELECT 1::smallint AS i2, 2.5::real AS f4, 2.5::float8 AS f8, 'é'::text AS s, "
        "'ab'::varchar AS v, 'a'::char(3) AS c, DATE '1995-03-15' AS d, "
        "TIMESTAMP '2000-01-02 03:04:05.5' AS ts, 12.30::numeric(10, 2) AS n, "
        "NULL::bytea AS nb, NULL::numeric AS nn, NULL::date AS nd",
    )
    row = table.to_pylist()[0]
    assert row["d"] == datetime.date(1995, 3, 15) and row["n"] == Decimal("12.30")
    assert row["nb"] is None and row["nn"] is None


def test_types_adbc_reads_differently_fall_back_to_rows(server: PostgresBackend) -> None:
    table = both_paths(server, "SELECT INTERVAL '1 day' AS i, 4294967295::oid AS o")
    assert table.schema.types == [pa.string(), pa.int64()]
    assert table.column("o").to_pylist() == [4294967295]


def test_empty_results_keep_their_types(server: PostgresBackend) -> None:
    server.bulk_load("t_c", ciphertext_table(10))
    empty = both_paths(
        server, 'SELECT "det", "rnd", sum("det") AS s FROM "t_c" WHERE false GROUP BY 1, 2'
    )
    assert empty.num_rows == 0
    assert empty.schema.types == [pa.int64(), pa.binary(), pa.decimal128(38, 0)]
    assert list(server.execute_batches('SELECT * FROM "t_c" WHERE false')) == []


def test_large_results_stream_in_bounded_batches(server: PostgresBackend) -> None:
    data = ciphertext_table(120_000)
    server.bulk_load("t_c", data)
    batches = list(
        server.execute_batches('SELECT * FROM "t_c" WHERE "id" >= $1', [0], batch_rows=25_000)
    )
    assert all(batch.num_rows <= 25_000 for batch in batches)
    streamed = pa.Table.from_batches(batches).sort_by("id")
    assert streamed.equals(data)


def test_an_abandoned_stream_leaves_the_connection_usable(server: PostgresBackend) -> None:
    server.bulk_load("t_c", ciphertext_table(50_000))
    stream = server.execute_batches('SELECT * FROM "t_c"', batch_rows=1000)
    next(stream)
    stream.close()  # type: ignore[attr-defined]
    assert server.execute('SELECT count(*) FROM "t_c"').column(0)[0].as_py() == 50_000


def test_parameters_bind_as_bigint_and_bytea(server: PostgresBackend) -> None:
    data = ciphertext_table(100)
    server.bulk_load("t_c", data)
    wanted = data.column("rnd")[3].as_py()
    found = both_paths(
        server, 'SELECT "id", $1 * 1000 AS big FROM "t_c" WHERE "rnd" = $2', [2**40, wanted]
    )
    assert found.to_pylist() == [{"id": 3, "big": 2**40 * 1000}]
    named = server.execute("SELECT $1::text AS t", ["x"])  # bound by psycopg
    assert named.to_pylist() == [{"t": "x"}]


def test_listeners_see_reads_with_their_parameters(server: PostgresBackend) -> None:
    seen: list[tuple[str, object]] = []
    server.add_statement_listener(lambda sql, params: seen.append((sql, params)))
    server.execute("SELECT $1::bigint AS x", [5])
    list(server.execute_batches("SELECT $1::bytea AS y", [b"\x01"]))
    assert seen == [("SELECT $1::bigint AS x", [5]), ("SELECT $1::bytea AS y", [b"\x01"])]


def test_reads_inside_a_transaction_see_its_writes(server: PostgresBackend) -> None:
    server.bulk_load("t_c", ciphertext_table(20))
    with server.transaction():
        server.execute('DELETE FROM "t_c" WHERE "id" < $1', [15])
        assert server.execute('SELECT count(*) FROM "t_c"').column(0)[0].as_py() == 5
        batches = list(server.execute_batches('SELECT "id" FROM "t_c"'))
        assert sum(batch.num_rows for batch in batches) == 5
    assert server.execute('SELECT count(*) FROM "t_c"').column(0)[0].as_py() == 5


def test_session_settings_reach_the_arrow_connection(server: PostgresBackend) -> None:
    server.execute("SELECT 1")  # opens the second connection first
    server.execute("SET work_mem = '3MB'")
    assert server.execute("SELECT current_setting('work_mem') AS w").column(0)[0].as_py() == "3MB"


def test_syntax_errors_say_where(server: PostgresBackend) -> None:
    with pytest.raises(BackendError, match=r'syntax error at or near ""t_c""(.|\n)*LINE 1'):
        server.execute('SELECT 1 FRM "t_c"')
    with pytest.raises(BackendError, match='relation "no_such" does not exist'):
        list(server.execute_batches('SELECT * FROM "no_such"'))


def test_a_lost_server_gives_server_unavailable(server: PostgresBackend) -> None:
    reader_pid = server.execute("SELECT pg_backend_pid() AS p").column(0)[0].as_py()
    server._execute_rows("SELECT pg_terminate_backend($1::int)", [reader_pid])
    with pytest.raises(ServerUnavailableError, match="lost the PostgreSQL server"):
        server.execute("SELECT 1")


def test_settings_toggled_around_statements_do_not_pile_up() -> None:
    """The ADBC reader replays the last SET/RESET per parameter on a reconnect, not every one."""
    reader = pg_read.ArrowReader("postgresql://nobody@127.0.0.1:1/none", 1)
    for _ in range(1000):
        reader.remember_setting("SET enable_sort = off")
        reader.remember_setting("RESET enable_sort")
    reader.remember_setting("SET LOCAL work_mem = '64MB'")
    assert list(reader._settings.values()) == ["RESET enable_sort", "SET LOCAL work_mem = '64MB'"]
