"""Slot and mask arithmetic of packed HOM groups, and masked sums of pack products."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from veil.crypto.hom import sum_ciphertexts
from veil.crypto.keys import MasterKey
from veil.design.model import HomGroup
from veil.errors import ParameterError
from veil.exec.hom_group import (
    MAX_ROWS_PER_CIPHERTEXT,
    HomGroupCipher,
    in_positions,
    slot_masks,
)


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
    # 24 value bits + 32 bits of padding = 56-bit slots; 2 slots per row; 2047 bits
    # would hold 18 rows, but at most 8 keep the masks per group few
    assert cipher.rows == min(2047 // (56 * 2), MAX_ROWS_PER_CIPHERTEXT) == 8
    assert cipher.group.value_bits == 24


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
