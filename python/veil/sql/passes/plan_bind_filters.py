"""Pass: key filters the client computes and the server applies (bind joins).

Some filters cannot run on the server at all: ``p_name LIKE '%green%'`` (a
substring, not a word SEARCH could find), or ``o_orderkey IN (SELECT
l_orderkey FROM lineitem GROUP BY l_orderkey HAVING SUM(l_quantity) > 300)``
(a comparison of a sum). MONOMI then ships the whole joined fact table to
the client. Instead, the client can work out the surviving keys first and
send their DET ciphertexts as a filter on the scan they restrict::

    part (fetched, filtered locally)   ->  lineitem: c_partkey IN (ct1, ct2, ...)
    IN-subquery (run locally first)    ->  orders:   c_orderkey IN (ct1, ct2, ...)

Two sources of keys:

* **join**: a small scan with a client-side filter (``Scan.residuals``),
  DET-equi-joined (inner) to a scan at least four times larger;
* **IN-subquery**: a top-level ``col IN (SELECT ...)`` conjunct whose
  subquery is self-contained (it reads only base tables through its own
  scopes: no outer column, no CTE or derived table defined outside it), on a
  column with a DET encryption.

Keys then travel along DET equi-joins of the scope, and from an outer scan
into a subquery correlated with it on that key (``_into_subquery``).

Sound: a row whose key is not among the keys cannot be in the result (it
joins nothing, or fails the IN); the local plan still evaluates everything
exactly. What it reveals: which key values the client-side filter or
subquery keeps (as DET ciphertexts), as a pushed filter would.

Planned here, filled in by the executor (``veil.exec.bind``) once the
source scans have been fetched; the executor skips a key list that would be
too long or that the filter hardly shortened.
"""

from __future__ import annotations

from sqlglot import exp
from sqlglot.optimizer.scope import Scope

from veil.design.model import DET
from veil.sql.columns import BaseColumn
from veil.sql.conjuncts import is_part_of
from veil.sql.derived_edges import output_position
from veil.sql.plan import BindFilter, JoinEdge, Scan
from veil.sql.state import PlanState, ScanKey

# The small side is at most this fraction of the large side's rows: below,
# fetching the small table first and filtering the large one pays off.
_SMALL_FRACTION = 0.25


def plan_bind_filters(state: PlanState) -> PlanState:
    for _, edges in state.edges:
        for edge in edges:
            _bind_join(edge.left, edge.left_column, edge.right, edge.right_column)
            _bind_join(edge.right, edge.right_column, edge.left, edge.left_column)
    for node, target in state.in_subqueries:
        _bind_subquery(node, target, state.scopes, state.scans, state.resolved)
    for column_node, derived_scope, joined, ref in state.derived_joins:
        _bind_derived(column_node, derived_scope, joined, ref, state)
    for _, edges in state.edges:
        _propagate(edges)
    # a scan those keys thin is small once fetched: its keys thin its join partners
    thinned = {id(s) for s in state.scans.values() if s.binds}
    for _, edges in state.edges:
        for edge in edges:
            for source, column, target, other in (
                (edge.left, edge.left_column, edge.right, edge.right_column),
                (edge.right, edge.right_column, edge.left, edge.left_column),
            ):
                if id(source) in thinned and id(target) not in thinned:
                    _bind_join(source, column, target, other, thinned=True)
    # a dimension filtered on the client filters the scans behind a derived table's
    # column joined with it (``veil.sql.derived_edges``; never the other way round:
    # one branch's keys do not cover the others')
    for derived in state.derived:
        for edge in derived:
            _bind_join(edge.right, edge.right_column, edge.left, edge.left_column)
    # scopes come innermost first: carry keys into correlated subqueries (and derived
    # tables' scans) outside-in
    for outer_edges, derived in reversed(list(zip(state.correlated, state.derived, strict=True))):
        for edge in outer_edges + derived:
            _into_subquery(edge)
    _drop_cycles(list(state.scans.values()))
    return state


