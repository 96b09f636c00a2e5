"""PostgreSQL type OIDs for DuckDB types and Arrow types, and parameter values from text.

A statement's description (from DuckDB's DESCRIBE on the plaintext schema)
and its result (Arrow) must name the same OID for a column, since clients
decode binary fields by the described type: both go through ``_BY_NAME``.
"""

from __future__ import annotations

import datetime as dt
import decimal
import re
import uuid
import zoneinfo
from collections.abc import Callable, Mapping
from typing import Any

import duckdb
import pyarrow as pa
from sqlglot import exp

from veil.serve.errors import WireError
from veil.sql import pg_types
from veil.sql.parse import literal

BOOL, BYTEA, INT8, INT2, INT4, TEXT, OID = 16, 17, 20, 21, 23, 25, 26
FLOAT4, FLOAT8, DATE, TIME, TIMESTAMP, TIMESTAMPTZ = 700, 701, 1082, 1083, 1114, 1184
INTERVAL, NUMERIC = 1186, 1700
JSON, UUID, JSONB = 114, 2950, 3802
# types whose values leave DuckDB's Arrow results as strings: the described type tells them
STRING_BACKED = frozenset({UUID, JSON, JSONB})

_BY_NAME = {
    "BOOLEAN": BOOL,
    "TINYINT": INT2,
    "SMALLINT": INT2,
    "UTINYINT": INT2,
    "INTEGER": INT4,
    "USMALLINT": INT4,
    "BIGINT": INT8,
    "UINTEGER": INT8,
    "UBIGINT": NUMERIC,
    "HUGEINT": NUMERIC,
    "UHUGEINT": NUMERIC,
    "DECIMAL": NUMERIC,
    "FLOAT": FLOAT4,
    "DOUBLE": FLOAT8,
    "DATE": DATE,
    "TIME": TIME,
    "TIMESTAMP": TIMESTAMP,
    "TIMESTAMP WITH TIME ZONE": TIMESTAMPTZ,
    "INTERVAL": INTERVAL,
    "VARCHAR": TEXT,
    "BLOB": BYTEA,
    "UUID": UUID,
    "JSON": JSONB,  # stored and shown as jsonb keeps it (docs/sql.md), json or jsonb
}


# the array type of each element type (pg_type.typarray)
_ARRAY_OF = {
    BOOL: 1000, BYTEA: 1001, INT2: 1005, INT4: 1007, INT8: 1016, TEXT: 1009, FLOAT4: 1021,
    FLOAT8: 1022, DATE: 1182, TIMESTAMP: 1115, TIMESTAMPTZ: 1185, TIME: 1183,
    INTERVAL: 1187, NUMERIC: 1231, UUID: 2951, JSON: 199, JSONB: 3807,
}  # fmt: skip
_ELEMENT_OF = {array: element for element, array in _ARRAY_OF.items()}


def oid_of_duckdb(type_name: str) -> int:
    """The OID of a DuckDB type as DESCRIBE spells it (``DECIMAL(15,2)``, ``VARCHAR[]``...)."""
    name = type_name.strip().upper()
    if name.endswith("[]"):
        return _ARRAY_OF.get(oid_of_duckdb(name[:-2]), TEXT)
    return _BY_NAME.get(name.split("(")[0].strip(), TEXT)


def duckdb_name(arrow_type: pa.DataType) -> str:
    """The DuckDB type an Arrow result column came from."""
    checks = [
        (pa.types.is_boolean, "BOOLEAN"),
        (pa.types.is_int8, "TINYINT"),
        (pa.types.is_int16, "SMALLINT"),
        (pa.types.is_int32, "INTEGER"),
        (pa.types.is_int64, "BIGINT"),
        (pa.types.is_uint8, "UTINYINT"),
        (pa.types.is_uint16, "USMALLINT"),
        (pa.types.is_uint32, "UINTEGER"),
        (pa.types.is_uint64, "UBIGINT"),
        (pa.types.is_decimal, "DECIMAL"),
        (pa.types.is_float32, "FLOAT"),
        (pa.types.is_float64, "DOUBLE"),
        (pa.types.is_date, "DATE"),
        (pa.types.is_time, "TIME"),
        (pa.types.is_duration, "INTERVAL"),
        (pa.types.is_interval, "INTERVAL"),
        (pa.types.is_binary, "BLOB"),
        (pa.types.is_large_binary, "BLOB"),
    ]
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        return duckdb_name(arrow_type.value_type) + "[]"
    if isinstance(arrow_type, pa.UuidType):
        return "UUID"
    if isinstance(arrow_type, pa.JsonType):
        return "JSON"
    if pa.types.is_timestamp(arrow_type):
        return "TIMESTAMP WITH TIME ZONE" if arrow_type.tz else "TIMESTAMP"
    return next((name for check, name in checks if check(arrow_type)), "VARCHAR")


