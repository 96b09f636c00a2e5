"""PostgreSQL's spellings of types, as DuckDB (and Veil's encodings) take them.

``rewrite_pg_types(tree)`` changes every type in a parsed statement (column
definitions, casts) that DuckDB would refuse or read otherwise than
PostgreSQL:

- ``FLOAT(p)``: ``REAL`` for p <= 24, ``DOUBLE`` above (SQLAlchemy declares
  ``FLOAT(53)``); DuckDB takes no precision for floats;
- ``DOUBLE(p)``/``REAL(p)`` (sqlglot's renderings of ``FLOAT(p)``) alike;
- ``NUMERIC``/``DECIMAL`` without a precision: ``DECIMAL(38, 10)``, not
  DuckDB's ``DECIMAL(18, 3)``, which would round values PostgreSQL keeps.

Other PostgreSQL names (``timestamptz``, ``bytea``, ``jsonb``, ``uuid``,
``double precision``, arrays) sqlglot already renders in DuckDB's terms.

``zoned_literals`` and ``zoned_parameters`` read times without offsets that
stand for timestamptz values in the session's TimeZone, as PostgreSQL does
(Veil's own DuckDB reads them in UTC).
"""

from __future__ import annotations

import datetime as dt
import zoneinfo
from collections.abc import Mapping

from sqlglot import exp

_FLOATS = (exp.DataType.Type.FLOAT, exp.DataType.Type.DOUBLE)
_DECIMALS = (exp.DataType.Type.DECIMAL,)
# PostgreSQL's unconstrained numeric, as close as DuckDB's DECIMAL comes
UNCONSTRAINED_NUMERIC = (38, 10)


def rewrite_pg_types(tree: exp.Expr) -> exp.Expr:
    """``tree`` with PostgreSQL's type spellings in DuckDB's (the tree itself, changed)."""
    for node in list(tree.find_all(exp.DataType)):
        _rewrite(node)
    return tree


def _rewrite(node: exp.DataType) -> None:
    params = node.expressions
    if node.this in _FLOATS and params:
        precision = _integer(params[0])
        single = precision is not None and precision <= 24
        node.set("this", exp.DataType.Type.FLOAT if single else exp.DataType.Type.DOUBLE)
        node.set("expressions", [])
    elif node.this in _DECIMALS and not params and _spelled_bare(node):
        digits, scale = UNCONSTRAINED_NUMERIC
        node.set(
            "expressions",
            [exp.DataTypeParam(this=exp.Literal.number(n)) for n in (digits, scale)],
        )


def _spelled_bare(node: exp.DataType) -> bool:
    """A bare NUMERIC in a column definition or cast (not DuckDB's own DECIMAL default)."""
    return isinstance(node.parent, exp.ColumnDef | exp.Cast | exp.TryCast | exp.DataType)


def _integer(param: exp.Expr) -> int | None:
    value = param.this if isinstance(param, exp.DataTypeParam) else param
    try:
        return int(value.name)
    except (AttributeError, ValueError):
        return None


_ZONED = ("TIMESTAMPTZ", "TIMESTAMP WITH TIME ZONE")


def zoned_literals(tree: exp.Expr, schema: Mapping[str, object], zone: str) -> exp.Expr:
    """Times without offsets read as timestamptz, as instants in the session's ``zone``.

    PostgreSQL reads ``'2024-01-01 00:00'`` as a time in the session's TimeZone
    where a timestamptz is wanted; Veil's DuckDB reads it in UTC, so the text
    gets its offset here: ``TIMESTAMPTZ '2024-01-01 00:00'`` in Asia/Kolkata ->
    ``TIMESTAMPTZ '2024-01-01 00:00:00+05:30'``. Casts, INSERT ... VALUES and
    UPDATE ... SET of timestamptz columns; other texts are left to DuckDB.
    """
    if zone == "UTC":
        return tree
    tree = tree.copy()
    tz = zoneinfo.ZoneInfo(zone)
    for place, sql_type in string_places(tree, schema):
        instant = _instant(place.this, tz) if sql_type in _ZONED else None
        if instant is not None:
            place.replace(exp.Literal.string(instant))
    return tree