def _bind_join(
    source: Scan, source_column: str, target: Scan, target_column: str, *, thinned: bool = False
) -> None:
    """Key filter on ``target`` from the rows of ``source`` its client-side filter keeps.

    ``thinned``: ``source`` is itself filtered by keys (TPC-H Q18's orders, by its
    IN-subquery: 57 rows), so all its fetched rows give keys, whatever its table's size
    (Q18's customer is then fetched for those 57 orders, not whole).
    """
    if not _standalone(source) or target.aggregation is not None or target.with_row_id:
        return
    if not (source.residuals or thinned):
        return
    if not thinned and source.table.row_count > _SMALL_FRACTION * target.table.row_count:
        return
    source_enc = next(e for e in source.table.encryptions if e.name == source_column)
    target_enc = next(e for e in target.table.encryptions if e.name == target_column)
    if source_enc.scheme != DET or source_enc.source not in source.columns:
        return
    keys = exp.select(exp.column(source_enc.source, table=source.alias)).from_(
        exp.alias_(exp.to_table(source.local_name), source.alias, table=True)
    )
    if source.residuals:
        condition = exp.and_(*[r.copy() for r in source.residuals], copy=False)
        keys = keys.where(condition)
        described = f"{source.alias} rows passing {condition.sql()}"
    else:
        described = f"the {source.alias} rows its own key filter keeps"
    # worth sending only if the client-side filter dropped most of the source's rows
    shrinks = source if source.residuals and not thinned else None
    target.binds.append(BindFilter([source], target_enc, keys, described, shrinks))


def _bind_subquery(
    node: exp.In,
    target: Scan,
    scopes: list[Scope],
    scans: dict[ScanKey, Scan],
    resolved: dict[int, BaseColumn],
) -> None:
    query = node.args["query"].this
    column = resolved.get(id(node.this))
    if column is None or target.aggregation is not None or len(query.selects) != 1:
        return
    target_enc = target.table.find(column.column, DET)
    # a subquery of the IN's subquery that went to the server inside a scan's filter
    # (``pushdown_subqueries``: TPC-DS q58's week of a date) has no scans of its own
    pushed = {
        id(inner)
        for scan in scans.values()
        for predicate in scan.predicates
        if predicate.node is not None
        for inner in predicate.node.find_all(exp.Select)
    }
    inside = [
        s for s in scopes if is_part_of(s.expression, query) and id(s.expression) not in pushed
    ]
    if target_enc is None or not inside or not _self_contained(inside, scans):
        return
    ids = {id(s) for s in inside}
    sources = [scan for (scope_id, _), scan in scans.items() if scope_id in ids]
    if not sources or any(s.with_row_id for s in sources):
        return
    target.binds.append(BindFilter(sources, target_enc, query, "its IN-subquery"))


def _bind_derived(
    column: exp.Column, source: Scope, target: Scan, ref: BaseColumn, state: PlanState
) -> None:
    """Key filter on ``target`` from the rows of the derived table (or CTE) it joins.

    TPC-DS q54: ``my_customers`` (a few hundred customers who bought one category in
    one month) joins store_sales on ``c_customer_sk = ss_customer_sk``; store_sales was
    fetched for every customer. The derived table's rows are worked out on the client
    first (its own scans, fetched with their own filters), and its keys sent as a
    filter on store_sales, as an IN-subquery's are. Sound as an inner join's semi-join
    is: a target row whose key no derived row has joins nothing. The derived column
    must be its first output (the key query is the derived table's own query, whose
    first column the executor reads); a CTE read by others gives its keys the same.
    Only into a target at least four times the rows the derived table's scans fetch.
    """
    body = source.expression
    enc = target.table.find(ref.column, DET)
    if enc is None or target.aggregation is not None or target.with_row_id:
        return
    if not isinstance(body, exp.Query) or output_position(body, column.name) != 0:
        return
    inside = [s for s in state.scopes if is_part_of(s.expression, body)]
    if not inside or not _self_contained(inside, state.scans):
        return
    ids = {id(s) for s in inside}
    sources = [scan for (scope_id, _), scan in state.scans.items() if scope_id in ids]
    if not sources or any(s.with_row_id for s in sources) or target in sources:
        return
    if any(b.keys is body for b in target.binds):
        return
    # worth it when the derived table's inputs are small beside the target: its keys
    # are few then, and the target is not made to wait for large fetches
    fetched = sum(s.estimated_rows or s.table.row_count for s in sources)
    if fetched > _SMALL_FRACTION * target.table.row_count:
        return
    name = column.table
    target.binds.append(BindFilter(sources, enc, body, f"{name}.{column.name}"))


