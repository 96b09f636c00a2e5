"""PostgreSQL's dialect in, Veil's (DuckDB's) out: statements, their kinds, their parameters.

A simple-protocol string may hold several statements; they are cut at the
top-level semicolons the tokenizer finds (never inside strings or comments).
Each statement is classified by its first keyword; queries and DML are
parsed as PostgreSQL and written as DuckDB with the bound parameters
(``$1``...) replaced by literals, exactly as Veil binds its own ``?``
parameters (``veil.sql.parse.literal``): they are encrypted where a
predicate goes to the server, never sent as plaintext.

PostgreSQL divides integers with truncation (``7 / 2`` is 3) where DuckDB's
``/`` gives 3.5: a division whose two sides have integer types (typed on the
plaintext schema) becomes DuckDB's ``//``, which truncates the same way.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, SqlglotError, TokenError
from sqlglot.optimizer.annotate_types import annotate_types
from sqlglot.optimizer.qualify import qualify
from sqlglot.tokens import TokenType

from veil.serve.errors import WireError
from veil.session.defaults import calls_sequences
from veil.sql.catalog_queries import is_system_table
from veil.sql.parse import literal
from veil.sql.pg_types import rewrite_pg_types
from veil.sql.sandbox import check_text

READ = "postgres"
WRITE = "duckdb"

# first keyword -> kind, for the statements answered without Veil's planner
_KINDS = {
    "BEGIN": "begin",
    "START": "begin",
    "COMMIT": "commit",
    "END": "commit",
    "ROLLBACK": "rollback",
    "ABORT": "rollback",
    "COPY": "copy",
    "SAVEPOINT": "savepoint",
    "RELEASE": "release",
    "SET": "set",
    "RESET": "reset",
    "SHOW": "show",
    "DISCARD": "ignore",
    "DEALLOCATE": "ignore",
    "LISTEN": "ignore",
    "DECLARE": "declare",
    "GRANT": "grant",
    "REVOKE": "grant",
    "FETCH": "fetch",
    "MOVE": "fetch",
    "CLOSE": "close",
    "UNLISTEN": "ignore",
    # the server's upkeep is its own (pgbench -i runs VACUUM ANALYZE)
    "VACUUM": "ignore",
    "ANALYZE": "ignore",
}


@dataclass
class Statement:
    text: str
    kind: str  # a _KINDS value, "query", "catalog", "dml" or "other"
    tree: exp.Expr | None = None


def split(sql: str) -> list[str]:
    """The statements of ``sql``, cut at top-level semicolons (empty ones dropped)."""
    if ";" not in sql:  # one statement (a driver's usual): no tokenizing
        return [sql.strip()] if sql.strip() else []
    # one statement ending in its only semicolon (pgbench's, psql's): no tokenizing
    # either (10 statements a TPC-B transaction, ~8% of a serve worker's Python). Were
    # that semicolon inside a string, identifier or comment, the text would end inside
    # it: the statement fails (or a comment loses its last character) the same way
    head = sql.rstrip()[:-1]
    if ";" not in head and sql.rstrip().endswith(";"):
        return [head.strip()] if head.strip() else []
    try:
        tokens = sqlglot.Dialect.get_or_raise(READ).tokenize(sql)
    except TokenError as exc:
        raise WireError("42601", f"syntax error: {exc}") from None
    parts, start = [], 0
    for token in tokens:
        if token.token_type == TokenType.SEMICOLON:
            parts.append(sql[start : token.start])
            start = token.end + 1
    parts.append(sql[start:])
    return [p.strip() for p in parts if p.strip()]


# psql's catalogue queries qualify operators: OPERATOR(pg_catalog.~)
_QUALIFIED_OPERATOR = re.compile(r"OPERATOR\(pg_catalog\.([^)\s]+)\)", re.IGNORECASE)


def classify(text: str) -> Statement:
    text = _QUALIFIED_OPERATOR.sub(r"\1", text)
    head = text.split(None, 1)[0].upper().rstrip(";")
    if head in _KINDS:
        return Statement(text, _KINDS[head])
    check_text(text)  # ATTACH, INSTALL, PRAGMA...: refused before parsing
    tree = parse(text)
    if isinstance(tree, exp.Insert | exp.Update | exp.Delete):
        return Statement(text, "dml", tree)
    if isinstance(tree, exp.Query):
        return Statement(text, "catalog" if _reads_catalog(tree) else "query", tree)
    return Statement(text, "other", tree)


def parse(text: str) -> exp.Expr:
    try:
        tree = sqlglot.parse_one(text, read=READ)
    except ParseError as exc:
        error = exc.errors[0] if exc.errors else {}
        raise WireError(
            "42601",
            f"syntax error: {error.get('description', exc)}",
            position=_position(text, error.get("line"), error.get("col")),
        ) from None
    except TokenError as exc:  # an unterminated string or comment
        raise WireError("42601", f"syntax error: {exc}") from None
    if tree is None:
        raise WireError("42601", "syntax error: an empty statement")
    for ordered in tree.find_all(exp.Ordered):  # DuckDB's ORDER BY ALL, not a column "all"
        key = ordered.this
        bare = isinstance(key, exp.Column) and not key.table and not key.this.quoted
        if bare and key.name.upper() == "ALL":
            ordered.set("this", exp.var("ALL"))
    return rewrite_pg_types(tree)


def _position(text: str, line: int | None, column: int | None) -> int | None:
    if line is None or column is None:
        return None
    lines = text.split("\n")
    return sum(len(row) + 1 for row in lines[: line - 1]) + column


def _reads_catalog(tree: exp.Expr) -> bool:
    """A query of the system catalogue, or of no table at all (``SELECT version()``), but
    not a call of a sequence function (``SELECT nextval(...)``: the session's to answer)."""
    if calls_sequences(tree):
        return False
    tables = list(tree.find_all(exp.Table))
    return not tables or any(is_system_table(t) for t in tables)


Schema = dict[str, object]  # table -> {column: SQL type}


def integer_divisions(tree: exp.Expr, schema: Schema) -> exp.Expr:
    """``tree`` with each division of two integers made DuckDB's truncating ``//``.

    Types come from a qualified copy; each of its divisions carries the
    number of the original it was copied from (qualification may copy one,
    as for ``GROUP BY 1``, never invent one).
    """
    divisions = list(tree.find_all(exp.Div))
    if not divisions:
        return tree
    copy = tree.copy()
    for number, div in enumerate(copy.find_all(exp.Div)):
        div.meta["veil_division"] = number
    try:
        typed = annotate_types(
            qualify(copy, schema=schema, dialect=READ, validate_qualify_columns=False),
            schema=schema,
        )
    except SqlglotError:
        return tree  # the binder reports the query's own error
    integer = {
        div.meta["veil_division"]: _integer(div.this) and _integer(div.expression)
        for div in typed.find_all(exp.Div)
        if "veil_division" in div.meta
    }
    for number, original in enumerate(divisions):
        if integer.get(number):
            original.replace(exp.IntDiv(this=original.this, expression=original.expression))
    return tree


def output_names(tree: exp.Expr) -> exp.Expr:
    """Unnamed result columns named as PostgreSQL names them (``count``, ``?column?``).

    DuckDB would call ``count(*)`` "count_star()" and ``7 / 2`` "(7 // 2)";
    drivers and tools key rows by these names.
    """
    select = tree
    while isinstance(select, exp.SetOperation):
        select = select.this
    if not isinstance(select, exp.Select):
        return tree
    named, clash = [], False
    for i, item in enumerate(select.expressions):
        if isinstance(item, exp.Alias | exp.Star | exp.Column) or item.find(exp.Star) is item:
            named.append(item.alias_or_name)
            continue
        name = _pg_name(item)
        # DuckDB reads CURRENT_DATE (and its kin) as a column first, and would find
        # the alias "current_date" beside it: a Binder Error for PostgreSQL's plain
        # SELECT current_date. Such a query is named from outside, by a column list.
        clash = clash or item.sql(WRITE).lower() == name
        select.expressions[i] = exp.alias_(item, name, quoted=True)
        select.expressions[i].parent = select
        named.append(name)
    if clash and not any(isinstance(item, exp.Star) for item in select.expressions):
        return _renamed(tree, select, named)
    return tree


def _renamed(tree: exp.Expr, select: exp.Select, names: list[str]) -> exp.Expr:
    """``SELECT * FROM (tree) AS _(names)``, the select list's own aliases made unique."""
    unique = [
        exp.alias_(item.unalias().copy(), f"column{i}", quoted=True)
        for i, item in enumerate(select.expressions)
    ]
    select.set("expressions", unique)
    columns = [exp.to_identifier(name, quoted=True) for name in names]
    alias = exp.TableAlias(this=exp.to_identifier("_"), columns=columns)
    return exp.select("*").from_(exp.Subquery(this=tree, alias=alias))


def _pg_name(node: exp.Expr) -> str:
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Column):
        return node.name
    if isinstance(node, exp.Cast):
        inner = node.this
        return inner.name if isinstance(inner, exp.Column) else node.to.sql(READ).lower()
    if isinstance(node, exp.Anonymous):
        return node.name.lower()
    if isinstance(node, exp.Case):
        return "case"
    if isinstance(node, exp.CurrentTimestamp) and "start" in node.meta:
        return "now"  # sqlglot reads now() as CURRENT_TIMESTAMP; only a call has a position
    if isinstance(node, exp.Func):
        return node.sql_name().lower()
    return "?column?"


