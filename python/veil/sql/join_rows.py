"""How many rows a server join returns, and what share of a table a scan reads: estimates
from the load's statistics.

Shared by the passes that choose what a server join does (``pushdown_joins``,
``pushdown_join_aggregates``). Each scan keeps the share of its rows its
exact filters keep (``veil.sql.selectivity``); the joins follow keys.
"""

from __future__ import annotations

import math
from math import prod

from sqlglot import exp

from veil.design.model import OPE, Encryption
from veil.sql.plan import JoinEdge, JoinGroup, Scan
from veil.sql.selectivity import distinct_rows, group_count, kept_share, rank_range
from veil.sql.state import PlanState


def joined_rows(members: list[Scan], edges: list[JoinEdge], state: PlanState) -> float:
    """The largest member's rows, thinned by every member's filters and every join that
    closes a cycle."""
    largest = max(members, key=lambda s: s.table.row_count)
    kept = prod(
        min(1.0, kept_share_of(s, state) * referenced_keys_factor(s, edges)) for s in members
    )
    return largest.table.row_count * kept * cycles_share(edges)


def referenced_keys_factor(scan: Scan, edges: list[JoinEdge]) -> float:
    """How much more of its partners' rows a scan's filter keeps than of its own (>= 1).

    A partner that holds fewer distinct keys than the scan joins only those: TPC-DS
    SF 1's store_sales holds 1,823 of date_dim's 73,049 dates. A filter on the scan
    is taken to pick keys the partner holds (a query asks about the years with
    sales), so ``d_year = 2001``, 1/200 of date_dim, keeps 1/5 of store_sales, not
    1/200 of it: priced uniformly, q04's joins were estimated at 7,004 rows for
    91,612 and its reductions at 46 rows for 2,473 (q05). The largest ratio over the
    scan's joins; 1 when a count is unknown.
    """
    factor = 1.0
    for edge in edges:
        if edge.left is scan:
            near, far, other = edge.left_column, edge.right_column, edge.right
        elif edge.right is scan:
            near, far, other = edge.right_column, edge.left_column, edge.left
        else:
            continue
        mine, theirs = _distinct_of(scan, near), _distinct_of(other, far)
        if mine is not None and theirs is not None and 0 < theirs < mine:
            factor = max(factor, mine / theirs)
    return factor


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
        distinct = _distinct_of(scan, column)
        if distinct is not None:
            counts.append(float(distinct))
    return max(counts)


def kept_share_of(scan: Scan, state: PlanState) -> float:
    """The estimated share of the scan's rows its exact filters keep.

    Implied conjuncts count too: copies, not part of ``select``, but filters the
    server applies on either path (TPC-H Q19, every filter inside one OR: priced
    as keeping all of both tables, the join lost to two statements that each
    scanned lineitem)."""
    return kept_share(_exact_filters(scan), scan, state.resolved, state.ctx)


def scanned_share_of(scan: Scan, state: PlanState) -> float:
    """The share of the scan's rows its table's scan on the server returns: its exact
    filters but those with a subquery, which the server runs as a join over the scan's
    rows (TPC-H Q4's EXISTS: a semi-join fed all 57K orders of the quarter)."""
    nodes = [n for n in _exact_filters(scan) if n.find(exp.Subquery, exp.Exists) is None]
    return kept_share(nodes, scan, state.resolved, state.ctx)


def _exact_filters(scan: Scan) -> list[exp.Expr]:
    return [p.node for p in scan.predicates if p.exact and p.node is not None]


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


def zone_share(scan: Scan, state: PlanState) -> float | None:
    """The share of the table's zones (blocks of rows as loaded, ``veil.load.zones``) that
    its exact range filters can match: the blocks a server skipping by min/max reads.

    Each range keeps the zones whose span of ranks meets its own; several ranges
    keep the zones all of them keep. None: no range on a column with zones.
    """
    kept: set[int] | None = None
    count = 0
    for predicate in scan.predicates:
        if not predicate.exact or not isinstance(predicate.node, _RANGES):
            continue
        found = rank_range(predicate.node, scan, state.resolved, state.ctx)
        refs = [state.resolved.get(id(c)) for c in predicate.node.find_all(exp.Column)]
        if found is None or len(refs) != 1 or refs[0] is None or refs[0].alias != scan.alias:
            continue
        enc = scan.table.find(refs[0].column, OPE)
        zones = enc.params.get("zones") if enc is not None else None
        if not isinstance(zones, list) or not zones:
            continue
        _, low, high = found
        met = {i for i, (start, end) in enumerate(zones) if end >= low and start <= high}
        kept = met if kept is None else kept & met
        count = len(zones)
    return None if kept is None or not count else len(kept) / count


