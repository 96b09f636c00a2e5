"""Every backend keeps the contract of veil.backends.base."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from veil.backends import Backend, BackendError, connect
from veil.backends import duckdb as duckdb_backend
from veil.backends.duckdb import DuckDBBackend

pytestmark = pytest.mark.integration


@pytest.fixture
def backend(server_url: str) -> Iterator[Backend]:
    server = connect(server_url)
    yield server
    server.close()


def sample(rows: int = 5) -> pa.Table:
    return pa.table(
        {
            "k": pa.array(range(rows), pa.int64()),
            "small": pa.array([i % 3 for i in range(rows)], pa.int32()),
            "c": pa.array(
                [bytes([i % 256, 0, 255]) if i % 2 else None for i in range(rows)], pa.binary()
            ),
            "s": pa.array([f"v{i}" for i in range(rows)], pa.string()),
            "flag": pa.array([i % 2 == 0 for i in range(rows)], pa.bool_()),
        }
    )


def test_bulk_load_then_select_round_trips_arrow(backend: Backend) -> None:
    data = sample()
    assert backend.bulk_load("t_a1", data) == 5
    back = backend.execute('SELECT * FROM "t_a1" ORDER BY "k"')
    # PostgreSQL creates the columns widest first (alignment); Veil names what it reads
    assert back.select(data.column_names).equals(data)


def test_parameters_are_numbered(backend: Backend) -> None:
    backend.bulk_load("t_a1", sample())
    result = backend.execute(
        'SELECT "k" FROM "t_a1" WHERE "k" >= $1 AND "c" = $2', [2, b"\x03\x00\xff"]
    )
    assert result.column(0).to_pylist() == [3]


def test_execute_batches_streams_all_rows(backend: Backend) -> None:
    backend.bulk_load("t_a1", sample(100))
    batches = list(backend.execute_batches('SELECT "k" FROM "t_a1" ORDER BY "k"', batch_rows=30))
    assert all(batch.num_rows <= 30 for batch in batches)
    assert sum(batch.num_rows for batch in batches) == 100


def test_failed_load_leaves_no_table_and_can_be_rerun(backend: Backend) -> None:
    def failing() -> Iterator[pa.RecordBatch]:
        yield from sample().to_batches()
        raise RuntimeError("encryption failed half way")

    with pytest.raises(RuntimeError):
        backend.bulk_load("t_a1", failing())
    assert backend.table_names() == []
    backend.bulk_load("t_a1", sample())
    assert backend.table_names() == ["t_a1"]


def test_failed_reload_keeps_the_old_table(backend: Backend) -> None:
    backend.bulk_load("t_a1", sample(3))

    def failing() -> Iterator[pa.RecordBatch]:
        yield from sample(7).to_batches()
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        backend.bulk_load("t_a1", failing())
    assert backend.execute('SELECT count(*) FROM "t_a1"').column(0)[0].as_py() == 3


def test_append_adds_rows(backend: Backend) -> None:
    backend.bulk_load("t_a1", sample(3))
    backend.append("t_a1", sample(2))
    assert backend.execute('SELECT count(*) FROM "t_a1"').column(0)[0].as_py() == 5


def test_rename_and_drop(backend: Backend) -> None:
    backend.bulk_load("t_a1", sample())
    backend.rename_table("t_a1", "t_b2")
    assert backend.table_names() == ["t_b2"]
    backend.drop_table("t_b2")
    assert backend.table_names() == []


def test_statement_listener_sees_every_statement(backend: Backend) -> None:
    seen: list[tuple[str, object]] = []
    remove = backend.add_statement_listener(lambda sql, params: seen.append((sql, params)))
    backend.execute("SELECT $1::bigint", [42])
    assert ("SELECT $1::bigint", [42]) in [(sql, list(p) if p else p) for sql, p in seen]
    remove()
    before = len(seen)
    backend.execute("SELECT 1")
    assert len(seen) == before


def test_estimate_reports_rows(backend: Backend) -> None:
    backend.bulk_load("t_a1", sample(50))
    estimate = backend.estimate('SELECT * FROM "t_a1" WHERE "k" > $1', [10])
    # an estimate (Spark's from bytes, not rows), but of a result that is not empty
    assert estimate.rows > 0


def test_a_statement_asked_again_keeps_its_planning_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DuckDB's estimate carries a measured planning time: the first measured for its text,
    however many other statements come between while it is still asked (the ILP designer
    priced one plan apart in its two designs of one workload when the cache was forgotten
    whole)."""
    monkeypatch.setattr(duckdb_backend, "_PLANNING_KEPT", 3)
    backend = connect(f"duckdb:///{tmp_path / 'planning.duckdb'}")
    try:
        assert isinstance(backend, DuckDBBackend)
        backend.bulk_load("t_p1", sample(50))
        kept = 'SELECT * FROM "t_p1" WHERE "k" > 10'
        first = backend.estimate(kept).planning
        for n in range(10):
            backend.estimate(f'SELECT * FROM "t_p1" WHERE "k" > {n + 100}')
            assert backend.estimate(kept).planning == first
        for n in range(3):  # asked no more: it goes, the others stay
            backend.estimate(f'SELECT * FROM "t_p1" WHERE "k" < {n}')
        assert kept not in backend._planning
    finally:
        backend.close()


