"""Arrow results as PostgreSQL text columns, batch by batch, for the wire (vectorised).

Each column of a batch leaves as Arrow-style buffers of its values' text
forms (``veil_wire`` turns them into ``DataRow``s, and into binary fields
where the client asks): pyarrow casts numbers, decimals, dates and strings;
booleans become ``t``/``f``, float infinities and NaN PostgreSQL's spellings,
bytea stays raw bytes, and any other type is cast by DuckDB.
"""

from __future__ import annotations

from collections.abc import Iterator

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

BATCH_ROWS = 16_384

Column = tuple[bool, int, bytes, bytes, bytes | None]


def batches(table: pa.Table, timezone: str = "UTC") -> Iterator[tuple[int, list[Column]]]:
    for batch in table.to_batches(max_chunksize=BATCH_ROWS):
        yield encode(batch, timezone)


def encode(batch: pa.RecordBatch, timezone: str = "UTC") -> tuple[int, list[Column]]:
    """One batch's rows as wire text columns (timestamptz shown in ``timezone``)."""
    return batch.num_rows, [_column(c, timezone) for c in batch.columns]


def _column(values: pa.Array, timezone: str) -> Column:
    kind = values.type
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return _buffers(values.cast(pa.large_binary()), raw=True)
    return strings(as_text(values, timezone))


def as_text(values: pa.Array, timezone: str = "UTC") -> pa.Array:
    """Each value's PostgreSQL text form (NULL stays NULL); timestamptz in ``timezone``."""
    kind = values.type
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if isinstance(kind, pa.JsonType):
        return pc.cast(values.storage, pa.large_string())
    if isinstance(kind, pa.UuidType):
        return _uuid_text(values)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return _array_text(values, timezone)
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):  # an array's elements
        hexed = pc.binary_join_element_wise("\\x", _hex(values), "")
        return pc.cast(hexed, pa.large_string())
    if pa.types.is_boolean(kind):
        return pc.if_else(values, "t", "f").cast(pa.large_string())
    if pa.types.is_floating(kind):
        text = pc.cast(values, pa.large_string())
        for arrow, postgres in (("inf", "Infinity"), ("-inf", "-Infinity"), ("nan", "NaN")):
            text = pc.if_else(pc.equal(text, arrow), postgres, text)
        return text
    if (
        pa.types.is_integer(kind)
        or pa.types.is_decimal(kind)
        or pa.types.is_date(kind)
        or pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
    ):
        return pc.cast(values, pa.large_string())
    if pa.types.is_interval(kind):
        return pa.array([_interval(v) for v in values.to_pylist()], pa.large_string())
    # timestamps, times, structs: DuckDB's text forms
    connection = duckdb.connect()
    connection.execute("SET TimeZone = ?", [timezone])  # timestamptz in the session's zone
    connection.register("frame", pa.table({"v": values}))
    cast = connection.sql("SELECT CAST(v AS VARCHAR) FROM frame").to_arrow_table()
    return pc.cast(cast.column(0).combine_chunks(), pa.large_string())


def _interval(value: pa.MonthDayNano | None) -> str | None:
    """An interval as PostgreSQL's ``postgres`` IntervalStyle prints it
    (``1 year 2 mons -3 days +04:05:06.5``: a field after a negative one is signed)."""
    if value is None:
        return None
    months, days, nanoseconds = value.months, value.days, value.nanoseconds
    years, months = int(months / 12), months - 12 * int(months / 12)  # toward zero, as C
    parts: list[str] = []
    before = False  # the field before was negative
    for number, unit in ((years, "year"), (months, "mon"), (days, "day")):
        if number:
            sign = "+" if before and number > 0 else ""
            parts.append(f"{sign}{number} {unit}{'' if number == 1 else 's'}")
            before = number < 0
    micros = int(nanoseconds / 1000)
    if not parts or micros:
        sign = "-" if micros < 0 else ("+" if before else "")
        seconds, fraction = divmod(abs(micros), 1_000_000)
        minutes, seconds = divmod(seconds, 60)
        hours, minutes = divmod(minutes, 60)
        clock = f"{sign}{hours:02d}:{minutes:02d}:{seconds:02d}"
        if fraction:
            clock += f".{fraction:06d}".rstrip("0")
        parts.append(clock)
    return " ".join(parts)