def _integer(node: exp.Expr) -> bool:
    kind = node.type
    return kind is not None and kind.is_type(*exp.DataType.INTEGER_TYPES)


def bind(tree: exp.Expr, params: Sequence[object]) -> str:
    """The statement in DuckDB's dialect with ``$n`` replaced by the n-th value."""
    values = [literal(v) for v in params]

    def replace(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.Parameter):
            number = node.name
            if not number.isdigit() or not 1 <= int(number) <= len(values):
                raise WireError(
                    "08P01",
                    f"there is no parameter ${number}: the statement was given {len(values)}",
                )
            return values[int(number) - 1].copy()
        return node

    bound = tree.copy().transform(replace, copy=False)
    return bound.sql(dialect=WRITE)


def marked(tree: exp.Expr) -> tuple[str, list[int]]:
    """The statement in DuckDB's dialect with each ``$n`` a ``?`` marker, and the ``n`` of
    each marker in the text's order (``ordered`` lists the values for them).

    Bound by the session rather than written in, the values meet the plan of the
    statement's shape (``veil.session.templates``): a prepared statement is planned
    once per design, each Bind only encrypts its values.
    """
    text = tree.sql(dialect=WRITE)
    tokens = sqlglot.Dialect.get_or_raise(WRITE).tokenize(text)
    pieces, order, start = [], [], 0
    for token, following in itertools.pairwise(tokens):
        if token.token_type != TokenType.PARAMETER or following.token_type != TokenType.NUMBER:
            continue
        if following.start != token.end + 1:
            continue
        pieces.append(text[start : token.start] + "?")
        order.append(int(following.text))
        start = following.end + 1
    pieces.append(text[start:])
    return "".join(pieces), order


