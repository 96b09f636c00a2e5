"""UPDATE, DELETE and INSERT over Parquet tables, as queries whose rows replace a table.

Spark SQL cannot change Parquet files in place, so each DML statement Veil sends is
turned into a query over the table (parsed back from Spark's dialect)::

    DELETE FROM t WHERE p        ->  SELECT * FROM t WHERE NOT COALESCE(p, FALSE)
    UPDATE t SET a = e WHERE p   ->  SELECT CASE WHEN COALESCE(p, FALSE) THEN e ELSE a END
                                            AS a, b, ... FROM t
      ... RETURNING r            ->  SELECT r FROM (SELECT e AS a, b, ... FROM t WHERE p) AS t
    DELETE ... RETURNING r       ->  SELECT r FROM (SELECT * FROM t WHERE p) AS t
    INSERT INTO t (a) <rows>     ->  SELECT v0 AS a, CAST(NULL AS <b's type>) AS b, ...
                                       FROM (<rows>) AS v(v0)

whose rows the backend writes as the table's next version (or appends, for INSERT).
The RETURNING query reads the same old version as the rewrite, before the swap.
Statements of other shapes (UPDATE ... FROM, INSERT ... ON CONFLICT) are refused.
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.dialects.spark import Spark

from veil.backends.base import BackendError

DIALECT = "spark"


class _QuotedIdentifiers(Spark):
    """Spark's dialect as the backend runs it: ``"name"`` is an identifier, as in
    ``spark.sql.ansi.doubleQuotedIdentifiers`` (Veil's own SQL quotes names so)."""

    class Tokenizer(Spark.Tokenizer):
        QUOTES = ["'"]  # noqa: RUF012 (sqlglot's own class attributes)
        IDENTIFIERS = ["`", '"']  # noqa: RUF012


@dataclass(frozen=True)
class Rewrite:
    """A DML statement as queries: the table's new rows, or rows to add to it."""

    table: str
    rows: str  # SELECT of the table's new contents (UPDATE, DELETE) or of added rows (INSERT)
    appends: bool  # INSERT: ``rows`` are added, not a replacement
    returning: str | None = None  # SELECT of what RETURNING gives, over the old version


def parse(sql: str) -> exp.Expr:
    try:
        tree = sqlglot.parse_one(sql, read=_QuotedIdentifiers)
    except sqlglot.errors.ParseError as exc:
        raise BackendError(f"the Spark backend cannot read this statement: {exc}") from exc
    return tree


def rewrite(tree: exp.Expr, columns: dict[str, str]) -> Rewrite:
    """The queries of a DML statement over a table whose columns are ``{name: type}``."""
    table = tree.this if isinstance(tree, exp.Insert | exp.Update | exp.Delete) else None
    if isinstance(table, exp.Schema):
        table = table.this
    unsupported = [k for k in ("from_", "using", "with_", "conflict") if tree.args.get(k)]
    if not isinstance(table, exp.Table) or unsupported:
        raise BackendError(f"the Spark backend does not run this DML: {tree.sql(DIALECT)[:80]}")
    name = table.name
    if isinstance(tree, exp.Delete):
        keep = exp.Not(this=_matched(tree))
        returned = _returned(tree, exp.select("*").from_(name).where(_matched(tree)), name)
        return Rewrite(name, _select_all(name, columns).where(keep).sql(DIALECT), False, returned)
    if isinstance(tree, exp.Update):
        return _update(tree, name, columns)
    assert isinstance(tree, exp.Insert)
    return Rewrite(name, _inserted(tree, columns).sql(DIALECT), True)


def _matched(tree: exp.Expr) -> exp.Expr:
    """The statement's WHERE as a boolean that is never NULL (no WHERE: every row)."""
    where = tree.args.get("where")
    if where is None:
        return exp.true()
    return exp.Coalesce(this=exp.paren(where.this.copy()), expressions=[exp.false()])


def _select_all(table: str, columns: dict[str, str]) -> exp.Select:
    return exp.select(*[exp.column(c, quoted=True) for c in columns]).from_(table)


def _update(tree: exp.Update, table: str, columns: dict[str, str]) -> Rewrite:
    assigned: dict[str, exp.Expression] = {}
    for assignment in tree.expressions:
        column = assignment.this.name
        if column not in columns:
            raise BackendError(f"UPDATE of a column {column!r} the table does not have")
        assigned[column] = assignment.expression
    matched = _matched(tree)
    new_rows = exp.select(
        *[
            exp.alias_(
                exp.Case(ifs=[exp.If(this=matched.copy(), true=assigned[c].copy())]).else_(
                    exp.column(c, quoted=True)
                ),
                c,
                quoted=True,
            )
            if c in assigned
            else exp.column(c, quoted=True)
            for c in columns
        ]
    ).from_(table)
    updated = exp.select(
        *[
            exp.alias_(assigned[c].copy(), c, quoted=True)
            if c in assigned
            else exp.column(c, quoted=True)
            for c in columns
        ]
    ).from_(table)
    returned = _returned(tree, updated.where(matched.copy()), table)
    return Rewrite(table, new_rows.sql(DIALECT), False, returned)


def _returned(tree: exp.Expr, changed: exp.Select, table: str) -> str | None:
    """The query of what ``tree``'s RETURNING gives over ``changed`` (the rows it changes,
    as they are afterwards), or None without a RETURNING."""
    returning = tree.args.get("returning")
    if returning is None:
        return None
    outer = exp.select(*[e.copy() for e in returning.expressions])
    return outer.from_(changed.subquery(table)).sql(DIALECT)


def _inserted(tree: exp.Insert, columns: dict[str, str]) -> exp.Select:
    target = tree.this
    given = (
        [c.name for c in target.expressions] if isinstance(target, exp.Schema) else list(columns)
    )
    unknown = [c for c in given if c not in columns]
    if unknown:
        raise BackendError(f"INSERT into columns {unknown} the table does not have")
    source = tree.expression
    if not isinstance(source, exp.Values | exp.Select):
        raise BackendError(f"the Spark backend does not run this INSERT: {tree.sql(DIALECT)[:80]}")
    positions = {c: i for i, c in enumerate(given)}
    aliases = [f"v{i}" for i in range(len(given))]
    projections = [
        exp.alias_(exp.column(aliases[positions[c]]), c, quoted=True)
        if c in positions
        else exp.alias_(exp.cast(exp.null(), columns[c], dialect=DIALECT), c, quoted=True)
        for c in columns
    ]
    rows = exp.Subquery(
        this=source.copy(),
        alias=exp.TableAlias(
            this=exp.to_identifier("v"), columns=[exp.to_identifier(a) for a in aliases]
        ),
    )
    return exp.select(*projections).from_(rows)
