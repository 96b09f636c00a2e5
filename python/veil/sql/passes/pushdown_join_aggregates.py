"""Pass: a whole joined block, grouped and counted on the server (one statement).

A SELECT whose sources are all scans inner-joined on DET keys (join edges
connecting every one), whose every WHERE / ON conjunct the server evaluates
exactly (join edges, exact predicates, pushed subqueries), whose GROUP BY
keys have DET encryptions and whose aggregates are COUNT(*), COUNT(col),
MIN/MAX of OPE columns and ASHE sums of one scan, or none at all (the distinct
key tuples: TPC-DS q82's items with stock and sales, where the fact tables'
many-to-many join would otherwise run as semi-join reductions and a local
join; and a ``SELECT DISTINCT`` of columns, its outputs the keys: q38's and
q87's customers and days, ~10 sales lines each), runs on the server whole
(TPC-H Q21). A key without a DET copy groups by its OPE copy where that is
one-to-one (numbers and dates)::

    SELECT s_name, COUNT(*) FROM supplier, lineitem l1, orders, nation
    WHERE s_suppkey = l1.l_suppkey AND o_orderkey = l1.l_orderkey AND ... GROUP BY s_name
      RemoteSQL: SELECT j0.c_name, COUNT(*) FROM t_supp AS j0, t_li AS j1, ...
                 WHERE j0.c_sk = j1.c_sk AND ... GROUP BY j0.c_name
      local:     ... ANY_VALUE(supplier.__veil_agg_0) ... GROUP BY supplier.s_name

The server returns a row per group, which the client splits into the
scans' local tables, paired by position (``veil.exec.fetch.run_joined``);
the local plan's GROUP BY sees each group once, as with a single table
(``pushdown_aggregates``). Exact: DET groups as the plaintext does, the
server's join and filters are the local plan's, and COUNT / MIN / MAX of
DET and OPE ciphertexts are the counts and the ciphertexts of the extremes.

Chosen without a byte estimate: the server's answer has at most one row per
group, never more than what the per-table or joined fetches would send (with
ASHE sums one per group and block of ids, which ``join_sums`` prices).
SUM / AVG under ASHE of one scan's expressions, when the join cannot repeat
its rows and the server's (group, block) rows pay (``veil.sql.join_sums``);
Windows run on the client over the groups (``_own_aggregates``); Paillier
sums, DISTINCT aggregates, FILTER and correlated blocks are left to the other passes.
A ROLLUP or CUBE of key columns groups by all of them on the server; the
client's GROUP BY adds the groups up (``_group_value``).
"""

from __future__ import annotations

from sqlglot import exp
from sqlglot.optimizer.scope import Scope

from veil.design.model import DET, OPE, Encryption
from veil.sql.columns import block_sources
from veil.sql.conjuncts import (
    block_conjuncts,
    drop_conjuncts,
    inner_joins_only,
    join_by_position,
    subqueries_outside_where,
)
from veil.sql.join_graph import components
from veil.sql.join_rows import grouped_rows, joined_rows
from veil.sql.join_sums import join_sums
from veil.sql.plan import AggregateItem, JoinedFetch, JoinEdge, JoinGroup, Scan
from veil.sql.remote import joined_alias
from veil.sql.state import PlanState


def pushdown_join_aggregates(state: PlanState) -> PlanState:
    for scope, edges in state.edges:
        select = scope.expression
        if not isinstance(select, exp.Select) or not edges or scope.external_columns:
            continue
        groups = components(edges)
        if len(groups) != 1:
            continue
        members, member_edges = groups[0]
        local = _whole_block(scope, select, members, member_edges)
        if local is None:
            continue
        members = _in_from_order(scope, members)
        fetch = JoinedFetch(members, member_edges)
        found = _join_group(select, members, member_edges, state)
        if found is None or not _on_keys(local, scope, found[0], state):
            continue
        fetch.groups, types = found
        rows = joined_rows(members, member_edges, state)
        fetch.estimated_rows = grouped_rows(fetch.groups, rows, state)
        fetch.joined_rows = rows
        _adopt(fetch, select, types, local)
    return state


