"""A query result's Arrow table as Python rows, for the DB-API cursor and the CLI.

Values come out as DuckDB's own Python API gives them, so code moving from
plaintext DuckDB to Veil sees the same objects: MAPs as dicts; DATE and
TIMESTAMP ``infinity`` / ``-infinity`` as the largest / smallest Python date
or datetime; other values beyond Python's years 1-9999 as DuckDB's text;
INTERVALs as timedeltas (a month is 30 days, as DuckDB and psycopg count it).
"""

from __future__ import annotations

import datetime as dt

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

Row = tuple[object, ...]

_EPOCH = dt.date(1970, 1, 1)
# DuckDB's infinities as Arrow stores them (days for DATE, microseconds for TIMESTAMP)
_DATE_INFINITY = 2**31 - 1
_TIMESTAMP_INFINITY = 2**63 - 1
_WHOLE_128 = pa.decimal256(39, 0)
_DAYS = ((dt.date.min - _EPOCH).days, (dt.date.max - _EPOCH).days)
_FEW = 64  # rows checked value by value in Python
# types whose Python values are Arrow's own, as DuckDB gives them
_AS_THEY_ARE = frozenset(
    [
        *(pa.bool_(), pa.float32(), pa.float64()),
        *(pa.string(), pa.large_string(), pa.binary(), pa.large_binary()),
        *(pa.int8(), pa.int16(), pa.int32(), pa.int64()),
        *(pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64()),
    ]
)


def table_rows(table: pa.Table) -> list[Row]:
    """Rows as tuples (column names may repeat, so not via dicts)."""
    return list(zip(*(column_values(c) for c in table.columns), strict=True))


def column_values(column: pa.ChunkedArray | pa.Array) -> list[object]:
    if column.type in _AS_THEY_ARE or pa.types.is_decimal128(column.type):
        return column.to_pylist()  # no type below needs a check (~5-10 us a column)
    if pa.types.is_date32(column.type):
        return _temporal(column, pa.int32(), _DATE_INFINITY, _DAYS, dt.date.max, dt.date.min)
    if pa.types.is_timestamp(column.type) and column.type.tz is None:
        scale = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}[column.type.unit]
        low = int((dt.datetime.min - dt.datetime(1970, 1, 1)).total_seconds()) * scale
        high = int((dt.datetime.max - dt.datetime(1970, 1, 1)).total_seconds()) * scale
        return _temporal(
            column, pa.int64(), _TIMESTAMP_INFINITY, (low, high), dt.datetime.max, dt.datetime.min
        )
    if pa.types.is_interval(column.type):
        return _timedeltas(column)
    if _holds_duckdb_types(column.type):
        return _as_duckdb_gives(column)
    if pa.types.is_fixed_size_list(column.type):  # DuckDB's ARRAY: a tuple, as duckdb gives it
        values = duckdb_maps(column).to_pylist(maps_as_pydicts="strict")
        return [None if v is None else tuple(v) for v in values]
    if column.type == _WHOLE_128:  # a UHUGEINT (veil.encoding.exact_arrow)
        return [None if v is None else int(v) for v in column.to_pylist()]
    return duckdb_maps(column).to_pylist(maps_as_pydicts="strict")


def _holds_duckdb_types(kind: pa.DataType) -> bool:
    """Does ``kind`` hold DuckDB's own Arrow types (HUGEINT, BIT: decrypted late)?"""
    if isinstance(kind, pa.OpaqueType) and kind.vendor_name == "DuckDB":
        return True
    return any(_holds_duckdb_types(kind.field(i).type) for i in range(kind.num_fields))


def _as_duckdb_gives(column: pa.ChunkedArray | pa.Array) -> list[object]:
    """The values as DuckDB's Python API gives them, by DuckDB itself: a HUGEINT as an
    int, a BIT as the text of its bits, at any depth."""
    with duckdb.connect() as connection:
        connection.register("frame", pa.table({"v": column}))
        return [row[0] for row in connection.execute("SELECT v FROM frame").fetchall()]


