"""Exact server filters leave the local plan, and so do the columns only they read."""

from __future__ import annotations

from tests.support.tpch import tpch_queries
from veil.session.session import Session
from veil.sql.plan import SplitPlan

TPCH = dict(tpch_queries())


def _columns(plan: SplitPlan | None, table: str) -> set[str]:
    assert plan is not None
    return {c for s in plan.scans if s.table.name == table for c in s.columns}


def test_q4_fetches_no_filter_only_column(session: Session) -> None:
    # l_commitdate < l_receiptdate is an OPE comparison the server applies exactly,
    # inside the EXISTS the server evaluates whole: lineitem is not fetched at all
    result = session.run(TPCH["q4"])
    plan = result.plan
    assert plan is not None and {s.table.name for s in plan.scans} == {"orders"}
    assert "l_commitdate" not in plan.local.sql() and "EXISTS" not in plan.local.sql()
    assert result.stats.statements == 1  # and orders is grouped on the server


def test_like_prefilter_is_still_finished_on_the_client(session: Session) -> None:
    # not a workload LIKE (those are precomputed, exact): a SEARCH pre-filter on "blush"
    sql = "SELECT COUNT(*) FROM part WHERE p_name LIKE '% blush %' AND p_size < 10"
    plan = session.run(sql).plan
    assert plan is not None
    assert _columns(plan, "part") == {"p_name"}  # p_size's filter is exact, LIKE's is not
    assert "LIKE" in plan.local.sql() and "p_size" not in plan.local.sql()
