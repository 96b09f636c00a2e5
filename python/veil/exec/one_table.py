"""A server join's rows as ONE local table, so the local DuckDB knows how many there are.

The planner pairs the local tables of a server join's scans by position
(``veil.sql.conjuncts.join_by_position``): they are one fetched result split by
scan, so ``a POSITIONAL JOIN b`` is the join. But DuckDB estimates a positional
scan at ~0 rows, and its join order optimizer then joins the rest of the query
to it as if it were free: TPC-DS q81 at SF 1 became a cross product of 2,446 x
27,820 rows (155 s and gigabytes; 0.66 s with the same rows as one table).

So the executor registers the read members of each server join side by side
as one Arrow table (zero copy: the same column buffers), and the local SQL
reads that table instead of the chain::

    FROM __veil_scan_0 AS cr POSITIONAL JOIN __veil_scan_2 AS ca ... cr.amt, ca.state
      ->  FROM __veil_scan_0__joined AS __veil_scan_0__joined
          ... __veil_scan_0__joined."__veil_scan_0.amt", __veil_scan_0__joined."__veil_scan_2.state"

Each column of the joined table is named ``<member's local table>.<column>``;
references to a member's alias are rewritten where they resolve to it (not
where a subquery's own source of the same alias hides it). A chain whose
scope holds what this cannot rewrite safely (a star, an unqualified column
other than an output's name in ORDER BY, a USING or NATURAL join) stays positional. (An
unqualified column of a subquery with a FROM of its own is that source's: the
planner's qualified plan leaves such names only in the tables it adds, as
``decrypt_late``'s keys.)
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from sqlglot import exp

from veil.sql.plan import JoinedFetch, Scan

_SUFFIX = "__joined"


def joined_name(members: list[Scan]) -> str:
    """The local name of the one table holding ``members``' rows."""
    return members[0].local_name + _SUFFIX


def joined_column(member: str, column: str) -> str:
    """A member's column's name in the joined table (``member``: its local table)."""
    return f"{member}.{column}"


def positional_members(scans: list[Scan]) -> list[list[Scan]]:
    """Each server join's members the local plan reads, where it pairs two or more."""
    fetches: dict[int, JoinedFetch] = {}
    for scan in scans:
        if scan.joined is not None:
            fetches.setdefault(id(scan.joined), scan.joined)
    found = [[s for s in fetch.scans if not s.unread] for fetch in fetches.values()]
    return [members for members in found if len(members) > 1]


def joined_tables(scans: list[Scan], tables: dict[str, pa.Table]) -> dict[str, pa.Table]:
    """The one table of each server join the local plan pairs by position (by its name).

    ``tables``: the local tables by local name, every read member's among them.
    """
    joined = {}
    for members in positional_members(scans):
        columns: dict[str, pa.ChunkedArray] = {}
        for member in members:
            table = tables[member.local_name]
            for name, column in zip(table.column_names, table.columns, strict=True):
                columns[joined_column(member.local_name, name)] = column
        joined[joined_name(members)] = pa.table(columns)
    return joined


def unread_members(local: exp.Expr, scans: list[Scan]) -> frozenset[str]:
    """The server joins' members that ``local`` (``one_table_per_join``'s) no longer names.

    Their rows reach the local plan through the joined table only, so they need
    no local table of their own: registering an Arrow table and dropping it costs
    ~0.5 ms in DuckDB, and a third of TPC-DS's registrations were such members
    (181 of 511 over the 79 queries). A member a bind filter's key query or a
    ``decrypt_late`` query reads (they run over local tables too) stays registered.
    """
    named = {table.name for table in local.find_all(exp.Table)}
    for scan in scans:
        named.update(source.local_name for bind in scan.binds for source in bind.sources)
        named.update(bind.shrinks.local_name for bind in scan.binds if bind.shrinks)
        if scan.late:
            named.add(scan.local_name)
    members = {member.local_name for group in positional_members(scans) for member in group}
    return frozenset(members - named)


def one_table_per_join(local: exp.Expr, scans: list[Scan]) -> exp.Expr:
    """``local`` with each server join's positional chain read as its one table."""
    groups = {
        frozenset(m.local_name for m in members): members for members in positional_members(scans)
    }
    if not groups:
        return local
    local = local.copy()
    for select in list(local.find_all(exp.Select)):
        for chain in list(_chains(select)):  # before the rewrite changes its FROM
            members = groups.get(frozenset(t.name for t in chain))
            if members is not None and len(chain) == len(members):
                _rewrite(select, chain, joined_name(members))
    return local


