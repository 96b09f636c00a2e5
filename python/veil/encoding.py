"""Plaintext encoding: SQL values <-> the integers and bytes the schemes encrypt.

Every scheme works on one of two encoded forms: signed 64-bit integers (DET
FF1, OPE, HOM) or byte strings (RND, DET AES-SIV, SEARCH). Encoding is exact and
reversible, so decrypting and decoding gives back the very value that was
loaded, and it preserves what the schemes are used for:

- equality: two SQL values are equal exactly when their encodings are equal
  (``-0.0`` is folded into ``0.0`` for that reason);
- order: for numeric kinds the integer order is the SQL order, so OPE over the
  encoding answers range predicates.

| SQL type              | encoded                                   |
|-----------------------|-------------------------------------------|
| TINYINT..BIGINT       | int64                                     |
| DECIMAL(p,s), p <= 18 | int64 of the unscaled value (x * 10**s)   |
| DATE                  | int64 days since 1970-01-01               |
| TIMESTAMP             | int64 microseconds since the epoch        |
| BOOLEAN               | int64 0 / 1                               |
| DOUBLE, REAL          | int64 with the order-preserving bit trick |
| TIMESTAMPTZ           | int64 microseconds since the epoch (UTC)  |
| VARCHAR               | UTF-8 bytes                               |
| DECIMAL(p,s), p > 18  | bytes: the value's text with s decimals   |
| UUID                  | bytes: its 16 bytes                       |
| JSON (json, jsonb)    | bytes: canonical text, as jsonb keeps it  |
| BLOB (bytea)          | bytes: the value itself                   |
| INTERVAL              | bytes: months, days, nanoseconds (Arrow)  |
| T[] (arrays)          | bytes: the array's JSON text              |
| HUGEINT, UHUGEINT,    | bytes: DuckDB's text of the value (one    |
| UBIGINT, BIT          | text per value)                           |
| STRUCT, MAP, T[n] and | bytes: DuckDB's text of the value (JSON   |
| lists of any of these | where it holds JSON), cast back by DuckDB |

Byte-string kinds take DET (AES-SIV) and RND, never OPE or sums (so a range over a
HUGEINT runs on the client). Intervals
and arrays are fetched and filtered on the client: equal values may have
different encodings (``INTERVAL '1 month' = INTERVAL '30 days'``), so DET
could not answer ``=`` over them; so are STRUCTs, MAPs and fixed-size arrays
(``-0.0`` and ``0.0`` inside them have two texts). JSON is stored as PostgreSQL's jsonb keeps
it (keys sorted shortest first, the last of duplicate keys, no insignificant
whitespace), so DET of it answers jsonb's ``=``.

Everything is vectorised over Arrow arrays (JSON is canonicalised once per
distinct value, on writes only); NULL stays NULL.
"""

from __future__ import annotations

import decimal
import functools
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from duckdb.sqltypes import DuckDBPyType

from veil.errors import VeilError

INT_KIND = "int"
DECIMAL_KIND = "decimal"
DATE_KIND = "date"
TIMESTAMP_KIND = "timestamp"
BOOL_KIND = "bool"
FLOAT_KIND = "float"
STRING_KIND = "string"
TIMESTAMPTZ_KIND = "timestamptz"
WIDE_DECIMAL_KIND = "wide_decimal"
UUID_KIND = "uuid"
JSON_KIND = "json"
BLOB_KIND = "blob"
INTERVAL_KIND = "interval"
LIST_KIND = "list"
HUGE_INT_KIND = "huge_int"  # HUGEINT, UHUGEINT, UBIGINT: beyond int64
BIT_KIND = "bit"
NESTED_KIND = "nested"  # STRUCT, MAP, fixed-size arrays, lists of the kinds above

INTEGRAL_KINDS = frozenset(
    {INT_KIND, DECIMAL_KIND, DATE_KIND, TIMESTAMP_KIND, TIMESTAMPTZ_KIND, BOOL_KIND, FLOAT_KIND}
)
# equal values may have different encodings: no DET, filtered on the client
_UNEQUAL_KINDS = frozenset({INTERVAL_KIND, LIST_KIND, NESTED_KIND})
_NUMBERS = ("INT", "DECIMAL", "DOUBLE", "FLOAT", "REAL", "HUGEINT")
_MOMENTS = ("DATE", "TIMESTAMP", "VARCHAR")
# the DuckDB types of constants that compare exactly with a column of each kind
CONSTANT_FAMILIES: dict[str, tuple[str, ...]] = {
    INT_KIND: _NUMBERS,
    DECIMAL_KIND: _NUMBERS,
    WIDE_DECIMAL_KIND: _NUMBERS,
    FLOAT_KIND: _NUMBERS,
    DATE_KIND: _MOMENTS,
    TIMESTAMP_KIND: _MOMENTS,
    TIMESTAMPTZ_KIND: _MOMENTS,
    STRING_KIND: ("VARCHAR",),
    BOOL_KIND: ("BOOLEAN",),
    UUID_KIND: ("UUID", "VARCHAR"),
    JSON_KIND: ("JSON", "VARCHAR"),
    BLOB_KIND: ("BLOB",),
    INTERVAL_KIND: (),
    LIST_KIND: (),
    HUGE_INT_KIND: _NUMBERS,
    BIT_KIND: ("BIT",),
    NESTED_KIND: (),
}

