"""Subqueries the server can evaluate whole, rewritten over opaque names.

A conjunct ``[NOT] EXISTS (subquery)``, ``col [NOT] IN (subquery)``,
``col <op> (SELECT MIN|MAX(c) ...)`` or ``col <op> (SELECT [DISTINCT] c ...)`` whose subquery reads base tables only
(inner joins), and whose every conjunct is exact on the server, becomes ONE
server predicate of the outer scan it is correlated with (TPC-H Q21, Q4)::

    EXISTS (SELECT * FROM lineitem l2 WHERE l2.l_orderkey = l1.l_orderkey
                                        AND l2.l_suppkey <> l1.l_suppkey)
      ->  EXISTS (SELECT 1 FROM t_li AS s1 WHERE s1.c_ok = __veil_outer.c_ok
                                              AND s1.c_sk <> __veil_outer.c_sk)

``OUTER`` stands for the outer scan's table until the statement that filters
that scan is built (``veil.sql.remote.qualified``). What each conjunct may be:

- a predicate ``pushdown_predicates`` pushed exactly to one of the
  subquery's scans (DET, OPE, precomputed LIKE, IS NULL ...);
- a comparison of two columns, of the subquery's scans or of the outer scan:
  ``=`` / ``<>`` on DET columns under one key scope, ``<``, ``<=``, ``>``,
  ``>=`` on OPE columns under one key scope (equal ciphertexts are equal
  values in both, and OPE keeps order);
- another such subquery, correlated with the scans of this one or the outer scan.

Exact, NULLs included: DET and OPE map NULL to NULL and distinct values to
distinct ciphertexts, so ``IN``/``NOT IN``/``EXISTS`` and comparisons give the
plaintext's three-valued answers; MIN/MAX of OPE ciphertexts are the
ciphertexts of the MIN/MAX. An uncorrelated ``col [NOT] IN (subquery)`` is
left to the client's bind filters (``_uncorrelated_in``), an IN only until
its scan turns out to be fetched by a server join
(``pushdown_joined_subqueries``). A subquery referring
to any scope further out, to a CTE or derived table, or with GROUP BY, HAVING,
LIMIT, windows or outer joins is left as it was (the client runs it). What
the server learns: which
outer rows satisfy the predicate, and the equalities and order of the key
columns it compares, as the same joins pushed as reductions would show.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from sqlglot import exp
from sqlglot.optimizer.scope import Scope

from veil.design.model import DET, OPE, Encryption, TableDesign
from veil.sql.columns import BaseColumn, block_sources
from veil.sql.conjuncts import block_conjuncts, inner_joins_only
from veil.sql.join_graph import equal_columns
from veil.sql.plan import Scan, ServerPredicate
from veil.sql.remote import OUTER, qualified
from veil.sql.state import PlanState, PushedSubquery, ScanKey

_COMPARISONS: dict[type[exp.Expr], str] = {
    exp.EQ: DET,
    exp.NEQ: DET,
    exp.GT: OPE,
    exp.GTE: OPE,
    exp.LT: OPE,
    exp.LTE: OPE,
}
_FLIPPED: dict[type[exp.Expr], type[exp.Expr]] = {
    exp.EQ: exp.EQ,
    exp.NEQ: exp.NEQ,
    exp.GT: exp.LT,
    exp.GTE: exp.LTE,
    exp.LT: exp.GT,
    exp.LTE: exp.GTE,
}


@dataclass
class _Translation:
    """One conjunct's rewrite in progress (aliases and scans of the subqueries inside it)."""

    state: PlanState
    outer: Scope  # the scope holding the conjunct
    by_select: dict[int, Scope]
    numbers: Iterator[int]  # the subqueries' aliases, unique in every statement
    aliases: dict[ScanKey, str] = field(default_factory=dict)
    schemes: set[str] = field(default_factory=set)
    scopes: list[Scope] = field(default_factory=list)
    outer_scans: dict[int, Scan] = field(default_factory=dict)
    outer_uses: int = 0  # references to the outer scope's columns
    depth: int = 0  # subquery blocks open around the conjunct being rewritten
    depths: dict[ScanKey, int] = field(default_factory=dict)  # each alias's block depth


