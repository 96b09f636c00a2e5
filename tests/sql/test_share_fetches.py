"""Two fetches of the same rows (same tables, joins, filters and parameters) are one statement.

Aggregates of one table under the same server filter too (``share_aggregates``):
TPC-DS q09's shape, per range the row count and two averages, each a scalar
subquery, computed in one statement (per block of ids once any is an ASHE
sum; the client's re-aggregation adds the blocks up), the empty range's too
(count 0, averages NULL).
"""

from __future__ import annotations

import duckdb
import pytest

from tests.support.oracle import check_query
from tests.support.tpch import tpch_queries
from veil.frontend.explain import explain
from veil.session.session import Session
from veil.sql.plan import SplitPlan

SHARED = [
    dict(tpch_queries())["q11"],
    # a scan and its uncorrelated subquery's scan, same filter, other columns
    "SELECT COUNT(*), MIN(o_orderdate) FROM orders WHERE o_orderstatus = 'F' AND o_totalprice > "
    "(SELECT MEDIAN(o_totalprice) FROM orders WHERE o_orderstatus = 'F')",
    # two derived tables over the same rows (a CTE read twice is one scan already); a
    # condition on one of them would filter its rows on the server (``derived_edges``'
    # reader filters), so the outer query compares the two
    "SELECT COUNT(*) FROM (SELECT o_custkey, o_totalprice FROM orders "
    "WHERE o_orderpriority = '1-URGENT') a JOIN (SELECT o_custkey, o_orderdate FROM orders "
    "WHERE o_orderpriority = '1-URGENT') b ON a.o_custkey = b.o_custkey "
    "WHERE a.o_totalprice > 100 * (b.o_orderdate - DATE '1992-01-01')",
]


def _bucket(low: int, high: int) -> str:
    """q09's bucket: the count decides which average the answer shows."""
    where = f"FROM lineitem WHERE l_quantity BETWEEN {low} AND {high}"
    return (
        f"SELECT CASE WHEN (SELECT COUNT(*) {where}) > 100 THEN (SELECT AVG(l_extendedprice) "
        f"{where}) ELSE (SELECT AVG(l_discount) {where}) END AS bucket, "
        f"(SELECT SUM(l_quantity) {where}) AS total"
    )


SHARED += [
    _bucket(1, 20),
    _bucket(100, 200),  # no row: COUNT 0, AVG and SUM NULL
    # grouped by the same keys, a count beside a sum and an extreme
    "SELECT a.l_returnflag, a.c, b.s, b.m FROM (SELECT l_returnflag, COUNT(*) AS c "
    "FROM lineitem WHERE l_shipdate <= DATE '1998-09-02' GROUP BY l_returnflag) a, "
    "(SELECT l_returnflag, SUM(l_quantity) AS s, MAX(l_shipdate) AS m FROM lineitem "
    "WHERE l_shipdate <= DATE '1998-09-02' GROUP BY l_returnflag) b "
    "WHERE a.c < b.s ORDER BY 1, 2, 3",
]
NOT_SHARED = [
    # other parameters: other rows
    "SELECT COUNT(*) FROM orders WHERE o_orderstatus = 'F' AND o_totalprice > "
    "(SELECT MEDIAN(o_totalprice) FROM orders WHERE o_orderstatus = 'O')",
    "SELECT (SELECT COUNT(*) FROM lineitem WHERE l_quantity BETWEEN 1 AND 20), "
    "(SELECT AVG(l_discount) FROM lineitem WHERE l_quantity BETWEEN 1 AND 21)",
]


def _statements(plan: SplitPlan | None) -> int:
    assert plan is not None and plan.pushdown
    return sum(
        1
        for s in plan.scans
        if s.same_rows is None and (s.joined is None or s is s.joined.scans[0])
    )


@pytest.mark.parametrize("sql", SHARED + NOT_SHARED)
def test_answers_match_plaintext(
    any_session: Session, plain: duckdb.DuckDBPyConnection, sql: str
) -> None:
    for _ in range(2):  # the second run reuses the cached plan
        check_query(any_session, plain, sql)


@pytest.mark.parametrize("sql", SHARED)
def test_one_statement_for_the_same_rows(session: Session, sql: str) -> None:
    result = session.run(sql)
    assert result.stats.statements == _statements(result.plan)
    assert any(s.same_rows is not None for s in result.plan.scans)  # type: ignore[union-attr]
    assert "(no statement of its own)" in explain(session, sql)


@pytest.mark.parametrize("sql", NOT_SHARED)
def test_other_rows_are_fetched_apart(session: Session, sql: str) -> None:
    result = session.run(sql)
    assert not any(s.same_rows is not None for s in result.plan.scans)  # type: ignore[union-attr]
    assert result.stats.statements == 2


def test_a_plan_shared_for_equal_values_is_not_reused_for_others(
    session: Session, plain: duckdb.DuckDBPyConnection
) -> None:
    """The literals are a template's parameters: planned with 'F' twice the fetches share,
    and a second planning with 'O' twice agrees, but 'F' beside 'O' are other rows."""
    query = SHARED[1].replace("'F'", "'{}'").format
    for values in [("F", "F"), ("O", "O"), ("F", "O"), ("O", "F")]:
        check_query(session, plain, query(*values))
    buckets = [_bucket(1, 20), _bucket(30, 40), _bucket(1, 20).replace("AND 20", "AND 21", 2)]
    for sql in buckets:  # the same for aggregates of one filter (``share_aggregates``)
        check_query(session, plain, sql)