_INT_TYPES = {
    "TINYINT",
    "SMALLINT",
    "INTEGER",
    "INT",
    "BIGINT",
    "UTINYINT",
    "USMALLINT",
    "UINTEGER",
}
_HUGE_INT_TYPES = {"HUGEINT", "UHUGEINT", "UBIGINT"}
_FLOAT_TYPES = {"DOUBLE", "REAL", "FLOAT"}
_STRING_TYPES = {"VARCHAR", "TEXT", "STRING"}
# PostgreSQL's (and DuckDB's) other spellings, without spaces
_ALIASES = {
    "INT": "INTEGER",
    "INT4": "INTEGER",
    "INT8": "BIGINT",
    "INT2": "SMALLINT",
    "TEXT": "VARCHAR",
    "STRING": "VARCHAR",
    "FLOAT": "REAL",
    "FLOAT4": "REAL",
    "FLOAT8": "DOUBLE",
    "DOUBLEPRECISION": "DOUBLE",
    "BOOL": "BOOLEAN",
    "TIMESTAMPWITHTIMEZONE": "TIMESTAMPTZ",
    "TIMESTAMPWITHOUTTIMEZONE": "TIMESTAMP",
    "BYTEA": "BLOB",
    "JSONB": "JSON",
    "INT128": "HUGEINT",
    "UINT128": "UHUGEINT",
    "UINT64": "UBIGINT",
    "UINT32": "UINTEGER",
    "UINT16": "USMALLINT",
    "UINT8": "UTINYINT",
    "BITSTRING": "BIT",
}
# a type whose name has parts (field names, keys' types): DuckDB's own spelling is kept
_NESTED = re.compile(r"(?:STRUCT|MAP|ROW)\s*\(|.*\[\s*\d+\s*\]\s*\Z", re.IGNORECASE | re.DOTALL)
_DECIMAL = re.compile(r"(?:DECIMAL|NUMERIC)\((\d+),\s*(\d+)\)\Z")
_SIGN_FLIP = np.int64(0x7FFF_FFFF_FFFF_FFFF)
# kinds decoded by DuckDB into its lossless Arrow types (arrow_lossless_conversion): a
# HUGEINT as DuckDB's 16 bytes, not a DECIMAL(38, 0) that cannot hold 2^127 - 1
LOSSLESS_KINDS = frozenset({HUGE_INT_KIND, BIT_KIND, NESTED_KIND})


class EncodingError(VeilError):
    """A column's SQL type has no encoding in Veil."""

    anchor = "encoding"


class ValueOverflowError(VeilError):
    """A stored value lies beyond its type: a per-row expression DuckDB could not compute."""

    anchor = "value-overflow"


@dataclass(frozen=True)
class SqlType:
    """A plaintext column's SQL type, as DuckDB spells it (``DECIMAL(15,2)``)."""

    name: str

    @property
    def kind(self) -> str:
        return _kind_of(self.name)

    @property
    def scale(self) -> int:
        match = _DECIMAL.match(self.name)
        return int(match.group(2)) if match else 0

    @property
    def precision(self) -> int:
        """A DECIMAL's digits (0 for other types)."""
        match = _DECIMAL.match(self.name)
        return int(match.group(1)) if match else 0

    @property
    def is_integral(self) -> bool:
        """Encoded as int64 (so DET FF1, OPE and HOM apply)."""
        return self.kind in INTEGRAL_KINDS

    @property
    def has_equality(self) -> bool:
        """Equal values have equal encodings (so DET can answer ``=``)."""
        return self.kind not in _UNEQUAL_KINDS

    @property
    def element(self) -> SqlType:
        """An array's element type."""
        assert self.name.endswith("[]")
        return SqlType(self.name[:-2])

    def arrow_type(self) -> pa.DataType:
        kind = self.kind
        if kind in LOSSLESS_KINDS:
            return _lossless_arrow_type(self.name)
        if kind in (DECIMAL_KIND, WIDE_DECIMAL_KIND):
            return pa.decimal128(self.precision, self.scale)
        if kind == INT_KIND:
            return _int_arrow(self.name)
        if kind == LIST_KIND:  # DuckDB's Arrow lists hold UUIDs and JSON as their text
            element = self.element
            text = element.kind in (UUID_KIND, JSON_KIND)
            return pa.list_(pa.string() if text else element.arrow_type())
        return {
            DATE_KIND: pa.date32(),
            TIMESTAMP_KIND: pa.timestamp("us"),
            TIMESTAMPTZ_KIND: pa.timestamp("us", tz="UTC"),
            BOOL_KIND: pa.bool_(),
            FLOAT_KIND: pa.float64() if self.name != "REAL" else pa.float32(),
            STRING_KIND: pa.string(),
            UUID_KIND: pa.uuid(),
            JSON_KIND: pa.json_(),
            BLOB_KIND: pa.binary(),
            INTERVAL_KIND: pa.month_day_nano_interval(),
        }[kind]


