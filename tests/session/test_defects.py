"""Regression tests for the defect classes of issue 8, on every server backend.

Each test checks a class, not one query: parameters bound by position,
aggregates known only to DuckDB's catalog, abandoned rewrites, subqueries
that cannot run alone, and errors that must reach the user as VeilErrors.
"""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pytest
import sqlglot

import veil.sql.planner as planner
from tests.support.oracle import assert_same
from veil.errors import InternalError, VeilError
from veil.frontend.explain import explain
from veil.session.result import Result, Streamed
from veil.session.session import Session
from veil.sql import fallbacks
from veil.sql.errors import QueryError, QuerySyntaxError


def check(session: Session, plain: duckdb.DuckDBPyConnection, sql: str, params=None) -> None:  # type: ignore[no-untyped-def]
    expected = plain.execute(sql, params).fetchall() if params else plain.execute(sql).fetchall()
    assert_same(session.run(sql, params).table, expected, False, sql)


PARAMETERS = [
    ("SELECT ? + 0, ?", [1, 2]),
    ("SELECT COUNT(*) FROM orders WHERE o_orderkey < ? + 0 AND o_orderkey > ?", [100, 50]),
    ("SELECT ? * 2 AS a, (SELECT COUNT(*) FROM nation WHERE n_nationkey < ?) AS b", [5, 3]),
    (
        "SELECT o_orderpriority, COUNT(*) FROM orders WHERE o_totalprice > ? "
        "GROUP BY 1 HAVING COUNT(*) > ? + ? ORDER BY 1",
        [1000, 10, 5],
    ),
    (
        "SELECT COUNT(*) FROM lineitem WHERE l_shipmode IN (?, ?, 'AIR') AND l_quantity < ?",
        ["MAIL", "SHIP", 10],
    ),
    ("SELECT n_name FROM nation WHERE n_regionkey = ? ORDER BY n_name LIMIT ?", [1, 3]),
    (
        "SELECT COUNT(*) FROM orders WHERE o_custkey IN "
        "(SELECT c_custkey FROM customer WHERE c_acctbal > ? AND c_nationkey = ?) AND o_orderkey < ?",
        [0, 3, 3000],
    ),
    ("SELECT CASE WHEN ? THEN 'a' ELSE ? END, ?::VARCHAR", [True, "b", "it's ?"]),
]


@pytest.mark.parametrize(("sql", "params"), PARAMETERS)
def test_parameters_bind_in_text_order(
    any_session: Session, plain: duckdb.DuckDBPyConnection, sql: str, params: list[object]
) -> None:
    check(any_session, plain, sql, params)


def test_a_question_mark_inside_a_string_is_not_a_marker(any_session: Session) -> None:
    assert any_session.run("SELECT '?' || ?", ["x"]).table.to_pylist() == [
        {"('?' || 'x')": "?x"}
    ] or (any_session.run("SELECT '?' || ?", ["x"]).table.column(0).to_pylist() == ["?x"])
    with pytest.raises(QueryError, match="2 parameter marker"):
        any_session.run("SELECT ?, ?", [1])
    with pytest.raises(QuerySyntaxError, match="one parameter style"):
        any_session.run("SELECT ?, $1", [1])


def test_parameters_in_dml(session: Session) -> None:
    before = session.run("SELECT COUNT(*) FROM region").table.column(0)[0].as_py()
    session.run("INSERT INTO region VALUES (? + 100, ?, ?)", [1, "NAME", "comment"])
    row = session.run("SELECT r_regionkey, r_name FROM region WHERE r_name = ?", ["NAME"]).table
    assert row.to_pylist() == [{"r_regionkey": 101, "r_name": "NAME"}]
    session.run("UPDATE region SET r_name = ? WHERE r_regionkey = ? + 0", ["OTHER", 101])
    session.run("DELETE FROM region WHERE r_name = ? AND r_regionkey > ?", ["OTHER", 100])
    assert session.run("SELECT COUNT(*) FROM region").table.column(0)[0].as_py() == before


