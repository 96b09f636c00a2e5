"""What a write's omitted values become: DEFAULTs and identity columns' numbers.

A DEFAULT is computed by the client's catalogue, whose table carries it
(``catalog_column``), when it runs the INSERT to compute its
rows; an identity column's catalogue column has none, so the rows that omit
it come back null and ``number_rows`` gives them the next values of the
column's server counter, taken atomically (``veil.exec.row_ids.allocate``):
concurrent inserts get distinct numbers, and a statement that fails skips
the numbers it took, as PostgreSQL's sequences do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
from sqlglot import exp

from veil.design.model import Column, TableDesign
from veil.errors import DomainError
from veil.exec.constraints import not_null_violation
from veil.exec.row_ids import allocate
from veil.sql.errors import GeneratedAlwaysError, UnsupportedStatementError

if TYPE_CHECKING:
    from veil.exec.session import Session


def catalog_column(column: Column) -> str:
    """A column of the catalogue's table, whose INSERT computes a row as DuckDB would.

    It checks NOT NULL and computes DEFAULT; an identity column is left nullable
    with no default, so the rows that omit it come back null, for the client to
    number from the server's counter (``number_rows``).
    """
    sql = f'"{column.label or column.name}" {column.type}'
    if column.identity:
        return sql
    if column.default is not None:
        sql += f" DEFAULT {column.default}"
    return sql + (" NOT NULL" if column.not_null else "")


def is_default(node: exp.Expr) -> bool:
    """``DEFAULT`` where a value goes (sqlglot reads it as a variable or a column)."""
    if isinstance(node, exp.Var):
        return node.name.upper() == "DEFAULT"
    if isinstance(node, exp.Column) and not node.table:
        name = node.this
        return isinstance(name, exp.Identifier) and not name.quoted and name.name == "DEFAULT"
    return False


def default_value(table: TableDesign, column: Column) -> exp.Expr:
    """The value ``SET column = DEFAULT`` writes."""
    if column.identity:
        raise UnsupportedStatementError(
            f"SET {column.name} = DEFAULT: Veil numbers identity columns of {table.name} "
            "on INSERT only; give the value"
        )
    if column.default is None:
        return exp.null()
    return exp.maybe_parse(column.default, dialect="duckdb")


def number_rows(session: Session, table: TableDesign, tree: exp.Insert, rows: pa.Table) -> pa.Table:
    """``rows`` (what ``tree`` inserts) with their omitted identity values numbered."""
    for column in (c for c in table.columns if c.identity):
        omitted = _omitted(tree, table, column, len(rows))
        values = rows.column(column.name)
        if column.identity == "always" and not omitted.all():
            raise GeneratedAlwaysError(
                f'cannot insert a non-DEFAULT value into column "{column.name}": it is '
                f"GENERATED ALWAYS AS IDENTITY; omit it or write DEFAULT"
            )
        given_null = np.asarray(values.is_null()) & ~omitted
        if given_null.any():
            raise not_null_violation(table.name, column.name)
        count = int(omitted.sum())
        if not count:
            continue
        first = allocate(session.backend, table, count, counter=column.sequence)
        numbers = values.fill_null(0).to_numpy().astype(np.int64)
        numbers[omitted] = np.arange(first, first + count, dtype=np.int64)
        try:
            typed = pa.array(numbers, pa.int64()).cast(values.type)
        except pa.ArrowInvalid:
            raise DomainError(
                f"the identity column {table.name}.{column.name} reached the largest value "
                f"its type {column.type} holds"
            ) from None
        rows = rows.set_column(rows.column_names.index(column.name), column.name, typed)
    return rows


def _omitted(tree: exp.Insert, table: TableDesign, column: Column, count: int) -> np.ndarray:
    """Which of the ``count`` inserted rows leave ``column`` to its default."""
    if tree.args.get("default"):  # DEFAULT VALUES
        return np.ones(count, dtype=bool)
    target = tree.this
    listed = (
        [c.name.lower() for c in target.expressions]
        if isinstance(target, exp.Schema)
        else [c.name for c in table.columns]
    )
    if column.name not in listed:
        return np.ones(count, dtype=bool)
    source = tree.expression
    if not isinstance(source, exp.Values):
        return np.zeros(count, dtype=bool)  # a query's rows give every listed column
    at = listed.index(column.name)
    flags = [
        is_default(row.expressions[at]) if isinstance(row, exp.Tuple) else False
        for row in source.expressions
    ]
    return np.array(flags, dtype=bool)