def ordered(order: list[int], params: Sequence[object]) -> list[object]:
    """The values of ``marked``'s markers, in their order."""
    for number in order:
        if not 1 <= number <= len(params):
            raise WireError(
                "08P01", f"there is no parameter ${number}: the statement was given {len(params)}"
            )
    return [params[number - 1] for number in order]


def placeholders(tree: exp.Expr) -> int:
    """How many parameters (``$1``...) the statement uses: its highest number."""
    numbers = [int(p.name) for p in tree.find_all(exp.Parameter) if p.name.isdigit()]
    return max(numbers, default=0)


# the operators whose two sides PostgreSQL gives one type (an untyped side takes the other's)
_SAME_TYPED = (
    exp.EQ, exp.NEQ, exp.LT, exp.LTE, exp.GT, exp.GTE, exp.NullSafeEQ, exp.NullSafeNEQ,
    exp.Add, exp.Sub, exp.Mul, exp.Div, exp.IntDiv, exp.Mod,
)  # fmt: skip


def parameter_types(tree: exp.Expr, schema: Schema) -> dict[int, str]:
    """The SQL type of each parameter whose type the client left open, from its context.

    PostgreSQL infers an untyped parameter's type from where it stands:
    ``abalance + $1`` (``pgbench -M prepared``) makes ``$1`` an integer, as
    ``aid = $1``, ``x BETWEEN $1 AND $2``, ``x IN ($1)`` and the n-th value of
    ``INSERT INTO t (a, b) VALUES ($1, $2)`` do. A parameter whose context
    names no type is missing from the answer (its value stays text).
    """
    scope = _Scope(tree, schema)
    found: dict[int, str] = {}
    for param in tree.find_all(exp.Parameter):
        if param.name.isdigit() and int(param.name) not in found:
            kind = scope.context_type(param)
            if kind is not None:
                found[int(param.name)] = kind
    return found