def _whole_block(
    scope: Scope, select: exp.Select, members: list[Scan], edges: list[JoinEdge]
) -> list[exp.Expr] | None:
    """All of the block's sources are these scans, and every conjunct is on the server
    or a WHERE conjunct left to the client (returned: ``_on_keys`` checks what it reads)."""
    if len(members) != len(block_sources(scope)) or subqueries_outside_where(select):
        return None
    distinct = select.args.get("distinct")
    if distinct is not None and (distinct.args.get("on") or select.args.get("group")):
        return None  # DISTINCT ON; DISTINCT over groups (their outputs may not be keys)
    if not inner_joins_only(select):
        return None
    if any(s.aggregation or s.with_row_id or s.joined or s.residuals for s in members):
        return None
    on_server = {id(e.node) for e in edges} | {
        id(p.node) for s in members for p in s.predicates if p.exact
    }
    local = [c for c in block_conjuncts(select) if id(c) not in on_server]
    if any(c.find_ancestor(exp.Where) is None for c in local):
        return None  # an ON conjunct the server does not evaluate
    inside = {id(w) for c in local for w in c.find_all(exp.Window)}  # its subqueries' own
    windows = [w for w in select.find_all(exp.Window) if id(w) not in inside]
    if any(w.find_ancestor(exp.Select) is not select for w in windows):
        return None
    return local


def _on_keys(local: list[exp.Expr], scope: Scope, group: JoinGroup, state: PlanState) -> bool:
    """Do the client's conjuncts read, of this block, only its GROUP BY keys?

    Such a conjunct holds for a group's rows exactly when it holds for the
    group (their keys are its keys), so the client applies it to the server's
    groups, before its own GROUP BY (a ROLLUP's too): TPC-DS q70's
    ``s_state IN (SELECT s_state ... ranked by profit)``, a window's answer the
    server cannot give, over states grouped with their counties. Not with a
    function whose value may change from row to row (``random()``).
    """
    if not local:
        return True
    if not group.keys:
        return False
    keys = {(s.alias, column) for s, column, _ in group.keys}
    for conjunct in local:
        if any(_volatile(f) for f in conjunct.find_all(exp.Func)):
            return False
        for column in conjunct.find_all(exp.Column):
            ref = state.resolved.get(id(column))
            if ref is None:
                if column.find_ancestor(exp.Select) is scope.expression:
                    return False  # not a base column of this block's: unknown
                continue  # a subquery's own (a derived table's output)
            if ref.scope_id == id(scope) and (ref.alias, ref.column) not in keys:
                return False
    return True


def _volatile(node: exp.Func) -> bool:
    if isinstance(node, exp.Rand):
        return True
    name = node.name.lower() if isinstance(node, exp.Anonymous) else ""
    return name in ("random", "uuid", "gen_random_uuid", "setseed", "nextval")


def _in_from_order(scope: Scope, members: list[Scan]) -> list[Scan]:
    by_alias = {s.alias: s for s in members}
    return [by_alias[alias] for alias in block_sources(scope) if alias in by_alias]


def _join_group(
    select: exp.Select, members: list[Scan], edges: list[JoinEdge], state: PlanState
) -> tuple[JoinGroup, dict[int, str]] | None:
    """The block's keys and aggregates over the join, with each aggregate's SQL type."""
    if _grouping_sets(select) is None:
        return None
    aliases = {id(s): joined_alias(i) for i, s in enumerate(members)}
    by_alias = {s.alias: s for s in members}
    keys: list[tuple[Scan, str, Encryption]] = []
    for key in _grouped(select):
        ref = state.resolved.get(id(key)) if isinstance(key, exp.Column) else None
        scan = by_alias.get(ref.alias) if ref is not None else None
        enc = _key_encryption(scan, ref.column) if scan is not None and ref is not None else None
        if scan is None or enc is None or ref is None:
            return None
        if not any(k[0] is scan and k[1] == ref.column for k in keys):  # GROUP BY a, a
            keys.append((scan, ref.column, enc))
    aggregates = _own_aggregates(select)
    if not aggregates and not keys:
        return None  # a plain join: ``pushdown_joins``
    group = JoinGroup(keys, [])
    types: dict[int, str] = {}
    sums = [a for a in aggregates if isinstance(a, exp.Sum | exp.Avg)]
    for node in aggregates:
        if isinstance(node, exp.Sum | exp.Avg):
            continue
        found = _item(node, members, by_alias, aliases, state)
        if found is None:
            return None
        group.items.append(found[:2])
        types[id(node)] = found[2]
    if (sums or _grouping_sets(select)) and any(_counts_distinct(i) for _, i in group.items):
        return None  # distinct counts per block of ids, or per finest group, do not add up
    if sums:
        sum_types = join_sums(sums, group, members, edges, state)
        if sum_types is None:
            return None
        types.update(sum_types)
    key_columns = {(s.alias, column) for s, column, _ in keys}
    inside = {id(c) for a in aggregates for c in a.find_all(exp.Column)}
    for column in select.find_all(exp.Column):
        if id(column) in inside or column.find_ancestor(exp.Where, exp.Join):
            continue  # aggregated, or in a conjunct the server evaluates
        ref = state.resolved.get(id(column))
        if ref is None and not column.table:
            continue  # an output alias (ORDER BY numwait)
        if ref is None or (ref.alias, ref.column) not in key_columns:
            return None
    return group, types