def oid_of_arrow(arrow_type: pa.DataType) -> int:
    return oid_of_duckdb(duckdb_name(arrow_type))


def result_oid(arrow_type: pa.DataType, described: int | None) -> int:
    """A result column's OID: its Arrow type's, or the described one where Arrow lost it.

    DuckDB hands UUID and JSON values (and arrays of them) to Arrow as strings.
    """
    found = oid_of_arrow(arrow_type)
    if described is None:
        return found
    if found == TEXT and described in STRING_BACKED:
        return described
    if _ELEMENT_OF.get(found) == TEXT and _ELEMENT_OF.get(described) in STRING_BACKED:
        return described
    return found


def may_lose_types(schema: pa.Schema) -> bool:
    """Whether a result may hold UUID or JSON columns that Arrow shows as strings."""
    return any(oid_of_arrow(f.type) in (TEXT, _ARRAY_OF[TEXT]) for f in schema)


def parameter_value(text: str | None, oid: int, zone: str = "UTC") -> object:
    """A bound parameter as the Python value Veil binds (``veil.sql.parse.literal``).

    Untyped parameters (OID 0, unknown, text) stay strings, which DuckDB casts
    where the query compares them with a typed column, as PostgreSQL does. An
    array is a list of its elements' values; a timestamptz without an offset is
    a time in the session's TimeZone ``zone``.
    """
    if text is None:
        return None
    element = _ELEMENT_OF.get(oid)
    if element is not None:
        return _nested(parse_array(text, oid), element, zone)
    try:
        if oid in (INT2, INT4, INT8, OID):
            return int(text)
        if oid in (FLOAT4, FLOAT8):
            return float(text)
        if oid == NUMERIC:
            return decimal.Decimal(text)
        if oid == BOOL:
            return text.strip().lower() in ("t", "true", "1", "yes", "on", "y")
        if oid == DATE:
            return dt.date.fromisoformat(text)
        if oid == TIMESTAMP:
            return dt.datetime.fromisoformat(text)
        if oid == BYTEA:
            return _bytea(text)
        if oid == UUID:
            return uuid.UUID(text)
        if oid == TIMESTAMPTZ:
            stamp = dt.datetime.fromisoformat(text)
            return stamp if stamp.tzinfo else pg_types.local_instant(stamp, zoneinfo.ZoneInfo(zone))
        if oid == INTERVAL:
            return interval_text(text)
    except (ValueError, ArithmeticError):
        raise WireError(
            "22P02", f"invalid input for a parameter of type OID {oid}: {text!r}"
        ) from None
    return text


_INTERVAL_UNITS = {
    "year": (12, 0, 0), "mon": (1, 0, 0), "month": (1, 0, 0), "week": (0, 7, 0),
    "day": (0, 1, 0), "hour": (0, 0, 3_600_000_000), "min": (0, 0, 60_000_000),
    "minute": (0, 0, 60_000_000), "sec": (0, 0, 1_000_000), "second": (0, 0, 1_000_000),
    "millisecond": (0, 0, 1000), "microsecond": (0, 0, 1),
}  # fmt: skip
_INTERVAL_PART = re.compile(
    r"\s*(?:(?P<clock>[+-]?\d+:\d+(?::\d+(?:\.\d*)?)?)|"
    r"(?P<number>[+-]?\d+(?:\.\d*)?)\s*(?P<unit>[a-z]+))",
    re.IGNORECASE,
)


def interval_text(text: str) -> str:
    """PostgreSQL's interval text (``-1 days +00:00:01``, ``1 year 2 mons``) as text
    DuckDB reads (months, days and microseconds); other text unchanged, for DuckDB to
    read or refuse."""
    months = days = micros = 0
    position, stripped = 0, text.strip()
    while position < len(stripped):
        found = _INTERVAL_PART.match(stripped, position)
        if found is None:
            return text
        position = found.end()
        if found["clock"]:
            negative = found["clock"].startswith("-")
            fields = [*found["clock"].lstrip("+-").split(":"), "0"]
            hours, minutes, seconds = int(fields[0]), int(fields[1]), decimal.Decimal(fields[2])
            amount = int((hours * 3600 + minutes * 60 + seconds) * 1_000_000)
            micros += -amount if negative else amount
            continue
        unit = found["unit"].lower()
        unit = unit[:-1] if unit.endswith("s") and unit[:-1] in _INTERVAL_UNITS else unit
        if unit not in _INTERVAL_UNITS:
            return text
        number = decimal.Decimal(found["number"])
        scale_months, scale_days, scale_micros = _INTERVAL_UNITS[unit]
        if number != int(number) and (scale_months or scale_days):
            return text  # fractional months and days: DuckDB's own reading
        months += int(number) * scale_months
        days += int(number) * scale_days
        micros += int(number * scale_micros)
    return f"{months} months {days} days {micros} microseconds"


