"""Subqueries the server evaluates whole (``pushdown_subqueries``), NULLs included.

EXISTS / NOT EXISTS correlated on DET keys, ``<>`` and OPE comparisons,
IN / NOT IN (whose NULL rules are the subtle part), comparisons with a
MIN/MAX subquery or a scalar subquery of one column, nested and uncorrelated subqueries: each checked against
plain DuckDB on both backends, before and after writes (DML whose WHERE
holds such subqueries too), and each checked to have left the client's plan.
"""

from __future__ import annotations

from collections.abc import Iterator

import duckdb
import pytest

from tests.support.oracle import check_query, load_tables
from veil.session.session import Session

PARTS = """
SELECT i AS p_id, i % 7 AS p_owner,
       CASE WHEN i % 11 = 0 THEN NULL ELSE (i * 37) % 50 END AS p_price
FROM range(200) t(i)
"""
LINES = """
SELECT i AS l_id,
       CASE WHEN i % 17 = 0 THEN NULL ELSE (i * 13) % 230 END AS l_part,
       CASE WHEN i % 19 = 0 THEN NULL ELSE i % 9 END AS l_qty,
       i % 7 AS l_owner,
       DATE '2020-01-01' + CAST(i % 300 AS INTEGER) AS l_day
FROM range(900) t(i)
"""
# (query, tables the client still fetches): the subqueries' tables are not among them
PUSHED = [
    (
        "SELECT COUNT(*) FROM parts WHERE EXISTS "
        "(SELECT 1 FROM lines WHERE l_part = p_id AND l_qty > 3)",
        {"parts"},
    ),
    (
        "SELECT p_id FROM parts p WHERE NOT EXISTS (SELECT * FROM lines l "
        "WHERE l.l_part = p.p_id AND l.l_owner <> p.p_owner) ORDER BY p_id",
        {"parts"},
    ),
    (
        "SELECT COUNT(*) FROM parts p WHERE p_id IN "
        "(SELECT l_part FROM lines WHERE l_qty < 4 AND l_owner = p.p_owner)",
        {"parts"},
    ),
    # l_part holds NULLs for some owners: there NOT IN is never true
    (
        "SELECT COUNT(*) FROM parts p WHERE p_id NOT IN "
        "(SELECT l_part FROM lines WHERE l_owner = p.p_owner)",
        {"parts"},
    ),
    (
        "SELECT COUNT(*) FROM parts p WHERE p_id NOT IN "
        "(SELECT l_part FROM lines WHERE l_part IS NOT NULL AND l_qty = 2 AND l_owner = p.p_owner)",
        {"parts"},
    ),
    (
        "SELECT p_id, p_price FROM parts p WHERE p.p_price = "
        "(SELECT MIN(q.p_price) FROM parts q WHERE q.p_owner = p.p_owner) ORDER BY p_id",
        {"parts"},
    ),
    (
        "SELECT p_id FROM parts p WHERE (SELECT MAX(q.p_price) FROM parts q "
        "WHERE q.p_owner = p.p_owner AND q.p_id < p.p_id) < p.p_price ORDER BY p_id",
        {"parts"},
    ),
    # a scalar subquery of one column: DET for =, OPE for order (TPC-DS q06's month)
    (
        "SELECT COUNT(*) FROM lines l WHERE l.l_qty = "
        "(SELECT DISTINCT m.l_qty FROM lines m WHERE m.l_owner = 3 AND m.l_id = 24)",
        {"lines"},
    ),
    (  # no row: NULL, so no row passes
        "SELECT COUNT(*) FROM parts p WHERE p.p_price = "
        "(SELECT q.p_price FROM parts q WHERE q.p_id = 1000)",
        {"parts"},
    ),
    (  # NULL in the subquery's one row
        "SELECT COUNT(*) FROM parts p WHERE p.p_price <> "
        "(SELECT DISTINCT q.p_price FROM parts q WHERE q.p_id = 11)",
        {"parts"},
    ),
    (  # correlated, an order
        "SELECT l_id FROM lines l WHERE l.l_qty < "
        "(SELECT m.l_qty FROM lines m WHERE m.l_id = l.l_part) ORDER BY l_id",
        {"lines"},
    ),
    (  # nested, correlated at each level
        "SELECT COUNT(*) FROM parts WHERE EXISTS (SELECT 1 FROM lines l WHERE l.l_part = p_id "
        "AND NOT EXISTS (SELECT 1 FROM lines m WHERE m.l_part = l.l_part AND m.l_qty > l.l_qty))",
        {"parts"},
    ),
    ("SELECT COUNT(*) FROM parts WHERE EXISTS (SELECT 1 FROM lines WHERE l_qty > 100)", {"parts"}),
    (
        "SELECT COUNT(*) FROM parts WHERE NOT EXISTS (SELECT 1 FROM lines WHERE l_qty > 7)",
        {"parts"},
    ),
    (
        "SELECT p_owner, COUNT(*) FROM parts WHERE EXISTS (SELECT 1 FROM lines "
        "WHERE l_part = p_id AND l_day >= DATE '2020-06-01') GROUP BY p_owner ORDER BY p_owner",
        {"parts"},
    ),
    (
        "SELECT p_owner, COUNT(*) FROM parts, lines WHERE p_id = l_part AND NOT EXISTS "
        "(SELECT 1 FROM lines m WHERE m.l_part = lines.l_part AND m.l_qty > lines.l_qty) "
        "GROUP BY p_owner ORDER BY 1",
        {"parts", "lines"},
    ),
]
# uncorrelated NOT IN: on the server where it runs as a hash anti-join (DuckDB, Spark),
# on the client where it would be a subplan per row (PostgreSQL)
NOT_IN = [
    "SELECT COUNT(*) FROM parts WHERE p_id NOT IN (SELECT l_part FROM lines)",  # NULLs: none
    "SELECT COUNT(*) FROM parts WHERE p_id NOT IN "
    "(SELECT l_part FROM lines WHERE l_part IS NOT NULL AND l_qty = 2)",
]
LOCAL = [
    # uncorrelated IN: the client's bind filters (their keys filter joined scans too)
    "SELECT COUNT(*) FROM parts WHERE p_id IN (SELECT l_part FROM lines WHERE l_qty < 4)",
    # correlated with the nullable side of an outer join: the client runs it
    "SELECT p_id, l_qty FROM parts LEFT JOIN lines ON p_id = l_part WHERE NOT EXISTS "
    "(SELECT 1 FROM lines m WHERE m.l_part = lines.l_part AND m.l_qty > lines.l_qty) "
    "ORDER BY 1, 2",
    # correlated with two outer tables
    "SELECT COUNT(*) FROM parts, lines WHERE p_id = l_part AND EXISTS "
    "(SELECT 1 FROM lines m WHERE m.l_part = parts.p_id AND m.l_owner = lines.l_owner "
    "AND m.l_id <> lines.l_id)",
]
# whole joined blocks grouped on the server (``pushdown_join_aggregates``): NULL keys,
# NULLs under COUNT(col) / MIN / MAX, no GROUP BY, HAVING and ORDER BY on the client
JOIN_GROUPS = [
    "SELECT l_qty, COUNT(*), COUNT(p_price), MIN(l_day), MAX(p_price) FROM parts, lines "
    "WHERE p_id = l_part GROUP BY l_qty ORDER BY 1",
    "SELECT COUNT(*), MIN(p_price) FROM parts JOIN lines ON p_id = l_part WHERE l_qty > 2",
    "SELECT COUNT(*), MAX(l_day) FROM parts, lines WHERE p_id = l_part AND p_owner = 99",
    "SELECT p_owner, l_qty, COUNT(*) AS n FROM parts, lines WHERE p_id = l_part "
    "AND l_day < DATE '2020-05-01' GROUP BY p_owner, l_qty HAVING COUNT(*) > 2 "
    "ORDER BY n DESC, 1, 2 LIMIT 10",
    "SELECT p_owner, COUNT(*) FROM parts p, lines l WHERE p.p_id = l.l_part AND EXISTS "
    "(SELECT 1 FROM lines m WHERE m.l_part = l.l_part AND m.l_id <> l.l_id) GROUP BY p_owner "
    "ORDER BY 1",
    # windows over the groups run on the client, over the server's counts and extremes
    "SELECT p_owner, COUNT(*) AS n, RANK() OVER (ORDER BY COUNT(*) DESC, p_owner) FROM parts, "
    "lines WHERE p_id = l_part GROUP BY p_owner ORDER BY 1",
    "SELECT l_qty, MAX(p_price), SUM(COUNT(*)) OVER (PARTITION BY l_qty % 3) FROM parts, lines "
    "WHERE p_id = l_part GROUP BY l_qty ORDER BY 1",
    # COUNT(DISTINCT) of a DET column with NULLs, and an uncorrelated NOT IN (Q16's shape)
    "SELECT p_owner, COUNT(DISTINCT l_qty), COUNT(DISTINCT l_day) FROM parts, lines "
    "WHERE p_id = l_part AND l_owner NOT IN (SELECT p_owner FROM parts WHERE p_price > 40) "
    "GROUP BY p_owner ORDER BY 1",
]
# an uncorrelated IN on a scan the server joins: in the join's statement, whose filters
# reach its partners as the IN's keys would (``pushdown_joined_subqueries``; TPC-DS q60)
JOINED_IN = [
    "SELECT l_qty, COUNT(*), MAX(p_price) FROM parts, lines WHERE p_id = l_part "
    "AND p_owner IN (SELECT m.l_owner FROM lines m WHERE m.l_qty = 2) GROUP BY l_qty ORDER BY 1",
    # NULLs among the subquery's keys, and an IN on the fact side of the join
    "SELECT p_owner, COUNT(*), MIN(l_day) FROM parts, lines WHERE p_id = l_part "
    "AND l_qty IN (SELECT q.p_price FROM parts q WHERE q.p_owner = 3) GROUP BY p_owner ORDER BY 1",
]
# the IN keeps most keys, the join's own filter few rows: the rows the server would read
# from the IN's keys cost more than the bytes it saves, so the client runs the IN alone
JOINED_WEAK_IN = [
    "SELECT l_id, p_price FROM parts, lines WHERE p_id = l_part AND l_id IN (7, 8, 9) "
    "AND p_owner IN (SELECT m.l_owner FROM lines m WHERE m.l_qty <> 5) ORDER BY 1",
]
# the same, where the join may or may not go to the server: answers only
JOINED_IN_ANSWERS = [
    # in each branch of a UNION ALL of CTEs (TPC-DS q60's shape)
    "WITH a AS (SELECT l_qty, COUNT(*) AS n FROM parts, lines WHERE p_id = l_part AND p_owner "
    "IN (SELECT m.l_owner FROM lines m WHERE m.l_qty = 2) GROUP BY l_qty), b AS (SELECT l_qty, "
    "COUNT(*) AS n FROM parts, lines WHERE p_id = l_part AND p_owner IN (SELECT m.l_owner FROM "
    "lines m WHERE m.l_qty = 3) GROUP BY l_qty) SELECT l_qty, SUM(n) FROM (SELECT * FROM a "
    "UNION ALL SELECT * FROM b) GROUP BY l_qty ORDER BY 1",
    # a chain of uncorrelated INs inside the subquery (q58's, q83's dates of weeks)
    "SELECT COUNT(*), MIN(l_day) FROM parts, lines WHERE p_id = l_part AND l_qty IN "
    "(SELECT q.p_price FROM parts q WHERE q.p_owner IN (SELECT m.l_owner FROM lines m "
    "WHERE m.l_day < DATE '2020-02-01'))",
    # the IN's column is the join key: its keys also reach the scan it joins
    "SELECT COUNT(*), MAX(l_day) FROM parts, lines WHERE p_id = l_part AND p_id IN "
    "(SELECT m.l_part FROM lines m WHERE m.l_qty = 4)",
    # two INs on the joined block, and one that selects nothing
    "SELECT COUNT(*) FROM parts, lines WHERE p_id = l_part AND p_owner IN (SELECT m.l_owner "
    "FROM lines m WHERE m.l_qty = 1) AND l_qty IN (SELECT q.p_price FROM parts q WHERE q.p_id < 0)",
]
WORKLOAD = [sql for sql, _ in PUSHED] + NOT_IN + LOCAL + JOIN_GROUPS + JOINED_IN + JOINED_IN_ANSWERS
WORKLOAD += JOINED_WEAK_IN
STATEMENTS = [
    "INSERT INTO lines VALUES (5000, 3, 8, 3, DATE '2021-01-01'), (5001, NULL, 1, 2, NULL)",
    "UPDATE parts SET p_price = 49 WHERE p_id IN (SELECT l_part FROM lines WHERE l_qty = 8)",
    "DELETE FROM lines WHERE NOT EXISTS (SELECT 1 FROM parts WHERE p_id = l_part AND p_owner < 3)",
]