def _self_contained(inside: list[Scope], scans: dict[ScanKey, Scan]) -> bool:
    """Whether the scopes of a subquery can run alone over their scans' local tables.

    Every column must resolve within those scopes, and every source must be
    one of their scans or one of their own subqueries: a reference to the
    outer row, to a CTE of the outer WITH or to an outer derived table
    would fail (or mean something else) when the subquery runs alone. Only the
    sources it reads count: a CTE the WITH defines before the one holding the
    subquery is among its scope's sources, unread (TPC-DS q58's second and third
    CTEs kept their fact tables whole).
    """
    ids = {id(s) for s in inside}
    expressions = {id(s.expression) for s in inside}
    for scope in inside:
        for alias, (_, source) in scope.selected_sources.items():
            if isinstance(source, exp.Table):
                if (id(scope), alias) not in scans:
                    return False  # a CTE name or a table Veil does not hold
            elif id(source.expression) not in expressions:
                return False  # a CTE or derived table defined outside the subquery
        for column in scope.columns:
            if not _resolves_inside(column, scope, ids):
                return False
    return True


def _resolves_inside(column: exp.Column, scope: Scope, ids: set[int]) -> bool:
    if not column.table:
        return True  # qualified queries leave only output aliases unqualified
    current: Scope | None = scope
    while current is not None and id(current) in ids:
        if column.table in current.sources:
            return True
        current = current.parent
    return False


def _propagate(edges: list[JoinEdge]) -> None:
    """Keys filtering one side of a DET equi-join filter the other side too.

    Both columns are DET under one key scope, so the same plaintext keys
    (encrypted under the other column) select the rows that can join.
    """
    for edge in edges:
        sides = (
            (edge.left, edge.left_column, edge.right),
            (edge.right, edge.right_column, edge.left),
        )
        for scan, column, other in sides:
            other_column = edge.right_column if other is edge.right else edge.left_column
            other_enc = next(e for e in other.table.encryptions if e.name == other_column)
            have = {(id(b.keys), b.target_enc.name) for b in other.binds}
            for bind in list(scan.binds):
                if bind.target_enc.name != column or (id(bind.keys), other_column) in have:
                    continue
                if other.aggregation is not None or other.with_row_id:
                    continue
                other.binds.append(
                    BindFilter(bind.sources, other_enc, bind.keys, bind.description, bind.shrinks)
                )


def _into_subquery(edge: JoinEdge) -> None:
    """Keys filtering an outer scan filter the correlated subquery's scan too.

    TPC-H Q20: partsupp keeps the keys of 'forest' parts, and the subquery
    summing lineitem per (ps_partkey, ps_suppkey) only ever runs for those
    partsupp rows, so lineitem is fetched for those parts only. Sound as the
    correlated reduction is (``reduce_joins``): the correlation is a
    top-level conjunct of the subquery, and it runs only for outer rows that
    pass the outer scope's top-level conjuncts, the key filter's among them.
    """
    inner, outer = edge.left, edge.right
    if inner.aggregation is not None or inner.with_row_id:
        return
    inner_enc = next(e for e in inner.table.encryptions if e.name == edge.left_column)
    have = {id(b.keys) for b in inner.binds if b.target_enc.name == edge.left_column}
    for bind in outer.binds:
        if bind.target_enc.name == edge.right_column and id(bind.keys) not in have:
            inner.binds.append(
                BindFilter(bind.sources, inner_enc, bind.keys, bind.description, bind.shrinks)
            )


def _standalone(scan: Scan) -> bool:
    """Fetched by its own statement, as a plain filtered scan."""
    return scan.joined is None and scan.aggregation is None and not scan.with_row_id


def _drop_cycles(scans: list[Scan]) -> None:
    """Keep the bind filters that a fetch order can satisfy (sources first)."""
    for scan in scans:
        scan.binds = [b for b in scan.binds if not reaches(b, scan, set())]


def reaches(bind: BindFilter, target: Scan, seen: set[int]) -> bool:
    """Whether ``bind``'s sources depend (through fetches) on ``target``'s own fetch."""
    fetched_with = {id(s) for s in (target.joined.scans if target.joined else [target])}
    for source in bind.sources:
        if id(source) in fetched_with:
            return True
        if id(source) in seen:
            continue
        seen.add(id(source))
        group = source.joined.scans if source.joined else [source]
        if any(reaches(b, target, seen) for member in group for b in member.binds):
            return True
    return False