def normalize_type(name: str) -> str:
    """DuckDB's spelling of a type, checked to be one Veil can encode."""
    if _NESTED.match(name.strip()):
        return _duckdb_spelling(name.strip())
    text = name.strip().upper().replace(" ", "")
    if text.endswith("[]"):
        return normalize_type(text[:-2]) + "[]"
    text = _ALIASES.get(text, text)
    if text.startswith("VARCHAR("):
        text = "VARCHAR"
    _kind_of(text)
    return text


@functools.cache
def _duckdb_spelling(name: str) -> str:
    """A nested type as DuckDB spells it, every field name quoted
    (``STRUCT("x" BIGINT, "Y" VARCHAR)``: DuckDB's own spelling leaves ``Y`` bare,
    which a parser folds to ``y``), or an error."""
    with duckdb.connect() as connection:
        try:
            [kind] = connection.sql(f"SELECT CAST(NULL AS {name})").types
        except duckdb.Error:
            raise EncodingError(f"SQL type {name} is not a type DuckDB knows") from None
    return _spelled(kind)


def _spelled(kind: DuckDBPyType) -> str:
    if kind.id not in ("struct", "map", "list", "array"):
        return str(kind)
    children = dict(kind.children)
    types = {n: t for n, t in children.items() if isinstance(t, DuckDBPyType)}
    if kind.id == "struct":
        fields = (f'"{n.replace(chr(34), 2 * chr(34))}" {_spelled(t)}' for n, t in types.items())
        return f"STRUCT({', '.join(fields)})"
    if kind.id == "map":
        return f"MAP({_spelled(types['key'])}, {_spelled(types['value'])})"
    size = f"[{children['size']}]" if kind.id == "array" else "[]"
    return _spelled(types["child"]) + size


@functools.lru_cache(maxsize=4096)  # a type's kind is asked for on every column of every row
def _kind_of(name: str) -> str:
    if _NESTED.match(name):
        return NESTED_KIND
    if name in _INT_TYPES:
        return INT_KIND
    if name in _HUGE_INT_TYPES:
        return HUGE_INT_KIND
    if name == "BIT":
        return BIT_KIND
    match = _DECIMAL.match(name)
    if match:
        if int(match.group(1)) > 38:
            raise EncodingError(f"{name} has more digits than DECIMAL's 38")
        return DECIMAL_KIND if int(match.group(1)) <= 18 else WIDE_DECIMAL_KIND
    if name.endswith("[]"):
        element = _kind_of(name[:-2])
        # lists of the kinds DuckDB's Arrow output loses (HUGEINT, BIT) travel as nested
        return NESTED_KIND if element in LOSSLESS_KINDS else LIST_KIND
    if name == "DATE":
        return DATE_KIND
    if name in ("TIMESTAMP", "DATETIME"):
        return TIMESTAMP_KIND
    if name in ("TIMESTAMPTZ", "TIMESTAMP WITH TIME ZONE"):
        return TIMESTAMPTZ_KIND
    if name in ("UUID", "JSON", "BLOB", "INTERVAL"):
        return name.lower()
    if name == "BOOLEAN":
        return BOOL_KIND
    if name in _FLOAT_TYPES:
        return FLOAT_KIND
    if name in _STRING_TYPES:
        return STRING_KIND
    raise EncodingError(
        f"SQL type {name} has no Veil encoding; cast the column to one of INTEGER, BIGINT, "
        "HUGEINT, UBIGINT, NUMERIC(p,s), DATE, TIMESTAMP, TIMESTAMPTZ, BOOLEAN, DOUBLE, VARCHAR, "
        "UUID, JSON, BYTEA, INTERVAL, BIT, a STRUCT or MAP, or an array of these"
    )


def _int_arrow(name: str) -> pa.DataType:
    return {
        "TINYINT": pa.int8(),
        "SMALLINT": pa.int16(),
        "INTEGER": pa.int32(),
        "UTINYINT": pa.uint8(),
        "USMALLINT": pa.uint16(),
        "UINTEGER": pa.uint32(),
    }.get(name, pa.int64())


