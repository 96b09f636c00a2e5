"""Value domains: the encoded values a column or a per-row expression can take.

OPE widths and HOM slot widths are sized from domains, never from the loaded
data, so that every value a column's SQL type admits can later be inserted:

| SQL type      | default domain (encoded, see ``veil.encoding``)              | bits |
|---------------|--------------------------------------------------------------|------|
| TINYINT ...   | the integer type's range (SMALLINT 16, INTEGER 32, BIGINT 64) |      |
| DECIMAL(p,s)  | ``±(10**p - 1)`` unscaled                                    | p digits |
| DATE          | every DATE DuckDB admits, ``±infinity`` included: days in     | 32   |
|               | ``[-(2**31 - 1), 2**31 - 1]``                                 |      |
| TIMESTAMP     | every TIMESTAMP DuckDB admits, ``±infinity`` included: µs in  | 64   |
|               | ``[-(2**63 - 1), 2**63 - 1]``                                 |      |
| BOOLEAN       | ``[0, 1]``                                                   | 2    |
| DOUBLE, REAL  | all int64 (the order-preserving bit pattern)                 | 64   |

A narrower domain only when the user declares one at load time
(``--domain table.column=LOW..HIGH``; ``declare_domains``): the design
records it on the column, and a value outside it is refused
(``DeclaredDomainError``) before anything is written.

A per-row expression's domain is computed by interval arithmetic over the
domains of the columns it reads (``expression_domain``), intersected with the
range of the type DuckDB computes it in: DuckDB itself fails on a row whose
value lies beyond that type (``Overflow in multiplication of DECIMAL(18)``),
so no other value can exist. Such rows are still stored (the row is valid):
see ``veil.ciphers.encrypt`` for how their precomputed values are marked.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction

import duckdb
import sqlglot
from sqlglot import exp

from veil.design.model import Column
from veil.encoding import (
    BOOL_KIND,
    DATE_KIND,
    DECIMAL_KIND,
    FLOAT_KIND,
    INT_KIND,
    STRING_KIND,
    TIMESTAMP_KIND,
    TIMESTAMPTZ_KIND,
    EncodingError,
    SqlType,
    encode,
    normalize_type,
)
from veil.errors import DomainError

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
DATE_LIMIT = 2**31 - 1  # DuckDB's ±infinity; finite dates lie strictly inside
TIMESTAMP_LIMIT = 2**63 - 1
_INT_RANGES = {
    "TINYINT": (-(2**7), 2**7 - 1),
    "SMALLINT": (-(2**15), 2**15 - 1),
    "INTEGER": (-(2**31), 2**31 - 1),
    "BIGINT": (INT64_MIN, INT64_MAX),
    "UTINYINT": (0, 2**8 - 1),
    "USMALLINT": (0, 2**16 - 1),
    "UINTEGER": (0, 2**32 - 1),
}
_WIDE_DECIMAL = re.compile(r"DECIMAL\((\d+),(\d+)\)\Z")
MAX_DECIMAL_DIGITS = 18  # what an int64 encoding holds


class DeclaredDomainError(DomainError):
    """A value lies outside the domain the user declared for its column at load time."""

    anchor = "declared-domain"


def type_domain(sql_type: SqlType) -> tuple[int, int] | None:
    """Encoded ``[low, high]`` of every value of ``sql_type`` (None for strings)."""
    kind = sql_type.kind
    if kind == INT_KIND:
        return _INT_RANGES.get(sql_type.name, (INT64_MIN, INT64_MAX))
    if kind == DECIMAL_KIND:
        limit = 10**sql_type.precision - 1
        return -limit, limit
    if kind == DATE_KIND:
        return -DATE_LIMIT, DATE_LIMIT
    if kind in (TIMESTAMP_KIND, TIMESTAMPTZ_KIND):
        return -TIMESTAMP_LIMIT, TIMESTAMP_LIMIT
    if kind == BOOL_KIND:
        return 0, 1
    if kind == FLOAT_KIND:
        return INT64_MIN, INT64_MAX
    return None


def signed_bits(low: int, high: int) -> int:
    """The fewest bits of a signed integer that hold every value in ``[low, high]``."""

    def need(value: int) -> int:
        return (value if value >= 0 else ~value).bit_length() + 1

    return max(need(low), need(high))


def rnd_bits(sql_type: SqlType, bounds: list[int] | None = None) -> int | None:
    """The width of a number's narrow RND (``veil.ciphers.columns.RowBoundCipher``), or None.

    The fewest bits holding every encoded value of the type (or of the domain
    declared, ``bounds``), when fewer than 64: DECIMAL(7,2) takes 25, INTEGER
    32, DATE 32. Never the loaded data's, so any later value fits; a server
    that bit-packs integers (DuckDB) then stores a row in those bits instead
    of 8 random bytes.
    """
    domain = (bounds or type_domain(sql_type)) if sql_type.is_integral else None
    bits = signed_bits(int(domain[0]), int(domain[1])) if domain is not None else 64
    return bits if bits < 64 else None


def column_domain(column: Column) -> tuple[int, int] | None:
    """The declared domain of a column if it has one, else its type's."""
    if column.bounds is not None:
        low, high = column.bounds
        return int(low), int(high)
    return type_domain(column.sql_type)


