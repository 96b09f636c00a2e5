"""How many rows a server join returns, and what share of a table a scan reads: estimates
from the load's statistics.

Shared by the passes that choose what a server join does (``pushdown_joins``,
``pushdown_join_aggregates``). Each scan keeps the share of its rows its
exact filters keep (``veil.sql.selectivity``); the joins follow keys.
"""

from __future__ import annotations

from math import prod

from sqlglot import exp

from veil.sql.plan import JoinEdge, Scan
from veil.sql.selectivity import kept_share
from veil.sql.state import PlanState


def joined_rows(members: list[Scan], edges: list[JoinEdge], state: PlanState) -> float:
    """The largest member's rows, thinned by every member's filters and every join that
    closes a cycle."""
    largest = max(members, key=lambda s: s.table.row_count)
    kept = prod(kept_share_of(s, state) for s in members)
    return largest.table.row_count * kept * cycles_share(edges)


def cycles_share(edges: list[JoinEdge]) -> float:
    """The share of joined rows the joins closing a cycle keep (1 for a tree of joins).

    Every other join is taken to follow a key to one row (the estimate's
    "largest table's rows"). Two joins between the same two scans are one
    (a composite key: Q9's partsupp and lineitem). Joins on keys of many
    values make the tree first, as foreign keys do; a join left over keeps
    one row in its key's distinct values: Q5's ``c_nationkey = s_nationkey``
    keeps 1/25 of the customer-order-lineitem-supplier rows.
    """
    pairs: dict[frozenset[int], JoinEdge] = {}
    for edge in edges:
        pairs.setdefault(frozenset((id(edge.left), id(edge.right))), edge)
    parent: dict[int, int] = {}

    def root(node: int) -> int:
        while parent.get(node, node) != node:
            node = parent[node]
        return node

    share = 1.0
    for edge in sorted(pairs.values(), key=lambda e: -edge_distinct(e)):
        left, right = root(id(edge.left)), root(id(edge.right))
        if left == right:
            share /= max(edge_distinct(edge), 1.0)
        else:
            parent[left] = right
    return share


def edge_distinct(edge: JoinEdge) -> float:
    """The larger distinct count (recorded at load) of an edge's two DET columns."""
    counts = [10.0]  # unknown: a key of few values
    for scan, column in ((edge.left, edge.left_column), (edge.right, edge.right_column)):
        enc = next((e for e in scan.table.encryptions if e.name == column), None)
        distinct = enc.params.get("distinct") if enc is not None else None
        if isinstance(distinct, int):
            counts.append(float(distinct))
    return max(counts)


def kept_share_of(scan: Scan, state: PlanState) -> float:
    """The estimated share of the scan's rows its exact filters keep.

    Implied conjuncts count too: copies, not part of ``select``, but filters the
    server applies on either path (TPC-H Q19, every filter inside one OR: priced
    as keeping all of both tables, the join lost to two statements that each
    scanned lineitem)."""
    nodes = [p.node for p in scan.predicates if p.exact and p.node is not None]
    return kept_share(nodes, scan, state.resolved, state.ctx)


_RANGES = (exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Between)


def read_share(scan: Scan, state: PlanState) -> float | None:
    """The share of the rows its exact range filters on the table's ``sort_by`` keep."""
    ordered = scan.table.sort_by
    if not ordered:
        return None
    nodes: list[exp.Expr] = [
        p.node
        for p in scan.predicates
        if p.exact and isinstance(p.node, _RANGES) and _reads_only(p.node, ordered, scan, state)
    ]
    return kept_share(nodes, scan, state.resolved, state.ctx) if nodes else None


def _reads_only(node: exp.Expr, column: str, scan: Scan, state: PlanState) -> bool:
    refs = [state.resolved.get(id(c)) for c in node.find_all(exp.Column)]
    return bool(refs) and all(
        r is not None and r.alias == scan.alias and r.column == column for r in refs
    )
