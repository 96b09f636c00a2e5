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
from veil.sql.server_subquery import forget_absorbed, pushed_subquery
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
            if pushed.joined_only:
                state.joined_subqueries.append((scope, pushed))
                continue
            pushed.scan.predicates.append(pushed.predicate)
            absorbed |= {id(s) for s in pushed.scopes}
    if absorbed:
        forget_absorbed(state, absorbed)
    return state
