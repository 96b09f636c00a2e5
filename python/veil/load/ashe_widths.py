"""ASHE words as wide as the loaded data needs, not as the SQL type allows.

The designer sizes a summed expression's words for its type's whole domain
(DECIMAL(18,4): two words, 86 bits a row), since any valid value must work.
At load the loader knows the values: each source gets words sized for
``HEADROOM`` times its largest |value| (l_extendedprice: 33 bits, one word),
and a row whose value falls beyond that later (INSERT, UPDATE) is stored as
0 and flagged in the table's flags word under ASHE, so any sum over it runs
on the client (``veil.ciphers.ashe_sums``): still exact, only slower.

What the server learns more: each word column's width, that is the bit
length of the source's largest |value| (to a factor of ``HEADROOM``).
"""

from __future__ import annotations

from typing import TypeAlias

from veil.crypto.ashe import BLOCK_ROWS, sum_fits, word_bits
from veil.design.model import (
    BLOCKS,
    FLAG_FIELD_BITS,
    MAX_NULL_FIELDS,
    AsheSums,
    DesignError,
    TableDesign,
    opaque_name,
)
from veil.designer.greedy import summed_columns

# how far beyond the loaded data a later value may go before its sums leave the server
HEADROOM = 4
# per summed expression, in ``AsheSums.sources``' order: encoded (min, max, NULL rows)
Profile: TypeAlias = list[tuple[int | None, int | None, int]]


def fit(table: TableDesign, profile: Profile | None) -> None:
    """Resize ``table.sums``' words to the data's ``profile`` (unchanged if unknown).

    Unknown means an empty table, a source that is NULL throughout, or an
    expression the source's DuckDB cannot compute for some row (``profile``
    None): then the designer's type-wide words stay. The flags word keeps a
    NULL counter only for the sources with NULLs in the data; the others'
    later NULLs are flagged as overflows (``AsheSums.null_fields``).
    """
    sums = table.sums
    if sums is None or profile is None:
        return
    found = [(low, high) for low, high, _ in profile]
    missing = [nulls for _, _, nulls in profile]
    if any(low is None or high is None for low, high in found):
        return
    limits = [HEADROOM * max(abs(low), abs(high), 1) for low, high in found]  # type: ignore[arg-type]
    words = [1 if sum_fits(BLOCK_ROWS, limit) else 2 for limit in limits]
    sums.columns = [[opaque_name("c") for _ in range(n)] for n in words]
    sums.word_bits = [word_bits(limit, n, None) for limit, n in zip(limits, words, strict=True)]
    sums.limits = limits
    sums.flag_bit = None
    if sums.overflow_column is None:  # a designer's older design: flags in their own word
        sums.overflow_column = opaque_name("c")
    fields = iter(range(1, MAX_NULL_FIELDS + 1))
    sums.null_fields = [next(fields, None) if n else 0 for n in missing]
    _size_flags(sums)


def count_on_columns(table: TableDesign) -> None:
    """Drop the flags word's NULL counters of sources the server can count by their columns.

    Only where the server bit-packs integers (DuckDB; ``veil.load.narrow_det``),
    so the flags word costs its bits a row: a source whose every column has a
    per-row server column then gets no counter, and the server counts its rows
    by testing those (``veil.sql.sums.count_present``; a COUNT beside each sum).
    TPC-DS's store_sales has NULLs in all its summed columns: 8 counters made a
    63-bit word, 8 random bytes a row (23 of its 456 MB at SF 1), where the
    overflow flags alone take 7 bits. Sources read only inside sums (sealed in
    blocks, as TPC-H's l_tax) keep theirs. PostgreSQL stores 8 bytes a BIGINT
    whatever its bits, so there a counter is free and a COUNT is not.
    """
    sums = table.sums
    if sums is None or sums.null_fields is None or sums.limits is None:
        return  # a designer's words, not fitted to the data: their fields stay
    fields = iter(range(1, MAX_NULL_FIELDS + 1))
    sums.null_fields = [
        0 if field == 0 else None if _per_row(table, source) else next(fields, None)
        for field, source in zip(sums.null_fields, sums.sources, strict=True)
    ]
    _size_flags(sums)


def _size_flags(sums: AsheSums) -> None:
    counters = sum(1 for f in sums.null_fields or [] if f)
    sums.overflow_bits = FLAG_FIELD_BITS * (1 + counters)


def _per_row(table: TableDesign, source: str) -> bool:
    """Has every column ``source`` reads a per-row server column (not sealed blocks)?"""
    try:
        return all(table.fetchable(c).scheme != BLOCKS for c in summed_columns(source))
    except DesignError:
        return False
