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
from sqlglot.tokens import TokenType

from veil.sql.errors import QueryError, QuerySyntaxError
from veil.sql.functions import normalize_functions

DIALECT = "duckdb"
_MARKERS = (TokenType.PLACEHOLDER, TokenType.QDCOLON)


def parse_statement(sql: str) -> exp.Expr:
    """One SQL statement as a sqlglot tree; syntax errors carry their position.

    Each ``?`` marker becomes a placeholder numbered by its place in the text
    (``bind_parameters`` binds by that number), and calls of DuckDB
    aggregates sqlglot does not know become aggregate nodes
    (``veil.sql.functions``).
    """
    try:
        statements = [s for s in sqlglot.parse(_number_markers(sql), read=DIALECT) if s is not None]
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
    return normalize_functions(statements[0])


def _number_markers(sql: str) -> str:
    """``?`` markers written as ``$1``, ``$2`` ... in order of appearance in the text.

    sqlglot keeps no position on parsed placeholders, and walking the tree
    visits them in tree order (``SELECT ? + 0, ?`` would bind its second
    marker first), so the order is taken from the token stream instead.
    """
    try:
        tokens = sqlglot.Dialect.get_or_raise(DIALECT).tokenize(sql)
    except Exception:  # the parser reports the syntax error with its position
        return sql
    # ``?::TYPE`` is one token (QDCOLON) whose first character is the marker
    markers = [t for t in tokens if t.token_type in _MARKERS and t.text.startswith("?")]
    if not markers:
        return sql
    if any(t.token_type == TokenType.PARAMETER for t in tokens):
        raise QuerySyntaxError("use one parameter style: ? markers, not $n as well")
    pieces, end = [], 0
    for number, token in enumerate(markers, start=1):
        pieces += [sql[end : token.start], f"${number}"]
        end = token.start + 1
    return "".join(pieces) + sql[end:]


def bind_parameters(tree: exp.Expr, params: Sequence[object] | None) -> exp.Expr:
    """Replace the ``n``-th ``?`` of the text by the literal of ``params[n - 1]``."""
    placeholders = list(tree.find_all(exp.Placeholder))
    given = list(params or ())
    if len(placeholders) != len(given):
        raise QueryError(
            f"the statement has {len(placeholders)} parameter marker(s) (?) "
            f"but {len(given)} parameter(s) were given"
        )
    if not placeholders:
        return tree
    values = [literal(value) for value in given]

    def bind(node: exp.Expr) -> exp.Expr:
        if not isinstance(node, exp.Placeholder):
            return node
        number = str(node.name)
        if not number.isdigit() or not 1 <= int(number) <= len(values):
            raise QueryError(f"unexpected parameter marker {node.sql(DIALECT)}; use ?")
        return values[int(number) - 1].copy()

    return tree.transform(bind, copy=False)


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