class _Scope:
    """The column types a statement's names can mean (its tables, by name and alias)."""

    def __init__(self, tree: exp.Expr, schema: Schema):
        self.tables: dict[str, dict[str, str]] = {}
        for table in tree.find_all(exp.Table):
            columns = schema.get(table.name.lower())
            if isinstance(columns, dict):
                typed = {str(k).lower(): str(v) for k, v in columns.items()}
                self.tables[table.name.lower()] = typed
                if table.alias:
                    self.tables[table.alias.lower()] = typed

    def column_type(self, column: exp.Column) -> str | None:
        name = column.name.lower()
        if column.table:
            return self.tables.get(column.table.lower(), {}).get(name)
        kinds = {t[name] for t in self.tables.values() if name in t}
        return kinds.pop() if len(kinds) == 1 else None

    def type_of(self, node: exp.Expr) -> str | None:
        while isinstance(node, exp.Paren | exp.Neg):
            node = node.this
        if isinstance(node, exp.Column):
            return self.column_type(node)
        if isinstance(node, exp.Cast):
            return node.to.sql(WRITE)
        if isinstance(node, exp.Literal) and not node.is_string:
            return "BIGINT" if node.is_int else "DOUBLE"
        if isinstance(node, exp.Add | exp.Sub | exp.Mul | exp.Mod):
            return self.type_of(node.this) or self.type_of(node.expression)
        return None

    def context_type(self, param: exp.Expr) -> str | None:
        node, parent = param, param.parent
        while isinstance(parent, exp.Paren | exp.Neg):
            node, parent = parent, parent.parent
        if isinstance(parent, _SAME_TYPED):
            other = parent.expression if parent.this is node else parent.this
            if isinstance(other, exp.Parameter):  # $1 + $2 = x: the pair takes x's type
                return self.context_type(parent)
            return self.type_of(other)
        if isinstance(parent, exp.Between | exp.In) and parent.this is not node:
            return self.type_of(parent.this)
        if isinstance(parent, exp.Limit | exp.Offset):
            return "BIGINT"
        if isinstance(parent, exp.Tuple) and isinstance(parent.parent, exp.Values):
            position = next(i for i, e in enumerate(parent.expressions) if e is node)
            return self._inserted_type(parent.parent.parent, position)
        return None

    def _inserted_type(self, insert: exp.Expr | None, position: int) -> str | None:
        """The type of the ``position``-th column an INSERT ... VALUES writes."""
        if not isinstance(insert, exp.Insert):
            return None
        target = insert.this
        table = target.this if isinstance(target, exp.Schema) else target
        if not isinstance(table, exp.Table):
            return None
        columns = self.tables.get(table.name.lower(), {})
        named = (
            [c.name.lower() for c in target.expressions]
            if isinstance(target, exp.Schema)
            else list(columns)
        )
        return columns.get(named[position]) if position < len(named) else None
