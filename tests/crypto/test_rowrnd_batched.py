"""Several columns' row-bound RND in one native call equals a call per column (issue 41)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from veil.crypto.rowrnd import RowRnd, xor_columns
from veil.errors import ParameterError

IDS = np.array([0, 7, 1 << 40, 3], dtype=np.int64)


def _key(n: int) -> RowRnd:
    return RowRnd(bytes([n]) * 32, column=f"c{n}")


COLUMNS = [
    pa.array([1, -2, None, 1 << 62], pa.int64()),
    pa.array([b"", b"x" * 40, None, b"Clerk#000000921"], pa.binary()),
    pa.array(["a", None, "\u00e9t\u00e9", "b"], pa.string()),
    pa.array([None, None, None, None], pa.int64()),
    pa.array([5, 6, 7, 8], pa.int32()),
    pa.array([9, 8, 7, 6, 5], pa.int64()).slice(1),
    pa.chunked_array([[b"ab"], [b"c", b"d", None]], pa.binary()),
]


def test_equal_to_a_call_per_column() -> None:
    pairs = [(_key(n), values) for n, values in enumerate(COLUMNS)]
    together = xor_columns(IDS, pairs)
    for (key, values), result in zip(pairs, together, strict=True):
        alone = key.decrypt(IDS, values)
        assert result.type == alone.type
        assert result.equals(alone)
        assert result.null_count == alone.null_count


def test_round_trip() -> None:
    pairs = [(_key(n), values) for n, values in enumerate(COLUMNS[:2])]
    stored = xor_columns(IDS, pairs)
    opened = xor_columns(IDS, [(key, s) for (key, _), s in zip(pairs, stored, strict=True)])
    assert opened[0].equals(COLUMNS[0])
    assert opened[1].equals(COLUMNS[1])


def test_empty() -> None:
    ids = np.empty(0, dtype=np.int64)
    pairs = [(_key(1), pa.array([], pa.int64())), (_key(2), pa.array([], pa.binary()))]
    assert [len(r) for r in xor_columns(ids, pairs)] == [0, 0]
    assert xor_columns(ids, []) == []


def test_refuses_what_a_call_per_column_refuses() -> None:
    with pytest.raises(ParameterError):
        xor_columns(IDS, [(_key(1), pa.array([1, 2], pa.int64()))])
    with pytest.raises(ParameterError):
        xor_columns(IDS, [(_key(1), pa.array([1.0, 2.0, 3.0, 4.0]))])
