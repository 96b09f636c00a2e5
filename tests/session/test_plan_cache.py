"""The plan cache: a repeated statement skips planning and still gives the right answer."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from tests.support.oracle import assert_same
from veil.load.loader import load
from veil.session.plan_cache import CachedPlan, PlanCache, plan_key
from veil.session.session import Session
from veil.sql import planner
from veil.sql.plan import SplitPlan

SQL = "SELECT o_orderpriority, COUNT(*) FROM orders WHERE o_orderdate < ? GROUP BY 1 ORDER BY 1"


def _fresh(session: Session) -> Session:
    session.plans = PlanCache()
    return session


def test_a_repeated_query_is_planned_once(
    session: Session, plain: duckdb.DuckDBPyConnection, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fresh(session)
    plans: list[SplitPlan] = []
    real = planner.plan_query

    def counted(*args: object, **kwargs: object) -> SplitPlan:
        plans.append(real(*args, **kwargs))  # type: ignore[arg-type]
        return plans[-1]

    monkeypatch.setattr("veil.cost.choice.plan_query", counted)  # queries plan there
    params = ["1995-01-01"]
    first, second = session.run(SQL, params), session.run(SQL, params)
    assert len(plans) == 1 and session.plans.hits == 1
    assert second.plan is first.plan
    assert second.stats.remote_sql == first.stats.remote_sql  # still run on the server
    expected = plain.execute(SQL, params).fetchall()
    assert_same(second.table, expected, True, SQL)
    assert second.table.column_names == first.table.column_names


def test_the_first_two_parameter_values_get_their_own_plan(
    session: Session, plain: duckdb.DuckDBPyConnection
) -> None:
    _fresh(session)
    for value in ("1993-01-01", "1997-06-30", "1993-01-01"):
        result = session.run(SQL, [value])
        assert_same(result.table, plain.execute(SQL, [value]).fetchall(), True, SQL)
    # each value's plan, and the shape's template the second value checked (``templates``)
    assert len(session.plans) == 3 and session.plans.hits == 1
    # 1 and 1.0 are different parameters (INTEGER and DOUBLE): not one key
    assert plan_key("SELECT ?", [1], "auto") != plan_key("SELECT ?", [1.0], "auto")
    assert plan_key("SELECT ?", [1], "auto") != plan_key("SELECT ?", [True], "auto")


def test_statements_that_change_between_runs_are_planned_every_time(session: Session) -> None:
    _fresh(session)
    for sql in (
        "SELECT COUNT(*) FROM orders WHERE o_orderdate < current_date",
        "SELECT COUNT(*) FROM orders WHERE o_orderdate < now() - INTERVAL 30 YEAR",
        "SELECT COUNT(*) FROM orders WHERE o_orderkey < random() * 1000",
    ):
        session.run(sql)
        session.run(sql)
    assert len(session.plans) == 0


def test_planner_settings_are_part_of_the_key(session: Session) -> None:
    _fresh(session)
    sql = "SELECT SUM(o_totalprice) FROM orders WHERE o_orderstatus = 'F'"
    session.run(sql)
    session.hom_pushdown = "never"
    try:
        session.run(sql)
    finally:
        session.hom_pushdown = "auto"
    # each kept under its values and under its shape (its literal a parameter: issue 41)
    assert len(session.plans) == 4 and session.plans.hits == 0


def test_a_cached_plan_answers_after_rows_are_written(tpch_dir: Path, tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "nation.parquet").symlink_to(tpch_dir / "nation.parquet")
    load(
        str(source), f"duckdb:///{tmp_path}/s.duckdb", str(tmp_path / "c"), progress=lambda _: None
    )
    session = Session(tmp_path / "c")
    try:
        count = "SELECT COUNT(*) FROM nation WHERE n_regionkey = 2"
        before = session.run(count).table.column(0)[0].as_py()
        assert len(session.plans) == 1
        session.run("INSERT INTO nation VALUES (99, 'ATLANTIS', 2, 'x')")
        assert len(session.plans) == 1  # a row written changes no plan (the design does)
        hits = session.plans.hits
        assert session.run(count).table.column(0)[0].as_py() == before + 1
        assert session.plans.hits == hits + 1
    finally:
        session.close()


def test_least_recently_used_plans_leave_first() -> None:
    cache = PlanCache(size=2)
    entry = CachedPlan([], SplitPlan.__new__(SplitPlan), None)  # type: ignore[arg-type]
    keys = [plan_key(f"SELECT {i}", None, "auto") for i in range(3)]
    cache.put(keys[0], entry)
    cache.put(keys[1], entry)
    assert cache.get(keys[0]) is entry  # now the most recent
    cache.put(keys[2], entry)
    assert cache.get(keys[1]) is None and cache.get(keys[0]) is entry and len(cache) == 2


@pytest.mark.fallback_expected
def test_a_plan_that_fell_back_is_not_kept(
    session: Session, first_scan_fails: list[object]
) -> None:
    _fresh(session)
    sql = "SELECT COUNT(*) FROM orders WHERE o_orderdate < DATE '1994-01-01'"
    assert not session.run(sql).plan.pushdown  # type: ignore[union-attr]
    assert len(session.plans) == 0 and first_scan_fails
    assert session.run(sql).plan.pushdown  # type: ignore[union-attr]
    assert len(session.plans) == 1