def pushed_subquery(
    conjunct: exp.Expr, scope: Scope, state: PlanState, numbers: Iterator[int]
) -> PushedSubquery | None:
    """``conjunct`` (of ``scope``'s WHERE) as a server predicate of one of its scans, if exact.

    ``numbers`` names the subqueries' tables (``s1``, ``s2`` ...): one counter
    per plan keeps the names apart when a pushed subquery holds another.
    """
    if not conjunct.find(exp.Select):
        return None
    by_select = {id(s.expression): s for s in state.scopes}
    work = _Translation(state, scope, by_select, numbers)
    server = _subquery_test(work, conjunct)
    if server is None or len(work.outer_scans) > 1:
        return None
    joined_only = _uncorrelated_in(conjunct, work) and _left_to_client(conjunct, work)
    if joined_only and _negated(conjunct):
        return None
    # uncorrelated: true or false for every row, so any scan of the scope may test it
    mine = (s for (scope_id, _), s in state.scans.items() if scope_id == id(scope))
    scan = next(iter(work.outer_scans.values()), None) or next(mine, None)
    if scan is None:
        return None
    schemes = sorted(work.schemes)
    predicate = ServerPredicate(conjunct.sql("duckdb"), server, schemes, conjunct, True)
    return PushedSubquery(scan, predicate, work.scopes, joined_only)


def forget_absorbed(state: PlanState, absorbed: set[int]) -> None:
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
    state.joined_subqueries = [
        (scope, pushed)
        for scope, pushed in state.joined_subqueries
        if id(scope) not in absorbed and id(pushed.scan) not in gone
    ]


def _tests_absorbed(node: exp.In, state: PlanState, absorbed: set[int]) -> bool:
    """Whether an IN-subquery conjunct's subquery is one the server now runs."""
    query = node.args.get("query")
    inner = query.this if isinstance(query, exp.Subquery) else None
    return any(id(s) in absorbed and s.expression is inner for s in state.scopes)


def _uncorrelated_in(conjunct: exp.Expr, work: _Translation) -> bool:
    """``col [NOT] IN (subquery)`` whose subquery reads nothing of the outer scope.

    An IN is left to the client's bind filters (``plan_bind_filters``): their keys
    also filter the scans joined to ``col`` (TPC-H Q20's lineitem through its index
    on l_partkey). A NOT IN gives no keys; it is left to the client only where the
    server runs it as a subplan per row (PostgreSQL: Q16 took 1.8 times as long;
    ``Backend.hashes_not_in``). The only outer reference is then ``col`` itself.
    Where the IN's scan is fetched by a server join, the join filters its partners
    as the keys would, and the server runs the IN whole inside that statement
    (``veil.sql.passes.pushdown_joined_subqueries``).
    """
    while isinstance(conjunct, exp.Not | exp.Paren):
        conjunct = conjunct.this
    return isinstance(conjunct, exp.In) and work.outer_uses <= 1


def _left_to_client(conjunct: exp.Expr, work: _Translation) -> bool:
    """Whether an uncorrelated ``[NOT] IN`` stays with the client (see ``_uncorrelated_in``)."""
    if _negated(conjunct):
        return not work.state.ctx.hashes_not_in()
    return not _inside_in_chain(work)


