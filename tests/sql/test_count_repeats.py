"""A fetch of few distinct rows returns each once with its count; the client repeats it."""

from __future__ import annotations

import duckdb
import pytest

from tests.support.oracle import check_query
from tests.support.tpch import tpch_queries
from veil.frontend.explain import explain
from veil.session.session import Session
from veil.sql.plan import SplitPlan

COUNTED = [
    # a server join of (ship mode, order priority) rows: 35 distinct at most
    dict(tpch_queries())["q12"],
    # one table; a CASE inside SUM keeps the aggregate on the client
    "SELECT l_returnflag, l_linestatus, SUM(CASE WHEN l_shipmode = 'AIR' THEN 1 ELSE 0 END) "
    "AS air, COUNT(*) AS n FROM lineitem WHERE l_shipdate < DATE '1995-01-01' "
    "GROUP BY l_returnflag, l_linestatus ORDER BY l_returnflag, l_linestatus",
    # no aggregate at all: every repeated row comes back, in the order asked for
    "SELECT l_shipmode, l_returnflag, COUNT(*) OVER (PARTITION BY l_shipmode) AS n "
    "FROM lineitem WHERE l_quantity < 3 ORDER BY l_shipmode, l_returnflag, n",
    "SELECT COUNT(DISTINCT l_shipmode || l_returnflag), "
    "STRING_AGG(DISTINCT l_linestatus, ',' ORDER BY l_linestatus) FROM lineitem",
]
NOT_COUNTED = [
    # a column of many values (the order keys): rows rarely repeat
    "SELECT l_orderkey, l_shipmode FROM lineitem WHERE l_quantity < 2 ORDER BY 1, 2",
]


def _counted(plan: SplitPlan | None) -> bool:
    assert plan is not None and plan.pushdown
    return any(s.counted or (s.joined is not None and s.joined.counted) for s in plan.scans)


@pytest.mark.parametrize("sql", COUNTED + NOT_COUNTED)
def test_answers_match_plaintext(
    any_session: Session, plain: duckdb.DuckDBPyConnection, sql: str
) -> None:
    for _ in range(2):  # the second run reuses the cached plan
        check_query(any_session, plain, sql)


@pytest.mark.parametrize("sql", COUNTED)
def test_repeated_rows_come_once_with_their_count(session: Session, sql: str) -> None:
    session.plans.clear()  # a plan another test made without some pass
    result = session.run(sql)
    assert _counted(result.plan)
    assert "COUNT(*) AS __veil_repeats" in " ".join(result.stats.remote_sql)
    assert "each distinct row once, with its count" in explain(session, sql)


@pytest.mark.parametrize("sql", NOT_COUNTED)
def test_rows_of_many_values_are_fetched_as_they_are(session: Session, sql: str) -> None:
    session.plans.clear()
    assert not _counted(session.run(sql).plan)
