"""Pass: WHERE / ON conjuncts that one scan can evaluate go to its RemoteSQL.

Each conjunct that reads one scan only and that REWRITESERVER can express
exactly goes to that scan's server predicates (MONOMI Algorithm 1, lines
6-13); ``LIKE`` may become a SEARCH pre-filter the client finishes::

    WHERE o.o_orderdate < DATE '1995-03-15' AND c.c_mktsegment = 'BUILDING'
      ->  orders:   c_od_ope < $1      customer: c_seg_det = $2

Conjuncts over the nullable side of an outer join are not pushed from WHERE,
since pre-filtering there would turn a matched row into a NULL-extended one.
Also collected, for later passes: DET equi-joins between scans (join edges,
``veil.sql.join_graph``; through derived tables, ``veil.sql.derived_edges``) and
``col IN (subquery)`` conjuncts on one scan's column. What the readers of a
derived table or CTE keep of its rows also filters the scans behind its columns
(``derived_edges.reader_filters``). The local plan is not changed here
(``drop_pushed_filters`` does).
"""

from __future__ import annotations

from sqlglot import exp
from sqlglot.optimizer.scope import Scope

from veil.sql.columns import BaseColumn
from veil.sql.conjuncts import aliases_of, conjunct_list, is_part_of, nullable_aliases
from veil.sql.derived_edges import derived_edges, derived_join, reader_filters
from veil.sql.implied_predicates import implied_conjuncts
from veil.sql.join_graph import join_edge
from veil.sql.plan import JoinEdge, Scan, ServerPredicate
from veil.sql.prefilter_like import prefilter_like
from veil.sql.rewrite_server import rewrite_server
from veil.sql.state import PlanState, ScanKey
from veil.sql.text import text


def pushdown_predicates(state: PlanState) -> PlanState:
    scans, resolved = state.scans, state.resolved
    for scope in state.scopes:
        select = scope.expression
        if not isinstance(select, exp.Select):
            continue
        edges: list[JoinEdge] = []
        correlated: list[JoinEdge] = []
        derived: list[JoinEdge] = []
        conjuncts = _conjuncts(select)
        conjuncts += [(i, a) for p, a in conjuncts for i in implied_conjuncts(p, resolved)]
        for predicate, allowed in conjuncts:
            edge = join_edge(predicate, allowed, id(scope), scans, resolved)
            if edge is not None:
                (correlated if edge.correlated else edges).append(edge)
                continue
            derived += derived_edges(predicate, allowed, scope, state)
            state.derived_joins += derived_join(predicate, allowed, scope, state)
            target = _in_subquery_target(predicate, scope, scans, resolved)
            if target is not None and (allowed is None or target.alias in allowed):
                state.in_subqueries.append((predicate, target))  # type: ignore[arg-type]
            scan = _single_scan(predicate, scope, scans, resolved)
            if scan is None or (allowed is not None and scan.alias not in allowed):
                continue
            _push(predicate, scan, select, state)
        state.edges.append((scope, edges))
        state.correlated.append(correlated)
        state.derived.append(derived)
    # what a derived table's (CTE's) readers keep, as filters on the scans behind it
    selects = {id(scope): scope.expression for scope in state.scopes}

    def can_push(predicate: exp.Expr, scan: Scan) -> bool:
        return rewrite_server(predicate, scan, state.resolved, state.ctx) is not None

    for scan, implied in reader_filters(state, can_push):
        select = selects[_scope_of(scan, state)]
        if isinstance(select, exp.Select):
            _push(implied, scan, select, state)
    return state


def _scope_of(scan: Scan, state: PlanState) -> int:
    return next(key[0] for key, s in state.scans.items() if s is scan)


def _push(predicate: exp.Expr, scan: Scan, select: exp.Select, state: PlanState) -> None:
    rewritten = rewrite_server(predicate, scan, state.resolved, state.ctx) or prefilter_like(
        predicate, scan, state.resolved, state.ctx
    )
    exact = rewritten is not None and "SEARCH" not in rewritten[1]  # LIKE pre-filter
    if rewritten is not None:
        server, schemes = rewritten
        scan.predicates.append(ServerPredicate(text(predicate), server, schemes, predicate, exact))
    if not exact and is_part_of(predicate, select):  # implied conjuncts are extras
        scan.residuals.append(predicate)


def _conjuncts(select: exp.Select) -> list[tuple[exp.Expr, set[str] | None]]:
    """Conjuncts with the aliases they may be pushed to (None: any of the scope)."""
    joins = select.args.get("joins") or []
    nullable = nullable_aliases(select)
    found: list[tuple[exp.Expr, set[str] | None]] = []
    preserved = aliases_of(select) - nullable
    where = select.args.get("where")
    if where is not None:
        found += [(c, preserved) for c in conjunct_list(where.this)]
    for join in joins:
        on = join.args.get("on")
        if on is None or join.args.get("kind") in ("ANTI", "SEMI", "ASOF"):
            continue
        side = join.args.get("side")
        target = {join.this.alias_or_name} if side == "LEFT" else preserved if not side else set()
        found += [(c, target) for c in conjunct_list(on)]
    return found


def _single_scan(
    predicate: exp.Expr, scope: Scope, scans: dict[ScanKey, Scan], resolved: dict[int, BaseColumn]
) -> Scan | None:
    """The one scan of this scope that every column of ``predicate`` reads."""
    if predicate.find(exp.Subquery, exp.Select, exp.AggFunc, exp.Window):
        return None
    owners = set()
    for column in predicate.find_all(exp.Column):
        ref = resolved.get(id(column))
        if ref is None or ref.scope_id != id(scope):
            return None
        owners.add((ref.scope_id, ref.alias))
    return scans.get(owners.pop()) if len(owners) == 1 else None


def _in_subquery_target(
    predicate: exp.Expr, scope: Scope, scans: dict[ScanKey, Scan], resolved: dict[int, BaseColumn]
) -> Scan | None:
    """The scan of this scope whose column ``predicate`` tests with ``IN (subquery)``."""
    if not isinstance(predicate, exp.In) or not isinstance(
        predicate.args.get("query"), exp.Subquery
    ):
        return None
    ref = resolved.get(id(predicate.this)) if isinstance(predicate.this, exp.Column) else None
    if ref is None or ref.scope_id != id(scope):
        return None
    return scans.get((ref.scope_id, ref.alias))