def _inside_in_chain(work: _Translation) -> bool:
    """The conjunct filters the one scan of a block that is itself ``col IN (block)``.

    A bind filter's keys pay for their round trip by filtering the scans joined
    to the one they filter; here there are none, and the block's rows are only
    the keys of the level out. So the server runs this level inside that
    block's statement: TPC-DS q83's ``d_date IN (SELECT d_date ... WHERE
    d_week_seq IN (SELECT d_week_seq ... WHERE d_date IN (...)))`` fetched each
    level's keys in turn, a round trip per level; the two inner levels are now
    one statement, whose keys filter the outer block's joined scans as before.
    Not where the block holds another subquery: the keys would also filter the
    scans correlated with the one they filter (TPC-H Q20's lineitem, through
    partsupp's keys of the parts named 'forest%').
    """
    scope = work.outer
    parent = scope.expression.parent
    return (
        scope.is_subquery
        and isinstance(parent, exp.Subquery)
        and isinstance(parent.parent, exp.In)
        and parent.parent.args.get("query") is parent
        and len(block_sources(scope)) == 1
        and len(work.scopes) == _subquery_blocks(scope.expression)
    )


def _subquery_blocks(select: exp.Expr) -> int:
    """The SELECT blocks nested in ``select``, at any depth."""
    return sum(1 for node in select.find_all(exp.Select) if node is not select)


def _negated(conjunct: exp.Expr) -> bool:
    """Whether ``conjunct`` is ``NOT (...)``, parentheses aside."""
    while isinstance(conjunct, exp.Paren):
        conjunct = conjunct.this
    return isinstance(conjunct, exp.Not)


def _subquery_test(work: _Translation, node: exp.Expr) -> exp.Expr | None:
    """``node`` if it is [NOT] EXISTS / [NOT] IN / comparison with a MIN/MAX or scalar subquery."""
    if isinstance(node, exp.Not):
        inner = _subquery_test(work, node.this)
        return exp.Not(this=inner) if inner is not None else None
    if isinstance(node, exp.Paren):
        return _subquery_test(work, node.this)
    if isinstance(node, exp.Exists) and isinstance(node.this, exp.Select):
        select = _block(work, node.this, lambda _: exp.Literal.number(1))
        return exp.Exists(this=select) if select is not None else None
    if isinstance(node, exp.In) and isinstance(node.args.get("query"), exp.Subquery):
        return _in_subquery(work, node)
    if type(node) in _COMPARISONS:
        return _compare_with_extreme(work, node)
    return None


def _in_subquery(work: _Translation, node: exp.In) -> exp.Expr | None:
    """``col IN (SELECT c ...)``: both DET under one key scope."""
    subquery = node.args["query"].this
    if node.expressions or not isinstance(subquery, exp.Select):
        return None
    items = subquery.expressions
    scheme = _equal_scheme(work, node.this, items[0].unalias()) if len(items) == 1 else DET
    outer = _column(work, node.this, scheme)
    if outer is None:
        return None
    enc = outer[1]

    def projection(scope: Scope) -> exp.Expr | None:
        if len(items) != 1:
            return None
        found = _column(work, items[0].unalias(), scheme, inside=scope)
        return found[0] if found is not None and found[1].key_scope == enc.key_scope else None

    select = _block(work, subquery, projection)
    if select is None:
        return None
    return exp.In(this=outer[0], query=exp.Subquery(this=select))


def _compare_with_extreme(work: _Translation, node: exp.Expr) -> exp.Expr | None:
    """``col <op> (SELECT MIN|MAX(c) FROM ...)``: both OPE under one key scope."""
    kind = type(node)
    column, subquery = node.this, node.expression
    if isinstance(column, exp.Subquery):
        column, subquery, kind = subquery, column, _FLIPPED[kind]
    if not isinstance(subquery, exp.Subquery) or not isinstance(subquery.this, exp.Select):
        return None
    select = subquery.this
    items = select.expressions
    if len(items) == 1 and isinstance(_unwrapped(items[0]), exp.Column):
        return _compare_with_scalar(work, kind, column, select)
    outer = _column(work, column, OPE)
    if outer is None or len(items) != 1 or not isinstance(items[0].unalias(), exp.Min | exp.Max):
        return None
    extreme = items[0].unalias()
    if extreme.expressions or not isinstance(extreme.this, exp.Column):  # MIN(a, b): other kind
        return None
    enc = outer[1]

    def projection(scope: Scope) -> exp.Expr | None:
        found = _column(work, extreme.this, OPE, inside=scope)
        if found is None or found[1].key_scope != enc.key_scope:
            return None
        kind = "MIN" if isinstance(extreme, exp.Min) else "MAX"
        return work.state.ctx.extreme(kind, found[0], found[1])

    server = _block(work, select, projection, aggregate=True)
    if server is None:
        return None
    return kind(this=outer[0], expression=exp.Subquery(this=server))


