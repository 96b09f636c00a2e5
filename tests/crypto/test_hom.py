"""HOM packing: several columns and rows per Paillier plaintext, sums by the server."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from veil.crypto.hom import (
    HomPacker,
    PackingLayout,
    PaillierKey,
    add_ciphertexts,
    sum_ciphertexts,
)
from veil.crypto.keys import MasterKey
from veil.errors import DomainError, MalformedCiphertextError, ParameterError

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def key() -> PaillierKey:
    return PaillierKey.from_seed(b"\x21" * 32, bits=1024)


@pytest.fixture(scope="module")
def key2048() -> PaillierKey:
    return PaillierKey.from_seed(b"\x22" * 32)


def _sums(columns: list[np.ndarray]) -> list[int]:
    return [sum(int(v) for v in column) for column in columns]


def test_default_layout_fills_a_2048_bit_plaintext(key2048: PaillierKey) -> None:
    packer = HomPacker(key2048, 64, 3)
    # 64 value bits + 32 padding bits = 96-bit slots; 2047 // (96 * 3) = 7 rows.
    assert packer.layout == PackingLayout(96, 21)
    assert packer.rows_per_ciphertext == 7


def test_2048_bit_many_rows_sum_and_round_trip(key2048: PaillierKey) -> None:
    rng = np.random.default_rng(1)
    columns = [rng.integers(-(2**63), 2**63 - 1, 100, endpoint=True) for _ in range(3)]
    packer = HomPacker(key2048, 64, 3, names=["qty", "price", "discount"])
    ciphertexts = packer.encrypt(columns)
    assert len(ciphertexts) == 15  # ceil(100 / 7)
    assert packer.decrypt_sums(sum_ciphertexts(ciphertexts, packer.n_square)) == _sums(columns)
    for got, want in zip(packer.decrypt_rows(ciphertexts, 100), columns, strict=True):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("extreme", ["max", "min"])
def test_near_overflow_largest_values_summed_max_count_times(key: PaillierKey, extreme) -> None:
    packer = HomPacker(key, 8, 2, max_summands=16)
    value = 127 if extreme == "max" else -128
    rows = 16 * packer.rows_per_ciphertext  # exactly max_summands ciphertexts
    columns = [np.full(rows, value), np.full(rows, -value - 1)]
    ciphertexts = packer.encrypt(columns)
    assert len(ciphertexts) == 16
    assert packer.decrypt_sums(sum_ciphertexts(ciphertexts, packer.n_square)) == _sums(columns)


def test_negatives_and_zeros(key: PaillierKey) -> None:
    packer = HomPacker(key, 16, 2)
    columns = [np.array([-5, 0, -7, 3]), np.array([0, 0, 0, 0])]
    total = sum_ciphertexts(packer.encrypt(columns), packer.n_square)
    assert packer.decrypt_sums(total) == [-9, 0]


def test_nulls_pack_as_zero(key: PaillierKey) -> None:
    packer = HomPacker(key, 32, 2)
    columns = [pa.array([1, None, 3]), pa.chunked_array([[None], [5, -6]], type=pa.int64())]
    total = sum_ciphertexts(packer.encrypt(columns), packer.n_square)
    assert packer.decrypt_sums(total) == [4, -1]


def test_add_ciphertexts_adds_rows_slot_by_slot(key: PaillierKey) -> None:
    packer = HomPacker(key, 32, 2, rows_per_ciphertext=1)
    a = packer.encrypt([np.array([1, 2]), np.array([-3, 4])])
    b = packer.encrypt([np.array([10, 20]), np.array([30, -40])])
    summed = add_ciphertexts(a, b, packer.n_square)
    assert packer.decrypt_sums_many(summed) == [[11, 27], [22, -36]]


def test_one_row_per_ciphertext_sums_any_subset_on_the_server(key: PaillierKey) -> None:
    packer = HomPacker(key, 32, 3, rows_per_ciphertext=1)
    columns = [np.arange(10), np.arange(10) * -2, np.ones(10, np.int64)]
    ciphertexts = packer.encrypt(columns)
    chosen = pa.array(np.array([1, 4, 5, 9]))
    total = sum_ciphertexts(ciphertexts.take(chosen), packer.n_square)
    assert packer.decrypt_sums(total) == [19, -38, 4]


def test_subset_of_row_packed_ciphertexts(key: PaillierKey) -> None:
    packer = HomPacker(key, 32, 2, max_summands=2**16)  # 48-bit slots, 10 rows each
    rows = 47
    columns = [np.arange(rows), np.arange(rows) * 3 - 50]
    ciphertexts = packer.encrypt(columns)
    matching = np.array([0, 3, *range(10, 20), *range(40, 47), 22, 25])
    full, partial = packer.split_selection(matching, rows)
    assert full.tolist() == [1, 4]  # rows 10..19 and the short last ciphertext 40..46
    assert partial == {0: [0, 3], 2: [2, 5]}
    total = packer.decrypt_sums(sum_ciphertexts(ciphertexts.take(pa.array(full)), packer.n_square))
    for index, positions in partial.items():
        extra = packer.decrypt_sums(ciphertexts[index].as_py(), positions=positions)
        total = [t + e for t, e in zip(total, extra, strict=True)]
    assert total == _sums([column[matching] for column in columns])


def test_locate_maps_rows_to_ciphertexts(key: PaillierKey) -> None:
    packer = HomPacker(key, 32, 2, rows_per_ciphertext=4)
    index, position = packer.locate(np.array([0, 3, 4, 9]))
    assert index.tolist() == [0, 0, 1, 2]
    assert position.tolist() == [0, 3, 0, 1]
    assert packer.ciphertext_count(9) == 3


def test_out_of_range_value_names_column_and_domain(key: PaillierKey) -> None:
    packer = HomPacker(key, 8, 2, names=["qty", "price"])
    with pytest.raises(DomainError, match=r"column 'price'.*\[-128, 128\)"):
        packer.encrypt([np.array([1]), np.array([128])])
    with pytest.raises(DomainError, match="column 'qty'"):
        packer.encrypt([np.array([-129]), np.array([1])])


def test_uint64_beyond_int64_is_out_of_domain(key: PaillierKey) -> None:
    packer = HomPacker(key, 64, 1, column="totals")
    with pytest.raises(DomainError, match=r"totals\[0\]"):
        packer.encrypt([np.array([2**63], dtype=np.uint64)])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"slot_bits": 65, "columns": 1}, "1..64 bits"),
        ({"slot_bits": 64, "columns": 0}, "columns >= 1"),
        ({"slot_bits": 64, "columns": 11}, "fit 0 rows"),
        ({"slot_bits": 64, "columns": 2, "rows_per_ciphertext": 6}, "asked for 6"),
        ({"slot_bits": 64, "columns": 2, "names": ["a"]}, "2 columns but 1 names"),
    ],
)
def test_impossible_layouts_are_refused(key: PaillierKey, kwargs, message: str) -> None:
    with pytest.raises(ParameterError, match=message):
        HomPacker(key, **kwargs)


def test_layout_larger_than_plaintext_is_refused(key: PaillierKey) -> None:
    with pytest.raises(ParameterError, match="use fewer slots"):
        PackingLayout(64, 16).check_fits(key.public)


def test_wrong_column_count_and_type_are_refused(key: PaillierKey) -> None:
    packer = HomPacker(key, 32, 2)
    with pytest.raises(ParameterError, match="takes 2 columns"):
        packer.encrypt([np.array([1])])
    with pytest.raises(ParameterError, match="same number of rows"):
        packer.encrypt([np.array([1]), np.array([1, 2])])
    with pytest.raises(ParameterError, match="integers"):
        packer.encrypt([np.array([1.5]), np.array([1])])


def test_sum_past_max_summands_is_detected_when_it_leaves_the_layout(key: PaillierKey) -> None:
    packer = HomPacker(key, 8, 1, max_summands=2, rows_per_ciphertext=1)
    ciphertexts = packer.encrypt([np.full(300, 127)])
    with pytest.raises(MalformedCiphertextError, match="overflowed"):
        packer.decrypt_sums(sum_ciphertexts(ciphertexts, packer.n_square))


def test_tampered_packed_ciphertext_is_refused(key: PaillierKey) -> None:
    packer = HomPacker(key, 32, 2, column="lineitem.hom")
    good = packer.encrypt([np.array([1]), np.array([2])])[0].as_py()
    with pytest.raises(MalformedCiphertextError, match=r"'lineitem\.hom'.*version 0x07"):
        packer.decrypt_sums(b"\x07" + good[1:])
    with pytest.raises(MalformedCiphertextError, match="got 10"):
        packer.decrypt_sums_many(pa.array([good, good[:10]]))


def test_empty_input_gives_no_ciphertexts(key: PaillierKey) -> None:
    packer = HomPacker(key, 32, 2)
    ciphertexts = packer.encrypt([np.array([], np.int64), np.array([], np.int64)])
    assert len(ciphertexts) == 0
    assert packer.decrypt_sums(sum_ciphertexts(ciphertexts, packer.n_square)) == [0, 0]


def test_packer_from_master_uses_the_scope_key() -> None:
    master = MasterKey(b"\x05" * 32)
    packer = HomPacker.from_master(master, "lineitem.agg", 32, 2, bits=512, column="agg")
    assert packer.public == PaillierKey.from_master(master, "lineitem.agg", bits=512).public
    assert PaillierKey.derive(master, "lineitem.agg", bits=512).public == packer.public
    total = sum_ciphertexts(packer.encrypt([np.array([1, 2]), np.array([3, 4])]), packer.n_square)
    assert packer.decrypt_sums(total) == [3, 7]


def test_layout_refuses_values_wider_than_a_slot() -> None:
    with pytest.raises(DomainError, match=r"\[-128, 128\)"):
        PackingLayout(8, 2).pack(np.array([[1, 128]]))


def test_flags_are_counted_above_the_slots(key: PaillierKey) -> None:
    # 1023 bits: 2 columns of 32-bit slots (24 + 8 bits) and a 10-bit counter: 13 rows
    packer = HomPacker(key, 24, 2, max_summands=2**8, flags=True)
    assert packer.rows_per_ciphertext == 1023 // (2 * 32 + 10) == 13
    assert packer.layout == PackingLayout(32, 26, counters=13, counter_bits=10)
    rows = 40
    flags = np.zeros(rows, np.int64)
    flags[[3, 16, 29, 30]] = 1
    columns = [np.arange(rows) - 20, np.full(rows, -(2**23)), flags]
    ciphertexts = packer.encrypt(columns)
    for got, want in zip(packer.decrypt_rows(ciphertexts, rows), columns, strict=True):
        np.testing.assert_array_equal(got, want)
    total = sum_ciphertexts(ciphertexts, packer.n_square)
    assert packer.decrypt_sums(total) == _sums(columns)
    # position 3: rows 3, 16 and 29, all three flagged
    assert packer.decrypt_sums(total, positions=[3]) == [-17 - 4 + 9, -(2**23) * 3, 3]
    with pytest.raises(DomainError, match=r"integers \[0, 2\)"):
        packer.encrypt([np.array([1]), np.array([1]), np.array([2])])


def test_a_flag_count_past_max_summands_is_detected(key: PaillierKey) -> None:
    packer = HomPacker(key, 8, 1, max_summands=2, rows_per_ciphertext=1, flags=True)
    ciphertexts = packer.encrypt([np.zeros(4, np.int64), np.ones(4, np.int64)])
    with pytest.raises(MalformedCiphertextError, match="overflowed"):
        packer.decrypt_sums(sum_ciphertexts(ciphertexts, packer.n_square))
