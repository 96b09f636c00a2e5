"""Pass: the nullable side of a LEFT JOIN reduced by the preserved side's rows.

``reduce_joins`` leaves outer joins alone: their ON conjuncts do not filter
the result. They do filter the nullable side, though. In

    FROM catalog_sales cs, date_dim d ... LEFT JOIN catalog_returns cr
      ON cr.cr_order_number = cs.cs_order_number AND cr.cr_item_sk = cs.cs_item_sk
    WHERE cs.cs_sold_date_sk = d.d_date_sk AND d.d_date BETWEEN ...

a row of ``catalog_returns`` shows in the result only beside a row of
``catalog_sales`` that survives the query's own filters and inner joins, so
the server need only send the returns that join with those sales (TPC-DS
q40, q72, q80: every return was fetched; q05: every web sale).

Sound because the result holds a nullable-side row only where the ON
conjunct matched it to a preserved row that passed the scope's WHERE and
inner joins, and the preserved side's reduction (its inner partners' and its
own pushed filters, ``plan.Reduction``) keeps every such row. A preserved row
whose partners were dropped had none among the rows kept, and the local plan
NULL-extends it exactly as before, then joins and filters exactly. Only a
LEFT JOIN's right side (not FULL, SEMI, ANTI or ASOF), only equi-conjuncts
the server can test (``join_graph.join_edge``), only preserved partners that
filter something, and only a scan with no reduction of its own.
"""

from __future__ import annotations

from sqlglot import exp

from veil.sql.conjuncts import aliases_of, conjunct_list, nullable_aliases
from veil.sql.join_graph import join_edge
from veil.sql.plan import JoinEdge, Reduction, Scan
from veil.sql.state import PlanState


def reduce_outer_joins(state: PlanState) -> PlanState:
    for scope in state.scopes:
        select = scope.expression
        if not isinstance(select, exp.Select):
            continue
        preserved = aliases_of(select) - nullable_aliases(select)
        for join in select.args.get("joins") or []:
            on = join.args.get("on")
            kind = (join.args.get("kind") or "OUTER").upper()  # LEFT [OUTER] JOIN
            if on is None or join.args.get("side") != "LEFT" or kind != "OUTER":
                continue
            nullable = state.scans.get((id(scope), join.this.alias_or_name))
            if nullable is None or nullable.reduction is not None:
                continue
            pairs = []  # (edge, the preserved scan it joins ``nullable`` with)
            for conjunct in conjunct_list(on):
                edge = join_edge(conjunct, None, id(scope), state.scans, state.resolved)
                partner = None if edge is None else _partner(edge, nullable, preserved)
                if edge is not None and partner is not None and not edge.correlated:
                    pairs.append((edge, partner))
            nullable.reduction = _by_partners(nullable, pairs)
    return state


def _partner(edge: JoinEdge, nullable: Scan, preserved: set[str]) -> Scan | None:
    """The preserved scan ``edge`` joins ``nullable`` with, if it does."""
    for mine, other in ((edge.left, edge.right), (edge.right, edge.left)):
        if mine is nullable and other is not nullable and other.alias in preserved:
            return other
    return None


def _by_partners(nullable: Scan, pairs: list[tuple[JoinEdge, Scan]]) -> Reduction | None:
    """``nullable`` with each partner's own reduction (or pushed filters), if any filter."""
    scans: dict[int, Scan] = {id(nullable): nullable}
    kept: dict[int, JoinEdge] = {}
    for edge, partner in pairs:
        part = partner.reduction or (Reduction([partner], []) if partner.predicates else None)
        if part is None:
            continue  # the partner's every row may match: nothing to reduce by
        scans.update((id(s), s) for s in part.scans)
        kept.update((id(e), e) for e in [edge, *part.edges])
    return Reduction(list(scans.values()), list(kept.values())) if len(scans) > 1 else None