def string_places(tree: exp.Expr, schema: Mapping[str, object]) -> list[tuple[exp.Expr, str]]:
    """The string literals of ``tree`` that stand for values of a known type, with that
    type (upper case): cast ones, and those INSERT ... VALUES or UPDATE ... SET put in
    a column of ``schema`` ({table: {column: type}})."""
    places = [(c.this, c.to.sql(dialect="duckdb").upper()) for c in tree.find_all(exp.Cast)]
    if isinstance(tree, exp.Update):
        columns = _columns(schema, tree.this.name)
        for assignment in tree.expressions:
            sql_type = columns.get(assignment.this.name.lower())
            if sql_type is not None:
                places.append((assignment.expression, str(sql_type).upper()))
    if isinstance(tree, exp.Insert) and isinstance(tree.expression, exp.Values):
        places += _inserted(tree, schema)
    places += _compared(tree, schema)
    return [(p, t) for p, t in places if isinstance(p, exp.Literal) and p.is_string]


_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)


def _compared(tree: exp.Expr, schema: Mapping[str, object]) -> list[tuple[exp.Expr, str]]:
    """String literals compared with a column (``ai = '{}'``), with the column's type,
    where the statement's tables name that column once."""
    types: dict[str, set[str]] = {}
    for table in tree.find_all(exp.Table):
        for name, sql_type in _columns(schema, table.name).items():
            types.setdefault(name.lower(), set()).add(str(sql_type).upper())
    places = []
    for comparison in tree.find_all(*_COMPARISONS):
        left, right = comparison.this, comparison.expression
        for column, other in ((left, right), (right, left)):
            found = types.get(column.name.lower()) if isinstance(column, exp.Column) else None
            if found is not None and len(found) == 1:
                places.append((other, next(iter(found))))
    return places


def _columns(schema: Mapping[str, object], table: str) -> Mapping[str, object]:
    """A table's {column: SQL type} (empty for a table the schema does not know)."""
    found = schema.get(table.lower())
    return found if isinstance(found, Mapping) else {}


def _inserted(tree: exp.Insert, schema: Mapping[str, object]) -> list[tuple[exp.Expr, str]]:
    """The values INSERT ... VALUES puts in columns of known types, with their types."""
    target = tree.this
    table = target.this if isinstance(target, exp.Schema) else target
    columns = _columns(schema, table.name)
    names = (
        [c.name.lower() for c in target.expressions]
        if isinstance(target, exp.Schema)
        else list(columns)
    )
    places = []
    for row in tree.expression.expressions:
        for name, value in zip(names, row.expressions, strict=False):
            if columns.get(name) is not None:
                places.append((value, str(columns[name]).upper()))
    return places


def _instant(text: str, tz: dt.tzinfo) -> str | None:
    """``text`` with the zone's offset if it is an ISO time without one; else None."""
    try:
        stamp = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    return None if stamp.tzinfo is not None else local_instant(stamp, tz).isoformat(sep=" ")


def zoned_parameters(tree: exp.Expr, values: list[object], zone: str) -> list[object]:
    """Texts bound in ``CAST($n AS timestamptz)``, read in the session's ``zone``."""
    values = list(values)
    tz = zoneinfo.ZoneInfo(zone)
    for cast in tree.find_all(exp.Cast):
        param = cast.this
        if not isinstance(param, exp.Parameter) or not param.name.isdigit():
            continue
        number = int(param.name)
        value = values[number - 1] if 0 < number <= len(values) else None
        if isinstance(value, str) and cast.to.sql(dialect="duckdb").upper() in _ZONED:
            values[number - 1] = _instant(value, tz) or value
    return values


def local_instant(stamp: dt.datetime, tz: dt.tzinfo) -> dt.datetime:
    """A wall-clock time in ``tz`` as PostgreSQL places it: an hour the clocks repeat
    is read in standard time (the later instant), one they skip with the offset before."""
    first, second = stamp.replace(tzinfo=tz, fold=0), stamp.replace(tzinfo=tz, fold=1)
    if first.utcoffset() == second.utcoffset():
        return first
    repeated = second.astimezone(dt.UTC).astimezone(tz).replace(tzinfo=None) == stamp
    return second if repeated else first