def describe_domain(column: Column) -> str:
    if column.domain is not None:
        return f"declared {column.domain[0]}..{column.domain[1]}"
    return f"{column.type}"


# -- declared domains ---------------------------------------------------------


def parse_domain_specs(specs: Iterable[str]) -> dict[str, tuple[str, str]]:
    """``["table.column=LOW..HIGH", ...]`` -> ``{"table.column": (LOW, HIGH)}``."""
    parsed: dict[str, tuple[str, str]] = {}
    for spec in specs:
        name, equals, span = spec.partition("=")
        parts = span.split("..")
        if not equals or len(parts) != 2 or "." not in name or not all(p.strip() for p in parts):
            raise DomainError(
                f"cannot read the domain {spec!r}: write TABLE.COLUMN=LOW..HIGH, e.g. "
                "lineitem.l_quantity=0..100 or orders.o_orderdate=1992-01-01..1998-12-31"
            )
        parsed[name.strip().lower()] = (parts[0].strip(), parts[1].strip())
    return parsed


def declare_domains(
    schema: Mapping[str, list[Column]], declared: Mapping[str, tuple[object, object]]
) -> None:
    """Record each declared domain on its column (as given, and encoded).

    The bounds are read as values of the column's type (DuckDB's casts: a
    date as ``1992-01-01``, a decimal as ``-999.99``); a domain must lie
    within the type and have ``LOW <= HIGH``.
    """
    catalog = duckdb.connect()
    try:
        for name, (low, high) in declared.items():
            table, _, column_name = name.lower().partition(".")
            column = next((c for c in schema.get(table, []) if c.name == column_name), None)
            if column is None:
                raise DomainError(f"a domain is declared for {name!r}, which the source lacks")
            if column.sql_type.kind == STRING_KIND:
                raise DomainError(
                    f"a domain is declared for {name!r}, a {column.type} column: "
                    "only numbers, dates, timestamps and booleans have domains"
                )
            bounds = [_encoded_literal(catalog, name, column.sql_type, v) for v in (low, high)]
            if bounds[0] > bounds[1]:
                raise DomainError(f"the domain declared for {name!r} is empty ({low} > {high})")
            column.domain = [str(low), str(high)]
            column.bounds = bounds
    finally:
        catalog.close()


def _encoded_literal(
    catalog: duckdb.DuckDBPyConnection, name: str, sql_type: SqlType, value: object
) -> int:
    text = str(value).replace("'", "''")
    try:  # through Arrow: Python's dates cannot hold DuckDB's extremes
        cast = catalog.sql(f"SELECT CAST('{text}' AS {sql_type.name})").to_arrow_table()
    except duckdb.Error as exc:
        raise DomainError(
            f"the domain bound {value!r} declared for {name!r} is not a {sql_type.name}: {exc}"
        ) from None
    encoded = encode(cast.column(0), sql_type)[0].as_py()
    assert isinstance(encoded, int)
    return encoded


def check_declared(
    column: Column,
    encoded_low: int | None,
    encoded_high: int | None,
    message: str | None = None,
    *,
    table: str | None = None,
) -> None:
    """Refuse values whose encoded range leaves the column's declared domain."""
    if column.bounds is None or encoded_low is None or encoded_high is None:
        return
    low, high = column.bounds
    if encoded_low < low or encoded_high > high:
        raise DeclaredDomainError(
            message
            or "a value lies outside the domain declared for this column at load time; "
            "nothing was written (reload the table with a wider --domain to store it)",
            column=f"{table}.{column.name}" if table else column.name,
            domain=f"{column.domain[0]}..{column.domain[1]}" if column.domain else None,
        )


# -- per-row expressions -------------------------------------------------------


@dataclass(frozen=True)
class ExpressionDomain:
    """How a per-row expression is stored: its type and the values it can take."""

    type: str  # the SQL type the value is computed and stored as
    low: int  # encoded bounds of every value DuckDB can compute
    high: int
    overflow: bool  # some rows of valid inputs make DuckDB's evaluation fail


