"""Conjuncts of the local plan: where they sit, removing them, the columns left.

Shared by the passes that take work off the client (``drop_pushed_filters``,
``pushdown_joins``, ``pushdown_aggregates``).
"""

from __future__ import annotations

from sqlglot import exp

from veil.sql.columns import BaseColumn
from veil.sql.plan import Scan


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
        kept = [c for c in conjunct_list(condition) if id(c) not in gone]
        rebuilt = exp.and_(*kept, copy=False) if kept else exp.true()
        if isinstance(clause, exp.Where):
            select.set("where", exp.Where(this=rebuilt) if kept else None)
        else:
            clause.replace(rebuilt)


def block_conjuncts(select: exp.Select) -> list[exp.Expr]:
    """The conjuncts of ``select``'s WHERE and of its joins' ON clauses."""
    clauses = [select.args.get("where")] + [
        j.args.get("on") for j in select.args.get("joins") or []
    ]
    found: list[exp.Expr] = []
    for clause in clauses:
        if clause is not None:
            found += conjunct_list(clause.this if isinstance(clause, exp.Where) else clause)
    return found


def conjunct_list(condition: exp.Expr) -> list[exp.Expr]:
    """The conjuncts of ``condition``, through nested and parenthesised ANDs.

    A conjunct is the node inside its parentheses: ``x = 1 AND (a OR b)`` has
    the conjuncts ``x = 1`` and ``a OR b``. Every pass takes its conjuncts here,
    so a node a pass pushed to the server is the node ``drop_conjuncts`` finds
    (a pass that took the parenthesised one left ``a OR b`` in the local plan
    while the server join stopped fetching its columns: a binder error).
    """
    while isinstance(condition, exp.Paren):
        condition = condition.this
    if isinstance(condition, exp.And):
        return conjunct_list(condition.this) + conjunct_list(condition.expression)
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


def aliases_of(select: exp.Select) -> set[str]:
    """The aliases of the sources in ``select``'s FROM and JOINs."""
    sources = [select.args.get("from_"), *(select.args.get("joins") or [])]
    return {s.this.alias_or_name for s in sources if s is not None}


def nullable_aliases(select: exp.Select) -> set[str]:
    """The aliases an outer join of ``select`` may NULL-extend."""
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


def subqueries_outside_where(select: exp.Expr) -> bool:
    """Whether ``select`` holds subqueries outside its WHERE.

    Those in WHERE may have gone to the server whole (``pushdown_subqueries``);
    a pass that needs the block's every conjunct on the server checks that.
    """
    where = select.args.get("where")
    for node in select.find_all(exp.Select, exp.Subquery):
        if node is not select and (where is None or not is_part_of(node, where)):
            return True
    return False


def inner_joins_only(select: exp.Expr) -> bool:
    """A SELECT whose joins are all inner or comma joins (no USING, no join hints)."""
    if not isinstance(select, exp.Select):
        return False
    for join in select.args.get("joins") or []:
        if join.args.get("side") or join.args.get("kind") not in (None, "INNER", "CROSS"):
            return False
        if join.args.get("using") or join.args.get("method"):
            return False
    return True


def inner_then_left_joins(select: exp.Expr) -> bool:
    """A SELECT whose joins are inner, comma or LEFT joins (no RIGHT/FULL, USING, hints).

    Its inner part may be re-ordered (``join_by_position``): a LEFT join's ON
    reads only sources before it, so ``(A LEFT JOIN B ON p), C`` is
    ``(A, C) LEFT JOIN B ON p``, an inner join's ON being a filter over the rows.
    """
    if not isinstance(select, exp.Select):
        return False
    for join in select.args.get("joins") or []:
        side, kind = join.args.get("side"), join.args.get("kind")
        if side not in (None, "LEFT") or kind not in (None, "INNER", "CROSS", "OUTER"):
            return False
        if side and join.args.get("on") is None:
            return False
        if join.args.get("using") or join.args.get("method"):
            return False
    return True


def join_by_position(select: exp.Select, scans: list[Scan]) -> None:
    """Join the local tables of a server join's scans row by row (DuckDB's POSITIONAL JOIN).

    They are one fetched result split by scan (``veil.exec.fetch.run_joined``),
    so row ``i`` of each belongs to joined row ``i``: pairing them by position
    is the join, without the hash joins on ``JOIN_ROW`` numbers that cost
    TPC-H Q9's client more than the rest of its plan (six tables of 320K rows).
    ``select`` joins only inner, comma or LEFT joins (``inner_then_left_joins``):
    the scans' references move to the front of its FROM list, the other inner
    sources follow in their order, every inner ON condition moves to the WHERE
    clause, and the LEFT joins come last, in their order, with their ON (TPC-DS
    q72 and q40: a star joined on the server, its returns LEFT joined locally).

    A scan the SELECT no longer reads (its join keys and filters went to the
    server: Q9's part and supplier) leaves the FROM list, as pairing a table by
    position with one of as many rows adds nothing; its local table is not
    registered (``Scan.unread``). One scan stays, for the rows.
    """
    read = {c.table for c in select.find_all(exp.Column)}
    kept = [s for s in scans if s.alias in read] or scans[:1]
    aliases = [s.alias for s in kept]
    for scan in scans:
        scan.unread = scan.alias not in aliases
    dropped = {s.alias for s in scans if s.unread}
    every = select.args.get("joins") or []
    outer = [j for j in every if j.args.get("side")]  # kept whole, after the inner sources
    joins = [j for j in every if not j.args.get("side")]
    for join in joins:
        condition = join.args.get("on")
        if condition is not None:
            select.where(condition.pop(), copy=False)
    # sources already joined by position (another server join of this SELECT) stay so
    units: list[list[exp.Expr]] = [[select.args["from_"].this]]
    for join in joins:
        if join.args.get("method") == "POSITIONAL":
            units[-1].append(join.this)
        else:
            units.append([join.this])
    units = [[i for i in unit if i.alias_or_name not in dropped] for unit in units]
    units = [u for u in units if u]  # a scan the SELECT does not read is gone
    wanted = set(aliases)
    members = sorted(
        (i for unit in units for i in unit if i.alias_or_name in wanted),
        key=lambda i: aliases.index(i.alias_or_name),
    )
    assert len(members) == len(aliases), "a server join's scans are sources of its SELECT"
    others = [u for u in units if not any(i.alias_or_name in wanted for i in u)]
    new = [members, *others]
    select.set("from_", exp.From(this=new[0][0].pop()))
    for join in outer:
        join.pop()
    select.set(
        "joins",
        [
            exp.Join(this=item.pop(), method="POSITIONAL") if k else exp.Join(this=item.pop())
            for n, unit in enumerate(new)
            for k, item in enumerate(unit)
            if n or k
        ]
        + outer,
    )
