"""PostgreSQL type OIDs for DuckDB types and Arrow types, and parameter values from text.

A statement's description (from DuckDB's DESCRIBE on the plaintext schema)
and its result (Arrow) must name the same OID for a column, since clients
decode binary fields by the described type: both go through ``_BY_NAME``.
"""

from __future__ import annotations

import datetime as dt
import decimal
import uuid

import duckdb
import pyarrow as pa

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
    "JSON": JSON,
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


def parameter_value(text: str | None, oid: int) -> object:
    """A bound parameter as the Python value Veil binds (``veil.sql.parse.literal``).

    Untyped parameters (OID 0, unknown, text) stay strings, which DuckDB casts
    where the query compares them with a typed column, as PostgreSQL does.
    """
    if text is None:
        return None
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
            return bytes.fromhex(text[2:]) if text.startswith("\\x") else text.encode()
        if oid == UUID:
            return uuid.UUID(text)
        if oid == TIMESTAMPTZ:
            return dt.datetime.fromisoformat(text)
    except ValueError:
        from veil.serve.errors import WireError

        raise WireError(
            "22P02", f"invalid input for a parameter of type OID {oid}: {text!r}"
        ) from None
    return text


def declared_oids(catalog: duckdb.DuckDBPyConnection, sql: str, schema: pa.Schema) -> list[int]:
    """Each result column's OID, told by the query's DuckDB types where Arrow lost them."""
    described: list[int | None] = [None] * len(schema)
    if may_lose_types(schema):
        try:
            rows = catalog.execute(f"DESCRIBE {sql}").fetchall()
        except duckdb.Error:
            rows = []
        if len(rows) == len(schema):
            described = [oid_of_duckdb(str(row[1])) for row in rows]
    return [result_oid(f.type, d) for f, d in zip(schema, described, strict=True)]
