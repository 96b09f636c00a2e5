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

# PostgreSQL's array text form: {a,"b c",NULL}; quoted where an element is
# empty, NULL-like or holds a delimiter, quote, backslash or space
_ARRAY = r"""
SELECT CASE WHEN v IS NULL THEN NULL ELSE '{{' || array_to_string(list_transform(v, lambda x:
  CASE WHEN x IS NULL THEN 'NULL'
       WHEN regexp_matches({element}, '^$|^null$|[{{}},"\\\s]', 'i')
       THEN '"' || replace(replace({element}, '\', '\\'), '"', '\"') || '"'
       ELSE {element} END), ',') || '}}' END
FROM frame
"""

Column = tuple[bool, int, bytes, bytes, bytes | None]


def batches(table: pa.Table) -> Iterator[tuple[int, list[Column]]]:
    for batch in table.to_batches(max_chunksize=BATCH_ROWS):
        yield encode(batch)


def encode(batch: pa.RecordBatch) -> tuple[int, list[Column]]:
    """One batch's rows as wire text columns."""
    return batch.num_rows, [_column(c) for c in batch.columns]


def _column(values: pa.Array) -> Column:
    kind = values.type
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return _buffers(values.cast(pa.large_binary()), raw=True)
    return strings(as_text(values))


def as_text(values: pa.Array) -> pa.Array:
    """Each value's PostgreSQL text form (NULL stays NULL)."""
    kind = values.type
    if isinstance(kind, pa.JsonType):
        return pc.cast(values.storage, pa.large_string())
    if isinstance(kind, pa.UuidType):
        return _uuid_text(values)
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
    # lists as PostgreSQL arrays; timestamps, times, intervals, structs: DuckDB's text forms
    connection = duckdb.connect()
    connection.execute("SET TimeZone = 'UTC'")  # timestamptz as UTC instants: +00
    connection.register("frame", pa.table({"v": values}))
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        element = (
            "CASE WHEN x THEN 't' ELSE 'f' END"
            if pa.types.is_boolean(kind.value_type)
            else ("CAST(x AS VARCHAR)")
        )
        sql = _ARRAY.format(element=element)
    else:
        sql = "SELECT CAST(v AS VARCHAR) FROM frame"
    cast = connection.sql(sql).to_arrow_table()
    text = pc.cast(cast.column(0).combine_chunks(), pa.large_string())
    if pa.types.is_interval(kind):  # PostgreSQL says "mons" where DuckDB says "months"
        text = pc.replace_substring_regex(text, r"(\d) month", r"\1 mon")
    return text


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