def _chains(select: exp.Select) -> Iterator[list[exp.Table]]:
    """Runs of FROM items joined by POSITIONAL JOIN, two or more plain tables each."""
    joins = select.args.get("joins") or []
    if not joins or select.args.get("from_") is None:
        return
    items = [select.args["from_"].this, *(j.this for j in joins)]
    starts = [True, *(j.args.get("method") != "POSITIONAL" for j in joins)]
    run: list[exp.Expr] = []
    for item, start in zip(items, starts, strict=True):
        if start:
            yield from _tables(run)
            run = []
        run.append(item)
    yield from _tables(run)


def _tables(run: list[exp.Expr]) -> Iterator[list[exp.Table]]:
    if len(run) > 1 and all(isinstance(i, exp.Table) and i.alias for i in run):
        yield run  # type: ignore[misc]


def _rewrite(select: exp.Select, chain: list[exp.Table], name: str) -> None:
    """Read ``chain`` as table ``name`` in ``select``, if every reference is rewritable."""
    members = {t.alias: t.name for t in chain}
    found = _references(select, set(members))
    if found is None:
        return
    for column in found:
        member = members[column.table]
        renamed = exp.column(joined_column(member, column.name), table=name, quoted=True)
        if isinstance(column.parent, exp.Select) and column.arg_key == "expressions":
            column.replace(exp.alias_(renamed, column.alias_or_name, quoted=True))
        else:
            column.replace(renamed)
    first = chain[0]
    first.replace(exp.to_table(name, quoted=True).as_(name, quoted=True))
    dropped = {id(t) for t in chain[1:]}
    select.set("joins", [j for j in select.args["joins"] if id(j.this) not in dropped])


def _references(select: exp.Select, aliases: set[str]) -> list[exp.Column] | None:
    """The columns of ``select`` (its subqueries' too) that read one of ``aliases`` of its
    FROM; None if some reference cannot be told apart (then the chain stays)."""
    for join in select.args.get("joins") or []:
        if join.args.get("using") or join.args.get("method") not in (None, "POSITIONAL"):
            return None
    outputs = {e.alias for e in select.expressions if isinstance(e, exp.Alias)}
    if any(isinstance(e, exp.Star) for e in select.expressions):
        return None  # SELECT *: the joined table's names would come out
    found = []
    for node in select.find_all(exp.Column):
        scope = _scope(node, select)
        if scope is None:
            continue  # in a WITH of ``select``: cannot see its FROM
        if node.args.get("db") is not None and node.text("db") in aliases:
            return None  # alias.column.field: read as a struct field elsewhere
        if not node.table:
            if isinstance(node.this, exp.Star) or node.find_ancestor(exp.Lambda) is not None:
                continue
            if scope is select and not (node.name in outputs and _ordering(node, select)):
                return None  # unqualified: it may name a member's column
            if scope is not select and not _sources(scope):
                return None  # nothing of its own it can name (``decrypt_late``'s table)
            continue
        if isinstance(node.this, exp.Star) and node.table in aliases:
            return None  # alias.*
        if node.table in aliases and _resolves_here(node, select):
            found.append(node)
    return found


def _ordering(node: exp.Expr, select: exp.Select) -> bool:
    """Whether ``node`` is in ``select``'s ORDER BY, where a name is the output's first
    (in GROUP BY or WHERE DuckDB binds a column of that name before an output)."""
    order = select.args.get("order")
    return order is not None and node.find_ancestor(exp.Order) is order


def _scope(node: exp.Expr, select: exp.Select) -> exp.Select | None:
    """The innermost SELECT around ``node`` up to ``select``; None under ``select``'s WITH."""
    inner: exp.Select | None = None
    parent: exp.Expr | None = node.parent
    child: exp.Expr = node
    while parent is not None and child is not select:
        if parent is select and child.arg_key == "with_":
            return None
        if isinstance(parent, exp.Select) and inner is None:
            inner = parent
        child, parent = parent, parent.parent
    return inner


def _resolves_here(column: exp.Column, select: exp.Select) -> bool:
    """Whether ``column``'s table is ``select``'s source, not a nested SELECT's own."""
    parent = column.parent
    while parent is not None and parent is not select:
        if isinstance(parent, exp.Select) and column.table in _sources(parent):
            return False
        parent = parent.parent
    return True


def _sources(select: exp.Select) -> set[str]:
    items = [select.args["from_"].this] if select.args.get("from_") is not None else []
    items += [j.this for j in select.args.get("joins") or []]
    return {i.alias_or_name for i in items}
