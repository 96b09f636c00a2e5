"""Inner equi-joins on DET columns run on the server as one RemoteSQL (``pushdown_joins``)."""

from __future__ import annotations

from contextlib import closing
from pathlib import Path

import duckdb
import pytest

import veil.sql.planner as planner
from tests.support.oracle import assert_same, without
from tests.support.tpch import pristine_session, tpch_queries
from veil.frontend.explain import explain
from veil.session.session import Session
from veil.sql.passes.pushdown_joins import pushdown_joins
from veil.sql.plan import JoinedFetch, SplitPlan
from veil.sql.remote import joined_statement

TPCH = dict(tpch_queries())

LEFT_STAR = (
    "SELECT o_orderpriority, COUNT(*), COUNT(l_orderkey) FROM customer JOIN orders "
    "ON c_custkey = o_custkey LEFT JOIN lineitem ON l_orderkey = o_orderkey AND l_quantity > 49 "
    "WHERE c_mktsegment = 'BUILDING' AND o_orderdate < DATE '1992-03-01' GROUP BY 1 ORDER BY 1"
)
# Edge cases of the joined fetch, each checked against plaintext DuckDB.
JOINS = [
    # no column of either side is needed: the server sends a row per joined row
    "SELECT COUNT(*) FROM customer, orders WHERE c_custkey = o_custkey AND c_nationkey = 3",
    # many-to-many on a non-key column, with duplicates on both sides
    "SELECT COUNT(*), MIN(a.o_orderkey) FROM orders a JOIN orders b ON a.o_custkey = b.o_custkey "
    "WHERE a.o_orderdate < DATE '1992-03-01' AND b.o_orderpriority = '1-URGENT'",
    # a joined block next to a derived table and an outer reference in a subquery
    "SELECT n_name, COUNT(*) FROM nation JOIN supplier ON s_nationkey = n_nationkey, "
    "(SELECT 1 AS one) d WHERE n_regionkey = 1 AND EXISTS (SELECT 1 FROM partsupp "
    "WHERE ps_suppkey = s_suppkey AND ps_availqty < 100) GROUP BY n_name ORDER BY n_name",
    # NULLs never join (an empty match on the server is the same as on the client)
    "SELECT COUNT(*) FROM lineitem, orders WHERE l_orderkey = o_orderkey AND o_comment IS NULL",
    # an inner star with LEFT joins after it (TPC-DS q72) and in the middle (q40): the inner
    # part is joined on the server, the LEFT joins stay local with their ON
    LEFT_STAR,
    "SELECT n_name, COUNT(*), COUNT(o_orderkey) FROM customer LEFT JOIN orders "
    "ON c_custkey = o_custkey AND o_totalprice > 450000, nation WHERE c_nationkey = n_nationkey "
    "AND n_regionkey = 2 GROUP BY 1 ORDER BY 1",
    # join keys also selected: fetched, not dropped
    "SELECT c_custkey, o_orderkey FROM customer JOIN orders ON c_custkey = o_custkey "
    "WHERE c_mktsegment = 'AUTOMOBILE' AND o_totalprice > 400000 ORDER BY 1, 2",
]


def _joins(plan: SplitPlan | None) -> list[JoinedFetch]:
    assert plan is not None
    found = {id(s.joined): s.joined for s in plan.scans if s.joined is not None}
    return list(found.values())


@pytest.mark.parametrize("name", ["q3", "q12"])
def test_tpch_join_runs_on_the_server(session: Session, name: str) -> None:
    result = session.run(TPCH[name])
    joins = _joins(result.plan)
    assert len(joins) == 1 and len(joins[0].scans) >= 2
    sql = joined_statement(joins[0]).sql()
    assert sql.count("t_") >= len(joins[0].scans)  # one statement over the opaque tables
    assert result.stats.statements == 1


def test_q3_joined_fetch_drops_join_keys_and_filter_columns(session: Session) -> None:
    plan = session.run(TPCH["q3"]).plan
    scans = {s.table.name: s for s in _joins(plan)[0].scans}
    assert scans["customer"].columns == set()
    assert scans["orders"].columns == {"o_orderdate", "o_shippriority"}
    assert scans["lineitem"].columns == {"l_orderkey", "l_extendedprice", "l_discount"}


