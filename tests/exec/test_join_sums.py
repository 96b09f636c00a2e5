"""ASHE sums inside a server join (``veil.sql.join_sums``, ``veil.exec.joined_sums``).

Grouped and ungrouped SUM / AVG of one table's expressions over joins that
follow keys, with NULL keys and values, negative values, empty groups and
filters on every table: each checked against plain DuckDB on both backends,
and checked to have run as one grouped server statement. A join that would
repeat the summed rows is left to the other plans; one that repeats them only
after writes the statistics did not see is caught on the server's answer, and
the query still gets the plaintext's result.

A join grouped by a ROLLUP's or CUBE's columns: the server groups by all of
them (the finest grouping set) and the client's GROUP BY ROLLUP / CUBE adds
those groups up, with NULL keys beside ROLLUP's NULLs, an empty input (its
grand total counts 0), GROUPING(), HAVING and a window over the groups
(TPC-DS q86, q22); distinct counts, which do not add up, are left to the
other plans.
"""

from __future__ import annotations

from collections.abc import Iterator

import duckdb
import pytest

from tests.sql.test_subquery_pushdown import PARTS
from tests.support.oracle import check_query, load_tables
from veil.session.session import Session
from veil.sql.plan import SplitPlan

OWNERS = "SELECT i AS o_id, i % 3 AS o_region FROM range(7) t(i)"
LINES = """
SELECT i AS l_id,
       CASE WHEN i % 17 = 0 THEN NULL ELSE (i * 13) % 230 END AS l_part,
       CASE WHEN i % 19 = 0 THEN NULL ELSE i % 9 END AS l_qty,
       CAST(((i * 7919) % 2001 - 1000) / 100 AS DECIMAL(12, 2)) AS l_price,
       CAST((i % 10) / 100 AS DECIMAL(12, 2)) AS l_disc,
       DATE '2020-01-01' + CAST(i % 300 AS INTEGER) AS l_day
FROM range(3000) t(i)
"""
SUMMED = [
    "SELECT p_owner, SUM(l_qty), AVG(l_qty), COUNT(*), COUNT(l_qty) FROM parts, lines "
    "WHERE p_id = l_part GROUP BY p_owner ORDER BY 1",
    "SELECT SUM(l_price * (1 - l_disc)), MIN(p_price), COUNT(*) FROM parts JOIN lines "
    "ON p_id = l_part WHERE p_price > 10",
    "SELECT p_owner, SUM(l_qty) FROM parts, lines WHERE p_id = l_part AND p_owner = 99 "
    "GROUP BY p_owner",  # no group at all
    "SELECT SUM(l_qty), AVG(l_price) FROM parts, lines WHERE p_id = l_part AND p_owner = 99",
    "SELECT o_region, SUM(l_price), AVG(l_price * (1 - l_disc)) FROM owners, parts, lines "
    "WHERE o_id = p_owner AND p_id = l_part AND l_day < DATE '2020-06-01' "
    "GROUP BY o_region ORDER BY 1",
    "SELECT p_price, SUM(l_price) AS s FROM parts, lines WHERE p_id = l_part "
    "GROUP BY p_price HAVING SUM(l_price) > 0 ORDER BY s DESC, 1 LIMIT 5",
]
# parts' prices summed over lines: each part repeated once per line, not by ASHE
REPEATING = (
    "SELECT l_qty, SUM(p_price), COUNT(*) FROM parts, lines WHERE p_id = l_part "
    "GROUP BY l_qty ORDER BY 1"
)
_ROLLED_JOIN = "FROM owners, parts, lines WHERE o_id = p_owner AND p_id = l_part"
ROLLED_UP = [
    f"SELECT o_region, p_owner, SUM(l_qty), COUNT(*), COUNT(l_qty), AVG(l_price) {_ROLLED_JOIN} "
    "GROUP BY ROLLUP(o_region, p_owner) ORDER BY 1 NULLS FIRST, 2 NULLS FIRST",
    # a NULL key (p_price) beside the NULLs ROLLUP makes; GROUPING() tells them apart
    "SELECT p_price, p_owner, GROUPING(p_price) + GROUPING(p_owner) AS lvl, "
    "MIN(l_day), MAX(l_day), COUNT(*) FROM parts, lines WHERE p_id = l_part "
    "GROUP BY ROLLUP(p_price, p_owner) ORDER BY 3, 1 NULLS FIRST, 2 NULLS FIRST, 6",
    f"SELECT o_region, p_owner, SUM(l_price * (1 - l_disc)) AS s {_ROLLED_JOIN} "
    "GROUP BY CUBE(o_region, p_owner) ORDER BY 1 NULLS FIRST, 2 NULLS FIRST, s",
    # a plain key beside the ROLLUP, and HAVING on a rolled-up sum
    f"SELECT o_region, p_owner, p_price, SUM(l_qty) AS s {_ROLLED_JOIN} AND l_day < DATE '2020-03-01' "
    "GROUP BY o_region, ROLLUP(p_owner, p_price) HAVING SUM(l_qty) > 10 "
    "ORDER BY 1, 2 NULLS FIRST, 3 NULLS FIRST, s",
    # an empty input: ROLLUP's grand total row, COUNT 0 and SUM NULL
    f"SELECT o_region, p_owner, COUNT(*), COUNT(l_qty), SUM(l_qty), MIN(l_day) {_ROLLED_JOIN} "
    "AND o_region = 99 GROUP BY ROLLUP(o_region, p_owner)",
    # q86's shape: a rank within each parent over the rolled-up sums
    "SELECT SUM(l_price) AS total, o_region, p_owner, "
    "GROUPING(o_region) + GROUPING(p_owner) AS lvl, "
    "RANK() OVER (PARTITION BY GROUPING(o_region) + GROUPING(p_owner), "
    "CASE WHEN GROUPING(p_owner) = 0 THEN o_region END ORDER BY SUM(l_price) DESC) AS r "
    f"{_ROLLED_JOIN} GROUP BY ROLLUP(o_region, p_owner) "
    "ORDER BY lvl DESC, CASE WHEN lvl = 0 THEN o_region END NULLS FIRST, r, p_owner NULLS FIRST, total",
]
# a WHERE conjunct the server cannot evaluate, over GROUP BY keys only: the client filters
# the server's groups by it (q70's states ranked by a window, then rolled up with counties)
KEY_FILTERED = [
    f"SELECT o_region, p_owner, SUM(l_qty), COUNT(*) {_ROLLED_JOIN} AND o_region + p_owner > 3 "
    "GROUP BY o_region, p_owner ORDER BY 1, 2",
    f"SELECT o_region, p_owner, SUM(l_price) AS s {_ROLLED_JOIN} AND o_region IN (SELECT r "
    "FROM (SELECT o_region AS r, RANK() OVER (ORDER BY SUM(l_qty) DESC) AS k FROM owners, "
    "parts, lines WHERE o_id = p_owner AND p_id = l_part GROUP BY o_region) t WHERE k <= 2) "
    "GROUP BY ROLLUP(o_region, p_owner) ORDER BY 1 NULLS FIRST, 2 NULLS FIRST, s",
]
# a conjunct the server cannot evaluate over a column that is not a key: rows, not groups
ROW_FILTERED = (
    f"SELECT o_region, SUM(l_qty), COUNT(*) {_ROLLED_JOIN} AND l_qty + p_price > 30 "
    "GROUP BY o_region ORDER BY 1"
)
# distinct counts of finer groups do not add up to a coarser group's
DISTINCT = (
    f"SELECT o_region, p_owner, COUNT(DISTINCT l_qty) {_ROLLED_JOIN} "
    "GROUP BY ROLLUP(o_region, p_owner) ORDER BY 1 NULLS FIRST, 2 NULLS FIRST"
)
WORKLOAD = [*SUMMED, REPEATING, *ROLLED_UP, DISTINCT, *KEY_FILTERED, ROW_FILTERED]


