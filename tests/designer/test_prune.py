"""The greedy design's pruning (``veil.designer.prune``): what no workload plan reads is left
out, what one reads stays, and a column read only inside a pruned sum stays fetchable."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.oracle import read_fixture
from tests.support.tpch import tpch_queries
from veil.ciphers.columns import available_schemes
from veil.design.model import ASHE, BLOCKS, OPE, Column, PhysicalDesign
from veil.designer import prune
from veil.designer.greedy import greedy_design
from veil.designer.prune import _favourable, _optional, _PlanningContext, unread_encryptions
from veil.load.sources import open_source
from veil.sql.parse import parse_statement
from veil.sql.planner import plan_query

pytestmark = pytest.mark.unit

SCHEMA = {
    "sales": [
        Column("s_item", "INTEGER"),
        Column("s_qty", "INTEGER"),
        Column("s_price", "DECIMAL(7,2)"),
    ],
    "item": [
        Column("i_item", "INTEGER"),
        Column("i_brand", "VARCHAR"),
        Column("i_size", "INTEGER"),
    ],
}
# a correlated AVG: the planner runs the subquery on the client, so no plan reads i_size's sum
CORRELATED_AVG = (
    "SELECT i_brand FROM item i "
    "WHERE 10 < (SELECT avg(i2.i_size) FROM item i2 WHERE i2.i_brand = i.i_brand)"
)


def stored(design: PhysicalDesign) -> set[tuple[str, str, str]]:
    found = {(t.name, e.scheme, e.source) for t in design.tables.values() for e in t.encryptions}
    for table in design.tables.values():
        found |= {(table.name, ASHE, s) for s in (table.sums.sources if table.sums else [])}
    return found


def design(workload: list[str], *, prune: bool = True) -> PhysicalDesign:
    return greedy_design(SCHEMA, workload, available_schemes(), "test", prune=prune)


def test_unread_sum_is_pruned_and_its_column_fetched() -> None:
    full, pruned = design([CORRELATED_AVG], prune=False), design([CORRELATED_AVG])
    assert ("item", ASHE, "i_size") in stored(full)
    assert ("item", BLOCKS, "i_size") in stored(full)  # read only inside the sum
    assert ("item", ASHE, "i_size") not in stored(pruned)
    # the client now sums it: it must come back per row, not only in sealed blocks
    assert pruned.tables["item"].find("i_size", BLOCKS) is None
    assert pruned.tables["item"].encryptions_of("i_size")


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT i_size, min(i_size), avg(i_size), count(*) FROM item GROUP BY i_size",
        "SELECT i_brand, sum(s_qty * s_price) FROM sales JOIN item ON s_item = i_item "
        "WHERE i_size > 3 GROUP BY i_brand",
        "SELECT sum(s_price) FROM sales WHERE s_qty > 5",
        "SELECT s_item FROM sales WHERE s_price = "
        "(SELECT min(s2.s_price) FROM sales s2 WHERE s2.s_item = sales.s_item)",
    ],
)
def test_what_a_plan_reads_is_kept(sql: str) -> None:
    """Server sums (over a join too: every key is taken as distinct), ranges, MIN/MAX."""
    assert stored(design([sql])) == stored(design([sql], prune=False))


def test_a_query_without_a_plan_keeps_its_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    """A query the planner fails on keeps every encryption of the tables it names."""
    full = design([CORRELATED_AVG], prune=False)

    def fails(*_: object, **__: object) -> None:
        raise RuntimeError("a planner bug")

    monkeypatch.setattr(prune, "plan_query", fails)
    assert unread_encryptions(full, [CORRELATED_AVG]) == frozenset()


def test_the_ordered_key_is_never_pruned() -> None:
    """The OPE rows are loaded in the order of stays: plans read it (ranges of a small
    dimension's keys) only where the loaded row counts say so, which planning cannot know."""
    sql = "SELECT i_brand, count(*) FROM item WHERE i_size BETWEEN 3 AND 5 GROUP BY i_brand"
    full = design([sql], prune=False)
    assert full.tables["item"].sort_candidates == ["i_size"]
    assert ("item", OPE, "i_size") not in set(_optional(full).values())


def test_without_a_workload_nothing_is_planned() -> None:
    assert unread_encryptions(design([]), []) == frozenset()


@pytest.fixture(scope="module")
def tpch_schema(tpch_dir: Path) -> dict[str, list[Column]]:
    con, tables = open_source(str(tpch_dir))
    try:
        return {t.name: t.columns(con) for t in tables}
    finally:
        con.close()


def test_tpch_plans_keep_their_shape(tpch_schema: dict[str, list[Column]]) -> None:
    """The test suite's workload (TPC-H's 22 and the feature queries): under the pruned
    design, each query plans as it did under the full one, by the same server statements'
    count and without falling back; only what no plan read is gone (one OPE in TPC-H's 22)."""
    workload = [sql for _, sql in read_fixture("features.sql") + tpch_queries()]
    schemes = available_schemes()
    full = greedy_design(tpch_schema, workload, schemes, "test", prune=False)
    pruned = greedy_design(tpch_schema, workload, schemes, "test")
    gone = stored(full) - stored(pruned)
    assert gone and all(scheme != BLOCKS for _, scheme, _ in gone)
    assert ("lineitem", OPE, "l_shipdate") in stored(pruned)
    for sql in workload:
        before, after = (_plan_shape(d, sql) for d in (full, pruned))
        assert after == before, sql


def test_tpch_alone_prunes_little(tpch_schema: dict[str, list[Column]]) -> None:
    workload = [sql for _, sql in tpch_queries()]
    full = greedy_design(tpch_schema, workload, available_schemes(), "test", prune=False)
    assert unread_encryptions(full, workload) <= {("partsupp", OPE, "ps_supplycost")}


def _plan_shape(design: PhysicalDesign, sql: str) -> tuple[bool, bool, int]:
    context = _PlanningContext(design)
    try:
        plan = plan_query(parse_statement(sql), _favourable(design), context)
    finally:
        context.close()
    return plan.fallback is None, plan.pushdown, len(plan.scans)
