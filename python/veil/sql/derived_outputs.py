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


def derived_selects(scopes: list[Scope], root: exp.Expr) -> dict[int, exp.Query]:
    """Every query some block reads as a derived table or a CTE, still in ``root``'s tree:
    a SELECT, or a UNION [ALL] of SELECTs (TPC-DS q04's year totals of three channels),
    whose output names are distinct (a reference names one output) and with no star."""
    found: dict[int, exp.Query] = {}
    for scope in scopes:
        for source in scope.sources.values():
            body = source.expression if isinstance(source, Scope) else None
            if not isinstance(body, exp.Query) or body.root() is not root or _renamed(body):
                continue
            selects = branches(body)
            if selects and all(_plain_outputs(s, len(body.selects)) for s in selects):
                found[id(body)] = body
    return found


def branches(body: exp.Expr) -> list[exp.Select]:
    """The SELECTs whose rows ``body`` returns: itself, or a UNION's (empty: neither)."""
    if isinstance(body, exp.Select):
        return [body]
    if isinstance(body, exp.Union) and not body.args.get("by_name"):  # by name: not by position
        left, right = branches(body.this), branches(body.expression)
        return left + right if left and right else []
    return []


def output_names(body: exp.Query) -> list[str]:
    """A derived table's output names (a UNION's: its first SELECT's)."""
    return [p.alias_or_name.lower() for p in branches(body)[0].expressions]


def output_references(scopes: list[Scope], bodies: dict[int, exp.Query]) -> dict[int, Output]:
    """``{id(column node): output}`` for each qualified reference to an output of ``bodies``,
    from its own block or a block it is correlated with."""
    found: dict[int, Output] = {}
    for scope in scopes:
        for column in scope.columns:
            source = _source_of(column, scope)
            body = source.expression if isinstance(source, Scope) else None
            if body is not None and id(body) in bodies:
                found[id(column)] = (id(body), column.name.lower())
    return found


def projected_output(node: exp.Column, bodies: dict[int, exp.Query]) -> Output | None:
    """The output ``node`` is, as a bare (possibly aliased) projection of a SELECT of
    ``bodies``, or of one of a UNION's SELECTs (by position)."""
    projection: exp.Expr = node.parent if isinstance(node.parent, exp.Alias) else node
    select = projection.parent
    if not isinstance(select, exp.Select):
        return None
    position = next((i for i, p in enumerate(select.expressions) if p is projection), None)
    body: exp.Expr = select
    while isinstance(body.parent, exp.Union):
        body = body.parent
    if position is None or id(body) not in bodies:
        return None
    assert isinstance(body, exp.Query)
    return id(body), output_names(body)[position]


def _renamed(body: exp.Query) -> bool:
    """Are the outputs named otherwise than its SELECT names them (``t(a, b) AS (...)``,
    ``(...) AS t(a, b)``), or read by the query itself (WITH RECURSIVE)?"""
    holder = body.parent
    alias = holder.args.get("alias") if isinstance(holder, exp.CTE | exp.Subquery) else None
    if isinstance(alias, exp.TableAlias) and alias.columns:
        return True
    return any(w.args.get("recursive") for w in body.root().find_all(exp.With))


def _plain_outputs(select: exp.Select, count: int) -> bool:
    if len(select.expressions) != count:
        return False
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
