"""The local plan reads the per-row expressions the design stores instead of their columns."""

from __future__ import annotations

import duckdb
import pytest

from tests.support.oracle import check_query
from tests.support.tpch import tpch_queries
from veil.session.session import Session
from veil.sql.plan import Scan

QUERIES = [
    # TPC-H Q22: the country code, not every phone
    (dict(tpch_queries())["q22"], "customer", "SUBSTRING(c_phone, 1, 2)", "c_phone"),
    # a stored LIKE boolean inside a CASE, and its negation
    (
        "SELECT p_partkey, CASE WHEN p_name LIKE '%green%' THEN 1 ELSE 0 END AS green, "
        "p_name NOT LIKE '%green%' AS other FROM part WHERE p_size < 3 ORDER BY p_partkey",
        "part",
        "p_name LIKE '%green%'",
        "p_name",
    ),
    # in GROUP BY, HAVING and ORDER BY, under two aliases of one table
    (
        "SELECT SUBSTRING(c1.c_phone, 1, 2) AS cc, COUNT(*) AS n FROM customer c1, customer c2 "
        "WHERE c1.c_custkey = c2.c_custkey AND c2.c_acctbal > 9000 "
        "GROUP BY SUBSTRING(c1.c_phone, 1, 2) HAVING COUNT(*) > 1 "
        "ORDER BY SUBSTRING(c1.c_phone, 1, 2)",
        "customer",
        "SUBSTRING(c_phone, 1, 2)",
        "c_phone",
    ),
    # in a window's partition and inside a correlated subquery of another table
    (
        "SELECT o_orderkey, (SELECT MAX(SUBSTRING(c_phone, 1, 2)) FROM customer "
        "WHERE c_custkey = o_custkey) AS cc FROM orders WHERE o_totalprice > 450000 "
        "ORDER BY o_orderkey",
        "customer",
        "SUBSTRING(c_phone, 1, 2)",
        "c_phone",
    ),
    (
        "SELECT p_partkey, COUNT(*) OVER (PARTITION BY p_name LIKE 'forest%') AS n "
        "FROM part WHERE p_size = 7 ORDER BY p_partkey",
        "part",
        "p_name LIKE 'forest%'",
        "p_name",
    ),
    # the column is read as itself too: both are fetched
    (
        "SELECT SUBSTRING(c_phone, 1, 2) AS cc, c_phone FROM customer "
        "WHERE c_acctbal > 9000 ORDER BY c_phone",
        "customer",
        "SUBSTRING(c_phone, 1, 2)",
        None,
    ),
]


def _scans(session: Session, sql: str, table: str) -> list[Scan]:
    session.plans.clear()  # a plan another test made without some pass
    plan = session.run(sql).plan
    assert plan is not None and plan.pushdown
    return [s for s in plan.scans if s.table.name == table and s.aggregation is None]


@pytest.mark.parametrize(("sql", "table", "expression", "column"), QUERIES)
def test_answers_match_plaintext(
    any_session: Session,
    plain: duckdb.DuckDBPyConnection,
    sql: str,
    table: str,
    expression: str,
    column: str | None,
) -> None:
    for _ in range(2):  # the second run reuses the cached plan
        check_query(any_session, plain, sql)


@pytest.mark.parametrize(("sql", "table", "expression", "column"), QUERIES)
def test_the_stored_expression_is_fetched(
    session: Session, sql: str, table: str, expression: str, column: str | None
) -> None:
    scan = next(s for s in _scans(session, sql, table) if expression in s.columns)
    fetched = [name for name, _ in scan.fetched()]
    assert expression in fetched
    if column is not None:
        assert column not in fetched  # only the expression read it