AGGREGATES = [
    "histogram(l_returnflag)",
    "product(l_linenumber)",
    "sumkahan(l_quantity)",
    "fsum(l_quantity)",
    "bit_and(l_linenumber)",
    "bit_or(l_linenumber)",
    "geomean(l_linenumber)",
    "string_agg(DISTINCT l_linestatus, ',' ORDER BY l_linestatus)",
    "arg_max(l_linestatus, l_orderkey * 10 + l_linenumber)",
    "median(l_quantity)",
    "COUNT(DISTINCT l_partkey)",
    "max(l_comment)",
]


@pytest.mark.parametrize("aggregate", AGGREGATES)
@pytest.mark.parametrize("policy", ["auto", "always"])
def test_every_catalog_aggregate_runs_over_all_rows(
    any_session: Session, plain: duckdb.DuckDBPyConnection, aggregate: str, policy: str
) -> None:
    any_session.hom_pushdown = policy
    try:
        for sql in (
            f"SELECT l_returnflag, COUNT(*), {aggregate} FROM lineitem GROUP BY l_returnflag",
            f"SELECT SUM(l_quantity), SUM(l_tax), {aggregate} FROM lineitem",
            f"SELECT SUM(l_quantity), {aggregate} FROM lineitem WHERE l_shipdate < DATE '1995-01-01'",
        ):
            check(any_session, plain, sql)
    finally:
        any_session.hom_pushdown = "auto"


SUBQUERIES = [
    "WITH big AS (SELECT o_orderkey AS k FROM orders WHERE o_totalprice > 300000) "
    "SELECT COUNT(*) FROM lineitem WHERE l_orderkey IN (SELECT k FROM big)",
    "SELECT COUNT(*) FROM (SELECT o_orderkey AS k, o_custkey AS c FROM orders) d, customer "
    "WHERE d.c = c_custkey AND c_custkey IN (SELECT d2.c FROM (SELECT o_custkey AS c FROM orders "
    "WHERE o_totalprice > 400000) d2)",
    "WITH t AS (SELECT p_partkey FROM part WHERE p_size < 5) SELECT COUNT(*) FROM lineitem, t "
    "WHERE l_partkey = t.p_partkey AND l_suppkey IN (SELECT ps_suppkey FROM partsupp, t "
    "WHERE ps_partkey = t.p_partkey)",
]


@pytest.mark.parametrize("sql", SUBQUERIES)
def test_in_subqueries_over_ctes_and_derived_tables(
    any_session: Session, plain: duckdb.DuckDBPyConnection, sql: str
) -> None:
    check(any_session, plain, sql)


