"""SUM and AVG on the server with HOM (Paillier) columns, opt-in at load time."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest
import sqlglot
from tests.sql.oracle import assert_same

from veil.exec.session import Session
from veil.load.loader import load

QUERIES = [
    "SELECT c_mktsegment, SUM(c_acctbal), AVG(c_acctbal), COUNT(*) FROM customer GROUP BY c_mktsegment",
    "SELECT SUM(c_acctbal * 2 + c_nationkey), MIN(c_acctbal), MAX(c_acctbal) FROM customer WHERE c_nationkey = 3",
    "SELECT SUM(c_acctbal), AVG(c_acctbal) FROM customer WHERE c_mktsegment = 'NO SUCH'",
    "SELECT c_nationkey, SUM(c_acctbal) AS s FROM customer GROUP BY c_nationkey HAVING SUM(c_acctbal) > 100000 ORDER BY s DESC",
    "SELECT SUM(x) FROM (SELECT NULLIF(c_nationkey, 1) AS x FROM customer) t",
]


@pytest.fixture(
    scope="module", params=["duckdb", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def hom_session(
    request: pytest.FixtureRequest, tpch_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Session]:
    root = tmp_path_factory.mktemp("hom")
    source = root / "src"
    source.mkdir()
    (source / "customer.parquet").symlink_to(tpch_dir / "customer.parquet")
    if request.param == "duckdb":
        url = f"duckdb:///{root}/server.duckdb"
    else:
        cluster = request.getfixturevalue("postgres_cluster")
        url = cluster.create_schema("veil_sql_hom")
    load(str(source), url, str(root / "client"), QUERIES, progress=lambda _: None, hom=True)
    opened = Session(root / "client")
    yield opened
    opened.close()


@pytest.fixture(scope="module")
def plain_customer(tpch_dir: Path) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute(
        f"CREATE TABLE customer AS SELECT * FROM read_parquet('{tpch_dir / 'customer.parquet'}')"
    )
    return con


@pytest.mark.parametrize("sql", QUERIES)
def test_hom_sums_match_plaintext(
    hom_session: Session, plain_customer: duckdb.DuckDBPyConnection, sql: str
) -> None:
    ordered = sqlglot.parse_one(sql, read="duckdb").args.get("order") is not None
    assert_same(hom_session.run(sql).table, plain_customer.execute(sql).fetchall(), ordered, sql)


def test_sums_run_on_the_server(hom_session: Session) -> None:
    plan = hom_session.plan(sqlglot.parse_one(QUERIES[0], read="duckdb"))
    aggregation = plan.scans[0].aggregation
    assert aggregation is not None
    assert [item.kind for item in aggregation.items] == ["SUM", "SUM", "COUNT", "COUNT"]
    result = hom_session.run(QUERIES[0])
    assert result.stats.bytes_received < 20_000  # five groups, not 1500 rows
