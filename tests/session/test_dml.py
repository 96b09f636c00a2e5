"""INSERT, UPDATE and DELETE through Veil, mirrored on plaintext DuckDB."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from tests.support.oracle import assert_same, server_url
from veil.load.loader import load
from veil.session.session import Session
from veil.sql.errors import QueryError

WORKLOAD = [
    "SELECT * FROM orders WHERE o_orderstatus = 'F' AND o_totalprice > 1000",
    "SELECT * FROM nation WHERE n_regionkey = 1",
    "SELECT o_orderstatus, SUM(o_totalprice), AVG(o_totalprice - o_shippriority) FROM orders GROUP BY 1",
]
STATEMENTS = [
    "INSERT INTO nation VALUES (25, 'ATLANTIS', 1, 'sunk'), (26, 'LEMURIA', 2, NULL)",
    "INSERT INTO nation (n_nationkey, n_name) VALUES (27, 'MU')",
    "INSERT INTO region SELECT r_regionkey + 10, r_name || '-2', r_comment FROM region WHERE r_regionkey < 2",
    "UPDATE nation SET n_comment = upper(n_name), n_regionkey = n_regionkey + 1 WHERE n_regionkey = 1",
    "UPDATE orders SET o_totalprice = o_totalprice * 2 WHERE o_orderstatus = 'F' AND o_totalprice > 300000",
    "INSERT INTO orders SELECT o_orderkey + 1000000, o_custkey, 'F', -o_totalprice, o_orderdate, "
    "o_orderpriority, o_clerk, o_shippriority, o_comment FROM orders WHERE o_orderkey < 500",
    "INSERT INTO orders VALUES (2000001, 1, 'O', NULL, DATE '1995-01-01', '1-URGENT', 'c', 0, 'x')",
    "UPDATE orders SET o_shippriority = 3 WHERE o_orderstatus = 'O' AND o_totalprice < 2000",
    "DELETE FROM orders WHERE o_orderstatus = 'P'",
    "DELETE FROM nation WHERE n_name IN ('ATLANTIS', 'ALGERIA')",
    "UPDATE region SET r_comment = NULL",
]
CHECKS = [
    "SELECT * FROM nation",
    "SELECT * FROM region",
    "SELECT o_orderstatus, COUNT(*), SUM(o_totalprice) FROM orders GROUP BY 1",
    "SELECT o_orderstatus, SUM(o_totalprice), AVG(o_totalprice - o_shippriority), COUNT(o_totalprice) "
    "FROM orders GROUP BY 1",
    "SELECT SUM(o_totalprice), AVG(o_totalprice) FROM orders WHERE o_orderstatus = 'F'",
    "SELECT COUNT(*) FROM orders WHERE o_totalprice > 600000",
    "SELECT n_name FROM nation WHERE n_regionkey = 2",
]


@pytest.fixture(
    scope="module",
    params=[
        "duckdb",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("spark", marks=pytest.mark.spark),
    ],
)
def pair(
    request: pytest.FixtureRequest, tpch_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Session, duckdb.DuckDBPyConnection]]:
    root = tmp_path_factory.mktemp("dml")
    source = root / "src"
    source.mkdir()
    plain = duckdb.connect()
    for name in ("nation", "region", "orders"):
        (source / f"{name}.parquet").symlink_to(tpch_dir / f"{name}.parquet")
        plain.execute(
            f"CREATE TABLE {name} AS SELECT * FROM read_parquet('{tpch_dir / name}.parquet')"
        )
    url = server_url(request, root, "veil_sql_dml")
    load(str(source), url, str(root / "client"), WORKLOAD, progress=lambda _: None)
    session = Session(root / "client")
    yield session, plain
    session.close()


def test_dml_matches_plaintext(pair: tuple[Session, duckdb.DuckDBPyConnection]) -> None:
    session, plain = pair
    for statement in STATEMENTS:
        expected = plain.execute(statement).fetchall()[0][0]
        assert session.run(statement).rowcount == expected, statement
        for check in CHECKS:
            assert_same(session.run(check).table, plain.execute(check).fetchall(), False, check)


def test_sums_after_dml_ran_on_the_server(
    pair: tuple[Session, duckdb.DuckDBPyConnection],
) -> None:
    session, plain = pair
    table = session.design.table("orders")
    assert table.sums is not None
    # o_totalprice had no NULL at load: the NULL inserted since is flagged, so sums
    # over its group ('O') run on the client; those of the other groups stay on the server
    result = session.run(CHECKS[4])
    assert len(result.stats.remote_sql) == 1
    assert "bit_or" in result.stats.remote_sql[0].lower()
    for check in CHECKS:
        assert_same(session.run(check).table, plain.execute(check).fetchall(), False, check)
    ids = session.backend.execute(f'SELECT "{table.row_id}" FROM "{table.server_name}"')
    assert len(ids.column(0).unique()) == ids.num_rows  # every write took fresh ids


def test_insert_errors(pair: tuple[Session, duckdb.DuckDBPyConnection]) -> None:
    """DML that DuckDB rejects is rejected with DuckDB's reason, and nothing is written."""
    session, plain = pair
    before = session.run("SELECT COUNT(*) FROM nation").table.column(0)[0].as_py()
    rejected = [
        ("INSERT INTO nation (n_nationkey, nope) VALUES (1, 2)", "does not have a column"),
        ("INSERT INTO nation VALUES (1, 'X', 1, 'y', 5)", "values"),  # fewer: PostgreSQL's fill
        ("INSERT INTO nation VALUES ('abc', 'X', 1, 'y')", "Conversion"),
        ("INSERT INTO nation (n_nationkey, n_nationkey) VALUES (1, 2)", "Duplicate column"),
        ("UPDATE nation SET n_nationkey = 1, n_nationkey = 2", "Multiple assignments"),
        ("UPDATE nation SET nope = 1", "nope"),
        ("DELETE FROM nation WHERE nope = 1", "nope"),
    ]
    for sql, reason in rejected:
        with pytest.raises(duckdb.Error):
            plain.execute(f"BEGIN; {sql}; ROLLBACK")
        plain.execute("ROLLBACK")
        with pytest.raises(QueryError, match=reason):
            session.run(sql)
    assert session.run("SELECT COUNT(*) FROM nation").table.column(0)[0].as_py() == before


