"""Conjuncts of the local plan: where they sit, removing them, the columns left.

Shared by the passes that take work off the client (``drop_pushed_filters``,
``pushdown_joins``, ``pushdown_aggregates``).
"""

from __future__ import annotations

from sqlglot import exp

from veil.sql.columns import BaseColumn


def drop_conjuncts(select: exp.Expr, dropped: list[exp.Expr]) -> None:
    """Remove ``dropped`` conjuncts from the WHERE and ON clauses of ``select``."""
    gone = {id(node) for node in dropped}
    clauses = [select.args.get("where")] + [
        j.args.get("on") for j in select.args.get("joins") or []
    ]
    for clause in clauses:
        if clause is None:
            continue
        condition = clause.this if isinstance(clause, exp.Where) else clause
        kept = [c for c in _conjunct_list(condition) if id(c) not in gone]
        rebuilt = exp.and_(*kept, copy=False) if kept else exp.true()
        if isinstance(clause, exp.Where):
            select.set("where", exp.Where(this=rebuilt) if kept else None)
        else:
            clause.replace(rebuilt)


def _conjunct_list(condition: exp.Expr) -> list[exp.Expr]:
    if isinstance(condition, exp.And):
        return _conjunct_list(condition.this) + _conjunct_list(condition.expression)
    if isinstance(condition, exp.Paren) and isinstance(condition.this, exp.And):
        return _conjunct_list(condition.this)
    return [condition]


def is_part_of(node: exp.Expr | None, select: exp.Expr) -> bool:
    """Whether ``node`` is part of ``select`` (implied conjuncts are copies, not)."""
    while node is not None:
        if node is select:
            return True
        node = node.parent
    return False


def columns_outside(
    tree: exp.Expr, dropped: list[exp.Expr | None], resolved: dict[int, BaseColumn]
) -> set[tuple[int, str, str]]:
    """``(scope id, alias, column)`` of base columns the local plan reads outside ``dropped``."""
    skipped = {id(c) for node in dropped if node is not None for c in node.find_all(exp.Column)}
    used = set()
    for column in tree.find_all(exp.Column):
        ref = resolved.get(id(column))
        if ref is not None and id(column) not in skipped:
            used.add((ref.scope_id, ref.alias, ref.column))
    return used