def _combined(array: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(array, pa.ChunkedArray):
        return array.combine_chunks() if array.num_chunks != 1 else array.chunk(0)
    return array


def encode(array: pa.Array | pa.ChunkedArray, sql_type: SqlType) -> pa.Array:
    """Plaintext column -> encoded column (int64 or binary), NULLs kept."""
    kind = sql_type.kind
    if kind in LOSSLESS_KINDS:  # DuckDB reads any chunks (even none of an extension type)
        return _encode_by_duckdb(array, sql_type)
    arr = _combined(array)
    if kind in _BYTES_ENCODERS:
        return _BYTES_ENCODERS[kind](arr, sql_type)
    if kind == DECIMAL_KIND:
        return _decimal_to_int64(_cast(arr, sql_type.arrow_type()))
    if kind == FLOAT_KIND:
        return _float_to_int64(pc.cast(arr, pa.float64()))
    if kind == DATE_KIND:  # days: the dates' own int32 bits, widened
        return _to_int64(_cast(arr, pa.date32()).view(pa.int32()))
    if kind == TIMESTAMP_KIND:
        return pc.cast(pc.cast(arr, pa.timestamp("us")), pa.int64())
    if kind == TIMESTAMPTZ_KIND:
        zone = arr.type.tz if pa.types.is_timestamp(arr.type) and arr.type.tz else "UTC"
        return pc.cast(pc.cast(arr, pa.timestamp("us", tz=zone)), pa.int64())
    if kind == BOOL_KIND:
        return pc.cast(pc.cast(arr, pa.bool_()), pa.int64())
    return _to_int64(arr)


def _to_int64(arr: pa.Array) -> pa.Array:
    """``arr`` cast to int64; a few rows of a narrower signed integer widened in numpy (a
    cast kernel costs ~13 us whatever the length, on every column an UPDATE writes)."""
    if arr.type == pa.int64():
        return arr
    if arr.type in _WIDENED and len(arr) <= _SMALL_ROWS and not arr.offset:
        words = np.frombuffer(arr.buffers()[1], dtype=_WIDENED[arr.type], count=len(arr))
        validity = arr.buffers()[0] if arr.null_count else None
        return pa.Array.from_buffers(
            pa.int64(),
            len(arr),
            [validity, pa.py_buffer(words.astype(np.int64))],
            null_count=arr.null_count,
        )
    return pc.cast(arr, pa.int64())


_WIDENED = {pa.int8(): np.int8, pa.int16(): np.int16, pa.int32(): np.int32}


def decode(array: pa.Array | pa.ChunkedArray, sql_type: SqlType) -> pa.Array:
    """Encoded column -> plaintext column of ``sql_type``'s Arrow type."""
    arr = _combined(array)
    kind = sql_type.kind
    if kind in _BYTES_DECODERS:
        return _BYTES_DECODERS[kind](arr, sql_type)
    if kind == DECIMAL_KIND:
        return _int64_to_decimal(_cast(arr, pa.int64()), sql_type.arrow_type(), sql_type)
    if kind == FLOAT_KIND:
        return _cast(_int64_to_float(_cast(arr, pa.int64())), sql_type.arrow_type())
    if kind == DATE_KIND:  # days: the checked cast to int32, then the same bits as dates
        return _cast(arr, pa.int32()).view(pa.date32())
    if kind == TIMESTAMP_KIND:
        return pc.cast(arr, pa.timestamp("us"))
    if kind == TIMESTAMPTZ_KIND:
        return pc.cast(_cast(arr, pa.int64()), pa.timestamp("us", tz="UTC"))
    if kind == BOOL_KIND:
        return pc.not_equal(arr, 0)
    return _cast(arr, sql_type.arrow_type())


def _cast(arr: pa.Array, arrow_type: pa.DataType) -> pa.Array:
    """``arr`` as ``arrow_type``, with no kernel call when it is one already: a cast costs
    ~5-15 us whatever the length, which a point query pays on every column (issue 41)."""
    if arr.type == arrow_type:
        return arr
    if arrow_type == pa.int32() and arr.type == pa.int64() and len(arr) <= _SMALL_ROWS:
        return _small_int32(arr)
    return arr.cast(arrow_type)


# Up to this many rows (a point query's), a column is narrowed or checked in numpy
# or by Arrow's validation instead of a cast kernel: ~1-3 us against ~13 (issue 41).
_SMALL_ROWS = 64


def _small_int32(arr: pa.Array) -> pa.Array:
    """A few int64 values as int32, as the checked cast gives them (which raises past int32)."""
    if arr.null_count:  # a NULL's slot may hold any bits: the cast skips it
        return arr.cast(pa.int32())
    start = arr.offset
    words = np.frombuffer(arr.buffers()[1], dtype=np.int64, count=start + len(arr))[start:]
    if len(words) and (words.min() < -(1 << 31) or words.max() >= 1 << 31):
        return arr.cast(pa.int32())  # raises the cast's own error
    return pa.Array.from_buffers(pa.int32(), len(arr), [None, pa.py_buffer(words.astype(np.int32))])


# -- byte-string kinds ---------------------------------------------------------


def _binary(arr: pa.Array) -> pa.Array:
    if arr.type == pa.binary():
        return arr
    if arr.type == pa.string():  # the same buffers: every text is bytes
        return arr.view(pa.binary())
    return pc.cast(arr, pa.binary())


def _encode_string(arr: pa.Array, _: SqlType) -> pa.Array:
    return _binary(arr if arr.type == pa.string() else pc.cast(arr, pa.string()))


def _decode_string(arr: pa.Array, _: SqlType) -> pa.Array:
    if arr.type == pa.binary() and len(arr) <= _SMALL_ROWS:
        # the same buffers read as text; the full validation checks the UTF-8 as the cast does
        text = arr.view(pa.string())
        text.validate(full=True)
        return text
    return pc.cast(arr, pa.string())


def _encode_wide_decimal(arr: pa.Array, sql_type: SqlType) -> pa.Array:
    # a decimal's text always has the type's scale in digits: one text per value
    return _binary(pc.cast(pc.cast(arr, sql_type.arrow_type()), pa.string()))


def _decode_wide_decimal(arr: pa.Array, sql_type: SqlType) -> pa.Array:
    return pc.cast(pc.cast(arr, pa.string()), sql_type.arrow_type())


def _encode_blob(arr: pa.Array, _: SqlType) -> pa.Array:
    return _binary(arr.storage if isinstance(arr, pa.ExtensionArray) else arr)


def _decode_blob(arr: pa.Array, _: SqlType) -> pa.Array:
    return _binary(arr)


_HEX = np.full(256, 255, dtype=np.uint8)
_HEX[np.frombuffer(b"0123456789", np.uint8)] = np.arange(10, dtype=np.uint8)
_HEX[np.frombuffer(b"abcdef", np.uint8)] = np.arange(10, 16, dtype=np.uint8)
_HEX[np.frombuffer(b"ABCDEF", np.uint8)] = np.arange(10, 16, dtype=np.uint8)


def _encode_uuid(arr: pa.Array, _: SqlType) -> pa.Array:
    if isinstance(arr, pa.ExtensionArray):
        arr = arr.storage
    if pa.types.is_fixed_size_binary(arr.type):
        return _binary(arr)
    if not (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)):
        return _binary(arr)
    # 32 hex digits, in any of PostgreSQL's spellings (hyphens, braces, case)
    digits = pc.replace_substring_regex(pc.cast(arr, pa.string()), r"[-{}]", "")
    filled = digits.fill_null("0" * 32)
    if len(filled) and pc.any(pc.not_equal(pc.binary_length(filled), 32)).as_py():
        raise EncodingError("invalid input syntax for type uuid: it takes 32 hex digits")
    raw = np.frombuffer(pc.cast(filled, pa.binary(32)).buffers()[1], np.uint8)
    nibbles = _HEX[raw[filled.offset * 32 : (filled.offset + len(filled)) * 32]]
    if (nibbles == 255).any():
        raise EncodingError("invalid input syntax for type uuid: it takes 32 hex digits")
    packed = (nibbles[0::2] << 4) | nibbles[1::2]
    fixed = pa.Array.from_buffers(
        pa.binary(16), len(arr), [_validity(arr), pa.py_buffer(packed.tobytes())]
    )
    return _binary(fixed)


