"""Arrow record batches as PostgreSQL ``COPY ... FROM STDIN (FORMAT BINARY)`` data.

The binary COPY format is a header, then per row an int16 field count and per
field an int32 length (-1 for NULL) and the value's binary send form, all
big-endian, then an int16 -1 trailer. Encoding is vectorised, with no loop
over rows. When every row has the same size
(fixed-width columns without NULLs) the buffer is a 2-D matrix and each
column is one slice assignment; otherwise Arrow's ``binary_join_element_wise``
concatenates each row's fields (length word + value) in C++.
"""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from veil.backends.base import BackendError

HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)
TRAILER = struct.pack(">h", -1)

# Days from 1970-01-01 (Arrow) to 2000-01-01 (PostgreSQL's epoch).
_PG_EPOCH_DAYS = 10957
_PG_EPOCH_MICROS = _PG_EPOCH_DAYS * 86_400_000_000

# Arrow type -> (PostgreSQL type, big-endian numpy dtype) for fixed-width columns.
_FIXED = {
    pa.int16(): ("smallint", ">i2"),
    pa.int32(): ("integer", ">i4"),
    pa.int64(): ("bigint", ">i8"),
    pa.float32(): ("real", ">f4"),
    pa.float64(): ("double precision", ">f8"),
    pa.bool_(): ("boolean", "u1"),
    pa.date32(): ("date", ">i4"),
    pa.timestamp("us"): ("timestamp", ">i8"),
}
_PIECE_BYTES = 64 << 20
_NOTHING = pa.scalar(b"", pa.binary())
_VARIABLE = {pa.binary(): "bytea", pa.string(): "text"}


def postgres_type(arrow_type: pa.DataType) -> str:
    """The PostgreSQL column type Veil stores an Arrow column as."""
    if arrow_type in _FIXED:
        return _FIXED[arrow_type][0]
    if pa.types.is_decimal(arrow_type) and _numeric_fits(arrow_type):
        return f"numeric({arrow_type.precision}, {arrow_type.scale})"
    variable = _variable_type(arrow_type)
    if variable is not None:
        return _VARIABLE[variable]
    raise BackendError(
        f"the PostgreSQL backend cannot store Arrow type {arrow_type}; server columns are "
        "integers, floats, booleans, dates, timestamps, binary, text or decimals of at "
        "most 15 digits"
    )


def _variable_type(arrow_type: pa.DataType) -> pa.DataType | None:
    if pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type):
        return pa.binary()
    if (
        pa.types.is_string(arrow_type)
        or pa.types.is_large_string(arrow_type)
        or pa.types.is_string_view(arrow_type)
    ):
        return pa.string()
    if pa.types.is_binary_view(arrow_type):
        return pa.binary()
    return None


def _numeric_fits(arrow_type: pa.Decimal128Type) -> bool:
    """Decimals whose unscaled values, padded to a whole base-10000 digit, fit int64."""
    return bool(
        arrow_type.bit_width == 128 and arrow_type.precision + (-arrow_type.scale) % 4 <= 18
    )


