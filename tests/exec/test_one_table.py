"""A server join's rows reach the local DuckDB as one table it can estimate (``veil.exec.one_table``).

DuckDB estimates a POSITIONAL JOIN of Arrow tables at ~0 rows, and joined the
rest of TPC-DS q81 to it as a cross product; the local plan must read one table.
"""

from __future__ import annotations

import re
from typing import cast

import duckdb
import pytest
import sqlglot
from sqlglot import exp

from tests.support.oracle import check_query
from tests.support.tpch import tpch_queries
from veil.design.model import Encryption, TableDesign
from veil.exec.one_table import one_table_per_join, unread_members
from veil.exec.server import FetchStats
from veil.session.session import Session
from veil.sql.plan import BindFilter, JoinedFetch, Scan

TPCH = dict(tpch_queries())

# each pairs a server join's scans by position in the planner's local plan
PAIRED = [
    TPCH["q3"],
    TPCH["q9"],
    # the inner orders is a source of its own: its columns are not the joined table's
    "SELECT l_orderkey, o_orderdate, o_shippriority FROM customer, orders, lineitem "
    "WHERE c_mktsegment = 'BUILDING' AND c_custkey = o_custkey AND l_orderkey = o_orderkey "
    "AND o_orderdate < DATE '1995-03-15' AND l_shipdate > DATE '1995-03-15' AND l_quantity > "
    "(SELECT max(l_quantity) - 2 FROM lineitem WHERE l_returnflag = 'R') ORDER BY 1, 2 LIMIT 5",
    # a bare column of a member is an output under its own name
    "SELECT o_orderdate, c_name FROM customer, orders WHERE c_custkey = o_custkey "
    "AND c_mktsegment = 'AUTOMOBILE' AND o_totalprice > 400000 ORDER BY 1, 2",
]


@pytest.mark.integration
@pytest.mark.parametrize("sql", PAIRED, ids=range(len(PAIRED)))
def test_local_plan_reads_one_table(
    session: Session, plain: duckdb.DuckDBPyConnection, sql: str
) -> None:
    check_query(session, plain, sql)
    plan = session.run(sql).plan
    assert plan is not None
    assert "POSITIONAL JOIN" in plan.local.sql(dialect="duckdb")  # the planner pairs them
    assert "POSITIONAL" not in plan.local_sql  # the local DuckDB reads one table


@pytest.mark.integration
def test_local_duckdb_estimates_the_joined_rows(session: Session) -> None:
    """EXPLAIN of the local plan: no positional scan, and the server join's true row count."""
    plan = session.run(TPCH["q3"]).plan
    assert plan is not None
    registered = session._fetch_scans(plan, FetchStats())  # what a run registers
    try:
        joined = next(n for n in registered if n.endswith("__joined"))
        rows = session.local.sql(f'SELECT count(*) FROM "{joined}"').fetchall()[0][0]
        text = session.local.sql("EXPLAIN " + session._local_sql(plan)).fetchall()[0][1]
    finally:
        session._unregister(registered)
    assert rows > 0 and "Positional" not in text
    assert f"~{rows:,} rows" in re.sub(r"\s+", " ", text)


def _scans(*names: tuple[str, str]) -> list[Scan]:
    table = cast(TableDesign, None)  # the rewrite reads only the scans' names and joins
    scans = [Scan(table, alias, local) for alias, local in names]
    fetch = JoinedFetch(scans, [])
    for scan in scans:
        scan.joined = fetch
    return scans


def _rewritten(sql: str) -> str:
    scans = _scans(("a", "t0"), ("b", "t1"))
    return one_table_per_join(sqlglot.parse_one(sql, read="duckdb"), scans).sql("duckdb")


