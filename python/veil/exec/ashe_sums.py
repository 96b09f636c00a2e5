"""A query's ASHE sums: the server's block sums -> plaintext sums per group.

Storing (``AsheSumsCipher.encrypt``): each summed expression of a row is
encoded as an int64 (a decimal as its unscaled integer; NULL as 0, the
server counts non-NULL rows from other columns) and stored in one or two
BIGINT columns (``AsheSums.columns``), each the ASHE encryption of one word
under the row's id and a key of its own. Two words, the low 32 bits
(unsigned) and the rest (signed), where a sum of ``BLOCK_ROWS`` values of the
expression's domain could leave int64.

Summing (``finish_ashe_sums``): the server groups the filtered rows by the
query's keys and by block of 64 row ids and returns, per (group, block), the
partial COUNT / MIN / MAX, the block number, the BIT_OR of the rows' id bits
and the SUM of each word column (``veil.sql.remote._ashe_blocks``). Such a
sum adds at most 64 ciphertexts, so it is exact mod 2**64 once the pads of
the mask's ids are removed (one native call per word column for all rows:
two PRF calls per run of ids). The words are put back together as 128-bit
decimals and the rows of each group re-aggregated, as for Paillier
(``veil.exec.hom_fetch``)::

    COUNT -> SUM of partial counts     MIN / MAX -> MIN / MAX of partials
    SUM   -> SUM of the block sums, NULL when the expression's count is 0

A non-zero sum of the overflow flags means a summed row holds an
expression DuckDB cannot compute: ``OverflowedRowsError``, and the query
runs on the client, which reports the overflow as plaintext DuckDB would.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from veil.ciphers.ashe_sums import LOW_BITS, LOW_MASK, AsheSumsCipher, low_words
from veil.ciphers.cache import CipherCache
from veil.ciphers.hom_group import OverflowedRowsError
from veil.design.model import FLAG_FIELD_BITS, TableDesign
from veil.encoding import SqlType
from veil.exec.decrypt import decrypt_columns
from veil.exec.hom_fetch import reaggregate
from veil.sql.plan import ASHE_BLOCK, ASHE_MASK, AggregateItem, Scan

_POOL = ThreadPoolExecutor(max_workers=os.cpu_count() or 1, thread_name_prefix="veil-ashe")


def finish_ashe_sums(fetched: pa.Table, scan: Scan, ciphers: CipherCache) -> pa.Table:
    """One row per group from the server's (group, block) rows."""
    aggregation, table = scan.aggregation, scan.table
    assert aggregation is not None and table.sums is not None
    fetched_names = aggregation.fetched(table)
    layout = [name for name, _ in fetched_names]
    first_sum = layout.index(ASHE_BLOCK)
    plain = decrypt_columns(
        fetched.select(list(range(first_sum))), table, fetched_names[:first_sum], ciphers
    )
    totals = {name: fetched.column(i) for i, name in enumerate(layout) if i > first_sum + 1}
    sums, counters = unpadded_sums(
        table,
        aggregation.ashe_sources(),
        ciphers.ashe(table),
        fetched.column(first_sum),
        fetched.column(layout.index(ASHE_MASK)),
        totals,
    )
    columns = {key: plain.column(key) for key in aggregation.keys}
    for i, item in enumerate(aggregation.items):
        name = f"__veil_agg_{i}"
        if item.kind == "SUM":
            assert item.ashe_index is not None
            columns[name] = sums[item.ashe_index]
        else:
            columns[name] = present_count(plain.column(name), item, counters)
    return reaggregate(pa.table(columns), aggregation)


