"""The outputs of derived tables and CTEs, and the column references that read them.

A CTE's or a derived table's output column is read by the blocks that name
it as a source (``ctr1.ctr_customer_sk`` of TPC-DS q01's
``customer_total_return``), under each alias they give it. ``compare_ciphertexts``
follows a key through such outputs: an output is named by the SELECT that
produces it and its name, whatever the alias that reads it.
"""

from __future__ import annotations

from sqlglot import exp
from sqlglot.optimizer.scope import Scope

Output = tuple[int, str]  # (id of the derived table's or CTE's SELECT, output name)


def derived_selects(scopes: list[Scope], root: exp.Expr) -> dict[int, exp.Select]:
    """Every SELECT some block reads as a derived table or a CTE, still in ``root``'s tree,
    whose output names are distinct (a reference names one output); a set operation's
    branches are not outputs of their own, nor is a SELECT with a star."""
    found: dict[int, exp.Select] = {}
    for scope in scopes:
        for source in scope.sources.values():
            select = source.expression if isinstance(source, Scope) else None
            if isinstance(select, exp.Select) and _plain_outputs(select) and select.root() is root:
                found[id(select)] = select
    return found


def output_references(scopes: list[Scope], selects: dict[int, exp.Select]) -> dict[int, Output]:
    """``{id(column node): output}`` for each qualified reference to an output of ``selects``,
    from its own block or a block it is correlated with."""
    found: dict[int, Output] = {}
    for scope in scopes:
        for column in scope.columns:
            source = _source_of(column, scope)
            select = source.expression if isinstance(source, Scope) else None
            if select is not None and id(select) in selects:
                found[id(column)] = (id(select), column.name.lower())
    return found


def projected_output(node: exp.Column, selects: dict[int, exp.Select]) -> Output | None:
    """The output ``node`` is, as a bare (possibly aliased) projection of one of ``selects``."""
    projection: exp.Expr = node.parent if isinstance(node.parent, exp.Alias) else node
    select = projection.parent
    if not isinstance(select, exp.Select) or id(select) not in selects:
        return None
    if not any(p is projection for p in select.expressions):
        return None
    return id(select), projection.alias_or_name.lower()


def _plain_outputs(select: exp.Select) -> bool:
    if any(isinstance(p, exp.Star) or isinstance(p.this, exp.Star) for p in select.expressions):
        return False  # * or t.*
    names = [p.alias_or_name.lower() for p in select.expressions]
    return all(names) and len(set(names)) == len(names)


def _source_of(column: exp.Column, scope: Scope) -> exp.Table | Scope | None:
    if not column.table:
        return None
    current: Scope | None = scope
    while current is not None:
        source = current.sources.get(column.table)
        if source is not None:
            return source
        current = current.parent
    return None
