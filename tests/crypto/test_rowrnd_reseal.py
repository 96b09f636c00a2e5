"""Stored row-bound RND values carried to new row ids equal a decrypt-then-encrypt (issue 41)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from veil.ciphers.encrypt import _resealed
from veil.ciphers.row_bound import RowBoundCipher
from veil.crypto.rowrnd import RowRnd, reseal_columns
from veil.errors import ParameterError

OLD = np.array([0, 7, 1 << 40, 3], dtype=np.int64)
NEW = np.array([1000, 1001, 1002, 1003], dtype=np.int64)


def _key(n: int) -> RowRnd:
    return RowRnd(bytes([n + 1]) * 32, column=f"c{n}")


PLAIN = [
    pa.array([1, -2, None, 1 << 62], pa.int64()),
    pa.array([b"", b"x" * 40, None, b"Clerk#000000921"], pa.binary()),
    pa.array(["a", None, "\u00e9t\u00e9", "b" * 17], pa.string()),
    pa.array([None, None, None, None], pa.int64()),
]


def test_equal_to_decrypt_then_encrypt() -> None:
    keys = [_key(n) for n in range(len(PLAIN))]
    stored = [key.encrypt(OLD, values) for key, values in zip(keys, PLAIN, strict=True)]
    moved = reseal_columns(OLD, NEW, list(zip(keys, stored, strict=True)))
    for key, values, result in zip(keys, PLAIN, moved, strict=True):
        fresh = key.encrypt(NEW, values)
        assert result.equals(fresh)


def test_narrow_columns_keep_their_width() -> None:
    """A narrow column stores the low bits only: carried, it is what a fresh sealing
    under the new ids stores (the keystreams' high bits masked off)."""
    cipher = RowBoundCipher(_key(9), None, bits=20)
    values = pa.array([5, -7, None, (1 << 19) - 1], pa.int64())
    stored = cipher.encrypt_rows(OLD, values)
    carried = _resealed(OLD, NEW, [("c", cipher, stored)])["c"]
    assert carried.equals(cipher.encrypt_rows(NEW, values))
    assert cipher.decrypt_rows(NEW, carried).equals(values)


@pytest.mark.parametrize("rows", [1, 100])  # one native call, or a call per column
def test_many_rows_and_few_agree(rows: int) -> None:
    cipher = RowBoundCipher(_key(3), None)
    old = np.arange(rows, dtype=np.int64) * 3
    new = np.arange(rows, dtype=np.int64) + 10_000
    values = pa.array([f"v{i}".encode() * (i % 5) for i in range(rows)], pa.binary())
    carried = _resealed(old, new, [("c", cipher, cipher.encrypt_rows(old, values))])["c"]
    assert carried.equals(cipher.encrypt_rows(new, values))


def test_refuses_unequal_id_counts() -> None:
    with pytest.raises(ParameterError):
        reseal_columns(OLD, NEW[:2], [(_key(1), pa.array([1, 2, 3, 4], pa.int64()))])