@pytest.fixture(
    scope="module", params=["duckdb", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def tables(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Session, duckdb.DuckDBPyConnection]]:
    session, plain = load_tables(
        request, tmp_path_factory.mktemp("subq"), {"parts": PARTS, "lines": LINES}, WORKLOAD
    )
    yield session, plain
    session.close()


@pytest.mark.parametrize(("sql", "fetched"), PUSHED)
def test_subquery_runs_on_the_server(
    tables: tuple[Session, duckdb.DuckDBPyConnection], sql: str, fetched: set[str]
) -> None:
    session, plain = tables
    check_query(session, plain, sql)
    plan = session.run(sql).plan
    assert plan is not None and plan.pushdown
    assert sorted(s.table.name for s in plan.scans) == sorted(fetched)
    assert "EXISTS" not in plan.local.sql() and " IN (" not in plan.local.sql()


def test_single_table_block_with_a_subquery_is_one_statement(
    tables: tuple[Session, duckdb.DuckDBPyConnection],
) -> None:
    session, _ = tables
    assert session.run(PUSHED[0][0]).stats.statements == 1  # counted on the server
    assert session.run(PUSHED[14][0]).stats.statements == 1  # and grouped there


@pytest.mark.parametrize("sql", JOIN_GROUPS)
def test_joined_block_grouped_on_the_server(
    tables: tuple[Session, duckdb.DuckDBPyConnection], sql: str
) -> None:
    session, plain = tables
    check_query(session, plain, sql)
    if " NOT IN " in sql and not session.backend.hashes_not_in:
        return  # the client runs the NOT IN (``test_not_in_on_the_server_where_it_is_hashed``)
    result = session.run(sql)
    assert result.plan is not None and result.stats.statements == 1
    fetches = {id(s.joined): s.joined for s in result.plan.scans if s.joined is not None}
    assert len(fetches) == 1 and next(iter(fetches.values())).groups is not None  # type: ignore[union-attr]


@pytest.mark.parametrize("sql", NOT_IN)
def test_not_in_on_the_server_where_it_is_hashed(
    tables: tuple[Session, duckdb.DuckDBPyConnection], sql: str
) -> None:
    session, plain = tables
    check_query(session, plain, sql)
    plan = session.run(sql).plan
    assert plan is not None and plan.pushdown
    on_client = " IN (" in plan.local.sql()
    assert on_client is not session.backend.hashes_not_in


@pytest.mark.parametrize("sql", LOCAL)
def test_subquery_left_to_the_client(
    tables: tuple[Session, duckdb.DuckDBPyConnection], sql: str
) -> None:
    session, plain = tables
    check_query(session, plain, sql)
    plan = session.run(sql).plan
    assert plan is not None and ("EXISTS" in plan.local.sql() or " IN (" in plan.local.sql())


@pytest.mark.parametrize("sql", JOINED_IN)
def test_uncorrelated_in_joins_the_server_join(
    tables: tuple[Session, duckdb.DuckDBPyConnection], sql: str
) -> None:
    check_query(*tables, sql)
    result = tables[0].run(sql)
    plan = result.plan
    assert plan is not None and " IN (" not in plan.local.sql() and plan.scans[0].joined
    assert all(s.joined is plan.scans[0].joined and not s.binds for s in plan.scans)
    assert result.stats.statements == 1  # the join alone: no fetch of the subquery's keys


@pytest.mark.parametrize("sql", JOINED_WEAK_IN)
def test_weak_in_beside_a_server_join_stays_with_the_client(
    tables: tuple[Session, duckdb.DuckDBPyConnection], sql: str
) -> None:
    check_query(*tables, sql)
    plan = tables[0].run(sql).plan
    assert plan is not None and " IN (SELECT" in plan.local.sql()
    joined = [s for s in plan.scans if s.joined is not None]
    assert joined and not any(s.binds for s in joined)  # no keys into the join either


@pytest.mark.parametrize("sql", JOINED_IN_ANSWERS)
def test_uncorrelated_in_near_server_joins_answers(
    tables: tuple[Session, duckdb.DuckDBPyConnection], sql: str
) -> None:
    check_query(*tables, sql)


def test_writes_then_queries(tables: tuple[Session, duckdb.DuckDBPyConnection]) -> None:
    session, plain = tables
    for statement in STATEMENTS:
        session.run(statement)
        plain.execute(statement)
        for sql in WORKLOAD:
            check_query(session, plain, sql)


def test_min_max_of_wide_ope_ciphertexts_on_the_server(
    tables: tuple[Session, duckdb.DuckDBPyConnection],
) -> None:
    """64-bit OPE ciphertexts are byte strings; PostgreSQL has no MIN(bytea) of its own."""
    session, plain = tables
    sql = "SELECT p_owner, MIN(p_price), MAX(p_price) FROM parts GROUP BY p_owner ORDER BY 1"
    check_query(session, plain, sql)
    result = session.run(sql)
    assert result.plan is not None and result.plan.pushdown
    assert [s.aggregation is not None for s in result.plan.scans] == [True]
    assert session.design.table("parts").find("p_price", "OPE").ope_binary  # type: ignore[union-attr]
