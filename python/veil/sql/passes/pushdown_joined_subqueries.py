"""Pass: an uncorrelated IN on a scan the server joins runs inside the join's statement.

``pushdown_subqueries`` leaves ``col IN (subquery)`` to the client's bind
filters when the subquery reads nothing of the outer scope
(``plan_bind_filters``): the client fetches the subquery's rows first, then
sends their keys' DET ciphertexts as a filter on ``col``'s scan, and the keys
travel along the scan's DET joins to filter its partners too. Where that scan
is fetched by a server join (``pushdown_joins``), the join already carries
every filter to its partners, and the key list costs a round trip and hides
the filter from the server's planner: PostgreSQL drove TPC-DS q60's
store_sales through its primary key from the keys of the 4,017 Music items
(560k random heap reads, 2.31 s at SF 1); with the same IN as a subquery of
the statement it ran 1.69 s. So the IN joins the statement::

    item (joined with store_sales ...): + i_item_id IN ($keys of the fetched Music items)
      ->  ... AND j3.c_iid IN (SELECT s1.c_iid FROM t_item AS s1 WHERE s1.c_cat = $1)

The translation is ``pushdown_subqueries``' (exact, or no translation at all);
the subquery's scans are no longer fetched. Not where the keys would filter
more than the join does: a join edge, correlation or derived table's join on
``col`` that reaches a scan outside the server join, which the bind filter's
keys would also filter (``plan_bind_filters``: TPC-H Q20's lineitem, through
partsupp's keys). Nor into a join grouped on the server (its block had every
conjunct on the server already).

Nor where the IN keeps so many of its scan's keys that the rows the server
reads driving the join from them cost more than the bytes the IN saves the
fetch (``Backend.scanned_rows_per_byte``, as ``trim_reductions`` weighs a
reduction): the IN then stays with the client alone, without its keys either.
PostgreSQL drives a join from a filtered dimension through the fact table's
index on its key, a random heap read per fact row; q60's Music items (a tenth
of the items by the load's statistics) reached 560k store_sales rows in 1.67 s
(load average 8), where the join without them scanned store_sales in 0.65 s and
sent 22,155 rows instead of 4,300 (the IN saves ~0.49 MB, worth 97k rows at 0.2
a byte, against 288k rows reached); q33's Electronics likewise (0.90 s against
0.76 s). q56's three colours (3.4% of the items: 98k rows reached against 104k)
and q58's and q83's weeks of dates stay in the join, where the IN is what keeps
the statement small (q58's store_sales: 20,061 rows in 0.83 s against 2.75M in
3.1 s); on DuckDB (2 rows a byte) every one stays.
"""

from __future__ import annotations

from sqlglot import exp

from veil.sql.conjuncts import columns_outside, drop_conjuncts
from veil.sql.join_rows import kept_share_of
from veil.sql.plan import JoinEdge, Scan
from veil.sql.server_subquery import forget_absorbed
from veil.sql.state import PlanState, PushedSubquery
from veil.sql.widths import encryption_width


def pushdown_joined_subqueries(state: PlanState) -> PlanState:
    absorbed: set[int] = set()  # scopes whose scans the server now reads itself
    joined: list[Scan] = []
    for scope, pushed in state.joined_subqueries:  # outermost first
        if id(scope) in absorbed or not _joined_alone(pushed, state):
            continue
        if not _pays(pushed, state):
            _leave_to_client(pushed, state)
            continue
        pushed.scan.predicates.append(pushed.predicate)
        assert pushed.predicate.node is not None  # set by pushed_subquery
        drop_conjuncts(scope.expression, [pushed.predicate.node])
        absorbed |= {id(s) for s in pushed.scopes}
        joined.append(pushed.scan)
    state.joined_subqueries = []
    if absorbed:
        forget_absorbed(state, absorbed)
        _narrow(state, joined)
    return state


def _joined_alone(pushed: PushedSubquery, state: PlanState) -> bool:
    """The IN's scan is in a server join, and its keys would filter no scan outside it."""
    scan = pushed.scan
    if scan.joined is None or scan.joined.groups is not None:
        return False
    columns = _in_columns(pushed, state)
    if columns is None:
        return False
    members = {id(s) for s in scan.joined.scans}
    edges = [e for _, found in state.edges for e in found]
    edges += [e for kind in (state.correlated, state.derived) for found in kind for e in found]
    if any(_reaches_out(e, scan, columns, members) for e in edges):
        return False
    return not any(target is scan for _, _, target, _ in state.derived_joins)


def _pays(pushed: PushedSubquery, state: PlanState) -> bool:
    """Whether the rows the server reads from the IN's keys cost no more than it saves.

    The IN keeps the share of its scan's keys the subquery's own filters keep (the
    most selective of its scans'); the server reads that share of the join's
    largest table, and the client receives the rest of the join's rows no more.
    """
    fetch = pushed.scan.joined
    assert fetch is not None  # checked by _joined_alone
    absorbed = {id(s) for s in pushed.scopes}
    inner = [s for (scope_id, _), s in state.scans.items() if scope_id in absorbed]
    share = min((kept_share_of(s, state) for s in inner), default=1.0)
    largest = max(s.table.row_count for s in fetch.scans)
    width = sum(encryption_width(s.table.fetchable(c)) for s in fetch.scans for c in s.columns)
    saved = (fetch.joined_rows or 0.0) * (1 - share) * width
    return largest * share <= saved * state.ctx.scanned_rows_per_byte()


def _leave_to_client(pushed: PushedSubquery, state: PlanState) -> None:
    """No keys either: the IN's bind filter would drive the join from them the same way."""
    node = pushed.predicate.node
    state.in_subqueries = [(n, t) for n, t in state.in_subqueries if n is not node]


def _in_columns(pushed: PushedSubquery, state: PlanState) -> set[str] | None:
    """The server columns of the IN's own column (its DET, OPE, JOIN copies)."""
    node = pushed.predicate.node
    while isinstance(node, exp.Paren):
        node = node.this
    column = node.this if isinstance(node, exp.In) else None
    ref = state.resolved.get(id(column)) if isinstance(column, exp.Column) else None
    if ref is None:
        return None
    return {e.name for e in pushed.scan.table.encryptions if e.source == ref.column}


def _reaches_out(edge: JoinEdge, scan: Scan, columns: set[str], members: set[int]) -> bool:
    """Whether ``edge`` joins ``scan`` on one of ``columns`` to a scan outside ``members``."""
    for one, column, other in (
        (edge.left, edge.left_column, edge.right),
        (edge.right, edge.right_column, edge.left),
    ):
        if one is scan and column in columns and id(other) not in members:
            return True
    return False


def _narrow(state: PlanState, scans: list[Scan]) -> None:
    """The joined scans fetch no column only the IN read (as ``pushdown_joins`` narrows)."""
    used = columns_outside(state.query, [], state.resolved)
    keys = {id(scan): key for key, scan in state.scans.items()}
    for scan in scans:
        for member in scan.joined.scans if scan.joined is not None else [scan]:
            scope_id, alias = keys[id(member)]
            member.columns = {c for c in member.columns if (scope_id, alias, c) in used}