def _reads_only(node: exp.Expr, column: str, scan: Scan, state: PlanState) -> bool:
    refs = [state.resolved.get(id(c)) for c in node.find_all(exp.Column)]
    return bool(refs) and all(
        r is not None and r.alias == scan.alias and r.column == column for r in refs
    )


def reduced_share(scan: Scan, state: PlanState) -> float:
    """The share of the scan's rows its semi-join reduction keeps.

    Walking out from the scan along the reduction's joins, each partner keeps
    the share of its own filters (and of the partners beyond it). Joined to a
    smaller table (a foreign key to its key), a row survives with its one
    partner row's chance; to a larger one, with any of its ``fanout`` rows'
    (``1 - (1 - p) ** fanout``). TPC-H Q17's lineitem, reduced by part's brand
    and container (1 in 1,000 parts), was priced at six million rows for 6,000.
    And only the rows whose key the partner holds at all can survive: at most
    the partner's distinct keys over the scan's (2/3 of TPC-H's customers have
    orders).
    """
    reduction = scan.reduction
    if reduction is None:
        return 1.0
    return _partners_share(scan, reduction.edges, {id(scan)}, state)


def _partners_share(scan: Scan, edges: list[JoinEdge], seen: set[int], state: PlanState) -> float:
    share = 1.0
    for edge in edges:
        if edge.left is scan or edge.right is scan:
            near, far = (
                (edge.left_column, edge.right_column)
                if edge.left is scan
                else (edge.right_column, edge.left_column)
            )
            other = edge.right if edge.left is scan else edge.left
            if id(other) in seen:
                continue
            seen.add(id(other))
            referenced = referenced_keys_factor(other, [edge])
            kept = min(1.0, kept_share_of(other, state) * referenced)
            kept *= _partners_share(other, edges, seen, state)
            fanout = other.table.row_count / max(scan.table.row_count, 1)
            share *= -math.expm1(max(fanout, 1.0) * math.log1p(-min(kept, 1.0 - 1e-12)))
            share *= _covered(scan, near, other, far)
    return share


def _covered(scan: Scan, column: str, other: Scan, other_column: str) -> float:
    """The share of ``scan``'s keys that ``other`` holds, by their distinct counts (1: unknown)."""
    mine, theirs = _distinct_of(scan, column), _distinct_of(other, other_column)
    if mine is None or theirs is None or mine <= 0:
        return 1.0
    return min(1.0, theirs / mine)


def _distinct_of(scan: Scan, column: str) -> float | None:
    return distinct_rows([edge_encryption(scan, column)])


def edge_encryption(scan: Scan, column: str) -> Encryption | None:
    """The encryption a join edge names by its server column."""
    return next((e for e in scan.table.encryptions if e.name == column), None)


def grouped_rows(groups: JoinGroup, rows: float, state: PlanState) -> float | None:
    """The groups a server join's GROUP BY returns from ``rows`` joined rows (None: a key
    without a distinct count). A key that an exact ``IN`` list or ``=`` filters takes at
    most that many values (Q16's ``p_size IN (8 sizes)``)."""
    distinct: list[float] = []
    tables: dict[int, Scan] = {}
    for scan, column, enc in groups.keys:
        count = distinct_rows([enc])
        if count is None:
            return None
        distinct.append(min(count, _values_allowed(scan, column, state)))
        tables[id(scan)] = scan
    # the keys' tables bound their tuples: Q16's keys are all part's, whose 29K kept rows
    # each repeat over their four partsupp rows (105K joined rows met 30K groups at random
    # where 18K are)
    keys_rows = prod(s.table.row_count * kept_share_of(s, state) for s in tables.values())
    return group_count(min(rows, keys_rows), distinct)


def _values_allowed(scan: Scan, column: str, state: PlanState) -> float:
    def reads(node: exp.Expr) -> bool:
        ref = state.resolved.get(id(node)) if isinstance(node, exp.Column) else None
        return ref is not None and ref.alias == scan.alias and ref.column == column

    allowed = math.inf
    for predicate in scan.predicates:
        node = predicate.node
        if not predicate.exact or node is None:
            continue
        if isinstance(node, exp.In) and not node.args.get("query") and reads(node.this):
            allowed = min(allowed, len(node.expressions))
        elif isinstance(node, exp.EQ) and any(
            reads(side) and not other.find(exp.Column)
            for side, other in ((node.this, node.expression), (node.expression, node.this))
        ):
            allowed = 1
    return allowed
