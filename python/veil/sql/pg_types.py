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
"""

from __future__ import annotations

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
