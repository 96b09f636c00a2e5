"""Parsing, parameter binding and qualification of client SQL (DuckDB dialect).

Parameters use the ``qmark`` style (``?``). They are bound into the syntax
tree on the client, before planning, so that a parameter is treated exactly
like a constant written in the query: encrypted with the column's scheme when
a predicate is pushed to the server, never sent as plaintext.
"""

from __future__ import annotations

import datetime as dt
import decimal
import functools
import re
import threading
import uuid
from collections.abc import Sequence

import duckdb
import sqlglot
from sqlglot import exp
from sqlglot.errors import OptimizeError, ParseError, TokenError
from sqlglot.parser import Parser
from sqlglot.tokens import Token, TokenType

from veil.sql.errors import QueryError, QuerySyntaxError
from veil.sql.functions import normalize_functions
from veil.sql.literals import TextInt
from veil.sql.pg_types import rewrite_pg_types
from veil.sql.slots import PARAM

DIALECT = "duckdb"
_MARKERS = (TokenType.PLACEHOLDER, TokenType.QDCOLON)


# sqlglot node names of operators, as the user wrote them
_OPERATORS = {
    "Mul": "*", "Div": "/", "Add": "+", "Sub": "-", "Mod": "%", "EQ": "=", "NEQ": "<>",
    "GT": ">", "GTE": ">=", "LT": "<", "LTE": "<=", "And": "AND", "Or": "OR", "Not": "NOT",
    "Like": "LIKE", "ILike": "ILIKE", "In": "IN", "Between": "BETWEEN", "DPipe": "||",
}  # fmt: skip


def _incomplete(node: str) -> str:
    """A parser's "missing keyword for <class Mul>" in the user's terms."""
    if node in _OPERATORS:
        return f"the operator {_OPERATORS[node]} is missing an operand"
    return f"the {re.sub(r'(?<!^)(?=[A-Z])', ' ', node).upper()} clause is incomplete"


def parse_statement(sql: str) -> exp.Expr:
    """One SQL statement as a sqlglot tree; syntax errors carry their position.

    Each ``?`` marker becomes a placeholder numbered by its place in the text
    (``bind_parameters`` binds by that number), and calls of DuckDB
    aggregates sqlglot does not know become aggregate nodes
    (``veil.sql.functions``).
    """
    dialect = sqlglot.Dialect.get_or_raise(DIALECT)
    try:
        tokens = _numbered_markers(dialect.tokenize(sql))
        statements = [
            s
            for s in _parser_class(dialect.parser_class)(dialect=dialect).parse(tokens, sql)
            if s is not None
        ]
    except ParseError as exc:
        first = exc.errors[0] if exc.errors else {}
        description = str(first.get("description", exc)).split(". Line")[0]
        description = re.sub(
            r"<Token token_type: TokenType\.SENTINEL[^>]*>", "the end", description
        )
        description = re.sub(
            r"<Token token_type: [^,]*, text: ([^,]*),[^>]*>", r"'\1'", description
        )
        description = re.sub(
            r"Required keyword: '\w+' missing for <class '[\w.]*\.(\w+)'>",
            lambda m: _incomplete(m.group(1)),
            description,
        )
        raise QuerySyntaxError(
            f"{description} near {first.get('highlight', '')!r}",
            line=first.get("line"),
            column=first.get("col"),
        ) from None
    except TokenError as exc:
        raise QuerySyntaxError(str(exc)) from None
    if len(statements) != 1:
        raise QuerySyntaxError(f"expected exactly one SQL statement, got {len(statements)}")
    check_join_conditions(sql, tokens, statements[0])
    return rewrite_pg_types(normalize_functions(_struct_keys_quoted(statements[0])))


def _struct_keys_quoted(tree: exp.Expr) -> exp.Expr:
    """``{'Y': 1}`` keeps its key's case: sqlglot reads a struct literal's keys as
    identifiers, which qualifying folds to lower case (``{'y': 1}``, even quoted: DuckDB's
    names are case-insensitive), while DuckDB's keys are strings, as here."""
    for struct in tree.find_all(exp.Struct):
        for item in struct.expressions:
            if isinstance(item, exp.PropertyEQ) and isinstance(item.this, exp.Identifier):
                item.set("this", exp.Literal.string(item.this.name))
    return tree


