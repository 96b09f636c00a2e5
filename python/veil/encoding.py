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
| VARCHAR               | UTF-8 bytes                               |

Everything is vectorised over Arrow arrays; NULL stays NULL.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from veil.errors import VeilError

INT_KIND = "int"
DECIMAL_KIND = "decimal"
DATE_KIND = "date"
TIMESTAMP_KIND = "timestamp"
BOOL_KIND = "bool"
FLOAT_KIND = "float"
STRING_KIND = "string"

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
_FLOAT_TYPES = {"DOUBLE", "REAL", "FLOAT"}
_STRING_TYPES = {"VARCHAR", "TEXT", "STRING"}
_DECIMAL = re.compile(r"(?:DECIMAL|NUMERIC)\((\d+),\s*(\d+)\)\Z")
_SIGN_FLIP = np.int64(0x7FFF_FFFF_FFFF_FFFF)


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
        return self.kind != STRING_KIND

    def arrow_type(self) -> pa.DataType:
        kind = self.kind
        if kind == DECIMAL_KIND:
            match = _DECIMAL.match(self.name)
            assert match is not None
            return pa.decimal128(int(match.group(1)), int(match.group(2)))
        if kind == INT_KIND:
            return _int_arrow(self.name)
        return {
            DATE_KIND: pa.date32(),
            TIMESTAMP_KIND: pa.timestamp("us"),
            BOOL_KIND: pa.bool_(),
            FLOAT_KIND: pa.float64() if self.name != "REAL" else pa.float32(),
            STRING_KIND: pa.string(),
        }[kind]


def normalize_type(name: str) -> str:
    """DuckDB's spelling of a type, checked to be one Veil can encode."""
    text = name.strip().upper().replace(" ", "")
    text = {"INT": "INTEGER", "TEXT": "VARCHAR", "STRING": "VARCHAR", "FLOAT": "REAL"}.get(
        text, text
    )
    if text.startswith("VARCHAR("):
        text = "VARCHAR"
    _kind_of(text)
    return text


def _kind_of(name: str) -> str:
    if name in _INT_TYPES:
        return INT_KIND
    match = _DECIMAL.match(name)
    if match:
        if int(match.group(1)) > 18:
            raise EncodingError(f"{name} does not fit in 64 bits; use DECIMAL(18,s) or narrower")
        return DECIMAL_KIND
    if name == "DATE":
        return DATE_KIND
    if name in ("TIMESTAMP", "DATETIME"):
        return TIMESTAMP_KIND
    if name == "BOOLEAN":
        return BOOL_KIND
    if name in _FLOAT_TYPES:
        return FLOAT_KIND
    if name in _STRING_TYPES:
        return STRING_KIND
    raise EncodingError(
        f"SQL type {name} has no Veil encoding; cast the column to one of INTEGER, BIGINT, "
        "DECIMAL(p<=18,s), DATE, TIMESTAMP, BOOLEAN, DOUBLE or VARCHAR before loading"
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
    arr = _combined(array)
    kind = sql_type.kind
    if kind == STRING_KIND:
        return pc.cast(pc.cast(arr, pa.string()), pa.binary())
    if kind == DECIMAL_KIND:
        return _decimal_to_int64(pc.cast(arr, sql_type.arrow_type()))
    if kind == FLOAT_KIND:
        return _float_to_int64(pc.cast(arr, pa.float64()))
    if kind == DATE_KIND:
        return pc.cast(pc.cast(pc.cast(arr, pa.date32()), pa.int32()), pa.int64())
    if kind == TIMESTAMP_KIND:
        return pc.cast(pc.cast(arr, pa.timestamp("us")), pa.int64())
    if kind == BOOL_KIND:
        return pc.cast(pc.cast(arr, pa.bool_()), pa.int64())
    return pc.cast(arr, pa.int64())


def decode(array: pa.Array | pa.ChunkedArray, sql_type: SqlType) -> pa.Array:
    """Encoded column -> plaintext column of ``sql_type``'s Arrow type."""
    arr = _combined(array)
    kind = sql_type.kind
    if kind == STRING_KIND:
        return pc.cast(arr, pa.string())
    if kind == DECIMAL_KIND:
        return _int64_to_decimal(pc.cast(arr, pa.int64()), sql_type.arrow_type(), sql_type)
    if kind == FLOAT_KIND:
        return pc.cast(_int64_to_float(pc.cast(arr, pa.int64())), sql_type.arrow_type())
    if kind == DATE_KIND:
        return pc.cast(pc.cast(arr, pa.int32()), pa.date32())
    if kind == TIMESTAMP_KIND:
        return pc.cast(arr, pa.timestamp("us"))
    if kind == BOOL_KIND:
        return pc.not_equal(arr, 0)
    return pc.cast(arr, sql_type.arrow_type())


def encode_scalar(value: object, sql_type: SqlType) -> int | bytes | None:
    """One plaintext value (as DuckDB returns it to Python) -> its encoding."""
    if value is None:
        return None
    arrow_value = pa.array([value], type=sql_type.arrow_type())
    encoded = encode(arrow_value, sql_type)[0].as_py()
    assert isinstance(encoded, (int, bytes))
    return encoded


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
    low = arr.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    limit = 10**sql_type.precision
    if len(low) and (int(low.max()) >= limit or int(low.min()) <= -limit):
        # the mark of a row whose per-row expression overflowed (veil.exec.encrypt)
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
