"""A reduction's branch joined on several keys goes as a correlated EXISTS on PostgreSQL.

TPC-DS q24 reduces store_sales by customer, store and customer_address,
joined among themselves by zip code: the branch meets store_sales on two of
its columns, so no key list stands for it. The row-id form
``rid IN (SELECT r0.rid FROM <store_sales and the branch joined>)`` made
PostgreSQL probe store_sales by row id once per sale (287k probes, 3.0 s at
SF 1); ``EXISTS (SELECT 1 FROM <the branch> WHERE <its columns> = <the
sale's>)`` is pulled up into a hash semi-join over the branch's own join
(1.1 s). DuckDB keeps the row-id form (its EXISTS on several keys ran TPC-H
Q7's reductions thirty times slower). Each answer is checked against plain
DuckDB, with NULL and dangling keys on the target.
"""

from __future__ import annotations

from collections.abc import Iterator

import duckdb
import pytest

from tests.support.oracle import checked_plan, loaded_tables, without
from veil.session.session import Session
from veil.sql import planner
from veil.sql.passes.pushdown_join_aggregates import pushdown_join_aggregates
from veil.sql.passes.pushdown_joins import pushdown_joins

pytestmark = pytest.mark.integration

TABLES = {
    # every 7th sale has no customer, every 11th a store that does not exist
    "sales": "SELECT i::INT AS s_id, CASE WHEN i % 7 = 0 THEN NULL ELSE i % 300 END::INT "
    "AS s_cust, CASE WHEN i % 11 = 0 THEN 99 ELSE i % 12 END::INT AS s_store, "
    "(i % 97)::DECIMAL(7, 2) AS s_amt FROM range(6000) t(i)",
    "customers": "SELECT i::INT AS c_id, (i * 7 % 200)::INT AS c_addr, 'name ' || i AS c_name "
    "FROM range(300) t(i)",
    "stores": "SELECT i::INT AS st_id, (i % 5)::INT AS st_zip, (i % 4)::INT AS st_market "
    "FROM range(12) t(i)",
    "addrs": "SELECT i::INT AS a_id, (i % 9)::INT AS a_zip, 'state ' || (i % 3) AS a_state "
    "FROM range(200) t(i)",
}

QUERIES = {
    "a zip cycle (q24)": "SELECT c_name, a_state, count(*), sum(s_amt) FROM sales, customers, "
    "stores, addrs WHERE s_cust = c_id AND s_store = st_id AND c_addr = a_id "
    "AND st_zip = a_zip AND st_market = 2 GROUP BY c_name, a_state",
    "the cycle in explicit joins": "SELECT count(*), min(c_name) FROM sales "
    "JOIN customers ON s_cust = c_id JOIN addrs ON c_addr = a_id "
    "JOIN stores ON s_store = st_id AND st_zip = a_zip WHERE a_state = 'state 1'",
}


@pytest.fixture(scope="module", params=["duckdb", "postgres"])
def shop(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Session, duckdb.DuckDBPyConnection]]:
    root = tmp_path_factory.mktemp("exists")
    with loaded_tables(request, root, TABLES, list(QUERIES.values())) as loaded:
        yield loaded


@pytest.mark.parametrize("sql", QUERIES.values(), ids=QUERIES.keys())
def test_a_branch_on_several_keys(
    shop: tuple[Session, duckdb.DuckDBPyConnection], sql: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # each table fetched on its own (these small tables would all be joined on the server)
    passes = without(without(planner.PASSES, pushdown_joins), pushdown_join_aggregates)
    monkeypatch.setattr(planner, "PASSES", passes)
    session, _ = shop
    plan = checked_plan(*shop, sql)  # right answers, no fallback
    sales = [s for s in plan.scans if s.table.name == "sales"]
    reduced = [s for s in sales if s.reduction is not None]
    statements = session.run(sql).stats.remote_sql
    name = session.design.table("sales").server_name
    fetches = [s for s in statements if f"FROM {name}" in s.split(" WHERE ")[0]]
    assert reduced and fetches
    by_exists = session.backend.semi_joins_by_exists
    assert by_exists is (session.backend.dialect == "postgres")
    assert all(("EXISTS(SELECT 1 FROM" in s) is by_exists for s in fetches)
    assert all((" IN (SELECT r0." in s) is not by_exists for s in fetches)
