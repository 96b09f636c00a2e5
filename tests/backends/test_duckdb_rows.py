"""A DuckDB server's repeated small reads, fetched as rows (``veil.backends.duckdb_rows``):
the same tables as through a relation, whatever changes between runs."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pytest

from veil.backends import connect
from veil.backends.duckdb import DuckDBBackend
from veil.backends.duckdb_rows import FEW

pytestmark = pytest.mark.integration

_READ = 'SELECT "k", "b", "s", "d", "i" FROM "t_r" WHERE "k" >= $1 ORDER BY "k"'


@pytest.fixture
def backend(duckdb_url: str) -> Iterator[DuckDBBackend]:
    server = connect(duckdb_url)
    assert isinstance(server, DuckDBBackend)
    rows = 3 * FEW
    server.bulk_load(
        "t_r",
        pa.table(
            {
                "k": pa.array(range(rows), pa.int64()),
                "b": pa.array([bytes([n % 256]) * 3 if n % 5 else None for n in range(rows)]),
                "s": pa.array([f"é{n}" for n in range(rows)], pa.string()),
                "d": pa.array(range(rows), pa.int32()).cast(pa.date32()),
                "i": pa.array(range(rows), pa.int32()),
            }
        ),
    )
    yield server
    server.close()


def _relation_result(server: DuckDBBackend, sql: str, params: list[object]) -> pa.Table:
    relation = server._con.sql(sql, params=params)
    return relation.to_arrow_table()


def test_a_small_read_again_gives_the_relations_table(backend: DuckDBBackend) -> None:
    first = backend.execute(_READ, [3 * FEW - 5])
    assert backend._row_reads.knows(_READ)
    for start in (3 * FEW - 5, 3 * FEW - 1, 3 * FEW):  # five rows, one, none
        again = backend.execute(_READ, [start])
        assert again.equals(_relation_result(backend, _READ, [start]))
        assert again.schema == first.schema
        with backend.transaction():  # the read left the connection free for any statement
            backend.execute('DELETE FROM "t_r" WHERE "k" = -1')


def test_more_rows_than_last_time_are_all_read(backend: DuckDBBackend) -> None:
    backend.execute(_READ, [3 * FEW - 1])
    assert backend._row_reads.knows(_READ)
    many = backend.execute(_READ, [0])  # past FEW rows: the rest comes as Arrow
    assert many.num_rows == 3 * FEW
    assert many.equals(_relation_result(backend, _READ, [0]))
    assert not backend._row_reads.knows(_READ)  # read through a relation from now on
    assert backend.execute(_READ, [0]).equals(many)


def test_a_table_made_again_with_other_types_is_read_through_a_relation(
    backend: DuckDBBackend,
) -> None:
    sql = 'SELECT "k", "i" FROM "t_r" WHERE "k" = $1'
    backend.execute(sql, [1])
    assert backend._row_reads.knows(sql)
    # DDL (or a peel) makes the table again under its name, a column of another type
    backend.execute(
        'CREATE OR REPLACE TABLE "t_r" AS SELECT "k", CAST("i" AS DOUBLE) AS "i" FROM "t_r"'
    )
    again = backend.execute(sql, [1])
    assert again.schema.field("i").type == pa.float64()
    assert again.equals(_relation_result(backend, sql, [1]))


def test_writes_and_wide_results_are_not_remembered(backend: DuckDBBackend) -> None:
    update = 'UPDATE "t_r" SET "i" = "i" + 1 WHERE "k" = $1 RETURNING "i"'
    backend.execute(update, [2])
    assert not backend._row_reads.knows(update)
    assert backend.execute(update, [2]).column(0).to_pylist() == [4]  # ran once each time
    wide = 'SELECT "k" FROM "t_r" WHERE "k" >= $1'
    backend.execute(wide, [0])
    assert not backend._row_reads.knows(wide)
    decimal = 'SELECT CAST("k" AS DECIMAL(9,2)) AS v FROM "t_r" WHERE "k" = $1'
    backend.execute(decimal, [1])
    assert not backend._row_reads.knows(decimal)  # only plain types are rebuilt from rows


def test_a_remembered_read_that_fails_fails_as_through_a_relation(
    backend: DuckDBBackend,
) -> None:
    from veil.backends.base import BackendError

    sql = """SELECT CAST(CASE WHEN "k" = 1 THEN '1' ELSE "s" END AS INTEGER) AS v
             FROM "t_r" WHERE "k" = $1"""
    assert backend.execute(sql, [1]).column(0).to_pylist() == [1]
    assert backend._row_reads.knows(sql)
    with pytest.raises(BackendError):
        backend.execute(sql, [2])  # 'é2' is no INTEGER
    assert backend.execute(sql, [1]).column(0).to_pylist() == [1]  # the connection is free