def encode_batch(batch: pa.RecordBatch) -> bytes:
    """The rows of ``batch`` in binary COPY form (no header or trailer)."""
    n = batch.num_rows
    if n == 0:
        return b""
    if batch.nbytes > _PIECE_BYTES and n > 1:  # keep Arrow's int32 binary offsets in range
        step = max(1, n * _PIECE_BYTES // batch.nbytes)
        return b"".join(encode_batch(batch.slice(at, step)) for at in range(0, n, step))
    columns = [_Column.of(array) for array in batch.columns]
    if all(column.fixed_width is not None and column.valid.all() for column in columns):
        return _uniform_rows(n, columns)
    return _joined_rows(n, columns)


class _Column:
    """One column's values as big-endian bytes plus per-row lengths."""

    def __init__(
        self,
        valid: np.ndarray,
        lengths: np.ndarray,
        *,
        matrix: np.ndarray | None = None,
        values: pa.Array | None = None,
    ):
        self.valid = valid  # bool per row
        self.lengths = lengths  # value bytes per row (0 for NULL)
        self.matrix = matrix  # fixed-width columns: (rows, width) big-endian bytes
        self.values = values  # variable-width columns: binary, NULLs as empty values
        self.fixed_width = None if matrix is None else matrix.shape[1]

    @classmethod
    def of(cls, array: pa.Array) -> _Column:
        valid = _validity(array)
        if array.type in _FIXED:
            return cls._fixed(array, valid, np.dtype(_FIXED[array.type][1]))
        if pa.types.is_decimal(array.type) and _numeric_fits(array.type):
            return cls._numeric(array, valid)
        variable = _variable_type(array.type)
        if variable is not None:
            if pa.types.is_string_view(array.type) or pa.types.is_binary_view(array.type):
                array = array.cast(variable)
            return cls._variable(array, valid)
        postgres_type(array.type)  # raises the explanatory error
        raise AssertionError("unreachable")

    @classmethod
    def _fixed(cls, array: pa.Array, valid: np.ndarray, dtype: np.dtype) -> _Column:
        values = np.ascontiguousarray(_fixed_values(array).astype(dtype, copy=False))
        matrix = values.view(np.uint8).reshape(len(array), dtype.itemsize)
        return cls(valid, np.where(valid, dtype.itemsize, 0), matrix=matrix)

    @classmethod
    def _numeric(cls, array: pa.Array, valid: np.ndarray) -> _Column:
        """NUMERIC's send form: ndigits, weight, sign, dscale, then base-10000 digits.

        Every value gets the same number of digits (PostgreSQL strips the
        leading and trailing zero digits on receipt), so the column is fixed-width.
        """
        scale = array.type.scale
        pad = (-scale) % 4  # scale up to a whole number of base-10000 fraction digits
        groups = (array.type.precision + pad + 3) // 4
        words = np.frombuffer(array.buffers()[1], "<i8")[
            2 * array.offset : 2 * (array.offset + len(array)) : 2
        ]
        unscaled = np.where(valid, words, 0)  # low words: exact for precision <= 18
        magnitude = np.abs(unscaled) * np.int64(10**pad)
        header = [groups, groups - (scale + pad) // 4 - 1, 0, scale]
        fields = np.empty((len(array), 4 + groups), np.int64)
        fields[:, :4] = header
        fields[:, 2] = np.where(unscaled < 0, 0x4000, 0)
        for digit in range(groups - 1, -1, -1):
            fields[:, 4 + digit] = magnitude % 10000
            magnitude //= 10000
        matrix = np.ascontiguousarray(fields.astype(">i2")).view(np.uint8)
        return cls(valid, np.where(valid, matrix.shape[1], 0), matrix=matrix)

    @classmethod
    def _variable(cls, array: pa.Array, valid: np.ndarray) -> _Column:
        values = array.cast(pa.binary()).fill_null(b"")
        lengths = pc.binary_length(values).to_numpy(zero_copy_only=False).astype(np.int64)
        if len(values) and valid.all() and np.all(lengths == lengths[0]):
            # Equal-length values (ciphertexts of a fixed-size format): a byte matrix.
            offsets = np.frombuffer(values.buffers()[1], np.int32)[values.offset :][
                : len(values) + 1
            ]
            data = np.frombuffer(values.buffers()[2], np.uint8)[offsets[0] : offsets[-1]]
            return cls(valid, lengths, matrix=data.reshape(len(values), int(lengths[0])))
        return cls(valid, lengths, values=values)

    def fields(self) -> pa.Array:
        """Every row's field (length word, then the value's bytes) as a binary array."""
        headers = self.length_headers()
        if self.values is not None:
            return pc.binary_join_element_wise(_binary_rows(headers), self.values, _NOTHING)
        assert self.matrix is not None
        full = _binary_rows(np.concatenate([headers, self.matrix], axis=1))
        if self.valid.all():
            return full
        return pc.if_else(pa.array(self.valid), full, _binary_rows(headers))

    def length_headers(self) -> np.ndarray:
        """The int32 length word of every field, -1 for NULL, as (rows, 4) bytes."""
        words = np.where(self.valid, self.lengths, -1).astype(">i4")
        return words.view(np.uint8).reshape(-1, 4)


def _validity(array: pa.Array) -> np.ndarray:
    if array.null_count == 0:
        return np.ones(len(array), bool)
    return np.asarray(array.is_valid().to_numpy(zero_copy_only=False), bool)


def _fixed_values(array: pa.Array) -> np.ndarray:
    if pa.types.is_boolean(array.type):
        return array.fill_null(False).to_numpy(zero_copy_only=False).astype(np.uint8)
    if pa.types.is_date32(array.type):
        days = array.cast(pa.int32()).fill_null(0).to_numpy()
        return days - np.int32(_PG_EPOCH_DAYS)
    if pa.types.is_timestamp(array.type):
        micros = array.cast(pa.int64()).fill_null(0).to_numpy()
        return micros - np.int64(_PG_EPOCH_MICROS)
    return array.fill_null(0).to_numpy()


def _uniform_rows(n: int, columns: list[_Column]) -> bytes:
    """Every row has the same layout: write each column as one 2-D slice."""
    widths = [4 + int(column.fixed_width or 0) for column in columns]
    rows = np.empty((n, 2 + sum(widths)), np.uint8)
    rows[:, 0:2] = np.frombuffer(struct.pack(">h", len(columns)), np.uint8)
    at = 2
    for column, width in zip(columns, widths, strict=True):
        assert column.matrix is not None
        rows[:, at : at + 4] = column.length_headers()
        rows[:, at + 4 : at + width] = column.matrix
        at += width
    return rows.tobytes()


def _joined_rows(n: int, columns: list[_Column]) -> bytes:
    """Rows of different sizes: Arrow joins each row's fields, in C++, into one buffer."""
    count = np.tile(np.frombuffer(struct.pack(">h", len(columns)), np.uint8), (n, 1))
    parts = [_binary_rows(count), *(column.fields() for column in columns)]
    rows = pc.binary_join_element_wise(*parts, _NOTHING)
    offsets = np.frombuffer(rows.buffers()[1], np.int32)[rows.offset : rows.offset + n + 1]
    start, end = int(offsets[0]), int(offsets[-1])
    return rows.buffers()[2].slice(start, end - start).to_pybytes()


def _binary_rows(matrix: np.ndarray) -> pa.Array:
    """Each row of a (rows, width) byte matrix as one binary value."""
    matrix = np.ascontiguousarray(matrix)
    rows, width = matrix.shape
    fixed = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(width), rows, [None, pa.py_buffer(matrix)]
    )
    return fixed.cast(pa.binary())
