"""Join edges that reach through a derived table, a UNION ALL or a CTE to the scans inside.

TPC-DS q05 joins a dimension to a union of fact tables::

    FROM (SELECT ss_sold_date_sk AS date_sk, ... FROM store_sales
          UNION ALL SELECT sr_returned_date_sk, ... FROM store_returns) sr, date_dim
    WHERE sr.date_sk = date_dim.d_date_sk AND d_date BETWEEN ...

``sr.date_sk`` is no base column, so ``join_graph.join_edge`` sees no edge and
both fact tables were fetched whole. Each branch's column is, row by row, a
base column of one of its scans: an edge from that scan to the dimension lets
the dimension's filter reach it (``reduce_joins``: a server semi-join;
``plan_bind_filters``: a key list the client computes), as a correlated
subquery's scan is reduced by its outer scan.

Sound because the outer conjunct is an inner equi-join: a derived row whose
column matches no filtered dimension row is dropped, and the derived table
makes its rows with that value only from branch rows with that value (a plain
projection, DISTINCT, or GROUP BY on that column; a UNION of such branches).
Nothing whose rows depend on other rows' values is crossed: aggregates
grouped by other keys, windows, LIMIT, DISTINCT ON, samples; nor the nullable
side of an outer join; a CTE only when it is read once (another reader may
want the rows this one drops). The local plan is unchanged.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp
from sqlglot.optimizer.scope import Scope

from veil.sql.columns import BaseColumn
from veil.sql.conjuncts import conjunct_list, nullable_aliases
from veil.sql.functions import is_volatile
from veil.sql.join_graph import equal_columns
from veil.sql.plan import JoinEdge, Scan
from veil.sql.state import PlanState

_MAX_DEPTH = 4  # derived tables nested deeper are left alone
# ``derived.col = t.col``: the derived column, its derived table's (CTE's) scope, t's
# scan and column
DerivedJoin = tuple[exp.Column, Scope, Scan, BaseColumn]


def derived_join(
    predicate: exp.Expr, allowed: set[str] | None, scope: Scope, state: PlanState
) -> list[DerivedJoin]:
    """``(derived column, derived table's scope, scan of t, t.col)`` if ``predicate`` is
    ``derived.col = t.col``, ``t`` a base table of ``scope`` and both sides among
    ``allowed`` (the aliases the conjunct may filter), else nothing."""
    if not isinstance(predicate, exp.EQ) or predicate.args.get("negate"):
        return []
    sides = (predicate.this, predicate.expression)
    if not all(isinstance(side, exp.Column) for side in sides):
        return []
    for derived, base in (sides, sides[::-1]):
        ref = state.resolved.get(id(base))
        if ref is None or ref.scope_id != id(scope) or id(derived) in state.resolved:
            continue
        if allowed is not None and not {derived.table, ref.alias} <= allowed:
            return []
        outer = state.scans.get((ref.scope_id, ref.alias))
        source = scope.sources.get(derived.table)
        if outer is None or not isinstance(source, Scope):
            return []
        return [(derived, source, outer, ref)]
    return []


def derived_edges(
    predicate: exp.Expr, allowed: set[str] | None, scope: Scope, state: PlanState
) -> list[JoinEdge]:
    """Edges from the scans behind a derived column of ``predicate`` to a scan of ``scope``.

    ``predicate``: a conjunct of ``scope``, ``derived.col = t.col`` with ``t`` a
    base table of the scope; ``allowed``: the aliases it may filter (both sides
    must be among them).
    """
    for derived, source, outer, ref in derived_join(predicate, allowed, scope, state):
        if not _read_once(source, state):
            return []
        by_expression = {id(s.expression): s for s in state.scopes}
        inner = _behind(source.expression, derived.name, by_expression, state, 0)
        if not inner:
            return []
        edges = [_edge(scan, column, outer, ref, predicate) for scan, column in inner]
        return [e for e in edges if e is not None] if all(edges) else []
    return []


def _edge(
    scan: Scan, column: BaseColumn, outer: Scan, ref: BaseColumn, predicate: exp.Expr
) -> JoinEdge | None:
    pair = equal_columns(scan.table, column.column, outer.table, ref.column)
    if pair is None:
        return None
    edge = JoinEdge(scan, pair[0].name, outer, pair[1].name, predicate.sql("duckdb"))
    edge.correlated = True  # the right side is a scan of an outer scope
    return edge


def _read_once(source: Scope, state: PlanState) -> bool:
    """A derived table is read once; a CTE only if one reference names it."""
    if not source.is_cte:
        return True
    cte = source.expression.parent
    if not isinstance(cte, exp.CTE) or not cte.alias:
        return False
    if isinstance(cte.parent, exp.With) and cte.parent.args.get("recursive"):
        return False
    name = cte.alias
    tables = [t for t in state.query.find_all(exp.Table) if t.name.lower() == name.lower()]
    return len(tables) == 1


def _behind(
    node: exp.Expr, name: str, by_expression: dict[int, Scope], state: PlanState, depth: int
) -> list[tuple[Scan, BaseColumn]] | None:
    """``(scan, base column)`` each row of output column ``name`` of ``node`` comes from."""
    if depth > _MAX_DEPTH or node.args.get("limit") or node.args.get("offset"):
        return None
    if isinstance(node, exp.Subquery):
        return _behind(node.this, name, by_expression, state, depth + 1)
    if isinstance(node, exp.Union):
        if any(node.args.get(k) for k in ("by_name", "side", "kind", "on")):
            return None  # columns matched by name, or DuckDB's outer set operations
        position = output_position(node, name)
        if position is None:
            return None
        found: list[tuple[Scan, BaseColumn]] = []
        for branch in _branches(node):
            part = _select_column(branch, position, by_expression, state, depth)
            if part is None:
                return None
            found += part
        return found
    if isinstance(node, exp.Select):
        position = output_position(node, name)
        return (
            None
            if position is None
            else _select_column(node, position, by_expression, state, depth)
        )
    return None


def output_position(node: exp.Expr, name: str) -> int | None:
    """The position of output column ``name`` of a SELECT or set operation, if one has it."""
    first = node
    while isinstance(first, exp.Union | exp.Subquery):
        first = first.this
    if not isinstance(first, exp.Select):
        return None
    names = [s.alias_or_name.lower() for s in first.selects]
    return names.index(name.lower()) if names.count(name.lower()) == 1 else None


def _branches(node: exp.Expr) -> list[exp.Expr]:
    """The SELECTs a UNION [ALL] combines (its nested unions flattened)."""
    if isinstance(node, exp.Union):
        if any(node.args.get(k) for k in ("limit", "offset", "by_name", "side", "kind", "on")):
            return [node]  # _select_column refuses it
        return _branches(node.this) + _branches(node.expression)
    return [node]


def _select_column(
    node: exp.Expr, position: int, by_expression: dict[int, Scope], state: PlanState, depth: int
) -> list[tuple[Scan, BaseColumn]] | None:
    """Where output column ``position`` of one SELECT comes from, if row by row."""
    if isinstance(node, exp.Union) and any(
        node.args.get(k) for k in ("limit", "offset", "by_name", "side", "kind", "on")
    ):
        return None
    if isinstance(node, exp.Subquery | exp.Union):
        inner = _first_select(node)
        if inner is None or position >= len(inner.selects):
            return None
        return _behind(node, inner.selects[position].alias_or_name, by_expression, state, depth)
    scope = by_expression.get(id(node))
    if not isinstance(node, exp.Select) or scope is None or position >= len(node.selects):
        return None
    projection = node.selects[position]
    column = projection.this if isinstance(projection, exp.Alias) else projection
    if not isinstance(column, exp.Column) or not _row_by_row(node, column):
        return None
    ref = state.resolved.get(id(column))
    if ref is not None:
        scan = state.scans.get((ref.scope_id, ref.alias))
        if ref.scope_id != id(scope) or scan is None or ref.alias in nullable_aliases(node):
            return None
        return [(scan, ref)]
    source = scope.sources.get(column.table)
    if not isinstance(source, Scope) or column.table in nullable_aliases(node):
        return None
    if not _read_once(source, state):
        return None
    return _behind(source.expression, column.name, by_expression, state, depth + 1)


def _first_select(node: exp.Expr) -> exp.Select | None:
    while isinstance(node, exp.Union | exp.Subquery):
        node = node.this
    return node if isinstance(node, exp.Select) else None


def _row_by_row(select: exp.Select, column: exp.Column) -> bool:
    """Whether the SELECT's rows with a value of ``column`` come from input rows with it only."""
    if any(select.args.get(k) for k in ("limit", "offset", "qualify", "sample")):
        return False
    distinct = select.args.get("distinct")
    if distinct is not None and distinct.args.get("on") is not None:
        return False
    if select.find(exp.TableSample) or any(s.find(exp.Window) for s in select.selects):
        return False
    group = select.args.get("group")
    if group is not None:
        if group.args.get("rollup") or group.args.get("cube") or group.args.get("grouping_sets"):
            return False
        return any(isinstance(k, exp.Column) and k == column for k in group.expressions)
    return not any(s.find(exp.AggFunc) for s in select.selects) and not select.args.get("having")


def reader_filters(
    state: PlanState, can_push: Callable[[exp.Expr, Scan], bool]
) -> list[tuple[Scan, exp.Expr]]:
    """Filters the readers of a derived table or CTE imply on the scans behind its columns.

    TPC-DS q31 reads its CTE ``ss`` (store_sales by county, quarter and year) three
    times, each reader keeping one quarter of 2000: the CTE's scans need only
    ``(d_qoy = 1 AND d_year = 2000) OR (d_qoy = 2 AND ...) OR ...``. q04, q11 and q74
    read a UNION ALL CTE per channel and year the same way. Each reader's top-level
    conjuncts over one of its columns (a group key, or a column passed on row by row)
    are rewritten over the base column behind it, per scan; a scan gets the OR over
    the readers of their conjunctions, if every reader has some (``can_push``: the
    server can evaluate that conjunct; the designer, not seeing through the CTE, may
    have given ``d_qoy`` no encryption to compare). Sound as an implied conjunct is:
    the rows it drops make derived rows no reader keeps. The readers still filter
    exactly on the client.
    """
    found: list[tuple[Scan, exp.Expr]] = []
    by_expression = {id(s.expression): s for s in state.scopes}
    for derived in state.scopes:
        if not (derived.is_cte or derived.is_derived_table):
            continue
        readers = _readers(derived, state)
        if not readers:
            continue
        per_scan: dict[int, list[list[exp.Expr]]] = {}
        scans: dict[int, Scan] = {}
        for alias, conjuncts in readers:
            mine: dict[int, list[exp.Expr]] = {}
            for conjunct in conjuncts:
                for scan, rewritten in _over_base(conjunct, alias, derived, by_expression, state):
                    if not can_push(rewritten, scan):
                        continue
                    scans[id(scan)] = scan
                    mine.setdefault(id(scan), []).append(rewritten)
            for key, parts in mine.items():
                per_scan.setdefault(key, []).append(parts)
        for key, conjunctions in per_scan.items():
            if len(conjunctions) != len(readers):
                continue  # a reader that keeps every value of these columns
            ors = list(  # one disjunct per distinct conjunction (q04's readers repeat theirs)
                {(o := exp.and_(*parts, copy=False)).sql(): o for parts in conjunctions}.values()
            )
            # copy=False: the columns must stay the nodes registered in ``state.resolved``
            parens = [exp.paren(o, copy=False) for o in ors]
            implied = ors[0] if len(ors) == 1 else exp.or_(*parens, copy=False)
            found.append((scans[key], implied))
    return found


def _readers(derived: Scope, state: PlanState) -> list[tuple[str, list[exp.Expr]]]:
    """Every reader of ``derived``: (its alias, its conjuncts that may filter it)."""
    readers = []
    for scope in state.scopes:
        for alias, (_, source) in scope.selected_sources.items():
            if source is not derived:
                continue
            select = scope.expression
            if not isinstance(select, exp.Select):
                return []
            readers.append((alias, _filtering(select, alias)))
    if derived.is_cte:
        cte = derived.expression.parent
        if not isinstance(cte, exp.CTE) or not cte.alias:
            return []
        if isinstance(cte.parent, exp.With) and cte.parent.args.get("recursive"):
            return []
        named = [t for t in state.query.find_all(exp.Table) if t.name.lower() == cte.alias.lower()]
        if len(named) != len(readers):
            return []  # a reference the scopes do not show: leave it alone
    elif len(readers) != 1:
        return []
    return readers


def _filtering(select: exp.Select, alias: str) -> list[exp.Expr]:
    """The WHERE and inner ON conjuncts of ``select`` that only read ``alias``'s columns."""
    nullable = nullable_aliases(select)
    found = []
    where = select.args.get("where")
    if where is not None and alias not in nullable:
        found += conjunct_list(where.this)
    for join in select.args.get("joins") or []:
        on = join.args.get("on")
        if on is None or join.args.get("kind") in ("ANTI", "SEMI", "ASOF"):
            continue
        if join.args.get("side") in (None, "") and alias not in nullable:
            found += conjunct_list(on)
    return [c for c in found if _reads_only(c, alias)]


def _reads_only(conjunct: exp.Expr, alias: str) -> bool:
    if conjunct.find(exp.Subquery, exp.Select, exp.AggFunc, exp.Window, exp.Star):
        return False
    if any(is_volatile(n) for n in conjunct.walk()):
        return False
    columns = list(conjunct.find_all(exp.Column))
    return bool(columns) and all(c.table == alias for c in columns)


def _over_base(
    conjunct: exp.Expr,
    alias: str,
    derived: Scope,
    by_expression: dict[int, Scope],
    state: PlanState,
) -> list[tuple[Scan, exp.Expr]]:
    """``conjunct`` over the base column behind its one derived column, for each scan."""
    names = {c.name.lower() for c in conjunct.find_all(exp.Column)}
    if len(names) != 1:
        return []
    behind = _behind(derived.expression, names.pop(), by_expression, state, 0)
    if not behind:
        return []
    rewritten = []
    for scan, base in behind:
        copied = conjunct.copy()
        for column in list(copied.find_all(exp.Column)):
            node = exp.column(base.column, table=base.alias)
            state.resolved[id(node)] = base
            column.replace(node)
        rewritten.append((scan, copied))
    return rewritten