def test_value_beyond_the_loaded_data(pair: tuple[Session, duckdb.DuckDBPyConnection]) -> None:
    """OPE widths cover o_totalprice's type, not the loaded data: far larger values fit."""
    session, _ = pair
    before = session.run("SELECT COUNT(*) FROM orders").table.column(0)[0].as_py()
    statement = (
        "INSERT INTO orders VALUES (9999999, 1, 'O', 99999999999, DATE '1995-01-01', "
        "'1-URGENT', 'c', 0, 'x')"
    )
    assert session.run(statement).rowcount == 1
    found = session.run("SELECT o_orderkey FROM orders WHERE o_totalprice > 99999999998")
    assert found.table.column(0).to_pylist() == [9999999]
    session.run("DELETE FROM orders WHERE o_orderkey = 9999999")
    assert session.run("SELECT COUNT(*) FROM orders").table.column(0)[0].as_py() == before


def test_insert_forms_follow_duckdb(pair: tuple[Session, duckdb.DuckDBPyConnection]) -> None:
    """INSERT's rows are made by DuckDB's own INSERT (on the empty plaintext schema)."""
    session, plain = pair
    statements = [
        "INSERT INTO orders (o_orderkey, o_orderdate) VALUES (900001, 'infinity'), "
        "(900002, DATE '1995-01-01')",
        "INSERT INTO region DEFAULT VALUES",
        "INSERT INTO region BY NAME SELECT 'N' AS r_name, 77 AS r_regionkey",
        "INSERT INTO region (r_regionkey) SELECT max(r_regionkey) + 1 FROM region",
        "UPDATE region SET r_comment = NULL WHERE r_regionkey > 50",
        "DELETE FROM region WHERE r_regionkey IS NULL",
    ]
    for statement in statements:
        plain.execute(statement)
        session.run(statement)
        for check in (
            "SELECT * FROM region",
            "SELECT o_orderkey, o_orderdate FROM orders WHERE o_orderkey > 900000",
            "SELECT max(o_orderdate), count(*) FROM orders",
        ):
            assert_same(session.run(check).table, plain.execute(check).fetchall(), False, check)


def test_update_from_delete_using_and_with_match_plaintext(
    pair: tuple[Session, duckdb.DuckDBPyConnection],
) -> None:
    session, plain = pair
    for statement in (
        "UPDATE region SET r_comment = n_name FROM nation "
        "WHERE n_regionkey = r_regionkey AND n_nationkey = 0",
        "WITH c AS (SELECT 4 AS k) DELETE FROM region WHERE r_regionkey IN (SELECT k FROM c)",
        "DELETE FROM region USING nation WHERE n_regionkey = r_regionkey AND n_name = 'CHINA'",
    ):
        plain.execute(statement)
        session.run(statement)
        check = "SELECT * FROM region"
        assert_same(session.run(check).table, plain.execute(check).fetchall(), False, statement)
