"""The planner's row estimates (``veil.sql.selectivity``) against the real shares of TPC-H rows."""

from __future__ import annotations

import duckdb
import pytest

from tests.sql.test_passes import state_before
from tests.support.tpch import tpch_queries
from veil.session.session import Session
from veil.sql.passes.reduce_joins import reduce_joins
from veil.sql.selectivity import ashe_pairs, ashe_runs, group_count, kept_share, quantile_rank

TPCH = dict(tpch_queries())
FILTERS = [
    # one month of shipments: two bounds on one column make one range
    "l_shipdate >= DATE '1995-09-01' AND l_shipdate < DATE '1995-10-01'",
    "l_shipdate BETWEEN DATE '1994-01-01' AND DATE '1994-12-31'",
    "l_shipdate <= DATE '1998-09-02'",
    "l_quantity < 24 AND l_discount BETWEEN 0.05 AND 0.07",
    "l_returnflag = 'R'",
    "l_shipmode IN ('MAIL', 'SHIP')",
    "l_shipmode <> 'MAIL' AND l_shipdate > DATE '1997-06-30'",
    # a filter restated (the planner's implied copies): one column's filters keep the
    # fewest rows one of them keeps, not their product
    "l_shipmode IN ('MAIL', 'SHIP') AND (l_shipmode = 'MAIL' OR l_shipmode = 'SHIP')",
]


@pytest.mark.parametrize("where", FILTERS)
def test_estimates_are_close_to_the_real_shares(
    session: Session, plain: duckdb.DuckDBPyConnection, where: str
) -> None:
    estimate, real = _estimated_and_real(session, plain, "lineitem", where)
    # ranges from quantiles are close; equalities assume uniform values (R: 1/3 for 1/4)
    assert real / 1.5 - 0.01 <= estimate <= real * 1.5 + 0.01, (estimate, real)


def test_quantile_rank_interpolates() -> None:
    points = [0, 10, 20, 30, 40]
    assert quantile_rank(points, 20, inclusive=False) == 0.5
    assert quantile_rank(points, 25, inclusive=False) == 0.625
    assert quantile_rank(points, -1, inclusive=True) == 0.0
    assert quantile_rank(points, 40, inclusive=True) == 1.0


def test_without_statistics_the_estimate_is_neutral(session: Session) -> None:
    sql = "SELECT COUNT(*) FROM lineitem WHERE l_comment LIKE '%special%requests%'"
    state = state_before(session, sql, reduce_joins)
    (scan,) = state.scans.values()
    nodes = [p.node for p in scan.predicates if p.node is not None]
    assert kept_share(nodes, scan, state.resolved, session) in (0.5, 1.0)


def _fetched_rows(session: Session, sql: str) -> dict[str, tuple[float, int]]:
    """Per statement (its first scan's table): the planner's estimate and the rows it returned."""
    result = session.run(sql)
    assert result.plan is not None and result.plan.pushdown
    found = {}
    for scan in result.plan.scans:
        step = scan.joined if scan.joined is not None else scan
        estimate = step.estimated_rows
        run = result.stats.steps.get(id(step))
        if estimate is not None and run is not None:
            found[scan.table.name if scan.joined is None else "join"] = (estimate, run.rows)
    return found


def test_a_join_closing_a_cycle_thins_the_joined_rows(session: Session) -> None:
    """Q5's c_nationkey = s_nationkey keeps 1 in 25 of the joined rows (it was priced 25x)."""
    estimate, rows = _fetched_rows(session, TPCH["q5"])["join"]
    assert rows / 3 <= estimate <= rows * 3, (estimate, rows)


def test_a_semi_join_reduction_thins_the_scan(session: Session) -> None:
    """Q17's shape: the subquery's lineitem, reduced by part's brand (1 part in 25)."""
    sql = (
        "SELECT SUM(l_extendedprice) FROM lineitem, part WHERE p_partkey = l_partkey "
        "AND p_brand = 'Brand#23' AND l_quantity < "
        "(SELECT 0.2 * AVG(l_quantity) FROM lineitem WHERE l_partkey = p_partkey)"
    )
    estimate, rows = _fetched_rows(session, sql)["lineitem"]
    assert rows > 0 and rows / 3 <= estimate <= rows * 3, (estimate, rows)


