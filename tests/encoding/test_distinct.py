"""veil.distinct gives what np.unique gives, by sorting."""

from __future__ import annotations

import numpy as np
import pytest

from veil.distinct import distinct

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("size", [0, 1, 2, 7, 1000])
def test_distinct_is_np_unique(size: int) -> None:
    values = np.random.default_rng(size).integers(-50, 50, size, dtype=np.int64)
    assert np.array_equal(distinct(values), np.unique(values))
    assert distinct(values).dtype == np.int64


def test_distinct_keeps_unsigned_values() -> None:
    values = np.array([2**63 + 5, 3, 2**63 + 5, 0], dtype=np.uint64)
    assert distinct(values).tolist() == [0, 3, 2**63 + 5]
