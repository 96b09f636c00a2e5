"""The split planner: a qualified query -> RemoteSQL scans + a local plan.

Passes, in order (each a function of this module):

1. ``find_scans``: every reference to a base table becomes a ``Scan`` with a
   local table name, and the columns it needs (pruned per reference).
2. ``pushdown_predicates``: each WHERE / ON conjunct that reads one scan only
   and that REWRITESERVER can express exactly goes to that scan's RemoteSQL
   (MONOMI Algorithm 1, lines 6-13). Conjuncts over the nullable side of an
   outer join are not pushed from WHERE, since pre-filtering there would turn
   a matched row into a NULL-extended one. DET equi-joins between the scope's
   scans become semi-join reductions (``reduce_joins``).
3. ``pushdown_aggregates``: a one-table block whose WHERE went to the server
   whole is grouped and aggregated there when DET keys and OPE allow it.
4. ``pushdown_joins``: an inner-join block's DET equi-joined scans are
   fetched by one server statement that joins them, when a byte estimate
   says that cannot cost more than the per-table fetches.
5. ``drop_pushed_filters``: conjuncts the server applied exactly leave the
   local plan, and so do the columns only they read.
6. ``plan_bind_filters``: a small scan's client-side filter becomes, once
   it is fetched, a filter on the DET join keys of a large inner-joined scan.
7. ``rename_scans``: the local plan reads the scans' local tables.

A query sqlglot cannot qualify falls back to the always-correct split: fetch
every column of every table it names and run the whole query on the client.
"""

from __future__ import annotations

from itertools import count

from sqlglot import exp
from sqlglot.optimizer.scope import Scope, traverse_scope

from veil.design.model import PhysicalDesign
from veil.sql.bind_filters import plan_bind_filters
from veil.sql.columns import BaseColumn, base_columns
from veil.sql.drop_pushed import drop_pushed_filters
from veil.sql.implied_predicates import implied_conjuncts
from veil.sql.parse import qualify_query
from veil.sql.plan import JoinEdge, Scan, ServerPredicate, SplitPlan
from veil.sql.prefilter_like import prefilter_like
from veil.sql.pushdown_aggregates import pushdown_aggregates
from veil.sql.pushdown_joins import is_part_of, pushdown_joins
from veil.sql.reduce_joins import join_edge, reduce_correlated, reduce_joins
from veil.sql.rewrite_server import ServerContext, rewrite_server

LOCAL_PREFIX = "__veil_scan_"


def plan_query(tree: exp.Expr, design: PhysicalDesign, ctx: ServerContext) -> SplitPlan:
    qualified = (
        qualify_query(tree, design.plaintext_schema()) if isinstance(tree, exp.Query) else None
    )
    if qualified is None:
        return plan_fetch_all(tree, design)
    prune_exists_projections(qualified)
    scopes = traverse_scope(qualified)
    resolved = base_columns(scopes, set(design.tables))
    scans = find_scans(scopes, design, resolved)
    in_subqueries: list[tuple[exp.In, Scan]] = []
    scope_edges = pushdown_predicates(scopes, scans, resolved, ctx, in_subqueries)
    pushdown_aggregates(scopes, scans, resolved, ctx)
    pushdown_joins(qualified, scope_edges, scans, resolved)
    drop_pushed_filters(qualified, scopes, scans, resolved)
    plan_bind_filters(scope_edges, scopes, scans, resolved, in_subqueries)
    rename_scans(scans)
    return SplitPlan(list(scans.values()), qualified, pushdown=True)


def prune_exists_projections(tree: exp.Expr) -> None:
    """``EXISTS (SELECT * FROM t WHERE ...)`` -> ``EXISTS (SELECT 1 FROM t WHERE ...)``.

    EXISTS ignores what its subquery selects, so fetching the columns that
    ``*`` expands to would only move bytes. Left alone when the projection
    decides how many rows there are (aggregates, windows, GROUP BY, DISTINCT).
    """
    for exists in tree.find_all(exp.Exists):
        select = exists.this.this if isinstance(exists.this, exp.Subquery) else exists.this
        if not isinstance(select, exp.Select) or any(
            select.args.get(k) for k in ("group", "having", "distinct", "qualify")
        ):
            continue
        if any(p.find(exp.AggFunc, exp.Window) for p in select.expressions):
            continue
        select.set("expressions", [exp.alias_(exp.Literal.number(1), "one")])


def find_scans(
    scopes: list[Scope], design: PhysicalDesign, resolved: dict[int, BaseColumn]
) -> dict[tuple[int, str], Scan]:
    """``{(scope id, alias): Scan}`` for every base-table reference."""
    numbers = count()
    scans: dict[tuple[int, str], Scan] = {}
    for scope in scopes:
        for alias, source in scope.sources.items():
            if isinstance(source, exp.Table) and source.name.lower() in design.tables:
                table = design.table(source.name)
                scan = Scan(table, alias, f"{LOCAL_PREFIX}{next(numbers)}", node=source)
                scans[(id(scope), alias)] = scan
    for ref in resolved.values():
        scans[(ref.scope_id, ref.alias)].columns.add(ref.column)
    return scans