def _grouped(select: exp.Select) -> list[exp.Expr]:
    """The block's GROUP BY keys (a ROLLUP's or CUBE's columns among them); for
    ``SELECT DISTINCT`` without one, its outputs."""
    group = select.args.get("group")
    if group is not None:
        return [
            key
            for e in group.expressions
            for key in (e.expressions if isinstance(e, exp.Rollup | exp.Cube) else [e])
        ]
    distinct = select.args.get("distinct")
    if distinct is None:
        return []
    return [e.this if isinstance(e, exp.Alias) else e for e in select.expressions]


def _grouping_sets(select: exp.Select) -> bool | None:
    """Does the block group by a ROLLUP or CUBE of columns (None: by a shape not handled)?

    The server then groups by all of their columns, the finest grouping set,
    and the client's GROUP BY ROLLUP / CUBE adds its groups up (``_adopt``):
    TPC-DS q86's and q36's classes ranked within their category, q22's
    quantities by product, brand, class and category.
    """
    group = select.args.get("group")
    if group is None:
        return False
    if any(group.args.get(k) for k in ("rollup", "cube", "grouping_sets", "totals", "all")):
        return None
    if any(isinstance(e, exp.GroupingSets) for e in group.expressions):
        return None
    sets = [e for e in group.expressions if isinstance(e, exp.Rollup | exp.Cube)]
    if any(not isinstance(k, exp.Column) for e in sets for k in e.expressions):
        return None  # ROLLUP((a, b), c): a composite level
    return bool(sets)


def _key_encryption(scan: Scan, column: str) -> Encryption | None:
    """The copy the server groups ``column`` by: its DET, else its OPE where the OPE of
    the column's encoding is one-to-one (numbers, dates: an int64 each, as DET FF1's), so
    equal ciphertexts are equal values, NULL with NULL."""
    enc = scan.table.find(column, DET)
    if enc is not None:
        return enc
    enc = scan.table.find(column, OPE)
    if enc is None or not (enc.sql_type.is_integral and enc.sql_type.has_equality):
        return None
    return enc


def _counts_distinct(item: AggregateItem) -> bool:
    return isinstance(item.server, exp.Count) and isinstance(item.server.this, exp.Distinct)


def _item(
    node: exp.Expr,
    members: list[Scan],
    by_alias: dict[str, Scan],
    aliases: dict[int, str],
    state: PlanState,
) -> tuple[Scan, AggregateItem, str] | None:
    """One aggregate as an item of the scan it reads, and its plaintext SQL type."""
    if isinstance(node.parent, exp.Filter):
        return None
    if isinstance(node.this, exp.Distinct):
        return _count_distinct(node, by_alias, aliases, state)
    if isinstance(node, exp.Count) and isinstance(node.this, exp.Star):
        return (
            members[0],
            AggregateItem(id(node), "COUNT", None, exp.Count(this=exp.Star())),
            "BIGINT",
        )
    if not isinstance(node, exp.Count | exp.Min | exp.Max) or node.expressions:
        return None
    ref = state.resolved.get(id(node.this)) if isinstance(node.this, exp.Column) else None
    scan = by_alias.get(ref.alias) if ref is not None else None
    column = scan.table.column(ref.column) if scan is not None and ref is not None else None
    if scan is None or ref is None or column is None:
        return None
    if isinstance(node, exp.Count):  # NULL stays NULL under DET and OPE: counts agree
        enc = scan.table.find(ref.column, DET) or scan.table.find(ref.column, OPE)
        if enc is None:
            return None
        server: exp.Expr = exp.Count(this=exp.column(enc.name, table=aliases[id(scan)]))
        return scan, AggregateItem(id(node), "COUNT", None, server), "BIGINT"
    enc = scan.table.find(ref.column, OPE)
    if enc is None:
        return None
    kind = "MIN" if isinstance(node, exp.Min) else "MAX"
    server = state.ctx.extreme(kind, exp.column(enc.name, table=aliases[id(scan)]), enc)
    return scan, AggregateItem(id(node), kind, enc, server), column.type


