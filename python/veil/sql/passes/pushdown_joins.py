"""Pass: inner equi-joins on the server: one RemoteSQL statement per joined block.

A SELECT scope whose sources are all combined by inner (or comma) joins, and
whose scans are linked by join edges (``reduce_joins``: equality of DET
columns under one key scope), can fetch the linked scans with ONE server
statement that joins the encrypted tables, applies every scan's pushed
filters and returns only the columns the client still needs
(``plan.JoinedFetch``). The client splits each joined row into the scans'
local tables (row ``i`` of each from joined row ``i``); the local plan pairs
them by position (``join_by_position``), so it sees exactly the server's
joined rows.

What the client no longer re-checks: the join equalities and the exact pushed
filters of the joined scans (DET and OPE comparisons are exact, so the
server's answer is the plaintext answer). Their conjuncts become TRUE in the
local plan, which is what lets the server stop sending the join keys and the
filter-only columns. Pre-filters (LIKE via SEARCH) are still finished locally.

When to join on the server (a byte estimate, nothing more). Each table keeps
the share of its rows its exact filters keep (``veil.sql.selectivity``: DET
distinct counts and OPE quantiles from the load); the joined rows are the
largest table's rows thinned by every share (independence). Per-table bytes:
the largest table sends its joined rows, a smaller one the distinct rows the
joined rows meet among its kept ones (``_fetched_alone``), each times its
width; joined bytes: the joined rows times the narrower widths ``width'``
(both without the columns only exact filters read, which neither path
fetches). The join may cost up to ``_JOIN_BONUS`` times the bytes, since it
saves statements and the client's own join. A foreign-key join repeats each
row of the smaller tables once per joined row, so wide dimension columns make
the join lose. Then the scan whose repetition costs most leaves the join (if
the rest stays connected) and the estimate is tried again; scans left out
keep the per-table path (with its semi-join reductions) and the local plan
joins them as before. TPC-H Q14's lineitem keeps 1/84 of its rows (one
month): lineitem and part are joined on the server (the per-table path
scanned lineitem twice); Q10's customer (name, address, phone, comment)
would be repeated on 76,000 joined rows against 60,000 of its own: left out
(1.20 times the bytes).
"""

from __future__ import annotations

from math import expm1, prod

from sqlglot import exp

from veil.sql.conjuncts import (
    aliases_of,
    columns_outside,
    drop_conjuncts,
    inner_then_left_joins,
    is_part_of,
    join_by_position,
    nullable_aliases,
)
from veil.sql.join_graph import components
from veil.sql.join_rows import cycles_share, kept_share_of, referenced_keys_factor
from veil.sql.plan import JoinedFetch, JoinEdge, Reduction, Scan
from veil.sql.state import PlanState, ScanKey
from veil.sql.widths import encryption_width

# One statement instead of several, and no join left for the client, are worth
# some extra bytes. On TPC-H SF 1: Q9's six-table join (estimated at 1.03 times
# the bytes) pays; Q10 with customer's text (1.20) sends 2.5 times the bytes
# for no gain in time.
_JOIN_BONUS = 1.15


def pushdown_joins(state: PlanState) -> PlanState:
    keys = {id(scan): key for key, scan in state.scans.items()}
    for scope, edges in state.edges:
        if not inner_then_left_joins(scope.expression):
            continue
        select = scope.expression
        assert isinstance(select, exp.Select)  # checked by inner_then_left_joins
        nullable = nullable_aliases(select)  # a LEFT join's right side stays local
        # with LEFT joins, only a server join of every inner source: DuckDB's local plan
        # LEFT joined TPC-DS q75's returns to a (date_dim, catalog_sales) pair joined with
        # item on the client in 14.7 s (0.05 s before), q72's whole star in 30 ms
        whole = aliases_of(select) - nullable if nullable else None
        for members, member_edges in components(edges):
            if any(s.aggregation or s.joined or s.with_row_id for s in members):
                continue
            if any(s.alias in nullable for s in members):
                continue
            _try_join(state, members, member_edges, select, keys, whole)
    return state