# an array element array_out quotes: empty, NULL, or holding a delimiter, quote,
# backslash or white space
_QUOTED = r'^$|^[Nn][Uu][Ll][Ll]$|[{},"\\\s]'


def _array_text(values: pa.Array, timezone: str) -> pa.Array:
    """PostgreSQL's array text forms, ``{1,NULL,"a b"}``, each element in its own
    text form (nested lists are arrays of more dimensions: ``{{1,2},{3,4}}``)."""
    if isinstance(values, pa.LargeListArray):
        values = values.cast(pa.list_(values.type.value_type))
    start, end = values.offsets[0].as_py(), values.offsets[-1].as_py()
    elements = values.values.slice(start, end - start)
    text = as_text(elements, timezone).cast(pa.string())
    nested = pa.types.is_list(elements.type) or pa.types.is_large_list(elements.type)
    if not nested:
        quote = pc.match_substring_regex(text, _QUOTED)
        escaped = pc.replace_substring(pc.replace_substring(text, "\\", "\\\\"), '"', '\\"')
        text = pc.if_else(quote, pc.binary_join_element_wise('"', escaped, '"', ""), text)
    text = pc.fill_null(text, "NULL")
    offsets = pc.subtract(values.offsets, start)
    lists = pa.ListArray.from_arrays(offsets, text.cast(pa.string()), mask=values.is_null())
    joined = pc.binary_join(lists, ",")
    return pc.cast(pc.binary_join_element_wise("{", joined, "}", ""), pa.large_string())


def _hex(values: pa.Array) -> pa.Array:
    """Each byte string as lower-case hex digits."""
    raw = values.to_pylist()
    return pa.array([None if v is None else v.hex() for v in raw], pa.string())


_HEX_DIGITS = np.frombuffer(b"0123456789abcdef", np.uint8)
# where each of a UUID's 32 hex digits goes in its 36-character text
_UUID_PLACES = np.array([i for i in range(36) if i not in (8, 13, 18, 23)])


def _uuid_text(values: pa.Array) -> pa.Array:
    """UUIDs' text forms, 8-4-4-4-12 lowercase hex digits (vectorised)."""
    n = len(values)
    fixed = values.storage
    raw = np.frombuffer(fixed.buffers()[1], np.uint8)[fixed.offset * 16 : (fixed.offset + n) * 16]
    raw = raw.reshape(n, 16)
    text = np.full((n, 36), ord("-"), np.uint8)
    text[:, _UUID_PLACES[0::2]] = _HEX_DIGITS[raw >> 4]
    text[:, _UUID_PLACES[1::2]] = _HEX_DIGITS[raw & 15]
    validity = None if values.null_count == 0 else values.is_valid().buffers()[1]
    chars = pa.Array.from_buffers(pa.binary(36), n, [validity, pa.py_buffer(text.tobytes())])
    return pc.cast(pc.cast(chars, pa.binary()), pa.large_string())


def strings(values: pa.Array) -> Column:
    """A string array as a text column for the wire."""
    return _buffers(values.cast(pa.large_string()), raw=False)


def _buffers(values: pa.Array, *, raw: bool) -> Column:
    """Offsets rebased to 0 and the data they cover: a slice never copies its whole buffers."""
    _, offsets_buffer, data_buffer = values.buffers()
    n = len(values)
    offsets = np.frombuffer(offsets_buffer, dtype=np.int64, count=n + 1, offset=values.offset * 8)
    start, end = int(offsets[0]), int(offsets[-1])
    data = data_buffer.slice(start, end - start).to_pybytes() if data_buffer is not None else b""
    validity = None
    if values.null_count:
        valid = values.is_valid().to_numpy(zero_copy_only=False)
        validity = np.packbits(valid, bitorder="little").tobytes()
    return raw, 0, (offsets - start).tobytes(), data, validity