def _adopt(
    fetch: JoinedFetch, select: exp.Select, types: dict[int, str], local: list[exp.Expr]
) -> None:
    """Commit: the scans fetch the groups; the local plan reads them once per group, and
    filters them by the conjuncts left to it."""
    groups = fetch.groups
    assert groups is not None
    kept = {id(c) for c in local}
    drop_conjuncts(select, [c for c in block_conjuncts(select) if id(c) not in kept])
    owners = {item.key: s for s, item in groups.items}
    kinds = {item.key: item.kind for _, item in groups.items}
    rolled_up = bool(_grouping_sets(select))
    for scan in fetch.scans:
        scan.columns = {c for s, c, _ in groups.keys if s is scan}
        scan.joined = fetch
        scan.reduction = None  # the server join does it
    for node in _own_aggregates(select):
        value = _group_value(groups, id(node), owners, kinds, rolled_up)
        if isinstance(node, exp.Avg):  # the sum over the count of the expression's rows
            count_key = next(i.count_key for _, i in groups.items if i.key == id(node))
            assert count_key is not None
            count = _group_value(groups, count_key, owners, kinds, rolled_up)
            value = exp.Div(
                this=exp.cast(value, "DOUBLE"),
                expression=exp.Nullif(this=count, expression=exp.Literal.number(0)),
            )
        node.replace(exp.cast(value, exp.DataType.build(types[id(node)], dialect="duckdb")))
    join_by_position(select, fetch.scans)  # once the SELECT reads what it reads


def _own_aggregates(select: exp.Select) -> list[exp.AggFunc]:
    """The block's aggregates, which the server computes per group.

    Its own: a pushed MIN/MAX subquery in WHERE has one too, and leaves with
    WHERE. Not a window's function (``RANK() OVER (... ORDER BY SUM(x))``,
    ``SUM(SUM(x)) OVER (PARTITION BY k)``): windows run after the grouping, on
    the client over the groups, reading the keys and the server's aggregates
    inside them (TPC-DS q70's states ranked by profit, q12's share of a class,
    q47's average of monthly sums fetched the joined rows).
    """
    return [
        a
        for a in select.find_all(exp.AggFunc)
        if a.find_ancestor(exp.Select) is select
        and not isinstance(a, exp.Grouping)  # the client's GROUP BY answers it
        and not (isinstance(a.parent, exp.Window) and a.parent.this is a)
    ]


def _group_value(
    groups: JoinGroup, key: int, owners: dict[int, Scan], kinds: dict[int, str], rolled_up: bool
) -> exp.Expr:
    """The group's value of an item, read from its scan's local table.

    Each local group is one server group (ANY_VALUE), except under ROLLUP /
    CUBE, whose coarser groups add up the server's finest ones: counts and
    sums by SUM (a count over no rows, the grand total of an empty input,
    is 0), extremes by MIN / MAX::

        SUM(ws_net_paid) ... GROUP BY ROLLUP(i_category, i_class)
          -> SUM(web_sales.__veil_agg_0) ... GROUP BY ROLLUP(i_category, i_class)
    """
    column = exp.column(groups.local_name(key), table=owners[key].alias)
    if not rolled_up:
        return exp.Anonymous(this="ANY_VALUE", expressions=[column])
    kind = kinds[key]
    if kind in ("MIN", "MAX"):
        return exp.Min(this=column) if kind == "MIN" else exp.Max(this=column)
    if kind == "COUNT":
        return exp.Coalesce(this=exp.Sum(this=column), expressions=[exp.Literal.number(0)])
    return exp.Sum(this=column)


def _count_distinct(
    node: exp.Expr, by_alias: dict[str, Scan], aliases: dict[int, str], state: PlanState
) -> tuple[Scan, AggregateItem, str] | None:
    """``COUNT(DISTINCT col)`` of a DET column: distinct ciphertexts are distinct values.

    TPC-H Q16's ``COUNT(DISTINCT ps_suppkey)`` per (brand, type, size) of the joined parts.
    NULLs are not counted on either side (DET keeps NULL).
    """
    distinct = node.this
    if not isinstance(node, exp.Count) or len(distinct.expressions) != 1:
        return None
    column = distinct.expressions[0]
    ref = state.resolved.get(id(column)) if isinstance(column, exp.Column) else None
    scan = by_alias.get(ref.alias) if ref is not None else None
    enc = scan.table.find(ref.column, DET) if scan is not None and ref is not None else None
    if scan is None or enc is None:
        return None
    server = exp.Count(
        this=exp.Distinct(expressions=[exp.column(enc.name, table=aliases[id(scan)])])
    )
    return scan, AggregateItem(id(node), "COUNT", None, server), "BIGINT"