@pytest.mark.fallback_expected
def test_a_failing_pass_falls_back_to_the_client(
    session: Session, plain: duckdb.DuckDBPyConnection, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(state: object) -> object:
        raise RuntimeError("an optimisation's bug")

    monkeypatch.setattr(planner, "PASSES", (*planner.PASSES[:3], broken, *planner.PASSES[3:]))
    session.plans.clear()  # plans made with the usual passes
    sql = "SELECT l_returnflag, COUNT(*) FROM lineitem WHERE l_quantity < 10 GROUP BY 1"
    result = session.run(sql)
    assert result.plan is not None and not result.plan.pushdown
    # the pass that failed is named, for the log and `veil explain`
    assert str(result.plan.fallback) == "pass broken failed (RuntimeError: an optimisation's bug)"
    assert (result.plan.fallback.stage, result.plan.fallback.shape) == ("plan", "pass broken")
    assert "the split planner gave up (pass broken failed" in explain(session, sql)
    assert_same(result.table, plain.execute(sql).fetchall(), False, sql)


def test_passes_are_left_out_by_name(session: Session) -> None:
    sql = "SELECT l_returnflag, COUNT(*) FROM lineitem GROUP BY 1"
    tree = sqlglot.parse_one(sql, read="duckdb")
    grouped = planner.plan_query(tree, session.design, session)
    assert grouped.scans[0].aggregation is not None
    ungrouped = planner.plan_query(
        tree, session.design, session, without=frozenset({"pushdown_aggregates"})
    )
    assert ungrouped.pushdown and ungrouped.scans[0].aggregation is None
    with pytest.raises(ValueError, match="no planner pass is named pushdown_everything"):
        planner.plan_query(
            tree, session.design, session, without=frozenset({"pushdown_everything"})
        )
    # a pass's name is its module's: the names `without` and explain use are the files' names
    assert all(p.__module__ == f"veil.sql.passes.{planner.pass_name(p)}" for p in planner.PASSES)


@pytest.mark.fallback_expected
def test_a_failing_server_statement_falls_back_to_the_client(
    session: Session, plain: duckdb.DuckDBPyConnection, first_scan_fails: list[object]
) -> None:
    sql = "SELECT COUNT(*) FROM orders WHERE o_orderdate < DATE '1995-01-01'"
    before = fallbacks.counts()
    result = session.run(sql)
    assert_same(result.table, plain.execute(sql).fetchall(), False, sql)
    assert first_scan_fails
    # the result says it fell back, and why; the process counts it by stage and shape
    assert result.plan is not None and result.plan.fallback is not None
    assert result.plan.fallback.stage == "run" and "split plan failed" in str(result.plan.fallback)
    assert [f[:3] for f in fallbacks.since(before)] == [("run", result.plan.fallback.shape, 1)]


@pytest.mark.fallback_expected
def test_a_streamed_query_falls_back_to_the_client_too(
    session: Session, plain: duckdb.DuckDBPyConnection, first_scan_fails: list[object]
) -> None:
    sql = "SELECT o_orderkey FROM orders WHERE o_orderdate < DATE '1992-02-01'"
    answer = session.stream(sql)
    assert isinstance(answer, Result)  # the split plan failed before any row: answered whole
    assert_same(answer.table, plain.cursor().execute(sql).fetchall(), False, sql)
    streamed = session.stream(sql)  # the next run streams
    assert isinstance(streamed, Streamed)
    rows = pa.Table.from_batches(list(streamed.batches()), schema=streamed.schema)
    assert_same(rows, plain.cursor().execute(sql).fetchall(), False, sql)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT nope FROM nation",
        "SELECT n_name + 1 FROM nation",
        "SELECT error('boom') FROM nation",
        "SELECT CAST(n_name AS INTEGER) FROM nation",
        "SELECT * FROM read_csv('/nonexistent.csv')",
    ],
)
def test_errors_reach_the_user_as_veil_errors(any_session: Session, sql: str) -> None:
    with pytest.raises(VeilError):
        any_session.run(sql)


def test_explain_failures_reach_the_user_as_veil_errors(
    session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    import veil.frontend.explain as explain_module

    def broken(*args: object) -> object:
        raise RuntimeError("a renderer bug")

    monkeypatch.setattr(explain_module, "scan_statement", broken)
    with pytest.raises(InternalError, match="a renderer bug"):
        explain_module.explain(session, "SELECT n_name FROM nation WHERE n_regionkey = 1")


def test_a_plan_runs_twice_unchanged(session: Session, plain: duckdb.DuckDBPyConnection) -> None:
    """Execution never mutates the plan: bind filters are per run."""
    from veil.exec.server import FetchStats
    from veil.sql.parse import parse_statement

    sql = (
        "SELECT COUNT(*) FROM lineitem, part WHERE l_partkey = p_partkey AND p_name LIKE '%green%'"
    )
    tree = parse_statement(sql)
    plan = session.plan(tree)
    before = [(len(s.predicates), len(s.binds)) for s in plan.scans]
    first = session.execute_plan(plan, FetchStats())
    second_stats = FetchStats()
    second = session.execute_plan(plan, second_stats)
    assert [(len(s.predicates), len(s.binds)) for s in plan.scans] == before
    assert first.equals(second)
    assert_same(second, plain.execute(sql).fetchall(), False, sql)
