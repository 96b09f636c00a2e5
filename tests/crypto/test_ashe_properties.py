"""Hypothesis properties of ASHE: every way of naming the summed ids gives the plaintext sum.

The server's SUM is modelled as Python's exact integer sum of the stored signed
ciphertexts (DuckDB's HUGEINT and PostgreSQL's NUMERIC do the same).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from veil.crypto.ashe import Ashe, sum_fits

pytestmark = pytest.mark.property

ASHE = Ashe(bytes(range(64, 96)))
MOD = 2**64
UNTIMED = settings(deadline=None)

int64s = st.one_of(
    st.sampled_from([-(2**63), -(2**63) + 1, -1, 0, 1, 2**63 - 2, 2**63 - 1]),
    st.integers(-(2**63), 2**63 - 1),
)
# Ids near both ends of the cycle and near the signed boundary, where wrapping can slip.
id_starts = st.one_of(st.sampled_from([0, 1, 2**63 - 3, 2**64 - 3]), st.integers(0, MOD - 1))


def signed(value: int) -> int:
    return (value + 2**63) % MOD - 2**63


def server_sum(ciphertexts: np.ndarray) -> int:
    return sum(ciphertexts.tolist())


@st.composite
def distinct_ids(draw: st.DrawFn, max_size: int = 60) -> list[int]:
    """Distinct ids: a few runs of consecutive ids plus scattered ones, shuffled."""
    ids: set[int] = set()
    for _ in range(draw(st.integers(0, 4))):
        start, length = draw(id_starts), draw(st.integers(1, 20))
        ids.update((start + k) % MOD for k in range(length))
    ids.update(draw(st.lists(st.integers(0, MOD - 1), max_size=10)))
    return draw(st.permutations(sorted(ids)[:max_size]))


@UNTIMED
@given(distinct_ids(), st.data())
def test_any_subset_decrypts_to_its_sum_mod_2_64(ids: list[int], data: st.DataObject) -> None:
    values = data.draw(st.lists(int64s, min_size=len(ids), max_size=len(ids)))
    id_array = np.array(ids, dtype=np.uint64)
    ciphertexts = ASHE.encrypt(id_array, np.array(values, dtype=np.int64))
    chosen = data.draw(st.lists(st.booleans(), min_size=len(ids), max_size=len(ids)))
    mask = np.array(chosen, dtype=bool)
    total = server_sum(ciphertexts[mask]) if ids else 0
    expected = signed(sum(v for v, c in zip(values, chosen, strict=True) if c))
    assert ASHE.decrypt_sum(total, ids=id_array[mask] if ids else []) == expected


@UNTIMED
@given(
    st.lists(st.tuples(id_starts, st.integers(1, 40)), max_size=5), st.integers(-(10**12), 10**12)
)
def test_runs_and_their_ids_agree(runs: list[tuple[int, int]], step: int) -> None:
    pairs = [(start, (start + length - 1) % MOD) for start, length in runs]
    ids = [(start + k) % MOD for start, length in runs for k in range(length)]
    assert ASHE.pad_sum(runs=pairs) == ASHE.pad_sum(ids=ids) == sum(map(ASHE.pad, ids)) % MOD
    if len(set(ids)) == len(ids):
        values = np.arange(len(ids), dtype=np.int64) * step
        total = server_sum(ASHE.encrypt(np.array(ids, dtype=np.uint64), values))
        assert ASHE.decrypt_sum(total, runs=pairs) == signed(int(values.sum()))


@UNTIMED
@given(id_starts, st.lists(st.booleans(), max_size=300), st.data())
def test_bitmaps_agree_with_the_ids_of_their_set_bits(
    base: int, bits: list[bool], data: st.DataObject
) -> None:
    flags = np.array(bits, dtype=bool)
    ids = [(base + k) % MOD for k in np.flatnonzero(flags).tolist()]
    values = data.draw(st.lists(int64s, min_size=len(ids), max_size=len(ids)))
    ciphertexts = ASHE.encrypt(np.array(ids, dtype=np.uint64), np.array(values, np.int64))
    total = server_sum(ciphertexts)
    expected = signed(sum(values))
    packed = np.packbits(flags, bitorder="little")
    assert ASHE.decrypt_sum(total, bitmap=(base, flags)) == expected
    assert ASHE.decrypt_sum(total, bitmap=(base, packed)) == expected
    assert ASHE.pad_sum(bitmap=(base, flags)) == ASHE.pad_sum(ids=ids)


@UNTIMED
@given(st.lists(st.integers(-(2**40), 2**40), min_size=1, max_size=40), st.data())
def test_update_with_fresh_ids_keeps_sums_exact(values: list[int], data: st.DataObject) -> None:
    """An UPDATE writes the new value under a fresh id and drops the old row's id."""
    ids = np.arange(len(values), dtype=np.int64)
    stored = dict(zip(ids.tolist(), ASHE.encrypt(ids, np.array(values)).tolist(), strict=True))
    current = dict(zip(ids.tolist(), values, strict=True))
    next_id = len(values)
    for _ in range(data.draw(st.integers(0, 10))):
        old_id = data.draw(st.sampled_from(sorted(current)))
        new_value = data.draw(st.integers(-(2**40), 2**40))
        del stored[old_id], current[old_id]
        stored[next_id] = ASHE.encrypt_one(next_id, new_value)
        current[next_id] = new_value
        next_id += 1
    assert sum_fits(len(current), 2**40)
    live = sorted(stored)
    assert ASHE.decrypt_sum(sum(stored.values()), ids=live) == sum(current.values())


@UNTIMED
@given(st.lists(st.one_of(st.none(), int64s), max_size=50), id_starts)
def test_arrow_nulls_are_skipped_by_sum_and_round_trip(rows: list[int | None], start: int) -> None:
    ids = np.array([(start + k) % MOD for k in range(len(rows))], dtype=np.uint64)
    column = pa.array(rows, pa.int64())
    ciphertexts = ASHE.encrypt(ids, column)
    assert ciphertexts.is_null().to_pylist() == column.is_null().to_pylist()
    assert ASHE.decrypt(ids, ciphertexts).to_pylist() == rows
    valid = ~np.array(column.is_null().to_pylist(), dtype=bool)
    total = sum(c for c in ciphertexts.to_pylist() if c is not None)
    expected = signed(sum(v for v in rows if v is not None))
    assert ASHE.decrypt_sum(total, ids=ids[valid]) == expected
    assert ASHE.decrypt_sum(total, bitmap=(start, valid)) == expected