def test_a_server_join_reduced_from_outside_keeps_what_the_reduction_keeps(
    session: Session,
) -> None:
    """Q2's region, nation, supplier and partsupp, reduced by the subquery's parts of one
    size and type: priced at every partsupp row of Europe's suppliers without it (250x)."""
    result = session.run(TPCH["q2"])
    assert result.plan is not None
    reduced = [
        s.joined
        for s in result.plan.scans
        if s.joined is not None and s.reduction is not None and s.joined.estimated_rows
    ]
    assert reduced, "Q2's server join is reduced by the subquery's parts"
    for fetch in reduced:
        rows = result.stats.steps[id(fetch)].rows
        assert fetch.estimated_rows is not None
        assert rows > 0 and rows / 3 <= fetch.estimated_rows <= rows * 3, (
            fetch.estimated_rows,
            rows,
        )


def test_a_grouped_server_join_counts_its_groups(session: Session) -> None:
    """Q16's joined GROUP BY: its groups from the keys' distinct counts (p_size narrowed to
    the IN list's 8) and the joined rows; DuckDB's own guess was 40 times too few."""
    estimate, rows = _fetched_rows(session, TPCH["q16"])["join"]
    assert rows > 0 and rows / 3 <= estimate <= rows * 3, (estimate, rows)


def test_group_count_meets_at_most_the_rows_or_the_combinations() -> None:
    assert group_count(10, [1000.0, 1000.0]) == pytest.approx(10, rel=1e-4)
    assert group_count(1e9, [25.0, 8.0]) == pytest.approx(200)
    assert group_count(120_000, [25.0, 150.0, 8.0]) == pytest.approx(29_450, rel=0.01)
    assert group_count(0, [5.0]) == 1.0 and group_count(7, []) == 1.0


@pytest.mark.parametrize(
    ("table", "where"),
    [
        ("part", "p_name LIKE '%green%'"),
        ("part", "p_type LIKE '%BRASS'"),
        ("orders", "o_comment NOT LIKE '%special%requests%'"),
        ("lineitem", "l_receiptdate > l_commitdate"),
        ("lineitem", "l_shipdate < l_commitdate"),
    ],
)
def test_precomputed_filters_keep_what_the_load_counted(
    session: Session, plain: duckdb.DuckDBPyConnection, table: str, where: str
) -> None:
    """A workload's LIKE or comparison of two columns, precomputed: its share as counted
    at load (``params["kept"]``), not ``UNKNOWN``'s half (Q9's green parts are 5%)."""
    estimate, real = _estimated_and_real(session, plain, table, where)
    assert real / 1.5 - 0.01 <= estimate <= real * 1.5 + 0.01, (estimate, real)


def _estimated_and_real(
    session: Session, plain: duckdb.DuckDBPyConnection, table: str, where: str
) -> tuple[float, float]:
    """The planner's share of ``table``'s rows that ``where`` keeps, and plaintext's."""
    state = state_before(session, f"SELECT COUNT(*) FROM {table} WHERE {where}", reduce_joins)
    (scan,) = state.scans.values()
    nodes = [p.node for p in scan.predicates if p.exact and p.node is not None]
    estimate = kept_share(nodes, scan, state.resolved, session)
    (real,) = plain.execute(
        f"SELECT AVG(CASE WHEN {where} THEN 1.0 ELSE 0 END) FROM {table}"
    ).fetchone()  # type: ignore[misc]
    return estimate, float(real)


def test_an_ashe_sums_pads_cost_per_run_of_summed_ids() -> None:
    # every id summed: one run a block; half at random: about 16 (a run starts at an id
    # with chance q, or 1/4 past the first); one group of many: runs of single ids
    assert ashe_runs(64_000, 64_000, 1) == pytest.approx(1_000)
    assert ashe_runs(64_000, 32_000, 1) == pytest.approx(1_000 * (0.5 + 63 / 4))
    assert ashe_runs(64_000, 64_000, 1_000) == pytest.approx(64_000 * (1 - 63 / 64_000))
    assert ashe_runs(64_000, 640, 1) <= 640  # never more runs than kept rows
    assert ashe_pairs(64_000, 64_000, 1) == pytest.approx(1_000)
