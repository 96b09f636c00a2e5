"""Narrow DET (``veil.crypto.det_narrow``): a permutation of int64 that keeps narrow values narrow."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from veil.crypto.det_narrow import NarrowDet

pytestmark = pytest.mark.unit

NARROW_KEY = bytes(range(16))
WIDE_KEY = bytes(range(16, 32))


def test_values_round_trip_and_keep_their_side() -> None:
    det = NarrowDet(NARROW_KEY, WIDE_KEY, 24)
    half = 1 << 23
    values = np.array(
        [0, 1, -1, half - 1, -half, half, -half - 1, 2**63 - 1, -(2**63), 123456789012],
        dtype=np.int64,
    )
    stored = det.encrypt(pa.array(values)).to_numpy()
    inside = (values >= -half) & (values < half)
    assert (((stored >= -half) & (stored < half)) == inside).all()
    assert det.decrypt(pa.array(stored)).to_numpy().tolist() == values.tolist()
    assert [det.encrypt_one(int(v)) for v in values] == stored.tolist()
    assert [det.decrypt_one(int(c)) for c in stored] == values.tolist()


def test_nulls_stay_null() -> None:
    det = NarrowDet(NARROW_KEY, WIDE_KEY, 20)
    values = pa.array([5, None, 2**40, None], pa.int64())
    stored = det.encrypt(values)
    assert stored.null_count == 2
    assert det.decrypt(stored).to_pylist() == values.to_pylist()


def test_a_permutation_of_the_whole_domain_with_frequent_walks() -> None:
    """Wide part of 22 bits: 1/4 of its ciphertexts land in the narrow part and walk on."""
    det = NarrowDet(NARROW_KEY, WIDE_KEY, 20, wide_bits=22)
    domain = np.arange(-(1 << 21), 1 << 21, dtype=np.int64)
    stored = det.encrypt(pa.array(domain)).to_numpy()
    assert len(np.unique(stored)) == len(domain)  # injective, hence onto the domain
    assert stored.min() >= -(1 << 21) and stored.max() < 1 << 21
    assert (det.decrypt(pa.array(stored)).to_numpy() == domain).all()


def test_keys_and_widths_change_the_ciphertexts() -> None:
    values = pa.array(np.arange(1000, dtype=np.int64))
    a = NarrowDet(NARROW_KEY, WIDE_KEY, 24).encrypt(values)
    b = NarrowDet(WIDE_KEY, NARROW_KEY, 24).encrypt(values)
    c = NarrowDet(NARROW_KEY, WIDE_KEY, 25).encrypt(values)
    assert a != b and a != c


@pytest.mark.parametrize("bits", [19, 64])
def test_widths_outside_ff1s_range_are_refused(bits: int) -> None:
    with pytest.raises(ValueError, match="narrow DET"):
        NarrowDet(NARROW_KEY, WIDE_KEY, bits)
