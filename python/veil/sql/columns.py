"""Which base-table column each column reference of a qualified query reads.

Works scope by scope (sqlglot's scope analysis), so correlated references to an
outer query resolve to the outer table and CTE or derived-table columns are
recognised as not being base columns.
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.optimizer.scope import Scope

from veil.sql.functions import is_volatile
from veil.sql.text import text


@dataclass(frozen=True)
class BaseColumn:
    table: str  # plaintext table name
    column: str
    alias: str  # the table reference's alias in its scope
    scope_id: int  # id() of the scope that owns the table reference


def base_columns(scopes: list[Scope], tables: set[str]) -> dict[int, BaseColumn]:
    """``{id(column node): BaseColumn}`` for every reference to a base table column.

    ``scopes`` is ``traverse_scope(tree)``; callers keep that list, since scope
    ids are only stable within one traversal.
    """
    resolved: dict[int, BaseColumn] = {}
    for scope in scopes:
        for column in scope.columns:
            found = _resolve(column, scope, tables)
            if found is not None:
                resolved[id(column)] = found
    return resolved


def block_sources(scope: Scope) -> dict[str, exp.Table | Scope]:
    """The sources ``scope``'s own FROM and JOINs read, in their order.

    sqlglot's ``Scope.sources`` also lists every CTE defined before the block:
    inside a query's second CTE, the first is a source of each block even where
    none reads it. Counted as sources, it made every block of a later CTE look
    like a join with a CTE, so none was aggregated or run on the server (TPC-DS
    q83's three CTEs: only the first one's subqueries went to the server).
    """
    return {
        name: source
        for name, source in scope.sources.items()
        if name not in scope.cte_sources or name in scope.selected_sources
    }


def _resolve(column: exp.Column, scope: Scope, tables: set[str]) -> BaseColumn | None:
    current: Scope | None = scope
    while current is not None:
        source = current.sources.get(column.table)
        if source is not None:
            if isinstance(source, exp.Table) and source.name.lower() in tables:
                return BaseColumn(
                    source.name.lower(), column.name.lower(), column.table, id(current)
                )
            return None
        current = current.parent
    return None


def is_constant(node: exp.Expr) -> bool:
    """No column, subquery, aggregate, window or volatile call: the client can evaluate it once."""
    forbidden = (exp.Column, exp.Subquery, exp.Select, exp.AggFunc, exp.Window, exp.Star)
    return not any(isinstance(n, forbidden) or is_volatile(n) for n in node.walk())


def row_expression(node: exp.Expr, resolved: dict[int, BaseColumn]) -> tuple[str, str] | None:
    """``(table, SQL)`` of an expression over one row of one base table, else None.

    The SQL has unqualified column names, so the designer and the planner
    spell the same expression the same way.
    """
    if isinstance(node, exp.Distinct) or node.find(
        exp.Subquery, exp.Select, exp.AggFunc, exp.Window
    ):
        return None
    columns = list(node.find_all(exp.Column))
    owners = {(r.table, r.scope_id, r.alias) for c in columns if (r := resolved.get(id(c)))}
    if len(owners) != 1 or any(id(c) not in resolved for c in columns):
        return None
    copied = node.copy()
    for column in copied.find_all(exp.Column):
        column.set("table", None)
    return next(iter(owners))[0], text(copied)


def like_source(node: exp.Expr, resolved: dict[int, BaseColumn]) -> tuple[str, str] | None:
    """``(table, SQL)`` of a ``LIKE`` / ``ILIKE`` over one row, always in its positive form.

    ``o_comment NOT LIKE '%special%requests%'`` gives the source of
    ``o_comment LIKE '%special%requests%'``: one precomputed boolean serves
    both. Only string-literal patterns without ESCAPE (whose SQL the node
    alone does not carry).
    """
    if not isinstance(node, exp.Like | exp.ILike) or isinstance(node.parent, exp.Escape):
        return None
    pattern = node.expression
    if not (isinstance(pattern, exp.Literal) and pattern.is_string):
        return None
    negated = node.args.get("negate")
    try:
        node.set("negate", None)
        return row_expression(node, resolved)
    finally:
        node.set("negate", negated)


# an order comparison's canonical form: ``b > a`` is stored as ``a < b``
_ORDER_FORMS: dict[type[exp.Expr], tuple[type[exp.Expr], bool]] = {
    exp.LT: (exp.LT, False),
    exp.LTE: (exp.LTE, False),
    exp.GT: (exp.LT, True),
    exp.GTE: (exp.LTE, True),
}


def order_source(node: exp.Expr, resolved: dict[int, BaseColumn]) -> tuple[str, str] | None:
    """``(table, SQL)`` of a comparison of two columns of one row, in canonical form.

    ``l_receiptdate > l_commitdate`` and ``l_commitdate < l_receiptdate`` give
    the same source, ``l_commitdate < l_receiptdate``: one precomputed boolean
    serves both (TPC-H Q4, Q12 and Q21). Its value is what the server learns
    from the two columns' OPE ciphertexts under one key, row by row.
    """
    form = _ORDER_FORMS.get(type(node))
    left, right = node.args.get("this"), node.args.get("expression")
    if form is None or not isinstance(left, exp.Column) or not isinstance(right, exp.Column):
        return None
    found = row_expression(node, resolved)
    if found is None or left.name.lower() == right.name.lower():
        return None
    kind, flipped = form
    first, second = (right, left) if flipped else (left, right)
    canonical = kind(
        this=exp.column(first.name.lower()), expression=exp.column(second.name.lower())
    )
    return found[0], canonical.sql(dialect="duckdb")


def columns_read(source: str) -> list[str]:
    """The columns a design source (a column or per-row expression) reads, sorted."""
    tree = sqlglot.parse_one(source, read="duckdb")
    return sorted({c.name.lower() for c in tree.find_all(exp.Column)})
