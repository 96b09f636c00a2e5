"""Arrow record batches as PostgreSQL ``COPY ... FROM STDIN (FORMAT BINARY)`` data.

The binary COPY format is a header, then per row an int16 field count and per
field an int32 length (-1 for NULL) and the value's binary send form, all
big-endian, then an int16 -1 trailer. Encoding is vectorised: row and field
offsets come from cumulative sums of per-row sizes, and each column is
scattered into one output buffer with numpy. When every row has the same size
(fixed-width columns and equal-length ciphertexts, no NULLs: the usual shape
of an encrypted table) the buffer is a 2-D matrix and each column is one slice
assignment.
"""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa

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
_PIECE_BYTES = 8 << 20
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
    if batch.nbytes > _PIECE_BYTES and n > 1:  # bound the scatter's index arrays
        step = max(1, n * _PIECE_BYTES // batch.nbytes)
        return b"".join(encode_batch(batch.slice(at, step)) for at in range(0, n, step))
    columns = [_Column.of(array) for array in batch.columns]
    row_sizes = np.full(n, 2, np.int64)
    for column in columns:
        row_sizes += column.field_sizes
    row_starts = np.zeros(n, np.int64)
    np.cumsum(row_sizes[:-1], out=row_starts[1:])
    out = np.empty(int(row_sizes.sum()), np.uint8)
    if all(np.all(column.lengths == column.lengths[0]) for column in columns):
        _fill_uniform(out.reshape(n, int(row_sizes[0])), columns)
    else:
        _fill_scattered(out, row_starts, columns)
    return out.tobytes()


class _Column:
    """One column's values as big-endian bytes plus per-row lengths."""

    def __init__(
        self, valid: np.ndarray, lengths: np.ndarray, data: np.ndarray, starts: np.ndarray
    ):
        self.valid = valid  # bool per row
        self.lengths = lengths  # value bytes per row (0 for NULL)
        self.data = data  # uint8 value bytes
        self.starts = starts  # where each row's bytes begin in data
        self.field_sizes = 4 + lengths

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
        values = _fixed_values(array).astype(dtype, copy=False)
        width = dtype.itemsize
        data = np.ascontiguousarray(values).view(np.uint8)
        lengths = np.where(valid, width, 0).astype(np.int64)
        return cls(valid, lengths, data, np.arange(len(array), dtype=np.int64) * width)

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
        width = 2 * (4 + groups)
        data = np.ascontiguousarray(fields.astype(">i2")).view(np.uint8).reshape(-1)
        lengths = np.where(valid, width, 0).astype(np.int64)
        return cls(valid, lengths, data, np.arange(len(array), dtype=np.int64) * width)

    @classmethod
    def _variable(cls, array: pa.Array, valid: np.ndarray) -> _Column:
        large = pa.types.is_large_binary(array.type) or pa.types.is_large_string(array.type)
        offsets_type = np.dtype(np.int64 if large else np.int32)
        _, offsets_buffer, data_buffer = array.buffers()
        offsets = np.frombuffer(offsets_buffer, offsets_type)[
            array.offset : array.offset + len(array) + 1
        ]
        offsets = offsets.astype(np.int64)
        data = (
            np.frombuffer(data_buffer, np.uint8)
            if data_buffer is not None
            else np.empty(0, np.uint8)
        )
        lengths = np.where(valid, np.diff(offsets), 0)
        return cls(valid, lengths, data, offsets[:-1])

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


def _fill_uniform(rows: np.ndarray, columns: list[_Column]) -> None:
    """Every row has the same layout: write each column as one 2-D slice."""
    n = rows.shape[0]
    rows[:, 0:2] = np.frombuffer(struct.pack(">h", len(columns)), np.uint8)
    at = 2
    for column in columns:
        width = int(column.lengths[0]) if n else 0
        rows[:, at : at + 4] = column.length_headers()
        start = int(column.starts[0])
        rows[:, at + 4 : at + 4 + width] = column.data[start : start + n * width].reshape(n, width)
        at += 4 + width


def _fill_scattered(out: np.ndarray, row_starts: np.ndarray, columns: list[_Column]) -> None:
    """Rows differ in size: scatter each column's bytes to computed positions."""
    count = np.frombuffer(struct.pack(">h", len(columns)), np.uint8)
    out[row_starts[:, None] + np.arange(2)] = count
    field_starts = row_starts + 2
    for column in columns:
        out[field_starts[:, None] + np.arange(4)] = column.length_headers()
        _scatter_values(out, field_starts + 4, column)
        field_starts = field_starts + column.field_sizes


def _scatter_values(out: np.ndarray, destinations: np.ndarray, column: _Column) -> None:
    lengths = column.lengths
    total = int(lengths.sum())
    if total == 0:
        return
    # Position of every byte within its own value: 0..len-1 for each row in turn.
    firsts = np.repeat(np.cumsum(lengths) - lengths, lengths)
    within = np.arange(total, dtype=np.int64) - firsts
    out[np.repeat(destinations, lengths) + within] = column.data[
        np.repeat(column.starts, lengths) + within
    ]
