"""A PostgreSQL plan (``EXPLAIN (FORMAT JSON)``) as ``Operator`` nodes, each with its own cost.

PostgreSQL prices every node of its plan in its own cost units, but from
rows it guesses over ciphertexts, and a wrong guess carries up the plan:
TPC-H Q9's join on two keys was estimated at 129 rows for 319,404, so the
sort and aggregate above it were priced at a 2,500th of their work and the
query at 0.03 of its time. Each node's own cost (its total less its
inputs') lets the cost model (``veil.cost.server_time``) scale the cost of
the nodes above a corrected input by the planner's rows, as it does DuckDB's
rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from veil.backends.base import Operator

_SCANS = ("Seq Scan", "Index Scan", "Index Only Scan", "Bitmap Heap Scan", "Tid Scan")
_JOINS = ("Hash Join", "Merge Join", "Nested Loop")
_SORTS = ("Sort", "Incremental Sort")
_BOUNDED = ("Semi", "Anti")


def plan_operators(
    plan: Mapping[str, Any], table_rows: Mapping[str, float], counted: bool = False
) -> Operator:
    """The operators of one ``EXPLAIN (FORMAT JSON)`` plan (its ``"Plan"``);
    ``table_rows``: each table's rows (``pg_class.reltuples``), by name; ``counted``: an
    ``EXPLAIN ANALYZE``'s, each node's rows as counted and its own time (summed over its
    runs and processes, as DuckDB's profiler sums its threads')."""
    return _node(plan, table_rows, divisor=1.0, looped=False, counted=counted)[0]


def _node(
    node: Mapping[str, Any],
    table_rows: Mapping[str, float],
    divisor: float,
    looped: bool,
    counted: bool,
) -> tuple[Operator, bool]:
    """The operator of ``node`` and whether it is partial: one of a parallel plan's
    processes' share of the rows (a parallel scan, or a node over one as its outer input)."""
    kind = str(node.get("Node Type", ""))
    if kind in ("Gather", "Gather Merge"):
        # below it, a partial node's rows are each process's: the parallel divisor scales
        # them to the whole (PostgreSQL's get_parallel_divisor)
        workers = float(node.get("Workers Planned") or 0)
        divisor = workers + max(0.0, 1.0 - 0.3 * workers)
    inputs = list(node.get("Plans") or [])
    below = [
        _node(child, table_rows, divisor, looped or _inner_of_loop(kind, child), counted)
        for child in inputs
    ]
    children = tuple(op for op, _ in below)
    partial = bool(node.get("Parallel Aware")) or bool(below and below[0][1])
    partial = partial and kind not in ("Gather", "Gather Merge")
    total = float(node.get("Total Cost") or 0.0)
    own = max(0.0, total - sum(float(child.get("Total Cost") or 0.0) for child in inputs))
    # a node that runs once per outer row (a nested loop's inner side) reports the rows
    # and cost of one run: left as PostgreSQL prices it
    rows = float(node.get("Plan Rows") or 0.0) * (divisor if partial else 1.0)
    spent = 0.0
    if counted:  # every run's rows and time (a run: one of its loops, or processes)
        rows = float(node.get("Actual Rows") or 0.0) * float(node.get("Actual Loops") or 0.0)
        spent = max(0.0, _spent(node) - sum(_spent(child) for child in inputs))
    filters = _conjuncts(node.get("Filter")) + _conjuncts(node.get("Index Cond"))
    common: dict[str, Any] = {"cost": own, "per_loop": looped, "seconds": spent}
    if kind in _SCANS and node.get("Relation Name"):
        table = str(node["Relation Name"])
        size = table_rows.get(table, 0.0)
        columns = len(node.get("Output") or ()) or 1
        scan = Operator("scan", rows, filters, (), table, size, columns=columns, **common)
        return scan, partial
    if kind in _JOINS:
        joined = str(node.get("Join Type", "Inner"))
        conditions = node.get("Hash Cond") or node.get("Merge Cond") or node.get("Join Filter")
        keys = max(1, _conjuncts(conditions))
        bounded, marks = joined in _BOUNDED, joined == "Anti"
        composite = joined == "Inner" and keys > 1 and kind != "Nested Loop"
        join = Operator(
            "join",
            rows,
            keys,
            children,
            bounded=bounded,
            marks=marks,
            composite=composite,
            hashed=kind == "Hash Join",
            **common,
        )
        return join, partial
    if kind == "Aggregate" and node.get("Group Key"):
        keys = len(node.get("Group Key") or ())
        return Operator("group", rows, 1, children, columns=keys, **common), partial
    if kind in _SORTS:
        return Operator("sort", rows, 1, children, **common), partial
    return Operator("other", rows, filters, children, **common), partial


def relations(plan: Mapping[str, Any]) -> set[str]:
    """The tables a plan's scans read, by name."""
    found = {str(plan["Relation Name"])} if plan.get("Relation Name") else set()
    for child in plan.get("Plans") or ():
        found |= relations(child)
    return found


def _spent(node: Mapping[str, Any]) -> float:
    """Seconds in ``node`` and below, over all its runs (PostgreSQL reports one run's, in ms)."""
    return (
        float(node.get("Actual Total Time") or 0.0) * float(node.get("Actual Loops") or 0.0) / 1e3
    )


def _inner_of_loop(kind: str, child: Mapping[str, Any]) -> bool:
    return kind == "Nested Loop" and child.get("Parent Relationship") == "Inner"


def _conjuncts(condition: object) -> int:
    """How many ANDed conditions a plan's condition text holds (0 for none)."""
    if not isinstance(condition, str) or not condition.strip():
        return 0
    return condition.count(" AND ") + 1
