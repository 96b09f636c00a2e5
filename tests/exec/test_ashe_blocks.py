"""Hypothesis properties of grouped ASHE sums: per (group, block of 64 ids) rows, as a server returns them.

The server is modelled exactly: Python integer sums of the stored signed
ciphertexts, returned as decimal128(38, 0) (DuckDB's HUGEINT, PostgreSQL's
NUMERIC), the masks as the BIT_OR of the ids' bits.
"""

from __future__ import annotations

from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from veil.ciphers.ashe_sums import AsheSumsCipher, low_words
from veil.ciphers.sources import Sources
from veil.crypto.ashe import ASHE_FLAG_BIT, word_bits
from veil.crypto.keys import MasterKey
from veil.design.model import AsheSums
from veil.exec.ashe_sums import _decimal128, _flags_apart

pytestmark = pytest.mark.property

UNTIMED = settings(deadline=None, max_examples=60)
MASTER = MasterKey(bytes(range(32)))
SUMS = AsheSums(
    sources=["narrow", "wide"],
    types=["INTEGER", "BIGINT"],
    columns=[["c_narrow"], ["c_wide_low", "c_wide_high"]],
    key_scope="ashe:test",
    overflow_column="c_flags",
    word_bits=[word_bits(2**31, 1, None), word_bits(2**63 - 1, 2, None)],  # [39], [38, 39]
)
CIPHER = AsheSumsCipher(MASTER, SUMS)

int64s = st.one_of(
    st.sampled_from([-(2**63), -(2**63) + 1, -1, 0, 1, 2**63 - 1]),
    st.integers(-(2**63), 2**63 - 1),
)
int32s = st.integers(-(2**31), 2**31 - 1)


def _server_rows(
    ids: np.ndarray, groups: list[int], stored: dict[str, np.ndarray]
) -> tuple[list[tuple[int, int]], np.ndarray, np.ndarray, dict[str, pa.Array]]:
    """GROUP BY (group, id >> 6): the blocks, masks and SUM of every stored column."""
    keys = sorted({(g, int(i) >> 6) for g, i in zip(groups, ids.tolist(), strict=True)})
    blocks = np.array([b for _, b in keys], dtype=np.int64)
    masks = np.zeros(len(keys), dtype=np.uint64)
    totals = {name: [0] * len(keys) for name in stored}
    where = {key: n for n, key in enumerate(keys)}
    for row, (g, i) in enumerate(zip(groups, ids.tolist(), strict=True)):
        n = where[(g, i >> 6)]
        masks[n] |= np.uint64(1 << (i & 63))
        for name, values in stored.items():
            totals[name][n] += int(values[row])
    arrays = {
        name: pa.array([Decimal(t) for t in values], pa.decimal128(38, 0))
        for name, values in totals.items()
    }
    return keys, blocks, masks, arrays


@UNTIMED
@given(st.data(), st.integers(0, 2**40), st.integers(1, 300))
def test_block_sums_decrypt_to_each_groups_sums(
    data: st.DataObject, first_id: int, rows: int
) -> None:
    narrow = data.draw(st.lists(int32s, min_size=rows, max_size=rows))
    wide = data.draw(st.lists(st.one_of(st.none(), int64s), min_size=rows, max_size=rows))
    groups = data.draw(st.lists(st.integers(0, 3), min_size=rows, max_size=rows))
    lost = data.draw(st.lists(st.booleans(), min_size=rows, max_size=rows))
    sources = Sources()
    sources["narrow"] = pa.array(narrow, pa.int32())
    sources["wide"] = pa.array(wide, pa.int64())
    sources.overflow["narrow"] = np.array(lost, dtype=np.int8)
    ids = np.arange(first_id, first_id + rows, dtype=np.int64)
    encrypted = CIPHER.encrypt(sources, ids)
    for name, bits in (("c_narrow", 39), ("c_wide_low", 38), ("c_wide_high", 39)):
        values = encrypted[name].to_numpy()
        assert values.min() >= 0 and int(values.max()) < 2**bits  # stored modulo 2**bits
    stored = {k: v.to_numpy(zero_copy_only=False) for k, v in encrypted.items()}
    keys, blocks, masks, totals = _server_rows(ids, groups, stored)

    narrow_sums = CIPHER.block_sums("c_narrow", totals["c_narrow"], blocks, masks)
    wide_words = [CIPHER.block_sums(c, totals[c], blocks, masks) for c in SUMS.columns[1]]
    wide_sums = _decimal128(*wide_words, scale=0).to_pylist()
    flags = CIPHER.block_sums("c_flags", totals["c_flags"], blocks, masks)
    for n, key in enumerate(keys):
        rows_here = [r for r in range(rows) if (groups[r], int(ids[r]) >> 6) == key]
        assert narrow_sums[n] == sum(0 if lost[r] else narrow[r] for r in rows_here)
        assert wide_sums[n] == sum(wide[r] or 0 for r in rows_here)  # beyond int64 too
        assert flags[n] == sum(lost[r] for r in rows_here)


@UNTIMED
@given(st.lists(st.integers(-(2**100), 2**100), min_size=1, max_size=20), st.integers(0, 5))
def testlow_words_are_sums_mod_2_64(values: list[int], offset: int) -> None:
    array = pa.array([Decimal(v) for v in [0] * offset + values], pa.decimal128(38, 0))
    low = low_words(array.slice(offset))
    assert low.tolist() == [v % 2**64 for v in values]


FLAGGED = AsheSums(
    sources=["wide"],
    types=["BIGINT"],
    columns=[["f_wide_low", "f_wide_high"]],
    key_scope="ashe:test-flags",
    flag_bit=ASHE_FLAG_BIT,
    word_bits=[word_bits(2**63 - 1, 2, ASHE_FLAG_BIT)],  # [38, 48]
)
FLAGGED_CIPHER = AsheSumsCipher(MASTER, FLAGGED)


@UNTIMED
@given(st.data(), st.integers(0, 2**40), st.integers(1, 300))
def test_flags_in_high_words_come_apart_from_the_sums(
    data: st.DataObject, first_id: int, rows: int
) -> None:
    wide = data.draw(st.lists(st.one_of(st.none(), int64s), min_size=rows, max_size=rows))
    groups = data.draw(st.lists(st.integers(0, 3), min_size=rows, max_size=rows))
    lost = data.draw(st.lists(st.booleans(), min_size=rows, max_size=rows))
    sources = Sources()
    sources["wide"] = pa.array(wide, pa.int64())
    sources.overflow["wide"] = np.array(lost, dtype=np.int8)
    ids = np.arange(first_id, first_id + rows, dtype=np.int64)
    encrypted = FLAGGED_CIPHER.encrypt(sources, ids)
    assert set(encrypted) == {"f_wide_low", "f_wide_high"}  # no flags column
    stored = {k: v.to_numpy(zero_copy_only=False) for k, v in encrypted.items()}
    keys, blocks, masks, totals = _server_rows(ids, groups, stored)
    low, high = (FLAGGED_CIPHER.block_sums(c, totals[c], blocks, masks) for c in FLAGGED.columns[0])
    high, flags = _flags_apart(high, ASHE_FLAG_BIT)
    sums = _decimal128(low, high, scale=0).to_pylist()
    for n, key in enumerate(keys):
        rows_here = [r for r in range(rows) if (groups[r], int(ids[r]) >> 6) == key]
        assert flags[n] == sum(lost[r] for r in rows_here)
        assert sums[n] == sum(0 if lost[r] else wide[r] or 0 for r in rows_here)