def test_wide_dimension_columns_stay_out_of_the_server_join(session: Session) -> None:
    # Q10's shape over all its orders: customer's name, address, phone and comment
    # repeated on a third of lineitem would cost more bytes than customer's own
    # fetch, so customer stays out of the server join.
    sql = (
        "SELECT c_custkey, c_name, c_address, c_phone, c_comment, n_name, "
        "SUM(l_extendedprice) FROM customer, orders, lineitem, nation "
        "WHERE c_custkey = o_custkey AND l_orderkey = o_orderkey AND l_returnflag = 'R' "
        "AND c_nationkey = n_nationkey GROUP BY ALL ORDER BY 1"
    )
    result = session.run(sql)
    joins = _joins(result.plan)
    assert len(joins) == 1 and "customer" not in {s.table.name for s in joins[0].scans}
    assert {"lineitem", "orders"} <= {s.table.name for s in joins[0].scans}
    assert "customer" in {s.table.name for s in result.plan.scans if s.joined is None}


def test_a_selective_filter_makes_the_join_pay(session: Session) -> None:
    # Q14: one month of lineitem (1/84 by the load's quantiles of l_shipdate) joined
    # with part on the server, rather than lineitem scanned twice (fetch, semi-join)
    result = session.run(TPCH["q14"])
    joins = _joins(result.plan)
    assert [sorted(s.table.name for s in j.scans) for j in joins] == [["lineitem", "part"]]
    assert result.stats.statements == 1


@pytest.mark.parametrize("name", ["q5", "q7", "q8", "q9"])
def test_part_of_a_larger_join_runs_on_the_server(session: Session, name: str) -> None:
    assert len(_joins(session.run(TPCH[name]).plan)) == 1


def test_outer_join_is_not_joined_on_the_server(session: Session) -> None:
    sql = (
        "SELECT c_custkey, COUNT(o_orderkey) FROM customer LEFT JOIN orders "
        "ON c_custkey = o_custkey GROUP BY 1"
    )
    assert _joins(session.run(sql).plan) == []


def test_inner_part_of_a_left_joined_block_runs_on_the_server(session: Session) -> None:
    result = session.run(LEFT_STAR)
    joins = _joins(result.plan)
    assert [sorted(s.table.name for s in j.scans) for j in joins] == [["customer", "orders"]]
    assert result.plan is not None and "LEFT JOIN" in result.plan.local.sql()


@pytest.mark.parametrize("sql", JOINS, ids=range(len(JOINS)))
def test_joined_fetch_matches_plaintext(
    any_session: Session, plain: duckdb.DuckDBPyConnection, sql: str
) -> None:
    result = any_session.run(sql)
    assert_same(result.table, plain.execute(sql).fetchall(), "ORDER BY" in sql, sql)


def test_joined_fetch_receives_fewer_bytes(
    veil_env: dict[str, object], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Q12: the join drops orders' key and lineitem's filter-only columns. A session over
    # the data as loaded for each set of passes: a sealed plan outlives plans.clear()
    with closing(pristine_session(veil_env, tmp_path / "joined")) as joining:
        joined = joining.run(TPCH["q12"]).stats.bytes_received
    monkeypatch.setattr(planner, "PASSES", without(planner.PASSES, pushdown_joins))
    with closing(pristine_session(veil_env, tmp_path / "per_table")) as fetching:
        per_table = fetching.run(TPCH["q12"]).stats.bytes_received
    assert joined < per_table


def test_explain_shows_the_server_join(session: Session) -> None:
    text = explain(session, TPCH["q3"])
    assert "server join of customer" in text
    assert "server join on customer.c_custkey = orders.o_custkey" in text
    assert "POSITIONAL JOIN" in text
    assert "BUILDING" not in text.split("local plan")[0].split("server filter")[0]


def test_q21_is_one_grouped_server_statement(session: Session) -> None:
    """EXISTS / NOT EXISTS as server filters of l1, and the four-table join grouped by
    s_name and counted on the server: a row per supplier comes back."""
    result = session.run(TPCH["q21"])
    joins = _joins(result.plan)
    assert len(joins) == 1 and joins[0].groups is not None and len(joins[0].scans) == 4
    assert result.stats.statements == 1
    assert "GROUP BY" in result.stats.remote_sql[0] and "NOT EXISTS" in result.stats.remote_sql[0]
