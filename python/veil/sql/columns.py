"""Which base-table column each column reference of a qualified query reads.

Works scope by scope (sqlglot's scope analysis), so correlated references to an
outer query resolve to the outer table and CTE or derived-table columns are
recognised as not being base columns.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp
from sqlglot.optimizer.scope import Scope


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
    """No column, subquery, aggregate or window: the client can evaluate it alone."""
    forbidden = (exp.Column, exp.Subquery, exp.Select, exp.AggFunc, exp.Window, exp.Star, exp.Rand)
    if isinstance(node, forbidden):
        return False
    return not any(isinstance(n, forbidden) for n in node.find_all(*forbidden))


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
    return next(iter(owners))[0], copied.sql(dialect="duckdb")