def expression_domain(
    source: str, duckdb_type: str, columns: Mapping[str, Column]
) -> ExpressionDomain | None:
    """The stored type and domain of ``source``, or None if it cannot be stored exactly.

    ``duckdb_type`` is the type DuckDB computes ``source`` in. When that type
    is wider than an int64 encoding (DECIMAL(p > 18), HUGEINT), the
    expression is stored as DECIMAL(18, s) / BIGINT only if interval
    arithmetic over its columns' domains proves every value fits; otherwise
    it is not precomputed at all (the client computes it from the columns).
    """
    real = _interval_of(source, columns)
    wide = _WIDE_DECIMAL.fullmatch(duckdb_type)
    if wide and int(wide.group(1)) > MAX_DECIMAL_DIGITS:
        stored = f"DECIMAL({MAX_DECIMAL_DIGITS},{wide.group(2)})"
    elif duckdb_type in ("HUGEINT", "UHUGEINT", "UBIGINT"):
        stored = "BIGINT"
    else:
        try:
            stored = normalize_type(duckdb_type)
        except EncodingError:
            return None
        sql_type = SqlType(stored)
        full = type_domain(sql_type)
        if full is None:
            return ExpressionDomain(stored, 0, 0, overflow=False)
        if real is None:
            return ExpressionDomain(stored, *full, overflow=True)
        low, high = _encoded_interval(real, sql_type.scale)
        return ExpressionDomain(
            stored,
            max(low, full[0]),
            min(high, full[1]),
            overflow=low < full[0] or high > full[1],
        )
    # DuckDB computes it wider than Veil stores: only a proven fit is exact.
    sql_type = SqlType(stored)
    full = type_domain(sql_type)
    assert full is not None
    if real is None:
        return None
    low, high = _encoded_interval(real, sql_type.scale)
    if low < full[0] or high > full[1]:
        return None
    return ExpressionDomain(stored, low, high, overflow=False)


def _encoded_interval(real: tuple[Fraction, Fraction], scale: int) -> tuple[int, int]:
    factor = 10**scale
    return math.floor(real[0] * factor), math.ceil(real[1] * factor)


Interval = tuple[Fraction, Fraction]


def _interval_of(source: str, columns: Mapping[str, Column]) -> Interval | None:
    try:
        tree = sqlglot.parse_one(source, read="duckdb")
    except sqlglot.errors.ParseError:
        return None
    return _interval(tree, columns)


def _interval(node: exp.Expr, columns: Mapping[str, Column]) -> Interval | None:
    """Bounds of an arithmetic expression's real value (None: unknown)."""
    if isinstance(node, exp.Paren):
        return _interval(node.this, columns)
    if isinstance(node, exp.Column):
        column = columns.get(node.name.lower())
        return None if column is None else _column_interval(column)
    if isinstance(node, exp.Literal) and not node.is_string:
        try:
            value = Fraction(node.this)
        except ValueError:
            return None
        return value, value
    if isinstance(node, exp.Neg):
        inner = _interval(node.this, columns)
        return None if inner is None else (-inner[1], -inner[0])
    if isinstance(node, exp.Add | exp.Sub | exp.Mul):
        left, right = _interval(node.this, columns), _interval(node.expression, columns)
        if left is None or right is None:
            return None
        if isinstance(node, exp.Add):
            return left[0] + right[0], left[1] + right[1]
        if isinstance(node, exp.Sub):
            return left[0] - right[1], left[1] - right[0]
        products = [a * b for a in left for b in right]
        return min(products), max(products)
    if isinstance(node, exp.Cast):
        inner = _interval(node.this, columns)
        try:
            target = _column_interval(Column("cast", normalize_type(node.to.sql("duckdb"))))
        except EncodingError:
            return None
        if target is None:
            return None
        if inner is None:  # the cast refuses values beyond its type
            return target
        # A cast to fewer decimals rounds: widen by one unit of the target's scale.
        unit = Fraction(1, 10 ** SqlType(normalize_type(node.to.sql("duckdb"))).scale)
        return max(inner[0] - unit, target[0]), min(inner[1] + unit, target[1])
    return None


def _column_interval(column: Column) -> Interval | None:
    kind = column.sql_type.kind
    if kind not in (INT_KIND, DECIMAL_KIND, BOOL_KIND):
        return None
    domain = column_domain(column)
    if domain is None:
        return None
    scale = Fraction(1, 10**column.sql_type.scale)
    return domain[0] * scale, domain[1] * scale


def sentinels(low: int, high: int) -> tuple[int, int] | None:
    """The encoded marks of values beyond ``[low, high]``, if int64 has room for them."""
    if low - 1 < INT64_MIN or high + 1 > INT64_MAX:
        return None
    return low - 1, high + 1
