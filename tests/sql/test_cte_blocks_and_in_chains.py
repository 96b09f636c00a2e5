"""Blocks inside a later CTE, and chains of uncorrelated IN-subqueries, on the server.

Two shapes of TPC-DS q83 (checked against plaintext DuckDB on both backends,
NULLs in every key and nothing falling back):

- a block inside a query's second or later CTE: sqlglot lists the CTEs
  defined before it among each block's sources, which made every such block
  look like a join with a CTE, so its subqueries, grouping and joined groups
  stayed on the client (``veil.sql.columns.block_sources``);
- ``a IN (SELECT b FROM t WHERE c IN (SELECT d ...))``: the inner levels, each
  in a block of one table, run inside the block's statement instead of one
  round trip of client-computed keys per level; the outermost level keeps its
  bind filter (its keys filter the scans joined to it).
"""

from __future__ import annotations

from collections.abc import Iterator

import duckdb
import pytest

from tests.support.oracle import checked_plan, load_tables
from veil.session.session import Session

ITEMS = """
SELECT i AS i_id, CASE WHEN i % 13 = 0 THEN NULL ELSE i % 9 END AS i_group,
       CASE WHEN i % 11 = 0 THEN NULL ELSE (i * 7) % 40 END AS i_week
FROM range(300) t(i)
"""
SALES = """
SELECT i AS s_id, CASE WHEN i % 17 = 0 THEN NULL ELSE (i * 31) % 320 END AS s_item,
       CASE WHEN i % 19 = 0 THEN NULL ELSE i % 23 END AS s_qty, i % 5 AS s_store
FROM range(2000) t(i)
"""
# the same grouped block as a first CTE and as a later one, each with a correlated EXISTS
LATER_CTE = (
    "WITH a AS (SELECT s_store, SUM(s_qty) AS q FROM sales s WHERE EXISTS "
    "(SELECT 1 FROM items i WHERE i.i_id = s.s_item AND i.i_group = 3) GROUP BY s_store), "
    "b AS (SELECT s_store, SUM(s_qty) AS q FROM sales s WHERE EXISTS "
    "(SELECT 1 FROM items i WHERE i.i_id = s.s_item AND i.i_group = 4) GROUP BY s_store) "
    "SELECT a.s_store, a.q, b.q FROM a JOIN b ON a.s_store = b.s_store ORDER BY 1"
)
# a later CTE's one-table block, grouped on the server
LATER_CTE_GROUPS = (
    "WITH a AS (SELECT s_store, COUNT(*) AS n FROM sales GROUP BY s_store), "
    "b AS (SELECT i_group, COUNT(*) AS n, MAX(i_week) AS w FROM items GROUP BY i_group) "
    "SELECT a.s_store, a.n, b.i_group, b.n, b.w FROM a, b WHERE a.s_store = b.i_group "
    "ORDER BY 1, 3"
)
CHAINS = [
    # two levels under the outer one: item groups of the weeks of three items
    "SELECT COUNT(*), SUM(s_qty) FROM sales WHERE s_item IN (SELECT i_id FROM items "
    "WHERE i_week IN (SELECT i_week FROM items WHERE i_id IN (3, 40, 77)))",
    # in a later CTE, joined, grouped (q83's shape)
    "WITH x AS (SELECT 1 AS k), y AS (SELECT i_group, SUM(s_qty) AS q FROM sales, items "
    "WHERE s_item = i_id AND i_week IN (SELECT i_week FROM items WHERE i_group IN "
    "(SELECT i_group FROM items WHERE i_id < 20)) GROUP BY i_group) "
    "SELECT y.i_group, y.q FROM y, x ORDER BY 1",
    # three levels, NULLs in the keys of each
    "SELECT s_store, COUNT(*) FROM sales WHERE s_item IN (SELECT i_id FROM items WHERE "
    "i_group IN (SELECT i_group FROM items WHERE i_week IN (SELECT s_qty FROM sales "
    "WHERE s_store = 2 AND s_id < 60))) GROUP BY s_store ORDER BY 1",
]
# a NOT IN inside the chain: on the server only where it is hashed (see test_subquery_pushdown)
NOT_IN_CHAIN = (
    "SELECT COUNT(*) FROM sales WHERE s_item IN (SELECT i_id FROM items WHERE i_week "
    "NOT IN (SELECT i_week FROM items WHERE i_group = 2 AND i_week IS NOT NULL))"
)
WORKLOAD = [LATER_CTE, LATER_CTE_GROUPS, *CHAINS, NOT_IN_CHAIN]


@pytest.fixture(
    scope="module", params=["duckdb", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def tables(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Session, duckdb.DuckDBPyConnection]]:
    session, plain = load_tables(
        request, tmp_path_factory.mktemp("ctes"), {"items": ITEMS, "sales": SALES}, WORKLOAD
    )
    yield session, plain
    session.close()


def test_subqueries_of_a_later_cte_run_on_the_server(
    tables: tuple[Session, duckdb.DuckDBPyConnection],
) -> None:
    session, plain = tables
    plan = checked_plan(session, plain, LATER_CTE)
    assert sorted(s.table.name for s in plan.scans) == ["sales", "sales"]
    assert "EXISTS" not in plan.local.sql()


def test_a_later_cte_is_grouped_on_the_server(
    tables: tuple[Session, duckdb.DuckDBPyConnection],
) -> None:
    session, plain = tables
    plan = checked_plan(session, plain, LATER_CTE_GROUPS)
    assert [s.aggregation is not None for s in plan.scans] == [True, True]


@pytest.mark.parametrize("sql", CHAINS)
def test_inner_levels_of_an_in_chain_are_one_statement(
    tables: tuple[Session, duckdb.DuckDBPyConnection], sql: str
) -> None:
    session, plain = tables
    plan = checked_plan(session, plain, sql)
    # only the outermost level's subquery is left to the client (its bind filter)
    assert plan.local.sql().count(" IN (") == 1
    pushed = [p for s in plan.scans for p in s.predicates if " IN (SELECT" in p.server.sql()]
    assert len(pushed) == 1


def test_not_in_inside_a_chain(tables: tuple[Session, duckdb.DuckDBPyConnection]) -> None:
    session, plain = tables
    plan = checked_plan(session, plain, NOT_IN_CHAIN)
    on_client = "NOT " in plan.local.sql()
    assert on_client is not session.backend.hashes_not_in


def test_writes_then_queries(tables: tuple[Session, duckdb.DuckDBPyConnection]) -> None:
    session, plain = tables
    for statement in (
        "INSERT INTO items VALUES (900, NULL, 3), (901, 4, NULL)",
        "INSERT INTO sales VALUES (9000, 900, 5, 2), (9001, 901, NULL, 3), (9002, NULL, 4, 2)",
    ):
        session.run(statement)
        plain.execute(statement)
    for sql in WORKLOAD:
        checked_plan(session, plain, sql)