@pytest.fixture(
    scope="module", params=["duckdb", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def tables(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Session, duckdb.DuckDBPyConnection]]:
    session, plain = load_tables(
        request,
        tmp_path_factory.mktemp("joinsums"),
        {"owners": OWNERS, "parts": PARTS, "lines": LINES},
        WORKLOAD,
    )
    session.hom_pushdown = "always"  # the cost rule's choice is tested in test_passes
    yield session, plain
    session.close()


def _summed_on_server(plan: SplitPlan | None) -> bool:
    assert plan is not None
    fetches = {id(s.joined): s.joined for s in plan.scans if s.joined is not None}
    return any(f.groups is not None and f.groups.summed is not None for f in fetches.values())


@pytest.mark.parametrize("sql", SUMMED)
def test_sums_over_a_join_on_the_server(
    tables: tuple[Session, duckdb.DuckDBPyConnection], sql: str
) -> None:
    session, plain = tables
    check_query(session, plain, sql)
    result = session.run(sql)
    assert result.stats.statements == 1
    assert _summed_on_server(result.plan)


def test_a_join_that_repeats_the_summed_rows_is_not_summed_there(
    tables: tuple[Session, duckdb.DuckDBPyConnection],
) -> None:
    session, plain = tables
    check_query(session, plain, REPEATING)
    assert not _summed_on_server(session.run(REPEATING).plan)


def _grouped_on_server(plan: SplitPlan | None) -> bool:
    assert plan is not None
    return any(s.joined is not None and s.joined.groups is not None for s in plan.scans)


@pytest.mark.parametrize("sql", ROLLED_UP, ids=range(len(ROLLED_UP)))
def test_rolled_up_groups_add_up_the_servers(
    tables: tuple[Session, duckdb.DuckDBPyConnection], sql: str
) -> None:
    session, plain = tables
    for _ in range(2):  # the second run reuses the cached plan
        check_query(session, plain, sql)
    result = session.run(sql)
    assert result.stats.statements == 1
    assert _grouped_on_server(result.plan)


@pytest.mark.parametrize("sql", KEY_FILTERED, ids=range(len(KEY_FILTERED)))
def test_a_filter_on_keys_filters_the_servers_groups(
    tables: tuple[Session, duckdb.DuckDBPyConnection], sql: str
) -> None:
    """Every block grouped on the server, one statement each (the subquery's its own)."""
    session, plain = tables
    for _ in range(2):
        check_query(session, plain, sql)
    result = session.run(sql)
    assert result.plan is not None
    fetches = {id(s.joined) for s in result.plan.scans if s.joined is not None}
    grouped = {id(s.joined) for s in result.plan.scans if s.joined and s.joined.groups}
    assert fetches == grouped and result.stats.statements == len(grouped)


@pytest.mark.parametrize("sql", [ROW_FILTERED, DISTINCT], ids=["rows filtered", "distinct"])
def test_left_to_the_other_plans(
    tables: tuple[Session, duckdb.DuckDBPyConnection], sql: str
) -> None:
    """A filter on a column that is not a key keeps the rows; distinct counts of finer
    groups do not add up to a coarser group's."""
    session, plain = tables
    check_query(session, plain, sql)
    assert not _grouped_on_server(session.run(sql).plan)


def test_rows_repeated_after_the_load_are_caught(
    tables: tuple[Session, duckdb.DuckDBPyConnection],
) -> None:
    """A second part 5 (p_id was a key at load): its lines now join twice. The first
    query to meet it plans again without sums over joins, and so does the session."""
    session, plain = tables
    statement = "INSERT INTO parts VALUES (5, 5, 3)"
    session.run(statement)
    plain.execute(statement)
    assert session.join_sums
    check_query(session, plain, SUMMED[0])
    assert not session.join_sums
    for sql in SUMMED:
        check_query(session, plain, sql)
        result = session.run(sql)
        assert result.plan is not None and result.plan.pushdown
        assert not _summed_on_server(result.plan)
