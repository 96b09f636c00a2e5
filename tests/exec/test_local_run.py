"""A query bound once (``veil.backends.duckdb_arrow``, ``veil.exec.local_run``) gives the
relation API's rows and types, and ``exact_arrow``'s for the types it reads as text."""

from __future__ import annotations

import pyarrow as pa
import pytest
from sqlglot import exp

from veil.backends.duckdb_arrow import query_arrow
from veil.encoding import exact_arrow
from veil.exec.local_duckdb import local_duckdb
from veil.exec.local_run import local_arrow
from veil.sql.plan import SplitPlan

_QUERIES = [
    ("SELECT a, b, a * 2.5 AS c FROM t WHERE a > $1 ORDER BY a", [1]),
    ("WITH x AS (SELECT b, count(*) AS n FROM t GROUP BY b) SELECT * FROM x ORDER BY b", None),
    ("SELECT a FROM t WHERE b IN (SELECT UNNEST($1)) ORDER BY a", [["x", "z"]]),
    ("select sum(a)::HUGEINT AS h, NULL AS n, DATE '2024-01-02' AS d FROM t", None),
]


@pytest.fixture
def connection():
    con = local_duckdb()
    con.register("t", pa.table({"a": [1, 2, 3, None], "b": ["x", "y", "z", "x"]}))
    yield con
    con.close()


@pytest.mark.parametrize(("sql", "params"), _QUERIES)
def test_query_arrow_is_the_relations(connection, sql, params):
    bound_once = query_arrow(connection, sql, params)
    assert bound_once is not None
    assert bound_once.equals(connection.sql(sql, params=params).to_arrow_table())


def test_query_arrow_leaves_other_statements_to_a_relation(connection):
    assert query_arrow(connection, "CREATE TABLE u (a INTEGER)") is None
    assert connection.sql("SELECT count(*) FROM duckdb_tables()").fetchall() == [(0,)]


def _plan() -> SplitPlan:
    return SplitPlan(scans=[], local=exp.select("1"), pushdown=True)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT a, b FROM t ORDER BY a",
        "SELECT 5::UHUGEINT AS u, '101'::BIT AS bits, a FROM t ORDER BY a",
    ],
)
def test_local_arrow_is_exact_arrows_at_every_run(connection, sql):
    plan, expected = _plan(), exact_arrow(connection, sql)
    for _ in range(3):
        assert local_arrow(connection, sql, plan).equals(expected)
    assert plan.local_exact is ("UHUGEINT" not in sql)
