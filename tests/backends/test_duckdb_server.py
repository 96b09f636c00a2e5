"""One DuckDB server file opened by several backends in one process."""

from __future__ import annotations

import pyarrow as pa
import pytest

from veil.backends import connect, render
from veil.backends.duckdb import DuckDBBackend

pytestmark = pytest.mark.integration


def test_the_same_file_opens_twice_and_both_see_the_data(duckdb_url: str) -> None:
    first, second = connect(duckdb_url), connect(duckdb_url)
    first.bulk_load("t_a", pa.table({"k": pa.array([1, 2, 3], pa.int64())}))
    assert second.execute('SELECT sum("k") AS s FROM "t_a"').column(0)[0].as_py() == 6
    first.close()
    second.append("t_a", pa.table({"k": pa.array([4], pa.int64())}))
    assert second.execute('SELECT count(*) FROM "t_a"').column(0)[0].as_py() == 4
    second.close()
    third = connect(duckdb_url)  # the database reopens after its last user closed it
    assert third.table_names() == ["t_a"]
    third.close()


def test_server_functions_work_on_every_backend_of_a_file(duckdb_url: str) -> None:
    from sqlglot import exp

    backends = [DuckDBBackend(duckdb_url) for _ in range(2)]
    backends[0].bulk_load("t_s", pa.table({"c": pa.array([b"\x01" + bytes(16)], pa.binary())}))
    for backend in backends:
        match = backend.search_match(exp.column("c"), exp.Placeholder(this="1"))
        sql = render(exp.select(match.as_("m")).from_("t_s"), backend.dialect)
        assert backend.execute(sql, [b"\x01" + bytes(32)]).num_rows == 1
    for backend in backends:
        backend.close()


def test_each_backend_has_its_own_transaction(duckdb_url: str) -> None:
    writer, reader = connect(duckdb_url), connect(duckdb_url)
    writer.bulk_load("t_a", pa.table({"k": pa.array([1, 2], pa.int64())}))
    with writer.transaction():
        writer.execute('DELETE FROM "t_a"')
        assert writer.execute('SELECT count(*) FROM "t_a"').column(0)[0].as_py() == 0
        assert reader.execute('SELECT count(*) FROM "t_a"').column(0)[0].as_py() == 2
    assert reader.execute('SELECT count(*) FROM "t_a"').column(0)[0].as_py() == 0
    writer.close()
    reader.close()


def test_closing_twice_is_harmless(duckdb_url: str) -> None:
    backend = connect(duckdb_url)
    backend.close()
    backend.close()
    again = connect(duckdb_url)
    assert again.table_names() == []
    again.close()
