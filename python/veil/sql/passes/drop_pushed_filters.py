"""Pass: stop re-checking on the client what the server filtered exactly.

A conjunct that ``pushdown_predicates`` sent to a scan's RemoteSQL as an
exact filter (DET equality, OPE comparison, their AND/OR/NOT; not a SEARCH
pre-filter) selects on the server exactly the rows the local plan would keep.
Keeping it in the local plan costs more than client time: every column it
reads must be fetched and decrypted, even when nothing else needs it (TPC-H
Q4 would fetch l_commitdate and l_receiptdate of every matching lineitem row
only to compare them again). So the conjunct becomes TRUE locally and the
columns only it read are no longer fetched.

Only conjuncts still in the query are dropped: implied conjuncts (copies
derived from ORs) are extra server filters and were never in the local plan.
Scans aggregated on the server or fetched by a server join already dropped
theirs (``pushdown_aggregates``, ``pushdown_joins``).
"""

from __future__ import annotations

from sqlglot import exp

from veil.sql.conjuncts import columns_outside, drop_conjuncts, is_part_of
from veil.sql.state import PlanState


def drop_pushed_filters(state: PlanState) -> PlanState:
    selects = {id(scope): scope.expression for scope in state.scopes}
    plain = {k: s for k, s in state.scans.items() if s.aggregation is None and s.joined is None}
    dropped: list[exp.Expr] = []
    for (scope_id, _), scan in plain.items():
        select = selects[scope_id]
        nodes = [p.node for p in scan.predicates if p.exact and is_part_of(p.node, select)]
        if nodes:
            drop_conjuncts(select, [n for n in nodes if n is not None])
            dropped += [n for n in nodes if n is not None]
    if not dropped:
        return state
    used = columns_outside(state.query, [], state.resolved)
    for (scope_id, alias), scan in plain.items():
        scan.columns = {c for c in scan.columns if (scope_id, alias, c) in used}
    return state
