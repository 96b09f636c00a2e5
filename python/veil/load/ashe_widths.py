"""ASHE words as wide as the loaded data needs, not as the SQL type allows.

The designer sizes a summed expression's words for its type's whole domain
(DECIMAL(18,4): two words, 86 bits a row), since any valid value must work.
At load the loader knows the values: each source gets words sized for
``HEADROOM`` times its largest |value| (l_extendedprice: 33 bits, one word),
and a row whose value falls beyond that later (INSERT, UPDATE) is stored as
0 and flagged in a 0/1 column under ASHE, so any sum over it runs on the
client (``veil.exec.ashe_sums``): still exact, only slower. A column of
flags costs 8 bits a row (a block's 64 flags sum to at most 64).

What the server learns more: each word column's width, that is the bit
length of the source's largest |value| (to a factor of ``HEADROOM``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeAlias

import duckdb
import pyarrow as pa

from veil.crypto.ashe import BLOCK_ROWS, sum_fits, word_bits
from veil.design.model import TableDesign, opaque_name

# how far beyond the loaded data a later value may go before its sums leave the server
HEADROOM = 4
FLAG_BITS = (BLOCK_ROWS + 1).bit_length()
# (source expression, SQL type) pairs -> the encoded (min, max) of each, in one scan
Ranges: TypeAlias = Callable[[list[tuple[str, str]]], list[tuple[int | None, int | None]]]
# source expressions -> how many rows each is NULL in
Nulls: TypeAlias = Callable[[list[str]], list[int]]


def fit(table: TableDesign, ranges: Ranges, nulls: Nulls) -> None:
    """Resize ``table.sums``' words to the data ``ranges`` reports (unchanged if unknown).

    Unknown means an empty table, a source that is NULL throughout, or an
    expression the source's DuckDB cannot compute for some row (``ranges``
    raises): then the designer's type-wide words stay. A source without
    NULLs in the data (``nulls``) is marked ``null_free``: a later NULL is
    flagged like a value beyond the words, so the server counts its rows
    with COUNT(*) and needs no other encryption of its columns.
    """
    sums = table.sums
    if sums is None:
        return
    try:
        found = ranges(list(zip(sums.sources, sums.types, strict=True)))
        missing = nulls(sums.sources)
    except (duckdb.Error, pa.ArrowException, ValueError):  # uncomputable: type-wide words
        return
    if any(low is None or high is None for low, high in found):
        return
    limits = [HEADROOM * max(abs(low), abs(high), 1) for low, high in found]  # type: ignore[arg-type]
    words = [1 if sum_fits(BLOCK_ROWS, limit) else 2 for limit in limits]
    sums.columns = [[opaque_name("c") for _ in range(n)] for n in words]
    sums.word_bits = [word_bits(limit, n, None) for limit, n in zip(limits, words, strict=True)]
    sums.limits = limits
    sums.null_free = [n == 0 for n in missing]
    sums.flag_bit = None
    sums.overflow_column = opaque_name("c")
    sums.overflow_bits = FLAG_BITS