def _decode_uuid(arr: pa.Array, _: SqlType) -> pa.Array:
    fixed = pc.cast(arr, pa.binary(16))
    return pa.ExtensionArray.from_storage(pa.uuid(), fixed)


def _encode_interval(arr: pa.Array, _: SqlType) -> pa.Array:
    arr = pc.cast(arr, pa.month_day_nano_interval())
    # Arrow's own layout: int32 months, int32 days, int64 nanoseconds (little-endian)
    data = arr.buffers()[1].slice(arr.offset * 16, len(arr) * 16)
    return _binary(pa.Array.from_buffers(pa.binary(16), len(arr), [_validity(arr), data]))


def _decode_interval(arr: pa.Array, _: SqlType) -> pa.Array:
    fixed = pc.cast(arr.fill_null(b"\0" * 16), pa.binary(16))
    data = fixed.buffers()[1].slice(fixed.offset * 16, len(fixed) * 16)
    return pa.Array.from_buffers(pa.month_day_nano_interval(), len(arr), [_validity(arr), data])


def _encode_json(arr: pa.Array, _: SqlType) -> pa.Array:
    text = pc.cast(arr.storage if isinstance(arr, pa.ExtensionArray) else arr, pa.string())
    distinct = pc.unique(text).drop_null()
    canonical = pa.array([canonical_json(t) for t in distinct.to_pylist()], pa.string())
    return _binary(pc.take(canonical, pc.index_in(text, value_set=distinct)))


def _decode_json(arr: pa.Array, _: SqlType) -> pa.Array:
    return pa.ExtensionArray.from_storage(pa.json_(), pc.cast(arr, pa.string()))