def _bytea(text: str) -> bytes:
    if not text.startswith("\\x"):
        return text.encode()
    try:
        return bytes.fromhex(text[2:])
    except ValueError:  # PostgreSQL's byteain says invalid_parameter_value
        raise WireError("22023", f"invalid hexadecimal data for type bytea: {text!r}") from None


def _nested(values: list[Any], element: int, zone: str) -> list[Any]:
    return [
        _nested(v, element, zone) if isinstance(v, list) else parameter_value(v, element, zone)
        for v in values
    ]


def parse_array(text: str, oid: int = 0) -> list[Any]:
    """PostgreSQL's array text form (``{1,NULL,"a b"}``, ``{{1,2},{3,4}}``) as nested
    lists of the elements' texts (None for NULL), as ``array_in`` reads it."""
    position = 0

    def fail() -> WireError:
        return WireError("22P02", f'malformed array literal: "{text}"')

    def skip_space() -> None:
        nonlocal position
        while position < len(text) and text[position].isspace():
            position += 1

    def element() -> str | None:
        nonlocal position
        if text[position] == '"':
            chars, position = [], position + 1
            while position < len(text) and text[position] != '"':
                position += text[position] == "\\"
                chars.append(text[position : position + 1])
                position += 1
            if position >= len(text):
                raise fail()
            position += 1
            return "".join(chars)
        start = position
        while position < len(text) and text[position] not in ",}":
            position += 2 if text[position] == "\\" else 1
        raw = text[start:position].strip()
        bare = re.sub(r"\\.", "", raw)  # what no backslash escapes
        if not raw or '"' in bare or "{" in bare or position > len(text):
            raise fail()
        return None if raw.upper() == "NULL" else re.sub(r"\\(.)", r"\1", raw)

    def array() -> list[Any]:
        nonlocal position
        skip_space()
        if position >= len(text) or text[position] != "{":
            raise fail()
        position += 1
        items: list[Any] = []
        skip_space()
        if position < len(text) and text[position] == "}":
            position += 1
            return items
        while True:
            skip_space()
            if position >= len(text):
                raise fail()
            items.append(array() if text[position] == "{" else element())
            skip_space()
            if position < len(text) and text[position] == ",":
                position += 1
            elif position < len(text) and text[position] == "}":
                position += 1
                return items
            else:
                raise fail()

    found = array()
    skip_space()
    if position != len(text) or not _rectangular(found):
        raise fail()
    return found


def array_literals(tree: exp.Expr, schema: Mapping[str, object]) -> exp.Expr:
    """PostgreSQL's array literals in SQL text, as DuckDB's arrays of their elements' texts:
    ``INSERT INTO t (a) VALUES ('{1,NULL}')`` into an ``integer[]`` column ->
    ``CAST(['1', NULL] AS INTEGER[])``. Casts, INSERT ... VALUES and UPDATE ... SET."""
    if not any(s.is_string and "{" in s.this for s in tree.find_all(exp.Literal)):
        return tree
    tree = tree.copy()
    for place, sql_type in pg_types.string_places(tree, schema):
        if sql_type.endswith("[]") and place.this.lstrip().startswith("{"):
            blob = sql_type.split("[")[0].strip() == "BLOB"
            array = _sql_array(parse_array(place.this), blob)
            place.replace(exp.cast(array, exp.DataType.build(sql_type, dialect="duckdb")))
    return tree


def _sql_array(items: list[Any], blob: bool) -> exp.Expr:
    return exp.Array(
        expressions=[
            _sql_array(i, blob)
            if isinstance(i, list)
            else literal(_bytea(i) if blob and i is not None else i)
            for i in items
        ]
    )


def _rectangular(items: list[Any]) -> bool:
    """Whether nested lists are as PostgreSQL's arrays: every sub-array one size."""
    inner = [i for i in items if isinstance(i, list)]
    if not inner:
        return True
    if len(inner) != len(items) or len({len(i) for i in inner}) != 1:
        return False
    return all(_rectangular(i) for i in inner)


def declared_oids(
    catalog: duckdb.DuckDBPyConnection, sql: str | Callable[[], str], schema: pa.Schema
) -> list[int]:
    """Each result column's OID, told by the query's DuckDB types where Arrow lost them
    (``sql`` may be made only then: the text with its values bound)."""
    described: list[int | None] = [None] * len(schema)
    if may_lose_types(schema):
        try:
            text = sql if isinstance(sql, str) else sql()
            rows = catalog.execute(f"DESCRIBE {text}").fetchall()
        except duckdb.Error:
            rows = []
        if len(rows) == len(schema):
            described = [oid_of_duckdb(str(row[1])) for row in rows]
    return [result_oid(f.type, d) for f, d in zip(schema, described, strict=True)]
