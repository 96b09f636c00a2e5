"""The rows of a table matching a WHERE clause, with their row ids: what a write reads first.

A Veil query (the WHERE clause pushed down where it can be), whose local plan
also returns each row's public row id, by which the write then deletes or
locks the rows it read.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from veil.design.model import TableDesign
from veil.exec.server import FetchStats
from veil.session.context import SessionContext
from veil.sql.plan import ROW_ID


def matching_rows(
    session: SessionContext,
    table: TableDesign,
    projections: list[exp.Expr],
    where: exp.Expr | None,
    statement: exp.Expr | None = None,
) -> pa.Table:
    """``projections`` of the rows matching ``where``, plus their row ids (last column).

    ``statement``: the UPDATE or DELETE whose target (its alias), other tables
    (``UPDATE ... FROM``, ``DELETE ... USING``) and WITH clause the query takes.
    A target row that joins several rows of the other tables comes once (the
    first), as PostgreSQL updates each row once.
    """
    target: exp.Expr = exp.to_table(table.name)
    others: list[exp.Expr] = []
    if statement is not None:
        target = statement.this.copy()
        extra = statement.args.get("from_") or statement.args.get("using")
        listed = [extra.this] if isinstance(extra, exp.From) else list(extra or [])
        for node in listed:
            node = node.copy()
            others += [node, *(j.this for j in node.args.pop("joins", None) or [])]
    select = exp.select(*projections).from_(target)
    for other in others:
        select = select.join(other)
    if where is not None:
        select = select.where(where.this if isinstance(where, exp.Where) else where)
    if statement is not None and statement.args.get("with_") is not None:
        select.set("with_", statement.args["with_"].copy())
    found = with_row_ids(session, select, target.alias_or_name)
    if not others or not len(found):
        return found
    ids = found.column(found.num_columns - 1)
    first = pc.index_in(pc.unique(ids), value_set=ids)  # each row id's first occurrence
    return found.take(first.take(pc.array_sort_indices(first)))


def with_row_ids(session: SessionContext, select: exp.Select, alias: str) -> pa.Table:
    """``select``'s rows, each with the row id of its row of the FROM table ``alias``."""
    session.describe(select)
    plan = session.plan(select, row_ids_of=alias)
    source = plan.local.args["from_"].this
    plan.local.append("expressions", exp.column(ROW_ID, table=source.alias_or_name))
    return session.execute_plan(plan, FetchStats())