def canonical_json(text: str) -> str:
    """JSON text as PostgreSQL's jsonb prints it: one text per jsonb value."""
    try:
        value = json.loads(text, parse_float=decimal.Decimal, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        raise EncodingError("invalid input syntax for type json") from None
    if "\\u0000" in text and _holds_nul(value):
        raise EncodingError(  # as jsonb refuses it (22P05): text cannot hold NUL
            "unsupported Unicode escape sequence: \\u0000 cannot be converted to text"
        )
    return _jsonb_text(value)


def _holds_nul(value: object) -> bool:
    if isinstance(value, dict):
        return any("\0" in k or _holds_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_holds_nul(v) for v in value)
    return isinstance(value, str) and "\0" in value


def _no_constant(name: str) -> object:
    raise ValueError(name)


def _jsonb_text(value: object) -> str:
    if isinstance(value, dict):
        keys = sorted(value, key=lambda k: (len(k.encode()), k.encode()))
        items = (f"{json.dumps(k, ensure_ascii=False)}: {_jsonb_text(value[k])}" for k in keys)
        return "{" + ", ".join(items) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_jsonb_text(v) for v in value) + "]"
    if isinstance(value, decimal.Decimal):  # numeric's spelling: no negative zero
        return format(value.copy_abs() if value.is_zero() else value, "f")
    return json.dumps(value, ensure_ascii=False)


def _encode_list(arr: pa.Array, sql_type: SqlType) -> pa.Array:
    with duckdb.connect() as connection:
        connection.register("frame", pa.table({"v": arr}))
        # as its own type: a JSON element's text is JSON, not a string (Arrow says VARCHAR[])
        found = connection.sql(
            f"SELECT CAST(to_json(CAST(v AS {sql_type.name})) AS VARCHAR) FROM frame"
        ).to_arrow_table()
    return _binary(found.column(0).combine_chunks())


def _decode_list(arr: pa.Array, sql_type: SqlType) -> pa.Array:
    with duckdb.connect() as connection:
        connection.register("frame", pa.table({"v": pc.cast(arr, pa.string())}))
        found = connection.sql(
            f"SELECT CAST(CAST(v AS JSON) AS {sql_type.name}) FROM frame"
        ).to_arrow_table()
    values = pc.cast(found.column(0).combine_chunks(), sql_type.arrow_type())
    if sql_type.element.kind == JSON_KIND:  # each element as jsonb prints it
        texts = values.values.to_pylist()
        elements = pa.array([None if t is None else canonical_json(t) for t in texts], pa.string())
        values = pa.ListArray.from_arrays(values.offsets, elements, mask=values.is_null())
    return values


def _lossless() -> duckdb.DuckDBPyConnection:
    connection = duckdb.connect()
    connection.execute("SET arrow_lossless_conversion = true")
    return connection


@functools.cache
def _lossless_arrow_type(name: str) -> pa.DataType:
    with _lossless() as connection:
        return connection.sql(f"SELECT CAST(NULL AS {name}) AS v").to_arrow_table().schema[0].type


def _duckdb_readable(
    arr: pa.Array | pa.ChunkedArray, sql_type: SqlType
) -> pa.Array | pa.ChunkedArray:
    """``arr`` as DuckDB reads back a value of ``sql_type``: DuckDB's plain Arrow output
    of a BIT is its storage bytes, which only the BIT extension type names as bits."""
    bit = pa.opaque(pa.binary(), "bit", "DuckDB")
    if sql_type.kind == BIT_KIND and pa.types.is_binary(arr.type):
        return pa.ExtensionArray.from_storage(bit, _combined(arr))
    return arr


def _encode_by_duckdb(arr: pa.Array | pa.ChunkedArray, sql_type: SqlType) -> pa.Array:
    """A value's text as DuckDB casts it, which DuckDB casts back exactly: one text per
    value for HUGEINT, UBIGINT and BIT (so DET answers ``=``). Nested values holding
    JSON go as JSON (DuckDB's text of a JSON element is not JSON's)."""
    as_text = (
        "CAST(to_json(CAST(v AS {0})) AS VARCHAR)"
        if _as_json(sql_type)
        else "CAST(CAST(v AS {0}) AS VARCHAR)"
    )
    if pa.types.is_decimal256(arr.type):  # exact_arrow's UHUGEINT: DuckDB reads no decimal256
        arr = pc.cast(arr, pa.string())
    with _lossless() as connection:
        connection.register("frame", pa.table({"v": _duckdb_readable(arr, sql_type)}))
        found = connection.sql(f"SELECT {as_text.format(sql_type.name)} FROM frame")
        return _binary(found.to_arrow_table().column(0).combine_chunks())


def _as_json(sql_type: SqlType) -> bool:
    return sql_type.kind == NESTED_KIND and "JSON" in sql_type.name.upper()


def _decode_by_duckdb(arr: pa.Array, sql_type: SqlType) -> pa.Array:
    from_text = "CAST(CAST(v AS JSON) AS {0})" if _as_json(sql_type) else "CAST(v AS {0})"
    with _lossless() as connection:
        connection.register("frame", pa.table({"v": pc.cast(arr, pa.string())}))
        found = connection.sql(f"SELECT {from_text.format(sql_type.name)} FROM frame")
        return found.to_arrow_table().column(0).combine_chunks()