def _compare_with_scalar(
    work: _Translation, kind: type[exp.Expr], column: exp.Expr, select: exp.Select
) -> exp.Expr | None:
    """``col <op> (SELECT [DISTINCT] c FROM ...)``: a scalar subquery of one column.

    Both sides under one key scope: DET for ``=`` / ``<>``, OPE for order. The
    server then meets the subquery's rows as plaintext DuckDB does: none gives
    NULL (no row passes), more than one is the same error, and DISTINCT over
    DET or OPE ciphertexts keeps exactly the distinct values (TPC-DS q06's
    ``d_month_seq = (SELECT DISTINCT d_month_seq ... WHERE d_year = ? AND d_moy = ?)``,
    which otherwise left the date filter, and the fact rows it keeps, to the client).
    """
    item = _unwrapped(select.expressions[0])
    scheme = _COMPARISONS[kind]
    if scheme == DET:
        scheme = _equal_scheme(work, column, item)
    outer = _column(work, column, scheme)
    if outer is None:
        return None
    enc = outer[1]

    def projection(scope: Scope) -> exp.Expr | None:
        found = _column(work, item, scheme, inside=scope)
        return found[0] if found is not None and found[1].key_scope == enc.key_scope else None

    server = _block(work, select, projection)
    if server is None:
        return None
    if select.args.get("distinct") is not None:
        server.set("distinct", exp.Distinct())
    return kind(this=outer[0], expression=exp.Subquery(this=server))


def _unwrapped(item: exp.Expr) -> exp.Expr:
    """A select item without its alias and parentheses (``SELECT DISTINCT (c) AS c``)."""
    item = item.unalias()
    while isinstance(item, exp.Paren):
        item = item.this
    return item


def _block(
    work: _Translation,
    select: exp.Select,
    projection: Callable[[Scope], exp.Expr | None],
    *,
    aggregate: bool = False,
) -> exp.Select | None:
    """The server form of a subquery block, or None if any part of it is not exact."""
    scope = work.by_select.get(id(select))
    if scope is None or not _plain_block(select, aggregate):
        return None
    state = work.state
    tables: list[exp.Expr] = []
    for alias, source in block_sources(scope).items():
        scan = state.scans.get((id(scope), alias))
        if scan is None or not isinstance(source, exp.Table):
            return None  # a CTE or derived table: the client runs it
        name = f"s{next(work.numbers)}"
        work.aliases[(id(scope), alias)] = name
        work.depths[(id(scope), alias)] = work.depth + 1
        tables.append(exp.alias_(exp.to_table(scan.table.server_name), name, table=True))
    work.scopes.append(scope)
    outputs = projection(scope)
    if outputs is None or not tables:
        return None
    server = exp.select(outputs).from_(tables[0])
    for table in tables[1:]:
        server = server.join(table)
    exact = _exact_predicates(state, scope)
    work.depth += 1
    try:
        for conjunct in block_conjuncts(select):
            condition = _condition(work, conjunct, exact)
            if condition is None:
                return None
            server = server.where(condition, copy=False)
    finally:
        work.depth -= 1
    return server


def _plain_block(select: exp.Select, aggregate: bool) -> bool:
    """Inner joins only; no grouping, limits, windows or aggregates (but the one MIN/MAX)."""
    if any(select.args.get(k) for k in ("group", "having", "limit", "offset", "qualify", "with_")):
        return False
    if select.args.get("distinct") is not None and select.args["distinct"].args.get("on"):
        return False
    if not inner_joins_only(select) or select.find(exp.Window):
        return False
    aggregates = [a for a in select.find_all(exp.AggFunc) if _own(a, select)]
    return len(aggregates) == (1 if aggregate else 0)