def unpadded_sums(
    table: TableDesign,
    sources: list[int],
    cipher: AsheSumsCipher,
    blocks: pa.ChunkedArray,
    masks: pa.ChunkedArray,
    totals: dict[str, pa.ChunkedArray],
) -> tuple[dict[int, pa.Array], np.ndarray | None]:
    """Each source's plaintext sum per (group, block) row, and the rows' flags words.

    ``totals``: the server's sums of each word column of ``sources`` (and of the
    flags), by server name. Raises ``OverflowedRowsError`` when a summed row
    was flagged as overflowing its type.
    """
    assert table.sums is not None
    block_numbers = as_words(blocks, np.int64)
    id_masks = as_words(masks, np.uint64)

    def block_sums(name: str) -> np.ndarray:
        return cipher.block_sums(name, totals[name], block_numbers, id_masks)

    # one native call per word column (and the flags), side by side: the kernel releases the GIL
    names = table.sums.summed_columns(sources)
    unpadded = dict(zip(names, _POOL.map(block_sums, names), strict=True))
    flags = table.sums.overflow_column
    counters = unpadded[flags] if flags is not None else None
    if counters is not None and table.sums.null_fields is not None:
        overflowed = bool(_field(counters, 0).any())
    else:
        overflowed = counters is not None and bool(counters.any())
    sums: dict[int, pa.Array] = {}
    for index in sources:
        words = [unpadded[name] for name in table.sums.columns[index]]
        if len(words) == 2 and table.sums.flag_bit is not None:
            words[1], count = _flags_apart(words[1], table.sums.flag_bit)
            overflowed = overflowed or bool(count.any())
        if overflowed:
            raise OverflowedRowsError(
                "the sum includes rows whose summed expression overflows its type; "
                "the client computes it instead"
            )
        scale = SqlType(table.sums.types[index]).scale
        sums[index] = _decimal128(*words, scale=scale)
    return sums, counters


def present_count(
    counted: pa.ChunkedArray, item: AggregateItem, counters: np.ndarray | None
) -> pa.ChunkedArray | pa.Array:
    """A count item's column; COUNT(*) of each block less its NULLs of the item's field."""
    if item.null_field is None:
        return counted
    assert counters is not None
    nulls = pa.array(_field(counters, item.null_field))
    return pc.subtract(counted.cast(pa.int64()), nulls)


def _field(counters: np.ndarray, field: int) -> np.ndarray:
    """One 7-bit counter of each block's flags word (``AsheSums.null_fields``)."""
    mask = np.int64((1 << FLAG_FIELD_BITS) - 1)
    return (counters >> np.int64(FLAG_FIELD_BITS * field)) & mask


def _flags_apart(high: np.ndarray, bit: int) -> tuple[np.ndarray, np.ndarray]:
    """Block sums of high words that carry ``2**bit`` per flagged row: (the sums, the flags)."""
    count = (high + np.int64(1 << (bit - 1))) >> bit  # the sums proper are below 2**(bit - 1)
    return high - (count << bit), count


def as_words(column: pa.ChunkedArray | pa.Array, dtype: type[np.generic]) -> np.ndarray:
    """A 64-bit integer column's bits (the backend may widen UBIGINT to a decimal)."""
    return low_words(column).view(dtype)


def _decimal128(*words: np.ndarray, scale: int) -> pa.Array:
    """Block sums as DECIMAL(38, scale): one word, or ``high * 2**32 + low`` from two.

    The high word's sum times 2**32 may leave int64, so the 128-bit result is
    built from two 64-bit limbs: (low limb, high limb) little-endian.
    """
    if len(words) == 1:
        (value,) = words
        low, high = value.view(np.uint64), value >> 63
    else:
        low_sum, high_sum = words
        shifted = (high_sum & LOW_MASK).view(np.uint64) << np.uint64(LOW_BITS)
        low = shifted + low_sum.view(np.uint64)  # low_sum >= 0: wraps at most once
        carry = (low < shifted).astype(np.int64)
        high = (high_sum >> LOW_BITS) + carry
    limbs = np.empty(2 * len(low), dtype=np.uint64)
    limbs[0::2], limbs[1::2] = low, high.view(np.uint64)
    return pa.Array.from_buffers(pa.decimal128(38, scale), len(low), [None, pa.py_buffer(limbs)])
