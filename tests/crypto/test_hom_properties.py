"""Properties of Paillier and of packing, over small (fast, insecure) keys."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from veil.crypto.hom import HomPacker, PackingLayout, PaillierKey, add_ciphertexts, sum_ciphertexts

pytestmark = pytest.mark.property

KEY = PaillierKey.from_seed(b"\x33" * 32, bits=512)
LIMIT = KEY.public.max_int
N_SQUARE = KEY.public.n_square

signed = st.integers(-LIMIT, LIMIT)
half = st.integers(-(LIMIT // 2), LIMIT // 2)


@given(st.lists(signed, max_size=8))
def test_signed_round_trip(values: list[int]) -> None:
    assert KEY.decrypt_ints(KEY.encrypt_ints(values)) == values


@given(st.lists(half, min_size=1, max_size=6), st.lists(half, min_size=1, max_size=6))
def test_ciphertext_product_is_plaintext_sum(left: list[int], right: list[int]) -> None:
    size = min(len(left), len(right))
    left, right = left[:size], right[:size]
    a, b = pa.array(KEY.encrypt_ints(left)), pa.array(KEY.encrypt_ints(right))
    assert KEY.decrypt_ints(add_ciphertexts(a, b, N_SQUARE)) == [
        x + y for x, y in zip(left, right, strict=True)
    ]


@given(st.lists(st.integers(-(2**200), 2**200), max_size=10))
def test_column_sum(values: list[int]) -> None:
    total = sum_ciphertexts(pa.array(KEY.encrypt_ints(values)), N_SQUARE)
    assert KEY.decrypt_ints([total]) == [sum(values)]


@st.composite
def layouts_and_values(draw: st.DrawFn) -> tuple[PackingLayout, list[int]]:
    slot_bits = draw(st.integers(2, 130))
    layout = PackingLayout(slot_bits, draw(st.integers(1, 6)))
    limit = layout.slot_limit
    values = draw(
        st.lists(st.integers(-limit, limit - 1), min_size=layout.slots, max_size=layout.slots)
    )
    return layout, values


@given(layouts_and_values())
def test_layout_unpack_inverts_pack(case: tuple[PackingLayout, list[int]]) -> None:
    layout, values = case
    fits_int64 = layout.slot_bits <= 64
    if fits_int64:
        assert layout.unpack(layout.pack(np.array([values], np.int64))[0]) == values
    assert layout.unpack(layout._pack_row(values)) == values


@st.composite
def packed_tables(draw: st.DrawFn) -> tuple[HomPacker, list[np.ndarray]]:
    value_bits = draw(st.integers(1, 64))
    columns = draw(st.integers(1, 3))
    max_summands = draw(st.integers(1, 12))
    packer = HomPacker(KEY, value_bits, columns, max_summands=max_summands)
    most_rows = max_summands * packer.rows_per_ciphertext
    rows = draw(st.integers(0, min(most_rows, 40)))
    low, high = -(1 << (value_bits - 1)), (1 << (value_bits - 1)) - 1
    extremes = st.sampled_from([low, high, 0, -1 if value_bits > 1 else 0])
    value = st.one_of(st.integers(low, high), extremes)
    table = [
        np.array(draw(st.lists(value, min_size=rows, max_size=rows)), np.int64)
        for _ in range(columns)
    ]
    return packer, table


@settings(max_examples=40, deadline=None)
@given(packed_tables())
def test_packed_sums_and_rows_round_trip(case: tuple[HomPacker, list[np.ndarray]]) -> None:
    packer, table = case
    ciphertexts = packer.encrypt(table)
    total = sum_ciphertexts(ciphertexts, packer.n_square)
    assert packer.decrypt_sums(total) == [sum(int(v) for v in column) for column in table]
    rows = len(table[0])
    for got, want in zip(packer.decrypt_rows(ciphertexts, rows), table, strict=True):
        np.testing.assert_array_equal(got, want)


SUBSET_PACKER = HomPacker(KEY, 16, 2, max_summands=64)  # 24-bit slots, 10 rows each
SUBSET_ROWS = 64
SUBSET_TABLE = [np.arange(SUBSET_ROWS) * 7 - 200, np.arange(SUBSET_ROWS) % 5 - 2]
SUBSET_STORED = SUBSET_PACKER.encrypt(SUBSET_TABLE)


@settings(max_examples=30, deadline=None)
@given(st.sets(st.integers(0, SUBSET_ROWS - 1)))
def test_subset_sum_from_whole_and_partial_ciphertexts(matching: set[int]) -> None:
    packer, stored = SUBSET_PACKER, SUBSET_STORED
    rows = np.array(sorted(matching), dtype=np.int64)
    full, partial = packer.split_selection(rows, SUBSET_ROWS)
    total = packer.decrypt_sums(sum_ciphertexts(stored.take(pa.array(full)), packer.n_square))
    for index, positions in partial.items():
        extra = packer.decrypt_sums(stored[index].as_py(), positions=positions)
        total = [t + e for t, e in zip(total, extra, strict=True)]
    assert total == [int(column[rows].sum()) for column in SUBSET_TABLE]