def test_transaction_rolls_back_on_error(backend: Backend) -> None:
    backend.bulk_load("t_a1", sample(3))
    with pytest.raises(RuntimeError), backend.transaction():
        backend.execute('DELETE FROM "t_a1"')
        raise RuntimeError("client failed")
    assert backend.execute('SELECT count(*) FROM "t_a1"').column(0)[0].as_py() == 3


def test_rejected_statement_raises_backend_error(backend: Backend) -> None:
    with pytest.raises(BackendError):
        backend.execute('SELECT * FROM "no_such_table"')


def test_names_must_be_plain_identifiers(backend: Backend) -> None:
    with pytest.raises(BackendError, match="plain identifier"):
        backend.bulk_load('x"; DROP TABLE y; --', sample())


def test_table_bytes_is_positive_after_load(backend: Backend) -> None:
    backend.bulk_load("t_a1", sample(1000))
    assert backend.table_bytes("t_a1") > 0


def test_plaintext_types_round_trip(backend: Backend) -> None:
    """Plaintext baselines (benchmarks) load decimals, dates and string views too."""
    import datetime
    from decimal import Decimal

    data = pa.table(
        {
            "d": pa.array(
                [Decimal("-1234.56"), Decimal("0.01"), None, Decimal("9999999999999.99")],
                pa.decimal128(15, 2),
            ),
            "q": pa.array(
                [Decimal("1.5"), Decimal("-0.0001"), Decimal("3"), None], pa.decimal128(12, 4)
            ),
            "day": pa.array(
                [
                    datetime.date(1992, 1, 1),
                    None,
                    datetime.date(1970, 1, 1),
                    datetime.date(2000, 1, 1),
                ]
            ),
            "sv": pa.array(["a", "bb", None, "dddd"], pa.string_view()),
        }
    )
    backend.bulk_load("t_plain", data)
    back = backend.execute('SELECT * FROM "t_plain"')
    assert back.column("d").to_pylist() == data.column("d").to_pylist()
    assert back.column("q").to_pylist() == data.column("q").to_pylist()
    assert back.column("day").to_pylist() == data.column("day").to_pylist()
    assert back.column("sv").cast(pa.string()).to_pylist() == ["a", "bb", None, "dddd"]


def test_sliced_and_chunked_input_loads_exactly_its_rows(backend: Backend) -> None:
    data = sample(50)
    sliced = data.slice(7, 20)  # every column with a non-zero offset
    chunked = pa.concat_tables([sliced.slice(0, 5), sliced.slice(5)])
    backend.bulk_load("t_a1", chunked)
    back = backend.execute('SELECT * FROM "t_a1" ORDER BY "k"')
    assert back.to_pylist() == sliced.to_pylist()


def test_null_integers_and_empty_strings_round_trip(backend: Backend) -> None:
    data = pa.table(
        {
            "i": pa.array([None, 1, None, -(2**63)], pa.int64()),
            "s": pa.array(["", None, "é", ""], pa.string()),
            "b": pa.array([b"", b"\x00", None, b"\xff" * 600], pa.binary()),
        }
    )
    backend.bulk_load("t_n", data)
    back = backend.execute('SELECT * FROM "t_n"')
    assert back.to_pylist() == data.to_pylist()


def test_empty_load_creates_an_empty_table(backend: Backend) -> None:
    schema = pa.schema([("k", pa.int64()), ("c", pa.binary())])
    assert backend.bulk_load("t_e", iter(()), schema=schema) == 0
    assert backend.execute('SELECT count(*) FROM "t_e"').column(0)[0].as_py() == 0


def test_render_numbers_placeholders_for_both_dialects() -> None:
    import sqlglot

    from veil.backends import n_square_bytes, render

    tree = sqlglot.parse_one("SELECT a FROM t WHERE b = ? AND c % 3 = ?")
    assert render(tree, "postgres") == "SELECT a FROM t WHERE b = $1 AND c % 3 = $2"
    numbered = sqlglot.parse_one("SELECT a FROM t WHERE b = $2 AND c = $1", read="duckdb")
    assert render(numbered, "postgres") == "SELECT a FROM t WHERE b = $2 AND c = $1"
    assert n_square_bytes(0x1_0203) == b"\x01\x02\x03"


def test_unknown_url_scheme_is_refused() -> None:
    with pytest.raises(BackendError, match="unknown server URL"):
        connect("mysql://nobody@localhost/db")


def test_table_bytes_count_long_values_stored_apart(backend: Backend) -> None:
    """Sealed blocks (tens of KB each) live outside their column's segments: counted too."""
    noise = pa.array([os.urandom(200_000) for _ in range(40)], pa.binary())  # incompressible
    backend.bulk_load("t_long", pa.table({"n": noise}))
    assert backend.table_bytes("t_long") >= 40 * 200_000
