"""The planner's row estimates (``veil.sql.selectivity``) against the real shares of TPC-H rows."""

from __future__ import annotations

import duckdb
import pytest
from tests.sql.test_passes import state_before

from veil.exec.session import Session
from veil.sql.passes.reduce_joins import reduce_joins
from veil.sql.selectivity import _interpolated, kept_share

FILTERS = [
    # one month of shipments: two bounds on one column make one range
    "l_shipdate >= DATE '1995-09-01' AND l_shipdate < DATE '1995-10-01'",
    "l_shipdate BETWEEN DATE '1994-01-01' AND DATE '1994-12-31'",
    "l_shipdate <= DATE '1998-09-02'",
    "l_quantity < 24 AND l_discount BETWEEN 0.05 AND 0.07",
    "l_returnflag = 'R'",
    "l_shipmode IN ('MAIL', 'SHIP')",
    "l_shipmode <> 'MAIL' AND l_shipdate > DATE '1997-06-30'",
]


@pytest.mark.parametrize("where", FILTERS)
def test_estimates_are_close_to_the_real_shares(
    session: Session, plain: duckdb.DuckDBPyConnection, where: str
) -> None:
    sql = f"SELECT COUNT(*) FROM lineitem WHERE {where}"
    state = state_before(session, sql, reduce_joins)
    (scan,) = state.scans.values()
    nodes = [p.node for p in scan.predicates if p.exact and p.node is not None]
    estimate = kept_share(nodes, scan, state.resolved, session)
    (real,) = plain.execute(
        f"SELECT AVG(CASE WHEN {where} THEN 1.0 ELSE 0 END) FROM lineitem"
    ).fetchone()  # type: ignore[misc]
    # ranges from quantiles are close; equalities assume uniform values (R: 1/3 for 1/4)
    assert real / 1.5 - 0.01 <= estimate <= real * 1.5 + 0.01, (estimate, real)


def test_quantile_rank_interpolates() -> None:
    points = [0, 10, 20, 30, 40]
    assert _interpolated(points, 20, inclusive=False) == 0.5
    assert _interpolated(points, 25, inclusive=False) == 0.625
    assert _interpolated(points, -1, inclusive=True) == 0.0
    assert _interpolated(points, 40, inclusive=True) == 1.0


def test_without_statistics_the_estimate_is_neutral(session: Session) -> None:
    sql = "SELECT COUNT(*) FROM lineitem WHERE l_comment LIKE '%special%requests%'"
    state = state_before(session, sql, reduce_joins)
    (scan,) = state.scans.values()
    nodes = [p.node for p in scan.predicates if p.node is not None]
    assert kept_share(nodes, scan, state.resolved, session) in (0.5, 1.0)