def check_join_conditions(sql: str, tokens: list[Token], tree: exp.Expr) -> None:
    """Refuse a JOIN without ON or USING, as DuckDB does, with DuckDB's message.

    sqlglot reads ``a JOIN b`` and ``a LEFT JOIN b`` (and ``a JOIN b BY ...``,
    ``BY`` an alias) as a cross product, which plaintext DuckDB refuses. A JOIN
    keyword that is not CROSS, NATURAL or POSITIONAL needs a condition; the
    tree's joins with one are counted against those keywords.
    """
    needed = sum(
        1
        for i, token in enumerate(tokens)
        if token.token_type == TokenType.JOIN and not _unconditioned(tokens, i)
    )
    given = sum(1 for j in tree.find_all(exp.Join) if j.args.get("on") or j.args.get("using"))
    if needed <= given:
        return
    try:
        _parses_in_duckdb(sql)
    except duckdb.ParserException as exc:
        message = str(exc).removeprefix("Parser Error: ").split("\n")[0].strip()
        raise QuerySyntaxError(message.removeprefix("syntax error ")) from None
    raise QuerySyntaxError("a JOIN needs ON or USING (or CROSS JOIN, NATURAL JOIN)")


_JOIN_SIDES = (TokenType.LEFT, TokenType.RIGHT, TokenType.FULL, TokenType.OUTER, TokenType.INNER)
_JOINS_WITHOUT_CONDITION = (TokenType.CROSS, TokenType.NATURAL, TokenType.POSITIONAL)


def _unconditioned(tokens: list[Token], join: int) -> bool:
    """Is the JOIN at ``tokens[join]`` one that takes no condition (CROSS, NATURAL...)?"""
    before = join - 1
    while before >= 0 and tokens[before].token_type in _JOIN_SIDES:
        before -= 1
    return before >= 0 and tokens[before].token_type in _JOINS_WITHOUT_CONDITION


def _parses_in_duckdb(sql: str) -> None:
    connection = getattr(_duckdb_parser, "connection", None)
    if connection is None:
        connection = _duckdb_parser.connection = duckdb.connect()
    connection.extract_statements(sql)


# DuckDB's parser, one in-memory connection per thread (a connection is not shared)
_duckdb_parser = threading.local()


@functools.cache
def _parser_class(base: type[Parser]) -> type[Parser]:
    """DuckDB's parser without ``:name`` placeholders, which DuckDB does not have.

    sqlglot reads a colon before a name as a named parameter, so the slice
    ``l[:n]`` became a marker (a query "with 1 parameter") instead of the list
    ``l`` up to the column ``n``; without that rule, ``:`` is a slice's colon.
    """
    parsers = {k: v for k, v in base.PLACEHOLDER_PARSERS.items() if k != TokenType.COLON}
    return type("VeilParser", (base,), {"PLACEHOLDER_PARSERS": parsers})


def _numbered_markers(tokens: list[Token]) -> list[Token]:
    """The tokens with the ``n``-th ``?`` marker written as ``$n``.

    sqlglot keeps no position on parsed placeholders, and walking the tree
    visits them in tree order (``SELECT ? + 0, ?`` would bind its second
    marker first), so the order is taken from the token stream. The tokens
    themselves are edited (not the text, which would be tokenized anew).
    """
    markers = [t for t in tokens if t.token_type in _MARKERS and t.text.startswith("?")]
    if not markers:
        return tokens
    if any(t.token_type == TokenType.PARAMETER for t in tokens):
        raise QuerySyntaxError("use one parameter style: ? markers, not $n as well")
    edited: list[Token] = []
    number = 0
    for token in tokens:
        if not (token.token_type in _MARKERS and token.text.startswith("?")):
            edited.append(token)
            continue
        number += 1
        where = (token.line, token.col, token.start, token.start)
        edited += [
            Token(TokenType.PARAMETER, "$", *where),
            Token(TokenType.NUMBER, str(number), *where),
        ]
        if token.token_type == TokenType.QDCOLON:  # ``?::TYPE`` is one token
            edited.append(
                Token(TokenType.DCOLON, "::", token.line, token.col, token.start + 1, token.end)
            )
    return edited


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
    places = iter(range(len(placeholders)))

    def bind(node: exp.Expr) -> exp.Expr:
        if not isinstance(node, exp.Placeholder):
            return node
        number = str(node.name)
        if not number.isdigit() or not 1 <= int(number) <= len(values):
            raise QueryError(f"unexpected parameter marker {node.sql(DIALECT)}; use ?")
        bound = values[int(number) - 1].copy()
        # which marker it was: a plan made for these values may take others (``veil.sql.slots``)
        bound.meta[PARAM] = (next(places), int(number) - 1)
        return bound

    return tree.transform(bind, copy=False)