def pushdown_predicates(
    scopes: list[Scope],
    scans: dict[tuple[int, str], Scan],
    resolved: dict[int, BaseColumn],
    ctx: ServerContext,
    in_subqueries: list[tuple[exp.In, Scan]],
) -> list[tuple[Scope, list[JoinEdge]]]:
    """Push conjuncts; returns each scope's join edges (for ``pushdown_joins``).

    Also collects ``col IN (subquery)`` conjuncts on one scan's column (for
    ``plan_bind_filters``).
    """
    scope_edges: list[tuple[Scope, list[JoinEdge]]] = []
    correlated: list[list[JoinEdge]] = []
    for scope in scopes:
        select = scope.expression
        if not isinstance(select, exp.Select):
            continue
        edges: list[JoinEdge] = []
        correlated.append([])
        conjuncts = _conjuncts(select)
        conjuncts += [(i, a) for p, a in conjuncts for i in implied_conjuncts(p, resolved)]
        for predicate, allowed in conjuncts:
            edge = join_edge(predicate, allowed, id(scope), scans, resolved)
            if edge is not None:
                (correlated[-1] if edge.correlated else edges).append(edge)
                continue
            target = _in_subquery_target(predicate, scope, scans, resolved)
            if target is not None and (allowed is None or target.alias in allowed):
                in_subqueries.append((predicate, target))  # type: ignore[arg-type]
            scan = _single_scan(predicate, scope, scans, resolved)
            if scan is None or (allowed is not None and scan.alias not in allowed):
                continue
            rewritten = rewrite_server(predicate, scan, resolved, ctx) or prefilter_like(
                predicate, scan, resolved, ctx
            )
            exact = rewritten is not None and "SEARCH" not in rewritten[1]  # LIKE pre-filter
            if rewritten is not None:
                server, schemes = rewritten
                scan.predicates.append(
                    ServerPredicate(predicate.sql("duckdb"), server, schemes, predicate, exact)
                )
            if not exact and is_part_of(predicate, select):  # implied conjuncts are extras
                scan.residuals.append(predicate)
        reduce_joins(edges)
        scope_edges.append((scope, edges))
    # scopes come innermost first; reduce subqueries by their outer scans outside-in
    for outer_edges in reversed(correlated):
        for edge in outer_edges:
            reduce_correlated(edge)
    return scope_edges


def _conjuncts(select: exp.Select) -> list[tuple[exp.Expr, set[str] | None]]:
    """Conjuncts with the aliases they may be pushed to (None: any of the scope)."""
    joins = select.args.get("joins") or []
    nullable = _nullable_aliases(select)
    found: list[tuple[exp.Expr, set[str] | None]] = []
    preserved = _aliases_of(select) - nullable
    where = select.args.get("where")
    if where is not None:
        found += [(c, preserved) for c in where.this.flatten() if isinstance(where.this, exp.And)]
        if not isinstance(where.this, exp.And):
            found.append((where.this, preserved))
    for join in joins:
        on = join.args.get("on")
        if on is None or join.args.get("kind") in ("ANTI", "SEMI", "ASOF"):
            continue
        side = join.args.get("side")
        target = {join.this.alias_or_name} if side == "LEFT" else preserved if not side else set()
        parts = list(on.flatten()) if isinstance(on, exp.And) else [on]
        found += [(c, target) for c in parts]
    return found


def _aliases_of(select: exp.Select) -> set[str]:
    sources = [select.args.get("from_"), *(select.args.get("joins") or [])]
    return {s.this.alias_or_name for s in sources if s is not None}


def _nullable_aliases(select: exp.Select) -> set[str]:
    nullable: set[str] = set()
    seen: list[str] = []
    from_ = select.args.get("from_")
    if from_ is not None:
        seen.append(from_.this.alias_or_name)
    for join in select.args.get("joins") or []:
        name = join.this.alias_or_name
        side = join.args.get("side")
        if side in ("LEFT", "FULL"):
            nullable.add(name)
        if side in ("RIGHT", "FULL"):
            nullable.update(seen)
        seen.append(name)
    return nullable


def _single_scan(
    predicate: exp.Expr,
    scope: Scope,
    scans: dict[tuple[int, str], Scan],
    resolved: dict[int, BaseColumn],
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
    predicate: exp.Expr,
    scope: Scope,
    scans: dict[tuple[int, str], Scan],
    resolved: dict[int, BaseColumn],
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


def rename_scans(scans: dict[tuple[int, str], Scan]) -> None:
    """Point each table reference of the local plan at its scan's local table."""
    for scan in scans.values():
        node = scan.node
        assert node is not None
        node.set("this", exp.to_identifier(scan.local_name))
        node.set("db", None)
        node.set("catalog", None)
        if not node.alias:
            node.set("alias", exp.TableAlias(this=exp.to_identifier(scan.alias)))


def plan_fetch_all(tree: exp.Expr, design: PhysicalDesign) -> SplitPlan:
    """Every column of every table the query names; the client runs all of it."""
    local = tree.copy()
    names = {t.name.lower() for t in local.find_all(exp.Table)} & set(design.tables)
    scans = []
    for name in sorted(names):
        table = design.table(name)
        scans.append(Scan(table, name, name, columns={c.name for c in table.columns}))
    return SplitPlan(scans, local, pushdown=False)
