"""Pass: server-side semi-join reduction of inner-joined scans (see ``plan.Reduction``).

For each SELECT scope, equi-join conjuncts between two of its scans (from
WHERE or an inner join's ON, never touching the nullable side of an outer
join) whose columns have DET encryptions under one key scope become join
edges. Scans linked by edges form components; each scan of a component in
which some *other* scan has a pushed predicate is fetched reduced to the rows
that join with the rest::

    FROM customer c, orders o WHERE c.c_custkey = o.o_custkey AND c.c_mktsegment = 'BUILDING'
      orders scan:  ... WHERE c_ok IN (SELECT r1.c_ck FROM t_cust r1 WHERE r1.c_seg = $1)

(the statement's form is ``veil.sql.remote.reduction_filter``'s; ``trim_reductions``
later drops the reductions that cost more than they save).

Sound because every row of the scope's result satisfies every conjunct used,
and the local plan re-evaluates them all anyway. A correlated subquery's scan
is also reduced by the outer scan it is correlated with (``reduce_correlated``),
and so is a scan behind a derived table's (UNION ALL branch's, CTE's) column
equi-joined with an outer scan (``veil.sql.derived_edges``; TPC-DS q05's fact
tables by date_dim's date range).
"""

from __future__ import annotations

from veil.sql.join_graph import components
from veil.sql.plan import JoinEdge, Reduction
from veil.sql.state import PlanState


def reduce_joins(state: PlanState) -> PlanState:
    """Reduce each scope's joined scans, then subqueries by their outer scans."""
    for _, edges in state.edges:
        _reduce_scope(edges)
    # scopes come innermost first; reduce subqueries (and the scans behind a derived
    # table's columns, ``veil.sql.derived_edges``) by their outer scans outside-in
    for outer_edges, derived in reversed(list(zip(state.correlated, state.derived, strict=True))):
        for edge in outer_edges + derived:
            _reduce_correlated(edge)
    return state


def _reduce_correlated(edge: JoinEdge) -> None:
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


def _reduce_scope(edges: list[JoinEdge]) -> None:
    """Attach a ``Reduction`` to every scan whose join partners filter on the server."""
    for component, component_edges in components(edges):
        for scan in component:
            if any(other.predicates for other in component if other is not scan):
                scan.reduction = Reduction(component, component_edges)