def _try_join(
    state: PlanState,
    members: list[Scan],
    edges: list[JoinEdge],
    select: exp.Select,
    keys: dict[int, ScanKey],
    whole: set[str] | None = None,
) -> JoinedFetch | None:
    """Join the largest connected part of a component whose estimate does not lose
    (``whole``: the aliases it must join, all or nothing)."""
    tree, resolved = state.query, state.resolved
    members = list(members)
    while len(members) >= 2:
        if whole is not None and {s.alias for s in members} != whole:
            return None
        inside = {id(s) for s in members}
        fetch = JoinedFetch(
            members, [e for e in edges if id(e.left) in inside and id(e.right) in inside]
        )
        filters = [
            p.node for s in members for p in s.predicates if p.exact and is_part_of(p.node, select)
        ]
        dropped = [e.node for e in fetch.edges if is_part_of(e.node, select)] + filters
        # per table, the exact filters leave the local plan too (``drop_pushed``)
        alone = _narrowed(members, columns_outside(tree, filters, resolved), keys)
        narrowed = _narrowed(members, columns_outside(tree, dropped, resolved), keys)
        kept = {id(s): kept_share_of(s, state) for s in members}
        largest = max(members, key=lambda s: s.table.row_count)
        # the joined rows: the largest table's, thinned by every member's filters (by
        # the share of the keys the others hold, ``referenced_keys_factor``: TPC-DS q04's
        # two years of date_dim keep 2/5 of store_sales, not 2/200, and customer's six
        # text columns joined on 1.1M rows tripled the bytes) and by every join that
        # closes a cycle
        thinned = [min(1.0, kept[id(s)] * referenced_keys_factor(s, fetch.edges)) for s in members]
        rows = largest.table.row_count * prod(thinned) * cycles_share(fetch.edges)
        before = sum(
            _fetched_alone(s, kept[id(s)], rows, s is largest) * _width(s, alone[id(s)])
            for s in members
        )
        after = rows * sum(_width(s, narrowed[id(s)]) for s in members)
        if after <= before * _JOIN_BONUS:
            fetch.scans = _selective_first(fetch.scans, fetch.edges, kept)
            _adopt(fetch, select, [node for node in dropped if node is not None], narrowed)
            fetch.estimated_rows = fetch.joined_rows = rows
            return fetch

        # leave out the scan whose repetition adds most (with the scans only it
        # connects to the largest table): its columns on every joined row, less
        # its own fetch (TPC-H Q10: customer, and nation hanging off it)
        adds = {
            id(s): rows * _width(s, narrowed[id(s)])
            - _fetched_alone(s, kept[id(s)], rows, s is largest) * _width(s, alone[id(s)])
            for s in members
        }
        options = [
            kept_part
            for m in members
            if m is not largest and len(kept_part := _reaching(largest, m, members, edges)) >= 2
        ]
        if not options:
            return None
        members = max(options, key=lambda part: sum(adds[id(s)] for s in members if s not in part))
    return None


def _selective_first(
    members: list[Scan], edges: list[JoinEdge], kept: dict[int, float]
) -> list[Scan]:
    """The members in the order the server should join them: the most selective filter
    first, then in their own order each member joined to those before it.

    DuckDB and PostgreSQL choose their own join order; Spark, without statistics over
    plain Parquet files, joins in the order the statement lists the tables (TPC-H Q9
    listed supplier and lineitem before the filtered part: 8.6x plaintext at SF 1).
    Only the start moves: picking each next member by its rows joined Q5's supplier
    through nation before lineitem, a many-to-many join (6x).
    """
    ordered = [min(members, key=lambda s: (kept[id(s)], s.table.row_count * kept[id(s)]))]
    while len(ordered) < len(members):
        placed = {id(s) for s in ordered}
        neighbours = {
            id(other)
            for edge in edges
            for one, other in ((edge.left, edge.right), (edge.right, edge.left))
            if id(one) in placed
        }
        remaining = [s for s in members if id(s) not in placed]
        ordered.append(next((s for s in remaining if id(s) in neighbours), remaining[0]))
    return ordered


def _fetched_alone(scan: Scan, kept: float, joined: float, largest: bool) -> float:
    """Rows of ``scan`` its own (semi-join reduced) fetch returns, estimated.

    The largest table sends at most its joined rows; a smaller one, the rows
    among its filtered ones that some joined row meets: the distinct values
    ``joined`` draws among them take (TPC-H Q10: customers with a returned line
    in the quarter, about 56,000 of 150,000, each repeated on two lines).
    """
    rows = scan.table.row_count * kept
    if largest or rows <= 0:
        return min(rows, joined)
    return rows * -expm1(-joined / rows)


def _narrowed(
    members: list[Scan], used: set[tuple[int, str, str]], keys: dict[int, ScanKey]
) -> dict[int, set[str]]:
    return {id(s): {c for c in s.columns if (*keys[id(s)], c) in used} for s in members}


def _reaching(start: Scan, without: Scan, members: list[Scan], edges: list[JoinEdge]) -> list[Scan]:
    """The members still joined to ``start`` once ``without`` leaves, in members' order."""
    usable = [e for e in edges if without not in (e.left, e.right)]
    return Reduction(members, edges).part(start, usable).scans


def _adopt(
    fetch: JoinedFetch,
    select: exp.Select,
    dropped: list[exp.Expr],
    narrowed: dict[int, set[str]],
) -> None:
    drop_conjuncts(select, dropped)
    members = {id(s) for s in fetch.scans}
    for scan in fetch.scans:
        scan.columns = narrowed[id(scan)]
        scan.joined = fetch
        if scan.reduction is not None and {id(s) for s in scan.reduction.scans} <= members:
            scan.reduction = None  # the server join itself reduces this scan
    join_by_position(select, fetch.scans)


def _width(scan: Scan, columns: set[str]) -> float:
    """Rough bytes per row of ``columns`` as fetched."""
    if not columns:
        return 0
    return sum(encryption_width(scan.table.fetchable(c)) for c in columns)