_Coder = Callable[[pa.Array, SqlType], pa.Array]
_BYTES_ENCODERS: dict[str, _Coder] = {
    STRING_KIND: _encode_string,
    WIDE_DECIMAL_KIND: _encode_wide_decimal,
    BLOB_KIND: _encode_blob,
    UUID_KIND: _encode_uuid,
    INTERVAL_KIND: _encode_interval,
    JSON_KIND: _encode_json,
    LIST_KIND: _encode_list,
}
_BYTES_DECODERS: dict[str, _Coder] = {
    STRING_KIND: _decode_string,
    WIDE_DECIMAL_KIND: _decode_wide_decimal,
    BLOB_KIND: _decode_blob,
    UUID_KIND: _decode_uuid,
    INTERVAL_KIND: _decode_interval,
    JSON_KIND: _decode_json,
    LIST_KIND: _decode_list,
    HUGE_INT_KIND: _decode_by_duckdb,
    BIT_KIND: _decode_by_duckdb,
    NESTED_KIND: _decode_by_duckdb,
}


# result types DuckDB's Arrow output loses: a UHUGEINT above 2^127 wraps in DECIMAL(38, 0),
# a BIT comes out as its storage bytes (a HUGEINT's DECIMAL(38, 0) holds all of its 128
# bits, and is what plaintext DuckDB gives)
_RESULT_TEXT = {"UHUGEINT": pa.decimal256(39, 0), "BIT": None}


def exact_arrow(connection: duckdb.DuckDBPyConnection, sql: str) -> pa.Table:
    """The rows of ``sql`` as Arrow, exact for every type: a UHUGEINT as decimal256(39, 0)
    (each one whole), a BIT as the text of its bits."""
    return exact_reader(connection, sql, None).read_all()


def exact_reader(
    connection: duckdb.DuckDBPyConnection, sql: str, batch_rows: int | None
) -> pa.RecordBatchReader:
    """``exact_arrow``'s rows in batches of ``batch_rows`` (all at once: None), read as
    the query runs."""
    relation = connection.sql(sql)
    kinds = [str(t) for t in relation.types]
    if not any(kind in _RESULT_TEXT for kind in kinds):
        return _reader(relation, batch_rows)
    items = [
        f"CAST(#{i} AS VARCHAR)" if kind in _RESULT_TEXT else f"#{i}"
        for i, kind in enumerate(kinds, start=1)
    ]  # by position: a result's column names may repeat
    texts = _reader(connection.sql(f"SELECT {', '.join(items)} FROM ({sql})"), batch_rows)
    targets = [_RESULT_TEXT.get(kind) for kind in kinds]
    fields = [
        pa.field(name, target or field.type)
        for name, target, field in zip(relation.columns, targets, texts.schema, strict=True)
    ]

    def exact() -> Iterator[pa.RecordBatch]:
        for batch in texts:
            columns = [
                pc.cast(column, target) if target else column
                for column, target in zip(batch.columns, targets, strict=True)
            ]
            yield pa.RecordBatch.from_arrays(columns, schema=pa.schema(fields))

    return pa.RecordBatchReader.from_batches(pa.schema(fields), exact())


def _reader(relation: duckdb.DuckDBPyRelation, batch_rows: int | None) -> pa.RecordBatchReader:
    if batch_rows is None:
        table = relation.to_arrow_table()
        return pa.RecordBatchReader.from_batches(table.schema, table.to_batches())
    return relation.to_arrow_reader(batch_rows)


def result_array(arr: pa.Array, sql_type: SqlType) -> pa.Array:
    """A decoded column as a query's result holds it (``exact_arrow``'s types): the local
    plan reads a UHUGEINT as DuckDB's 16 bytes, a result gives it as decimal256(39, 0)."""
    if sql_type.kind not in LOSSLESS_KINDS:
        return _cast(arr, sql_type.arrow_type())
    with duckdb.connect() as connection:
        connection.register("frame", pa.table({"v": arr}))
        return exact_arrow(connection, "SELECT v FROM frame").column(0).combine_chunks()


@functools.cache
def result_type(sql_type: SqlType) -> pa.DataType:
    """The Arrow type of ``result_array``."""
    if sql_type.kind not in LOSSLESS_KINDS:
        return sql_type.arrow_type()
    with duckdb.connect() as connection:
        return exact_arrow(connection, f"SELECT CAST(NULL AS {sql_type.name})").schema[0].type


def no_values(sql_type: SqlType) -> pa.Array | pa.ChunkedArray:
    """An empty array of ``sql_type`` (pyarrow builds none of an extension type directly)."""
    if sql_type.kind in LOSSLESS_KINDS:  # DuckDB's extension types, at any depth
        with _lossless() as connection:
            empty = connection.sql(f"SELECT CAST(NULL AS {sql_type.name}) LIMIT 0")
            return empty.to_arrow_table().column(0)
    return pa.array([], type=sql_type.arrow_type())


