"""The 22 TPC-H queries run on plaintext DuckDB at SF 0.01, and the `veil tpch` commands."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import duckdb
import pytest
import sqlglot

from veil.cli import main
from veil_dev.tpch.gen import TABLES, read_table
from veil_dev.tpch.queries import QUERY_NUMBERS, query_text, query_texts

pytestmark = pytest.mark.integration

# Rows each query returns at SF 0.01 (tpchgen-cli data).
ROW_COUNTS = {1: 4, 2: 4, 3: 10, 4: 5, 5: 5, 6: 1, 7: 4, 8: 2, 9: 173, 10: 20, 11: 359,
              12: 2, 13: 33, 14: 1, 15: 1, 16: 296, 17: 1, 18: 2, 19: 1, 20: 1, 21: 1, 22: 7}  # fmt: skip


@pytest.fixture(scope="module")
def tpch_001(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tpch")
    assert main(["tpch", "gen", "--sf", "0.01", "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def plain(tpch_001: Path) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    for table in TABLES:
        con.register(f"{table}_arrow", read_table(tpch_001, table))
        con.execute(f"CREATE TABLE {table} AS SELECT * FROM {table}_arrow")
    return con


@pytest.mark.parametrize("number", QUERY_NUMBERS)
def test_query_runs_on_plaintext_duckdb(plain: duckdb.DuckDBPyConnection, number: int) -> None:
    rows = plain.sql(query_text(number)).fetchall()
    assert len(rows) == ROW_COUNTS[number]


@pytest.mark.parametrize("number", QUERY_NUMBERS)
def test_query_parses_in_sqlglot_for_both_servers(number: int) -> None:
    tree = sqlglot.parse_one(query_text(number), read="duckdb")
    for dialect in ("duckdb", "postgres"):
        assert sqlglot.parse_one(tree.sql(dialect=dialect), read=dialect)


def test_validation_answers(plain: duckdb.DuckDBPyConnection) -> None:
    """Values that agree with DuckDB's own published TPC-H answers at SF 0.01."""
    q1 = plain.sql(query_text(1)).fetchall()
    assert [row[-1] for row in q1] == [14876, 348, 29181, 14902]
    assert plain.sql(query_text(6)).fetchall() == [(Decimal("1193053.2253"),)]
    assert plain.sql(query_text(19)).fetchall() == [(Decimal("22923.0280"),)]
    assert plain.sql(query_text(17)).fetchall() == [(None,)]
    [(promo_revenue,)] = plain.sql(query_text(14)).fetchall()
    assert round(promo_revenue, 6) == 15.486546


def test_queries_command_writes_22_files(tmp_path: Path) -> None:
    assert main(["tpch", "queries", "--out", str(tmp_path)]) == 0
    written = sorted(tmp_path.glob("q*.sql"))
    assert len(written) == 22
    assert written[0].read_text() == query_texts()[1]


def test_gen_writes_one_parquet_file_per_table(tpch_001: Path) -> None:
    assert sorted(p.stem for p in tpch_001.glob("*.parquet")) == sorted(TABLES)


def _rounded(rows: list[dict[str, object]]) -> list[tuple[object, ...]]:
    """Rows with every non-integer number rounded to cents (engines differ in decimal scale)."""
    return [
        tuple(round(float(v), 2) if isinstance(v, Decimal | float) else v for v in row.values())
        for row in rows
    ]


@pytest.mark.postgres
def test_queries_agree_on_plaintext_postgres(
    tpch_001: Path, plain: duckdb.DuckDBPyConnection, postgres_url: str
) -> None:
    """The plaintext baseline the benchmark compares with: PostgreSQL, via sqlglot, same answers."""
    from veil.backends import connect

    server = connect(postgres_url)
    try:
        for table in TABLES:
            server.bulk_load(table, read_table(tpch_001, table))
        # As in the benchmark: without it PostgreSQL runs Q20 as a lineitem scan per row.
        server.execute("CREATE INDEX ON lineitem (l_partkey, l_suppkey)")
        for number, sql in query_texts().items():
            on_postgres = server.execute(sqlglot.transpile(sql, read="duckdb", write="postgres")[0])
            expected = plain.sql(sql).to_arrow_table()
            assert _rounded(on_postgres.to_pylist()) == _rounded(expected.to_pylist()), number
    finally:
        server.close()