def duckdb_maps(column: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
    """``column`` with each MAP whose keys are lists, structs or maps (no Python dict
    can hold them) as DuckDB's Python API gives it: ``{'key': [...], 'value': [...]}``.

    Other MAPs stay MAPs (dicts); the change is of whole arrays, at any depth.
    """
    if not _unhashable_maps(column.type):
        return column
    if isinstance(column, pa.ChunkedArray):
        return pa.chunked_array([_as_duckdb(chunk) for chunk in column.chunks])
    return _as_duckdb(column)


def _unhashable_maps(kind: pa.DataType) -> bool:
    if isinstance(kind, pa.MapType) and _unhashable(kind.key_type):
        return True
    return any(_unhashable_maps(kind.field(i).type) for i in range(kind.num_fields))


def _unhashable(kind: pa.DataType) -> bool:
    nested = pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_struct(kind)
    return nested or pa.types.is_fixed_size_list(kind) or isinstance(kind, pa.MapType)


def _as_duckdb(array: pa.Array) -> pa.Array:
    """One array of ``duckdb_maps``, children first (a copy with offset 0 makes the
    children's offsets line up with the parent's)."""
    kind = array.type
    if not _unhashable_maps(kind):
        return array
    array = pa.concat_arrays([array]) if array.offset else array
    mask = array.is_null() if array.null_count else None
    if isinstance(kind, pa.MapType):
        keys, items = _as_duckdb(array.keys), _as_duckdb(array.items)
        if not _unhashable(kind.key_type):
            return pa.MapArray.from_arrays(array.offsets, keys, items, mask=mask)
        lists = [pa.ListArray.from_arrays(array.offsets, part) for part in (keys, items)]
        return pa.StructArray.from_arrays(lists, names=["key", "value"], mask=mask)
    if pa.types.is_struct(kind):
        fields = [_as_duckdb(array.field(i)) for i in range(kind.num_fields)]
        names = [kind.field(i).name for i in range(kind.num_fields)]
        return pa.StructArray.from_arrays(fields, names=names, mask=mask)
    if pa.types.is_fixed_size_list(kind):
        values = _as_duckdb(array.values)
        return pa.FixedSizeListArray.from_arrays(values, kind.list_size, mask=mask)
    builder = pa.LargeListArray if pa.types.is_large_list(kind) else pa.ListArray
    return builder.from_arrays(array.offsets, _as_duckdb(array.values), mask=mask)


_MICROS_A_DAY = 86_400_000_000
_MONTH_DAY_NANO = np.dtype([("months", "<i4"), ("days", "<i4"), ("nanos", "<i8")])


def _timedeltas(column: pa.ChunkedArray | pa.Array) -> list[object]:
    """Intervals as DuckDB gives them to Python: timedeltas, a month counted as 30 days."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    parts = np.frombuffer(arr.buffers()[1], _MONTH_DAY_NANO, len(arr) + arr.offset)[arr.offset :]
    days = parts["months"].astype(np.int64) * 30 + parts["days"]
    micros = days * _MICROS_A_DAY + parts["nanos"] // 1000
    valid = arr.is_valid().to_numpy(zero_copy_only=False)
    return pa.array(micros, pa.duration("us"), mask=~valid).to_pylist()


def _temporal(
    column: pa.ChunkedArray | pa.Array,
    storage: pa.DataType,
    infinity: int,
    span: tuple[int, int],
    largest: object,
    smallest: object,
) -> list[object]:
    raw = pc.cast(column, storage)
    # a point query's row: four kernels cost more than a Python loop over it
    if len(raw) <= _FEW and all(n is None or span[0] <= n <= span[1] for n in raw.to_pylist()):
        return column.to_pylist()
    outside = pc.or_(pc.less(raw, span[0]), pc.greater(raw, span[1]))
    if not pc.any(outside).as_py():
        return column.to_pylist()
    values = pc.if_else(outside, pa.scalar(None, column.type), column).to_pylist()
    for index in pc.indices_nonzero(pc.fill_null(outside, False)).to_pylist():
        number = raw[index].as_py()
        values[index] = (
            largest
            if number == infinity
            else smallest
            if number == -infinity
            else _text(number, column.type)
        )
    return values


def _text(number: int, kind: pa.DataType) -> str:
    """DuckDB's text for a date or timestamp beyond Python's years (numpy reaches them)."""
    unit: str = "D" if pa.types.is_date32(kind) else kind.unit
    day, _, time = str(np.datetime64(number, unit)).partition("T")  # type: ignore[call-overload]
    if not time:
        return day
    whole, _, fraction = time.partition(".")
    fraction = fraction.rstrip("0")
    return f"{day} {whole}{'.' + fraction if fraction else ''}"