def encode_scalar(value: object, sql_type: SqlType) -> int | bytes | None:
    """One plaintext value (as DuckDB returns it to Python) -> its encoding."""
    if value is None:
        return None
    if sql_type.kind in (HUGE_INT_KIND, BIT_KIND) and isinstance(value, (int, str)):
        return str(value).encode()  # DuckDB's text of an integer or of a BIT's bits
    if sql_type.kind == INT_KIND and type(value) is int:  # a key's value: no Arrow (~25 us)
        low, high = _int_range(sql_type.name)
        if low <= value <= high:
            return value
        raise EncodingError(f"{value!r} is not a value of type {sql_type.name}")
    try:
        arrow_value = pa.array([value], type=sql_type.arrow_type())
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
        raise EncodingError(f"{value!r} is not a value of type {sql_type.name}") from None
    encoded = encode(arrow_value, sql_type)[0].as_py()
    assert isinstance(encoded, (int, bytes))
    return encoded


@functools.cache
def _int_range(name: str) -> tuple[int, int]:
    """The smallest and largest value of an integer type (INT_KIND), as Arrow holds it."""
    limits = np.iinfo(_int_arrow(name).to_pandas_dtype())
    return int(limits.min), int(limits.max)


def int64_to_bytes(array: pa.Array) -> pa.Array:
    """int64 -> 8-byte big-endian binary (for schemes that take bytes), NULLs kept."""
    arr = _combined(array)
    values = arr.fill_null(0).to_numpy(zero_copy_only=False).astype(">i8")
    data = pa.py_buffer(values.tobytes())
    fixed = pa.Array.from_buffers(pa.binary(8), len(arr), [_validity(arr), data])
    return pc.cast(fixed, pa.binary())


def bytes_to_int64(array: pa.Array) -> pa.Array:
    """Inverse of ``int64_to_bytes``."""
    arr = _combined(array)
    fixed = pc.cast(arr.fill_null(b"\0" * 8), pa.binary(8))
    raw = np.frombuffer(fixed.buffers()[1], dtype=">i8", count=len(fixed) + fixed.offset)
    values = raw[fixed.offset :].astype(np.int64)
    return pa.Array.from_buffers(pa.int64(), len(arr), [_validity(arr), pa.py_buffer(values)])


def _validity(arr: pa.Array) -> pa.Buffer | None:
    if arr.null_count == 0:
        return None
    return pc.is_valid(arr).buffers()[1]


def _decimal_to_int64(arr: pa.Array) -> pa.Array:
    # decimal128 is 16-byte little-endian two's complement; p <= 18 fits the low word.
    words = np.frombuffer(arr.buffers()[1], dtype="<i8", count=2 * (len(arr) + arr.offset))
    low = words[2 * arr.offset :: 2].copy()
    return pa.Array.from_buffers(pa.int64(), len(arr), [_validity(arr), pa.py_buffer(low)])


def _int64_to_decimal(arr: pa.Array, arrow_type: pa.DataType, sql_type: SqlType) -> pa.Array:
    low = (arr.fill_null(0) if arr.null_count else arr).to_numpy(zero_copy_only=False)
    low = low.astype(np.int64, copy=False)
    limit = 10**sql_type.precision
    if len(low) and (int(low.max()) >= limit or int(low.min()) <= -limit):
        # the mark of a row whose per-row expression overflowed (veil.ciphers.encrypt)
        raise ValueOverflowError(
            f"a stored value lies beyond {sql_type.name}: a precomputed expression that "
            "DuckDB cannot compute for that row (numeric overflow)"
        )
    words = np.empty((len(low), 2), dtype="<i8")
    words[:, 0] = low
    words[:, 1] = low >> 63  # sign extension into the high word
    return pa.Array.from_buffers(arrow_type, len(arr), [_validity(arr), pa.py_buffer(words)])


def _float_to_int64(arr: pa.Array) -> pa.Array:
    floats = arr.fill_null(0.0).to_numpy(zero_copy_only=False).astype(np.float64)
    floats = np.where(floats == 0.0, 0.0, floats)  # -0.0 == 0.0 in SQL
    bits = floats.view(np.int64)
    ordered = np.where(bits < 0, bits ^ _SIGN_FLIP, bits)
    return pa.Array.from_buffers(pa.int64(), len(arr), [_validity(arr), pa.py_buffer(ordered)])


def _int64_to_float(arr: pa.Array) -> pa.Array:
    ordered = arr.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    bits = np.where(ordered < 0, ordered ^ _SIGN_FLIP, ordered)
    floats = bits.view(np.float64)
    return pa.Array.from_buffers(pa.float64(), len(arr), [_validity(arr), pa.py_buffer(floats)])
