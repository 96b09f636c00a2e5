"""Server-side semi-join reduction of inner-joined scans (see ``plan.Reduction``).

For each SELECT scope, equi-join conjuncts between two of its scans (from
WHERE or an inner join's ON, never touching the nullable side of an outer
join) whose columns have DET encryptions under one key scope become join
edges. Scans linked by edges form components; each scan of a component in
which some *other* scan has a pushed predicate is fetched reduced to the rows
that join with the rest::

    FROM customer c, orders o WHERE c.c_custkey = o.o_custkey AND c.c_mktsegment = 'BUILDING'
      orders scan:  ... WHERE rid IN (SELECT r1.rid FROM t_cust r0, t_ord r1
                                      WHERE r0.c_ck = r1.c_ok AND r0.c_seg = $1)

Sound because every row of the scope's result satisfies every conjunct used,
and the local plan re-evaluates them all anyway. A correlated subquery's scan
is also reduced by the outer scan it is correlated with (``reduce_correlated``).
"""

from __future__ import annotations

from sqlglot import exp

from veil.design.model import DET
from veil.sql.columns import BaseColumn
from veil.sql.plan import JoinEdge, Reduction, Scan

ScanKey = tuple[int, str]


def join_edge(
    predicate: exp.Expr,
    allowed: set[str] | None,
    scope_id: int,
    scans: dict[ScanKey, Scan],
    resolved: dict[int, BaseColumn],
) -> JoinEdge | None:
    """The join edge ``predicate`` (a conjunct of scope ``scope_id``) gives, if any.

    Either both columns belong to scans of this scope, or (a correlated
    conjunct) the left one does and the right one belongs to an outer scope.
    """
    if not isinstance(predicate, exp.EQ) or predicate.args.get("negate"):
        return None
    left = resolved.get(id(predicate.this)) if isinstance(predicate.this, exp.Column) else None
    right = (
        resolved.get(id(predicate.expression))
        if isinstance(predicate.expression, exp.Column)
        else None
    )
    if (
        left is None
        or right is None
        or (left.scope_id, left.alias) == (right.scope_id, right.alias)
    ):
        return None
    if left.scope_id != scope_id:
        left, right = right, left
    if left.scope_id != scope_id:
        return None
    same_scope = right.scope_id == scope_id
    wanted = {left.alias, right.alias} if same_scope else {left.alias}
    if allowed is not None and not wanted <= allowed:
        return None
    left_scan, right_scan = scans[(left.scope_id, left.alias)], scans[(right.scope_id, right.alias)]
    left_enc = left_scan.table.find(left.column, DET)
    right_enc = right_scan.table.find(right.column, DET)
    if left_enc is None or right_enc is None or left_enc.key_scope != right_enc.key_scope:
        return None
    edge = JoinEdge(left_scan, left_enc.name, right_scan, right_enc.name, predicate.sql("duckdb"))
    edge.correlated = not same_scope
    edge.node = predicate
    return edge


def reduce_correlated(edge: JoinEdge) -> None:
    """Reduce a subquery's scan by the outer scan it is correlated with.

    The subquery only ever runs for outer rows that pass the outer scope's
    top-level conjuncts, so its rows that match no such outer row cannot
    matter. Outer scopes are reduced first (callers go outside-in), so the
    outer scan's own reduction carries over.
    """
    inner, outer = edge.left, edge.right
    if not (outer.predicates or outer.reduction):
        return
    outer_part = outer.reduction or Reduction([outer], [])
    inner_part = inner.reduction or Reduction([inner], [])
    members = list({id(s): s for s in inner_part.scans + outer_part.scans}.values())
    inner.reduction = Reduction(members, inner_part.edges + outer_part.edges + [edge])


def reduce_joins(edges: list[JoinEdge]) -> None:
    """Attach a ``Reduction`` to every scan whose join partners filter on the server."""
    for component, component_edges in components(edges):
        for scan in component:
            if any(other.predicates for other in component if other is not scan):
                scan.reduction = Reduction(component, component_edges)


def components(edges: list[JoinEdge]) -> list[tuple[list[Scan], list[JoinEdge]]]:
    parent: dict[int, int] = {}
    by_id: dict[int, Scan] = {}

    def find(key: int) -> int:
        while parent.setdefault(key, key) != key:
            key = parent[key]
        return key

    for edge in edges:
        by_id[id(edge.left)], by_id[id(edge.right)] = edge.left, edge.right
        parent[find(id(edge.left))] = find(id(edge.right))
    groups: dict[int, list[Scan]] = {}
    for key, scan in by_id.items():
        groups.setdefault(find(key), []).append(scan)
    return [
        (members, [e for e in edges if find(id(e.left)) == root])
        for root, members in groups.items()
    ]
