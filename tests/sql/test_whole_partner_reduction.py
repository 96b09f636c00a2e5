"""A semi-join reduction by a whole, unfiltered partner table is a NOT NULL test (issue 40).

TPC-DS's star joins reduce the fact scan by each dimension it joins; where a
dimension has no filter (q47, q67: store_sales by item and store), the branch
``c_k IN (SELECT r1.c_k FROM t_y AS r1)`` made the server hash the whole table
to drop only NULL keys. ``c_k IS NOT NULL`` drops the same rows when every key
names a partner row, and the local plan's join drops the keys that name none.
Each answer is checked against plain DuckDB, with NULL and dangling keys.
"""

from __future__ import annotations

from collections.abc import Iterator

import duckdb
import pytest

from tests.support.oracle import checked_plan, loaded_tables
from veil.session.session import Session

pytestmark = pytest.mark.integration

TABLES = {
    # every 7th sale has no store, every 11th a store that does not exist
    "sales": "SELECT i::INT AS s_id, (i % 50)::INT AS s_item, "
    "CASE WHEN i % 7 = 0 THEN NULL WHEN i % 11 = 0 THEN 999 ELSE i % 9 END::INT AS s_store, "
    "(i % 97)::DECIMAL(7, 2) AS s_amt FROM range(20000) t(i)",
    "items": "SELECT i::INT AS i_id, (i % 5)::INT AS i_cat FROM range(50) t(i)",
    "stores": "SELECT i::INT AS st_id, 'store ' || i AS st_name FROM range(9) t(i)",
}

QUERIES = {
    "grouped by the whole partner": "SELECT st_name, count(*), sum(s_amt) FROM sales, items, "
    "stores WHERE s_item = i_id AND s_store = st_id AND i_cat = 3 GROUP BY st_name",
    "the whole partner in an explicit join": "SELECT count(*), min(st_name) FROM sales "
    "JOIN stores ON s_store = st_id JOIN items ON s_item = i_id WHERE i_cat IN (1, 2)",
}


@pytest.fixture(scope="module", params=["duckdb", "postgres"])
def shop(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Session, duckdb.DuckDBPyConnection]]:
    root = tmp_path_factory.mktemp("partner")
    with loaded_tables(request, root, TABLES, list(QUERIES.values())) as loaded:
        yield loaded


@pytest.mark.parametrize("sql", QUERIES.values(), ids=QUERIES.keys())
def test_an_unfiltered_partner_is_no_semi_join(
    shop: tuple[Session, duckdb.DuckDBPyConnection], sql: str
) -> None:
    plan = checked_plan(*shop, sql)
    (sales,) = [s for s in plan.scans if s.table.name == "sales"]
    session, _ = shop
    stores = session.design.table("stores").server_name
    statements = session.run(sql).stats.remote_sql
    assert statements and not any(f"FROM {stores} AS r" in s for s in statements)
    if sales.reduction is not None and sales.joined is None:
        (fetch,) = [s for s in statements if f"FROM {sales.table.server_name} " in s]
        assert "IS NULL" in fetch and " IN (SELECT" in fetch  # items' filter stays a semi-join
