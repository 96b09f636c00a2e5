"""PostgreSQL's plan as operators: each node's own cost, rows scaled to the whole plan."""

from __future__ import annotations

import pytest

from veil.backends.pg_plan import plan_operators, relations
from veil.cost.server_time import plan_work

pytestmark = pytest.mark.unit


def _scan(table: str, rows: float, cost: float, **more: object) -> dict[str, object]:
    return {
        "Node Type": "Seq Scan",
        "Relation Name": table,
        "Plan Rows": rows,
        "Total Cost": cost,
        **more,
    }


def test_each_node_keeps_its_own_cost() -> None:
    plan = {
        "Node Type": "Hash Join",
        "Join Type": "Inner",
        "Hash Cond": "(a.k = b.k)",
        "Plan Rows": 100,
        "Total Cost": 150.0,
        "Plans": [
            _scan("a", 1000, 100.0, **{"Parent Relationship": "Outer"}),
            {
                "Node Type": "Hash",
                "Plan Rows": 10,
                "Total Cost": 12.0,
                "Parent Relationship": "Inner",
                "Plans": [_scan("b", 10, 10.0)],
            },
        ],
    }
    join = plan_operators(plan, {"a": 5000.0, "b": 10.0})
    assert join.kind == "join" and join.cost == pytest.approx(38.0)
    scan, hashed = join.children
    assert (scan.kind, scan.table, scan.table_rows, scan.cost) == ("scan", "a", 5000.0, 100.0)
    assert hashed.kind == "other" and hashed.cost == pytest.approx(2.0)
    assert relations(plan) == {"a", "b"}


def test_the_nodes_above_a_corrected_join_are_scaled_by_its_rows() -> None:
    # PostgreSQL guessed 10 rows for a join on two keys that returns 1,000: the aggregate
    # over it is priced at a hundredth of its work
    plan = {
        "Node Type": "Aggregate",
        "Strategy": "Hashed",
        "Group Key": ["x"],
        "Plan Rows": 5,
        "Total Cost": 240.0,
        "Plans": [
            {
                "Node Type": "Hash Join",
                "Join Type": "Inner",
                "Hash Cond": "((a.k = b.k) AND (a.j = b.j))",
                "Plan Rows": 10,
                "Total Cost": 230.0,
                "Plans": [
                    _scan("a", 1000, 100.0),
                    {
                        "Node Type": "Hash",
                        "Plan Rows": 100,
                        "Total Cost": 110.0,
                        "Plans": [_scan("b", 100, 100.0)],
                    },
                ],
            }
        ],
    }
    ops = plan_operators(plan, {"a": 1000.0, "b": 100.0})
    # scans and the join keep their cost (their inputs were right); the aggregate's 10
    # units handle a hundred times the rows
    scaled = 100 + 100 + 10 + 20 + 10 * 100
    assert plan_work(ops, joined_rows=1000.0).cost == pytest.approx(scaled)
    # a join on two keys is taken for a foreign key's: a row per outer row
    assert ops.children[0].composite
    assert plan_work(ops).cost == pytest.approx(scaled)
    single = plan_operators({**plan["Plans"][0], "Hash Cond": "(a.k = b.k)"}, {})
    assert not single.composite and plan_work(single).cost == pytest.approx(230.0)


def test_a_parallel_plans_rows_are_each_process_share() -> None:
    plan = {
        "Node Type": "Gather",
        "Workers Planned": 2,
        "Plan Rows": 2400,
        "Total Cost": 60.0,
        "Plans": [_scan("a", 1000, 50.0, **{"Parallel Aware": True})],
    }
    gather = plan_operators(plan, {"a": 2400.0})
    assert gather.children[0].rows == pytest.approx(2400.0)  # 1,000 x (2 + 0.4)


def test_a_nested_loops_inner_side_is_priced_per_run() -> None:
    plan = {
        "Node Type": "Nested Loop",
        "Join Type": "Inner",
        "Plan Rows": 50,
        "Total Cost": 90.0,
        "Plans": [
            _scan("a", 50, 40.0, **{"Parent Relationship": "Outer"}),
            {
                "Node Type": "Index Scan",
                "Relation Name": "b",
                "Plan Rows": 1,
                "Total Cost": 0.5,
                "Parent Relationship": "Inner",
                "Index Cond": "(b.k = a.k)",
            },
        ],
    }
    loop = plan_operators(plan, {"a": 50.0, "b": 1_000_000.0})
    inner = loop.children[1]
    assert inner.per_loop and inner.rows == 1
    # the planner knows b's filters keep 1M rows: a run's row stays one
    assert plan_work(loop, filtered={"b": 1_000_000.0}).cost == pytest.approx(90.0)
