"""Parsing, parameter binding and qualification of client SQL (DuckDB dialect).

Parameters use the ``qmark`` style (``?``). They are bound into the syntax
tree on the client, before planning, so that a parameter is treated exactly
like a constant written in the query: encrypted with the column's scheme when
a predicate is pushed to the server, never sent as plaintext.
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Sequence

import sqlglot
from sqlglot import exp
from sqlglot.errors import OptimizeError, ParseError
from sqlglot.optimizer.qualify import qualify

from veil.sql.errors import QueryError, QuerySyntaxError

DIALECT = "duckdb"


def parse_statement(sql: str) -> exp.Expr:
    """One SQL statement as a sqlglot tree; syntax errors carry their position."""
    try:
        statements = [s for s in sqlglot.parse(sql, read=DIALECT) if s is not None]
    except ParseError as exc:
        first = exc.errors[0] if exc.errors else {}
        description = str(first.get("description", exc)).split(". Line")[0]
        raise QuerySyntaxError(
            f"{description} near {first.get('highlight', '')!r}",
            line=first.get("line"),
            column=first.get("col"),
        ) from None
    if len(statements) != 1:
        raise QuerySyntaxError(f"expected exactly one SQL statement, got {len(statements)}")
    return statements[0]


def bind_parameters(tree: exp.Expr, params: Sequence[object] | None) -> exp.Expr:
    """Replace each ``?`` by the literal of the matching parameter."""
    placeholders = [p for p in tree.find_all(exp.Placeholder)]
    given = list(params or ())
    if len(placeholders) != len(given):
        raise QueryError(
            f"the statement has {len(placeholders)} parameter marker(s) (?) "
            f"but {len(given)} parameter(s) were given"
        )
    if not placeholders:
        return tree
    values = iter(given)
    # find_all walks breadth-first; bind in textual order instead.
    ordered = sorted(placeholders, key=_position)
    replacements = {id(node): literal(next(values)) for node in ordered}
    return tree.transform(
        lambda n: replacements[id(n)].copy() if id(n) in replacements else n, copy=False
    )


def _position(node: exp.Expr) -> tuple[int, int]:
    meta = node.meta or {}
    return (int(meta.get("line", 0)), int(meta.get("col", 0)))


def literal(value: object) -> exp.Expr:
    """A sqlglot literal for a Python value."""
    if value is None:
        return exp.Null()
    if isinstance(value, bool):
        return exp.Boolean(this=value)
    if isinstance(value, int | float | decimal.Decimal):
        return exp.Literal.number(str(value))
    if isinstance(value, str):
        return exp.Literal.string(value)
    if isinstance(value, dt.datetime):
        return exp.cast(exp.Literal.string(value.isoformat(sep=" ")), "TIMESTAMP")
    if isinstance(value, dt.date):
        return exp.cast(exp.Literal.string(value.isoformat()), "DATE")
    raise QueryError(f"cannot bind a parameter of type {type(value).__name__}")


def qualify_query(tree: exp.Expr, schema: dict[str, dict[str, str]]) -> exp.Expr | None:
    """The tree with every column qualified by its source, or None if sqlglot cannot.

    A query sqlglot cannot qualify still runs (everything it needs is fetched
    and the client runs it), so failure here is not an error.
    """
    try:
        return qualify(
            tree.copy(),
            schema=dict(schema),
            dialect=DIALECT,
            quote_identifiers=False,
            validate_qualify_columns=True,
        )
    except (OptimizeError, ValueError, KeyError):
        return None
