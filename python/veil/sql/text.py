"""A node's SQL text, and a plain literal's value, without sqlglot's defensive work.

Planning renders many small nodes only to compare or key them (constants, columns,
conjuncts): ``node.sql()`` deep-copies the node first because the generator may
rewrite what it renders (DuckDB's rewrites SELECTs, structs, casts to some types,
date functions and more in place). Columns, identifiers, plain literals and the
comparisons, arithmetic and connectives over them render without touching the tree,
so a node made of those alone renders itself; any other node is copied first, as
``node.sql()`` does. TPC-H's 22 plans rendered ~980 nodes, ~0.45 s of deep copies
under profile.
"""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal

from sqlglot import exp

from veil.encoding import DATE_KIND, DECIMAL_KIND, INT_KIND, STRING_KIND, SqlType

# nodes sqlglot renders without changing them (its generators' methods for these read
# their arguments only); anything else may be rewritten in place while rendered
_RENDERED_AS_IS = (
    exp.Column, exp.Identifier, exp.Literal, exp.Boolean, exp.Null, exp.Star, exp.Neg,
    exp.Paren, exp.Not, exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Add,
    exp.Sub, exp.Mul, exp.And, exp.Or, exp.Between, exp.Is,
)  # fmt: skip
# signed or unsigned, and bits, of the integer types DuckDB casts a digits literal to
_INT_BITS = {
    "TINYINT": (True, 8),
    "SMALLINT": (True, 16),
    "INTEGER": (True, 32),
    "BIGINT": (True, 64),
    "UTINYINT": (False, 8),
    "USMALLINT": (False, 16),
    "UINTEGER": (False, 32),
}
NOT_PLAIN = object()  # ``plain_value``'s answer when DuckDB must say
_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_DECIMAL_TEXT = re.compile(r"\d{1,18}(\.\d{1,18})?")


def text(node: exp.Expr, dialect: str | None = "duckdb") -> str:
    """``node.sql(dialect=...)``, copying the node only where rendering may change it."""
    copy = any(not isinstance(n, _RENDERED_AS_IS) for n in node.walk())
    return node.sql(dialect=dialect, copy=copy)


def plain_value(node: exp.Expr, sql_type: SqlType) -> object:
    """The value DuckDB's ``TRY_CAST`` of ``node`` to ``sql_type`` gives, where that needs
    no DuckDB and equals the constant: a string literal as VARCHAR text; a literal of
    digits as an integer type's value; a plain decimal literal as a DECIMAL's; an ISO
    date string (or ``DATE '...'``) as a DATE. None where TRY_CAST's value would not
    equal the constant (out of range, more decimals than the scale); ``NOT_PLAIN``
    where DuckDB must say (``Session._exact_value``)."""
    kind = sql_type.kind
    if kind == DATE_KIND:
        return _date(node)
    if not isinstance(node, exp.Literal):
        return NOT_PLAIN
    if node.is_string:
        return node.this if kind == STRING_KIND and sql_type.name == "VARCHAR" else NOT_PLAIN
    if kind == INT_KIND:
        return _integer(node.this, sql_type.name)
    if kind == DECIMAL_KIND and _DECIMAL_TEXT.fullmatch(node.this):
        return _decimal(Decimal(node.this), sql_type)
    return NOT_PLAIN


def _integer(digits: str, name: str) -> object:
    bits = _INT_BITS.get(name)
    if bits is None or not digits.isdigit() or len(digits) > 20:
        return NOT_PLAIN
    value = int(digits)
    signed, width = bits
    return value if value < 2 ** (width - 1 if signed else width) else None


def _decimal(value: Decimal, sql_type: SqlType) -> object:
    precision, scale = sql_type.precision, sql_type.scale
    if not 0 < precision <= 18:
        return NOT_PLAIN
    if value >= Decimal(10) ** (precision - scale):
        return None  # beyond the type: TRY_CAST's NULL
    quantized = value.quantize(Decimal(1).scaleb(-scale))  # at most 18 digits: exact
    return quantized if quantized == value else None  # else TRY_CAST rounds it


def _date(node: exp.Expr) -> object:
    if isinstance(node, exp.Cast) and node.to.is_type(exp.DataType.Type.DATE):
        node = node.this
    if not (isinstance(node, exp.Literal) and node.is_string):
        return NOT_PLAIN
    if not _ISO_DATE.fullmatch(node.this):
        return NOT_PLAIN
    try:
        return dt.date.fromisoformat(node.this)
    except ValueError:  # 0000-01-01, 1994-02-30: DuckDB's answer, whatever it is
        return NOT_PLAIN
