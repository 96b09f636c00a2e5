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
and the local plan re-evaluates them all anyway.
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
    scans: dict[ScanKey, Scan],
    resolved: dict[int, BaseColumn],
) -> JoinEdge | None:
    """The join edge ``predicate`` gives, if it is a server-evaluable equi-join."""
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
        or left.scope_id != right.scope_id
        or left.alias == right.alias
    ):
        return None
    if allowed is not None and not {left.alias, right.alias} <= allowed:
        return None
    left_scan, right_scan = scans[(left.scope_id, left.alias)], scans[(right.scope_id, right.alias)]
    left_enc = left_scan.table.find(left.column, DET)
    right_enc = right_scan.table.find(right.column, DET)
    if left_enc is None or right_enc is None or left_enc.key_scope != right_enc.key_scope:
        return None
    return JoinEdge(left_scan, left_enc.name, right_scan, right_enc.name, predicate.sql("duckdb"))


def reduce_joins(edges: list[JoinEdge]) -> None:
    """Attach a ``Reduction`` to every scan whose join partners filter on the server."""
    for component, component_edges in _components(edges):
        for scan in component:
            if any(other.predicates for other in component if other is not scan):
                scan.reduction = Reduction(component, component_edges)


def _components(edges: list[JoinEdge]) -> list[tuple[list[Scan], list[JoinEdge]]]:
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
