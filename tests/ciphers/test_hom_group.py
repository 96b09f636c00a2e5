"""Slot and mask arithmetic of packed HOM groups, and masked sums of pack products."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from veil.ciphers.hom_group import (
    MAX_ROWS_PER_CIPHERTEXT,
    MIN_SUMMAND_BITS,
    HomGroupCipher,
    OverflowedRowsError,
    headroom,
    in_positions,
    slot_masks,
)
from veil.crypto.hom import sum_ciphertexts
from veil.crypto.keys import MasterKey
from veil.design.model import HomGroup
from veil.errors import ParameterError

pytestmark = pytest.mark.unit


def test_slot_masks_group_slots_by_pack() -> None:
    # R = 4: slots 0..3 are pack 0, 4..7 pack 1; slot 9 is pack 2, position 1.
    assert slot_masks(np.array([0, 1, 2, 3, 5, 9]), 4) == {0: 0b1111, 1: 0b0010, 2: 0b0010}


def test_in_positions_reads_the_mask_bits() -> None:
    assert in_positions(0b1011, 4) == [0, 1, 3]
    assert in_positions(0, 4) == []
    with pytest.raises(ParameterError, match="beyond"):
        in_positions(0b10000, 4)


@pytest.fixture(scope="module")
def cipher() -> HomGroupCipher:
    group = HomGroup("t_side", "c_slot", ["a", "a * b"], ["BIGINT", "BIGINT"], "hom:test")
    group.value_bits = 24
    return HomGroupCipher.sized(MasterKey(b"\x07" * 32), group)


def test_sized_group_fills_the_plaintext_up_to_the_row_cap(cipher: HomGroupCipher) -> None:
    # 24 value bits + 32 bits of headroom = 56-bit slots; 2 slots per row; 2047 bits
    # would hold 18 rows, but at most 8 keep the masks per group few, so the
    # headroom stays at its most, 32 bits
    assert cipher.rows == min(2047 // (56 * 2), MAX_ROWS_PER_CIPHERTEXT) == 8
    assert cipher.group.value_bits == 24 and cipher.group.summand_bits == 32


def test_lineitem_group_packs_four_rows_with_the_most_headroom_that_keeps_them() -> None:
    # TPC-H lineitem: six sums, DECIMAL(15,2) columns (51 bits) up to DECIMAL(18,s)
    # products (61 bits), which may overflow: 61 + 19 bits = 80-bit slots and a
    # 21-bit flag counter, 6 * 80 + 21 = 501 bits a row, 4 rows in 2047 bits
    assert headroom(2047, 61, 6, True) == (19, 4)
    # one more bit of headroom needs 88-bit slots: 3 rows
    assert headroom(2047, 61, 6, True)[1] > 2047 // (6 * 88 + 22)
    # six DECIMAL(15,2) sums without products: 51 + 13 bits, 64-bit slots, 5 rows
    assert headroom(2047, 51, 6, True) == (13, 5)
    # the old layout (a flag slot, 2^32 packs per product): 7 * 96 bits, 3 rows
    assert 2047 // (7 * 96) == 3


@pytest.mark.parametrize(
    ("value_bits", "columns", "flags"),
    [(61, 6, True), (61, 6, False), (64, 1, True), (24, 2, False), (51, 3, True), (8, 30, True)],
)
def test_headroom_is_the_largest_that_keeps_the_most_rows(
    value_bits: int, columns: int, flags: bool
) -> None:
    from veil.crypto.hom import rows_that_fit

    def rows(bits: int) -> int:
        fit = rows_that_fit(2047, value_bits, columns, max_summands=2**bits, flags=flags)
        return min(fit, MAX_ROWS_PER_CIPHERTEXT)

    bits, most = headroom(2047, value_bits, columns, flags)
    assert most == max(rows(b) for b in range(MIN_SUMMAND_BITS, 33)) and rows(bits) == most
    assert bits == 32 or rows(bits + 1) < most


def test_a_product_of_2_to_the_h_packs_is_exact_at_the_domain_edges() -> None:
    """Lineitem's layout, every slot at its domain's extreme, 2^h packs in one product."""
    sources = [f"e{i}" for i in range(6)]
    group = HomGroup("t_side", "c_slot", sources, ["BIGINT"] * 6, "hom:edge", value_bits=61)
    group.overflow_flags = True
    cipher = HomGroupCipher.sized(MasterKey(b"\x0b" * 32), group)
    assert (group.summand_bits, cipher.rows, cipher.packer.layout.slot_bits) == (19, 4, 80)
    top, bottom = (1 << 60) - 1, -(1 << 60)
    row = [top, bottom] * 3 + [0]
    values = np.array([row] * cipher.rows, np.int64)
    values[1, 6] = 1  # the row at position 1 overflowed
    pack = cipher.encrypt_packs(values, 0).column("ct")[0].as_py()
    # the server's largest product: the same pack 2^h times
    power = pow(int.from_bytes(pack[1:], "big"), 2**group.summand_bits, cipher.n_square)
    product = pa.array([pack[:1] + power.to_bytes(len(pack) - 1, "big")], pa.binary())
    with pytest.raises(OverflowedRowsError):
        cipher.masked_sums(product, [0b0010])
    times = 2**group.summand_bits
    assert cipher.masked_sums(product, [0b1101]) == [[v * 3 * times for v in row[:6]]]


def test_masked_sums_add_only_the_selected_rows(cipher: HomGroupCipher) -> None:
    rng = np.random.default_rng(5)
    rows = 3 * cipher.rows + 2  # the last pack is partial
    values = rng.integers(-1000, 1000, (rows, 2))
    side = cipher.encrypt_packs(values, 0)
    assert side.column("pack").to_pylist() == [0, 1, 2, 3]
    chosen = np.sort(rng.choice(rows, 25, replace=False))
    # What the server does: per mask, multiply the packs holding the chosen rows.
    by_mask: dict[int, list[int]] = {}
    for pack, mask in slot_masks(chosen, cipher.rows).items():
        by_mask.setdefault(mask, []).append(pack)
    cts = side.column("ct").to_pylist()
    products = [
        sum_ciphertexts(pa.array([cts[p] for p in packs]), cipher.n_square)
        for packs in by_mask.values()
    ]
    sums = cipher.masked_sums(pa.array(products, pa.binary()), list(by_mask))
    total = [sum(s[i] for s in sums if s is not None) for i in range(2)]
    assert total == values[chosen].sum(axis=0).tolist()


def test_cost_rule_sends_q1_shaped_sums_to_the_server_only_at_scale() -> None:
    from veil.design.model import DET, Encryption, HomGroup, TableDesign
    from veil.sql.passes.pushdown_aggregates import few_groups

    def table(rows: int) -> TableDesign:
        flag = Encryption("c_f", "flag", DET, "VARCHAR", "det:t.flag", {"distinct": 6})
        key = Encryption("c_k", "key", DET, "BIGINT", "det:t.key", {"distinct": rows // 4})
        group = HomGroup("t_h", "c_s", ["a", "b"], ["BIGINT"] * 2, "hom:t", rows_per_ciphertext=4)
        return TableDesign("t", "t_x", "c_r", [], [flag, key], row_count=rows, hom=group)

    assert few_groups(table(6_000_000), ["flag"])  # TPC-H Q1 at SF 1: 6 groups
    assert not few_groups(table(60_000), ["flag"])  # SF 0.01: fetching is cheaper
    assert not few_groups(table(6_000_000), ["key"])  # Q18: 1.5M groups
    # Q1's flags spread over the table: every group touches every chunk of 2^h
    # packs. 1.5M packs in 3 chunks of 2^19 (lineitem's h): 6 * 16 * 3 products
    # still pay; in 367 chunks of 2^12, 6 * 16 * 367 decryptions (~78 s) do not.
    lineitem = table(6_000_000)
    assert lineitem.hom is not None
    lineitem.hom.summand_bits = 19
    assert few_groups(lineitem, ["flag"])
    lineitem.hom.summand_bits = 12
    assert not few_groups(lineitem, ["flag"])