def literal(value: object) -> exp.Expr:
    """The SQL literal of a parameter, typed as DuckDB's Python API binds the value.

    So ``CAST(? AS INTEGER)`` with ``2.5`` rounds a DOUBLE (to 2), as plaintext
    DuckDB does, not a DECIMAL (to 3); ``Decimal('2.50')`` is a DECIMAL(3,2).
    """
    if value is None:
        return exp.Null()
    if isinstance(value, bool):
        return exp.Boolean(this=value)
    if isinstance(value, TextInt):  # a literal of the text (``veil.sql.literals``): as written
        return exp.Literal.number(value.text)
    if isinstance(value, int):
        return _integer(value)
    if isinstance(value, float):
        return _typed(repr(value), "DOUBLE")
    if isinstance(value, decimal.Decimal):
        return _decimal(value)
    if isinstance(value, str):
        return exp.Literal.string(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return _typed("".join(f"\\x{b:02x}" for b in bytes(value)), "BLOB")
    if isinstance(value, dt.datetime):
        kind = "TIMESTAMP" if value.tzinfo is None else "TIMESTAMPTZ"
        return _typed(value.isoformat(sep=" "), kind)
    if isinstance(value, dt.date):
        return _typed(value.isoformat(), "DATE")
    if isinstance(value, dt.time):
        return _typed(value.isoformat(), "TIME")
    if isinstance(value, dt.timedelta):
        text = f"{value.days} days {value.seconds} seconds {value.microseconds} microseconds"
        return _typed(text, "INTERVAL")
    if isinstance(value, uuid.UUID):
        return _typed(str(value), "UUID")
    if isinstance(value, list):  # an array (psycopg's list); DuckDB unifies its elements' types
        return exp.Array(expressions=[literal(v) for v in value])
    raise QueryError(
        f"cannot bind a parameter of type {type(value).__name__}; pass None, bool, int, "
        "float, Decimal, str, bytes, date, datetime, time, timedelta, UUID or a list of them"
    )


def _typed(text: str, sql_type: str) -> exp.Expr:
    return exp.cast(exp.Literal.string(text), exp.DataType.build(sql_type, dialect=DIALECT))


def _integer(value: int) -> exp.Expr:
    # typed even in INTEGER's range: COALESCE(tinyint_col, ?) is an INTEGER, as in DuckDB
    for low, high, sql_type in _INTEGER_TYPES:
        if low <= value < high:
            return _typed(str(value), sql_type)
    raise QueryError(f"the integer parameter {value} is beyond UHUGEINT's range")


_INTEGER_TYPES = (
    (-(2**31), 2**31, "INTEGER"),
    (-(2**63), 2**63, "BIGINT"),
    (2**63, 2**64, "UBIGINT"),
    (-(2**127), 2**127, "HUGEINT"),
    (2**127, 2**128, "UHUGEINT"),
)


def _decimal(value: decimal.Decimal) -> exp.Expr:
    """DECIMAL(p, s) of the value's own digits; DOUBLE beyond 38 digits, as DuckDB binds it."""
    if not value.is_finite():
        return _typed(str(value).lower().replace("infinity", "inf"), "DOUBLE")
    _, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)
    scale = max(-exponent, 0)
    precision = len(digits) + max(exponent, 0)
    precision = scale + 1 if len(digits) < scale else precision
    if precision > 38:
        return _typed(str(value), "DOUBLE")
    return _typed(format(value, "f"), f"DECIMAL({precision},{scale})")


def qualify_query(tree: exp.Expr, schema: dict[str, dict[str, str]]) -> exp.Expr | None:
    """The tree with every column qualified by its source, or None if sqlglot cannot.

    A query sqlglot cannot qualify still runs (everything it needs is fetched
    and the client runs it), so failure here is not an error.
    """
    # here, not at the top: sqlglot's optimizer is planning's, never a kept plan's (issue 41)
    from sqlglot.optimizer.qualify import qualify

    try:
        return qualify(
            _aliased_subqueries(tree.copy()),
            schema=dict(schema),
            dialect=DIALECT,
            quote_identifiers=False,
            validate_qualify_columns=True,
        )
    except (OptimizeError, ValueError, KeyError):
        return None


def _aliased_subqueries(tree: exp.Expr) -> exp.Expr:
    """``SELECT (SELECT 1) ... ORDER BY 1`` with the subquery under an alias node.

    sqlglot's qualifier names an unaliased scalar subquery of a select list
    by setting the subquery's own alias (``(SELECT 1) AS _col_0`` as one
    node), and then a positional ORDER BY or GROUP BY that points at it
    fails an assertion that the item is an alias node. The same name, given
    here as an alias node, is what the qualifier would have given it.
    """
    for select in tree.find_all(exp.Select):
        for position, item in enumerate(select.expressions):
            if isinstance(item, exp.Subquery) and not item.alias:
                name = exp.to_identifier(f"_col_{position}")
                item.replace(exp.Alias(this=item.copy(), alias=name))
    return tree