def _own(node: exp.Expr, select: exp.Select) -> bool:
    """Whether ``node`` belongs to ``select`` itself, not to a subquery inside it."""
    return node.find_ancestor(exp.Select) is select


def _exact_predicates(state: PlanState, scope: Scope) -> dict[int, tuple[Scan, ServerPredicate]]:
    """The exact server predicates of the scope's scans, by their conjunct."""
    found = {}
    for (scope_id, _), scan in state.scans.items():
        if scope_id == id(scope):
            for predicate in scan.predicates:
                if predicate.exact and predicate.node is not None:
                    found[id(predicate.node)] = (scan, predicate)
    return found


def _condition(
    work: _Translation, conjunct: exp.Expr, exact: dict[int, tuple[Scan, ServerPredicate]]
) -> exp.Expr | None:
    pushed = exact.get(id(conjunct))
    if pushed is not None:
        scan, predicate = pushed
        work.schemes.update(predicate.schemes)
        alias = next(a for k, a in work.aliases.items() if work.state.scans.get(k) is scan)
        return qualified(predicate.server, scan, alias)
    if conjunct.find(exp.Select):
        return _subquery_test(work, conjunct)
    scheme = _COMPARISONS.get(type(conjunct))
    if scheme is None:
        return None
    if scheme == DET:
        scheme = _equal_scheme(work, conjunct.this, conjunct.expression)
    left = _column(work, conjunct.this, scheme)
    right = _column(work, conjunct.expression, scheme)
    if left is None or right is None or left[1].key_scope != right[1].key_scope:
        return None
    return type(conjunct)(this=left[0], expression=right[0])


def _equal_scheme(work: _Translation, left: exp.Expr, right: exp.Expr) -> str:
    """DET, or JOIN where only the columns' JOIN-ADJ onions share a key (looked up, not used)."""
    found = [_table_column(work, node) for node in (left, right)]
    if found[0] is None or found[1] is None:
        return DET
    pair = equal_columns(*found[0], *found[1])
    return pair[0].scheme if pair is not None else DET


def _table_column(work: _Translation, node: exp.Expr) -> tuple[TableDesign, str] | None:
    ref = work.state.resolved.get(id(node)) if isinstance(node, exp.Column) else None
    scan = work.state.scans.get((ref.scope_id, ref.alias)) if ref is not None else None
    return (scan.table, ref.column) if scan is not None and ref is not None else None


def _column(
    work: _Translation, node: exp.Expr, scheme: str, *, inside: Scope | None = None
) -> tuple[exp.Column, Encryption] | None:
    """A column reference as its ``scheme`` encryption on the server, qualified.

    Columns of the subqueries' scans take their aliases; the outer scope's
    take ``OUTER`` (and their scan is recorded); anything else is refused.
    ``inside``: the reference must belong to that scope.
    """
    ref: BaseColumn | None = (
        work.state.resolved.get(id(node)) if isinstance(node, exp.Column) else None
    )
    if ref is None or (inside is not None and ref.scope_id != id(inside)):
        return None
    key = (ref.scope_id, ref.alias)
    scan = work.state.scans.get(key)
    enc = scan.table.find(ref.column, scheme) if scan is not None else None
    if scan is None or enc is None:
        return None
    # a reference more than one block out, which Spark cannot resolve
    out = work.depth - work.depths.get(key, 0)
    if out > 1 and not work.state.ctx.correlates_deeply():
        return None
    work.schemes.add(scheme)
    if key in work.aliases:
        return exp.column(enc.name, table=work.aliases[key]), enc
    if ref.scope_id != id(work.outer):
        return None
    work.outer_scans[id(scan)] = scan
    work.outer_uses += 1
    return exp.column(enc.name, table=OUTER), enc