@pytest.mark.unit
def test_a_subquerys_own_alias_stays() -> None:
    got = _rewritten(
        "SELECT a.x FROM t0 AS a POSITIONAL JOIN t1 AS b "
        "WHERE b.y > (SELECT max(b.y) FROM t2 AS b WHERE b.z = a.z)"
    )
    assert got == (
        'SELECT "t0__joined"."t0.x" AS "x" FROM t0__joined AS "t0__joined" '
        'WHERE "t0__joined"."t1.y" > (SELECT MAX(b.y) FROM t2 AS b WHERE b.z = "t0__joined"."t0.z")'
    )


@pytest.mark.unit
@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM t0 AS a POSITIONAL JOIN t1 AS b",  # the joined table's names would show
        "SELECT b.* FROM t0 AS a POSITIONAL JOIN t1 AS b",
        "SELECT x FROM t0 AS a POSITIONAL JOIN t1 AS b",  # x may be either member's
        "SELECT a.x FROM t0 AS a POSITIONAL JOIN t1 AS b JOIN t2 AS c USING (x)",
    ],
)
def test_what_cannot_be_told_apart_stays_positional(sql: str) -> None:
    assert "POSITIONAL JOIN" in _rewritten(sql)


@pytest.mark.unit
def test_another_joins_tables_stay() -> None:
    """A chain of other tables than one server join's read members is left as it is."""
    assert "POSITIONAL JOIN" in _rewritten("SELECT a.x FROM t0 AS a POSITIONAL JOIN t9 AS b")


@pytest.mark.unit
def test_two_server_joins_of_one_select() -> None:
    scans = _scans(("a", "t0"), ("b", "t1")) + _scans(("c", "t2"), ("d", "t3"))
    sql = "SELECT a.x, c.z FROM t0 AS a POSITIONAL JOIN t1 AS b, t2 AS c POSITIONAL JOIN t3 AS d WHERE b.y = d.w"
    got = one_table_per_join(sqlglot.parse_one(sql, read="duckdb"), scans).sql("duckdb")
    assert got == (
        'SELECT "t0__joined"."t0.x" AS "x", "t2__joined"."t2.z" AS "z" '
        'FROM t0__joined AS "t0__joined", t2__joined AS "t2__joined" '
        'WHERE "t0__joined"."t1.y" = "t2__joined"."t3.w"'
    )


@pytest.mark.unit
def test_members_read_through_the_joined_table_only_are_unread() -> None:
    scans = _scans(("a", "t0"), ("b", "t1"))
    local = one_table_per_join(
        sqlglot.parse_one(
            "SELECT a.x FROM t0 AS a POSITIONAL JOIN t1 AS b WHERE b.y > 1", read="duckdb"
        ),
        scans,
    )
    assert unread_members(local, scans) == {"t0", "t1"}


@pytest.mark.unit
def test_members_still_named_or_read_by_key_queries_stay() -> None:
    scans = _scans(("a", "t0"), ("b", "t1"))
    positional = sqlglot.parse_one("SELECT x FROM t0 AS a POSITIONAL JOIN t1 AS b", read="duckdb")
    assert unread_members(one_table_per_join(positional, scans), scans) == frozenset()
    keys = cast(exp.Query, sqlglot.parse_one("SELECT a.x FROM t0 AS a"))
    other = Scan(cast(TableDesign, None), "c", "t2")
    other.binds.append(BindFilter([scans[0]], cast(Encryption, None), keys, "t0's keys"))
    local = one_table_per_join(
        sqlglot.parse_one("SELECT a.x FROM t0 AS a POSITIONAL JOIN t1 AS b", read="duckdb"), scans
    )
    assert unread_members(local, [*scans, other]) == {"t1"}


@pytest.mark.integration
def test_a_run_registers_the_joined_table_alone(session: Session) -> None:
    """A member read only through its joined table gets no local table of its own."""
    plan = session.run(TPCH["q3"]).plan
    assert plan is not None
    registered = session._fetch_scans(plan, FetchStats())
    session._unregister(registered)
    assert plan.unregistered and not plan.unregistered & set(registered)
    assert any(name.endswith("__joined") for name in registered)
