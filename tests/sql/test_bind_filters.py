"""A small scan's client-side filter becomes a DET key filter on a large joined scan."""

from __future__ import annotations

import duckdb
import pytest

import veil.sql.planner as planner
from tests.support.oracle import assert_same, without
from tests.support.tpch import tpch_queries
from veil.frontend.explain import explain
from veil.session.session import Session
from veil.sql.passes.count_repeats import count_repeats
from veil.sql.plan import SplitPlan

TPCH = dict(tpch_queries())

QUERIES = [
    # the filter keeps a few parts: lineitem is fetched for their keys only
    "SELECT COUNT(*), SUM(l_quantity) FROM part, lineitem "
    "WHERE p_partkey = l_partkey AND p_name LIKE '%blush%'",
    # the filter keeps no part: the server gets FALSE and sends nothing
    "SELECT COUNT(*) FROM part JOIN lineitem ON p_partkey = l_partkey "
    "WHERE p_name LIKE '%no such colour%'",
    # the filter keeps most parts: no key list is sent
    "SELECT COUNT(*) FROM part, lineitem WHERE p_partkey = l_partkey AND p_name NOT LIKE '%blush%'",
    # a NULL-producing outer join elsewhere in the query is left alone
    "SELECT p_partkey, COUNT(l_orderkey) FROM part LEFT JOIN lineitem ON p_partkey = l_partkey "
    "WHERE p_name LIKE '%blush%' GROUP BY p_partkey ORDER BY p_partkey",
    # an uncorrelated IN-subquery: its keys filter orders, and lineitem through the join
    "SELECT o_orderkey, SUM(l_quantity) FROM orders, lineitem WHERE o_orderkey = l_orderkey "
    "AND o_orderkey IN (SELECT l_orderkey FROM lineitem GROUP BY l_orderkey "
    "HAVING SUM(l_quantity) > 250) GROUP BY o_orderkey ORDER BY o_orderkey",
    # keys of another type: only exactly representable ones can match
    "SELECT COUNT(*) FROM orders WHERE o_orderkey IN (SELECT l_quantity / 2 FROM lineitem)",
    # text keys (byte-string DET ciphertexts) sent as one array parameter
    "SELECT o_orderstatus, COUNT(*) FROM orders WHERE o_orderstatus IN "
    "(SELECT l_linestatus FROM lineitem WHERE l_orderkey < 100 AND l_linestatus = 'F') "
    "GROUP BY o_orderstatus",
    # keys filtering the outer scan filter its correlated subquery's scan (Q20's shape,
    # with a LIKE the workload does not precompute: the client runs the IN-subquery)
    "SELECT ps_partkey, ps_availqty FROM partsupp WHERE ps_partkey IN "
    "(SELECT p_partkey FROM part WHERE p_name LIKE 'rose%') AND ps_availqty > "
    "(SELECT 0.5 * SUM(l_quantity) FROM lineitem WHERE l_partkey = ps_partkey "
    "AND l_suppkey = ps_suppkey) ORDER BY 1, 2",
    # NOT IN and a correlated IN are left to the client
    "SELECT COUNT(*) FROM orders WHERE o_orderkey NOT IN (SELECT l_orderkey FROM lineitem "
    "WHERE l_quantity > 5)",
    "SELECT COUNT(*) FROM orders o WHERE o_orderkey IN (SELECT l_orderkey FROM lineitem "
    "WHERE l_suppkey = o.o_custkey)",
]


def _binds(plan: SplitPlan | None, table: str) -> int:
    assert plan is not None
    return sum(len(s.binds) for s in plan.scans if s.table.name == table)


@pytest.mark.parametrize("sql", QUERIES, ids=range(len(QUERIES)))
def test_bind_filtered_queries_match_plaintext(
    any_session: Session, plain: duckdb.DuckDBPyConnection, sql: str
) -> None:
    result = any_session.run(sql)
    assert_same(result.table, plain.execute(sql).fetchall(), "ORDER BY" in sql, sql)


def test_q9_filters_green_parts_on_the_server(session: Session) -> None:
    """The workload's LIKE is precomputed: Q9's whole join runs as one server statement."""
    result = session.run(TPCH["q9"])
    assert _binds(result.plan, "lineitem") == 0
    assert result.stats.statements == 1  # the six-table join, nation included
    assert "server filter part.p_name LIKE '%green%'  [DET" in explain(session, TPCH["q9"])


def test_few_keys_cut_the_bytes(fresh_session: Session, monkeypatch: pytest.MonkeyPatch) -> None:
    # without count_repeats, which would send the partkeys' 2,000 values with their counts;
    # a session of its own, whose plans and bytes no other test's queries touched
    monkeypatch.setattr(planner, "PASSES", without(planner.PASSES, count_repeats))
    few, most = (fresh_session.run(QUERIES[i]).stats for i in (0, 2))
    assert few.bytes_received * 2 < most.bytes_received  # part itself is fetched whole
    assert not any(" IN (" in sql for sql in most.remote_sql)


def test_no_key_left_sends_false(session: Session) -> None:
    stats = session.run(QUERIES[1]).stats
    assert any("FALSE" in sql.upper() for sql in stats.remote_sql)


def test_key_lists_are_one_parameter(any_session: Session) -> None:
    """Integer and text keys alike: one array parameter, not a literal per key."""
    for sql, table in ((QUERIES[0], "lineitem"), (QUERIES[6], "orders")):
        result = any_session.run(sql)
        assert _binds(result.plan, table) == 1
        # Spark's dialect spells UNNEST as EXPLODE (of one ARRAY literal)
        unnest = "EXPLODE(ARRAY(" if any_session.backend.dialect == "spark" else "UNNEST("
        keyed = [s for s in result.stats.remote_sql if f"IN (SELECT {unnest}" in s.upper()]
        assert keyed, result.stats.remote_sql
        if any_session.backend.dialect == "duckdb":  # PostgreSQL and Spark: an array literal
            assert all(len(s) < 2000 for s in keyed), keyed


def test_outer_join_gets_no_bind_filter(session: Session) -> None:
    assert _binds(session.run(QUERIES[3]).plan, "lineitem") == 0


def test_in_subquery_keys_filter_both_joined_scans(session: Session) -> None:
    plan = session.run(QUERIES[4]).plan
    assert _binds(plan, "orders") == 1
    assert _binds(plan, "lineitem") == 1  # the outer lineitem, through o_orderkey = l_orderkey


def test_outer_keys_filter_a_correlated_subquery(session: Session) -> None:
    for sql in (QUERIES[7], TPCH["q20"]):  # an uncorrelated IN stays with bind filters
        plan = session.run(sql).plan
        assert _binds(plan, "partsupp") == 1 and _binds(plan, "lineitem") == 1


@pytest.mark.parametrize("index", [8, 9])
def test_not_in_and_correlated_in_get_no_bind_filter(session: Session, index: int) -> None:
    assert _binds(session.run(QUERIES[index]).plan, "orders") == 0


def test_a_scan_thinned_by_keys_thins_its_join_partners(session: Session) -> None:
    """Q18: orders, filtered by its IN-subquery's keys, filters customer by its c_custkeys."""
    result = session.run(TPCH["q18"])
    assert result.plan is not None
    customer = next(s for s in result.plan.scans if s.table.name == "customer")
    assert [[s.table.name for s in b.sources] for b in customer.binds] == [["orders"]]
    run = result.stats.steps[id(customer)]
    assert run.rows < session.design.table("customer").row_count / 10
