"""Conjuncts implied by a disjunction, so its parts can still be pushed down.

A WHERE conjunct that is an OR over several tables cannot go to any one scan,
but it implies predicates that can (TPC-H Q19, Q7)::

    (p_partkey = l_partkey AND p_brand = 'Brand#12' AND l_quantity <= 11)
 OR (p_partkey = l_partkey AND p_brand = 'Brand#23' AND l_quantity >= 10)
      implies  p_partkey = l_partkey                          (in every branch)
               p_brand = 'Brand#12' OR p_brand = 'Brand#23'   (part's parts)
               l_quantity <= 11 OR l_quantity >= 10           (lineitem's parts)

Every row satisfying the OR satisfies each implied conjunct, so they are
valid server filters; the OR itself still runs on the client.
"""

from __future__ import annotations

from sqlglot import exp

from veil.sql.columns import BaseColumn
from veil.sql.text import text

Owner = tuple[int, str]


def implied_conjuncts(predicate: exp.Expr, resolved: dict[int, BaseColumn]) -> list[exp.Expr]:
    """Copies of the implied conjuncts, their columns registered in ``resolved``."""
    branches = _flatten(predicate, exp.Or)
    if len(branches) < 2:
        return []
    parts = [_flatten(branch, exp.And) for branch in branches]
    implied: list[exp.Expr] = []
    common = set.intersection(*({text(p, None) for p in branch} for branch in parts))
    implied += [_copy(p, resolved) for p in parts[0] if text(p, None) in common]
    by_owner = [_by_owner(branch, resolved) for branch in parts]
    for owner in set.intersection(*(set(groups) for groups in by_owner)):
        if all(len(g[owner]) == len(p) for g, p in zip(by_owner, parts, strict=True)):
            continue  # an OR over one table's columns implies only itself, already pushed
        ands = [
            exp.and_(*[_copy(p, resolved) for p in groups[owner]], copy=False)
            for groups in by_owner
        ]
        implied.append(exp.or_(*[exp.paren(a, copy=False) for a in ands], copy=False))
    return implied


def _flatten(node: exp.Expr, kind: type[exp.Expr]) -> list[exp.Expr]:
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, kind):
        return _flatten(node.this, kind) + _flatten(node.expression, kind)
    return [node]


def _by_owner(
    conjuncts: list[exp.Expr], resolved: dict[int, BaseColumn]
) -> dict[Owner, list[exp.Expr]]:
    groups: dict[Owner, list[exp.Expr]] = {}
    for conjunct in conjuncts:
        if conjunct.find(exp.Subquery, exp.Select, exp.AggFunc, exp.Window):
            continue
        owners = {_owner(c, resolved) for c in conjunct.find_all(exp.Column)}
        if len(owners) == 1 and None not in owners:
            groups.setdefault(owners.pop(), []).append(conjunct)  # type: ignore[arg-type]
    return groups


def _owner(column: exp.Column, resolved: dict[int, BaseColumn]) -> Owner | None:
    ref = resolved.get(id(column))
    return (ref.scope_id, ref.alias) if ref else None


def _copy(node: exp.Expr, resolved: dict[int, BaseColumn]) -> exp.Expr:
    """A copy whose column nodes resolve like the original's."""
    copied = node.copy()
    for original, twin in zip(node.walk(), copied.walk(), strict=True):
        if id(original) in resolved:
            resolved[id(twin)] = resolved[id(original)]
    return copied
