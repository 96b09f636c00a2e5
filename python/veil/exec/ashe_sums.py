"""A table's ASHE sums: rows -> word ciphertexts under row ids; block sums -> plaintext sums.

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
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from veil.crypto.ashe import Ashe
from veil.crypto.keys import MasterKey
from veil.design.model import FLAG_FIELD_BITS, AsheSums, TableDesign
from veil.encoding import SqlType, encode
from veil.exec.hom_fetch import reaggregate
from veil.exec.hom_group import OverflowedRowsError
from veil.sql.plan import ASHE_BLOCK, ASHE_MASK, AggregateItem, Scan

if TYPE_CHECKING:
    from veil.exec.encrypt import Sources
    from veil.exec.fetch import CipherCache

_POOL = ThreadPoolExecutor(max_workers=os.cpu_count() or 1, thread_name_prefix="veil-ashe")
_LOW_BITS = 32
_LOW_MASK = np.int64((1 << _LOW_BITS) - 1)


class AsheSumsCipher:
    """The ASHE keys of one table's summed expressions (one per stored word)."""

    def __init__(self, master: MasterKey, sums: AsheSums):
        self.sums = sums
        names = [n for words in sums.columns for n in words]
        if sums.overflow_column is not None:
            names.append(sums.overflow_column)
        self._keys = {
            name: Ashe.from_master(master, f"{sums.key_scope}/{name}", column=name)
            for name in names
        }
        # words stored modulo 2**bits (bits < 64): their ciphertexts and sums are masked
        bits = sums.word_bits or [[64] * len(words) for words in sums.columns]
        self._bits = {
            name: b
            for words, sizes in zip(sums.columns, bits, strict=True)
            for name, b in zip(words, sizes, strict=True)
        }
        # the low word of a two-word value is unsigned: its sums are not sign-extended;
        # so are the sums of 0/1 overflow flags
        self._unsigned = {words[0] for words in sums.columns if len(words) == 2}
        if sums.overflow_column is not None:
            self._bits[sums.overflow_column] = sums.overflow_bits
            self._unsigned.add(sums.overflow_column)
        self._masks = {n: np.int64((1 << b) - 1) for n, b in self._bits.items() if b < 64}

    def encrypt(self, sources: Sources, ids: np.ndarray) -> dict[str, pa.Array]:
        """The server columns of a batch whose rows get the row ids ``ids``."""
        out: dict[str, pa.Array] = {}
        flags = np.zeros(len(ids), dtype=np.int64)
        counters = np.zeros(len(ids), dtype=np.int64)  # NULL counters of the flags word
        limits: list[int | None] = [None] * len(self.sums.sources)
        if self.sums.limits is not None:
            limits = list(self.sums.limits)
        for index, (source, type_name, names, limit) in enumerate(
            zip(self.sums.sources, self.sums.types, self.sums.columns, limits, strict=True)
        ):
            encoded = encode(sources[source], SqlType(type_name))
            values = encoded.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
            marks = sources.overflow.get(source)
            lost = marks != 0 if marks is not None else None
            if limit is not None:  # beyond the words' range: summed by the client
                beyond = (values > limit) | (values < -limit)
                lost = beyond if lost is None else lost | beyond
            field = self.sums.null_field(index)
            if field is not None and encoded.null_count:
                nulls = encoded.is_null().to_numpy(zero_copy_only=False).astype(np.int64)
                if field == 0:  # no NULL at load: flagged, at most once a row
                    flags |= nulls
                else:
                    counters += nulls << (FLAG_FIELD_BITS * field)
            if lost is not None:
                values[lost] = 0
                flags[lost] = 1
            words = [values] if len(names) == 1 else [values & _LOW_MASK, values >> _LOW_BITS]
            if lost is not None and len(names) == 2 and self.sums.flag_bit is not None:
                words[1] = words[1] + (lost.astype(np.int64) << self.sums.flag_bit)
            for name, word in zip(names, words, strict=True):
                stored = self._keys[name].encrypt(ids, word)
                out[name] = pa.array(stored & self._masks[name] if name in self._masks else stored)
        if self.sums.overflow_column is not None:
            name = self.sums.overflow_column
            stored = self._keys[name].encrypt(ids, flags + counters)
            out[name] = pa.array(stored & self._masks[name] if name in self._masks else stored)
        return out

    def block_sums(
        self, name: str, totals: pa.Array, blocks: np.ndarray, masks: np.ndarray
    ) -> np.ndarray:
        """The plaintext int64 sum of each block's words, from the server's SUMs."""
        pads = self._keys[name].pad_sums_blocks(blocks, masks)
        sums = _low_words(totals) - pads
        bits = self._bits.get(name, 64)
        if bits == 64:
            return sums.view(np.int64)
        sums &= np.uint64((1 << bits) - 1)
        if name not in self._unsigned:  # sign-extend from ``bits``
            top = np.uint64(1 << (bits - 1))
            sums = (sums ^ top) - top
        return sums.view(np.int64)


def finish_ashe_sums(fetched: pa.Table, scan: Scan, ciphers: CipherCache) -> pa.Table:
    """One row per group from the server's (group, block) rows."""
    from veil.exec.fetch import decrypt_columns

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
    return _low_words(column).view(dtype)


def _low_words(totals: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """The server's exact sums mod 2**64 (the low 64 bits of their two's complement).

    Both backends return integer SUMs as decimal128(38, 0), whose storage is
    the unscaled int128, little-endian: its low word is the sum mod 2**64.
    """
    array = totals.combine_chunks() if isinstance(totals, pa.ChunkedArray) else totals
    if array.null_count:
        raise ValueError("a server sum or mask is NULL")  # never for a group with rows
    if pa.types.is_decimal(array.type):
        if array.type.scale != 0:
            array = array.cast(pa.decimal128(38, 0))
        words = np.frombuffer(array.buffers()[1], dtype=np.uint64)
        return words[2 * array.offset : 2 * (array.offset + len(array)) : 2].copy()
    values = array.to_numpy(zero_copy_only=False)
    return (
        values.astype(np.int64, copy=False).view(np.uint64)
        if values.dtype.kind == "i"
        else values.astype(np.uint64)
    )


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
        shifted = (high_sum & _LOW_MASK).view(np.uint64) << np.uint64(_LOW_BITS)
        low = shifted + low_sum.view(np.uint64)  # low_sum >= 0: wraps at most once
        carry = (low < shifted).astype(np.int64)
        high = (high_sum >> _LOW_BITS) + carry
    limbs = np.empty(2 * len(low), dtype=np.uint64)
    limbs[0::2], limbs[1::2] = low, high.view(np.uint64)
    return pa.Array.from_buffers(pa.decimal128(38, scale), len(low), [None, pa.py_buffer(limbs)])
