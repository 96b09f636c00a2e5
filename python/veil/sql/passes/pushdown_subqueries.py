"""Pass: subqueries the server evaluates whole become one server predicate.

``[NOT] EXISTS``, ``[NOT] IN (subquery)`` and comparisons with a MIN/MAX or
one-column scalar subquery whose every part is exact on the server (``veil.sql.server_subquery``)
become an exact predicate of the outer scan they are correlated with. The
subquery's own scans are then not fetched at all: TPC-H Q21's l2 and l3
fetched a few million rows each for the client's EXISTS; now the server
tests both on l1's rows. Later passes treat the predicate like any other
exact filter: it reduces the scan's join partners, goes into a server join
or a server-side aggregation of the scan (Q4 becomes one statement), and
leaves the local plan (``drop_pushed_filters``).

Scopes are visited outermost first, so a subquery absorbed by an outer
conjunct is not also rewritten on its own. Only WHERE conjuncts on scans
an outer join cannot NULL-extend are taken.
"""

from __future__ import annotations

from itertools import count

from sqlglot import exp

from veil.sql.conjuncts import aliases_of, conjunct_list, nullable_aliases
from veil.sql.server_subquery import pushed_subquery
from veil.sql.state import PlanState


def pushdown_subqueries(state: PlanState) -> PlanState:
    absorbed: set[int] = set()  # ids of scopes whose scans the server now reads itself
    numbers = count(1)
    for scope in reversed(state.scopes):  # outermost first
        select = scope.expression
        if id(scope) in absorbed or not isinstance(select, exp.Select):
            continue
        where = select.args.get("where")
        if where is None:
            continue
        preserved = aliases_of(select) - nullable_aliases(select)
        for conjunct in conjunct_list(where.this):
            pushed = pushed_subquery(conjunct, scope, state, numbers)
            if pushed is None or pushed.scan.alias not in preserved:
                continue
            pushed.scan.predicates.append(pushed.predicate)
            absorbed |= {id(s) for s in pushed.scopes}
    if absorbed:
        _forget(state, absorbed)
    return state


def _forget(state: PlanState, absorbed: set[int]) -> None:
    """Drop the absorbed scopes' scans and everything planned about them."""
    gone = {id(s) for key, s in state.scans.items() if key[0] in absorbed}
    state.scans = {k: s for k, s in state.scans.items() if k[0] not in absorbed}
    state.edges = [(scope, edges) for scope, edges in state.edges if id(scope) not in absorbed]
    state.correlated, state.derived = (
        [[e for e in edges if id(e.left) not in gone and id(e.right) not in gone] for edges in kind]
        for kind in (state.correlated, state.derived)
    )
    state.derived_joins = [j for j in state.derived_joins if id(j[2]) not in gone]
    state.in_subqueries = [
        (node, target)
        for node, target in state.in_subqueries
        if id(target) not in gone and not _tests_absorbed(node, state, absorbed)
    ]


def _tests_absorbed(node: exp.In, state: PlanState, absorbed: set[int]) -> bool:
    """Whether an IN-subquery conjunct's subquery is one the server now runs."""
    query = node.args.get("query")
    inner = query.this if isinstance(query, exp.Subquery) else None
    return any(id(s) in absorbed and s.expression is inner for s in state.scopes)
