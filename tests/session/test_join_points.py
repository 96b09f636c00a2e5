"""The JOIN-ADJ points a peel's builds share (``veil.session.onions.JoinPoints``)."""

from __future__ import annotations

import pyarrow as pa

from veil.ciphers.columns import JoinCipher
from veil.crypto.joinadj import JoinAdj
from veil.session.onions import JoinPoints


class _Counted(JoinCipher):
    """A JOIN cipher that counts the values it encrypts."""

    def __init__(self, inner: JoinAdj):
        super().__init__(inner)
        self.encrypted = 0

    def encrypt(self, encoded: pa.Array) -> pa.Array:
        self.encrypted += len(encoded)
        return super().encrypt(encoded)


def test_a_second_build_under_the_same_key_reuses_the_points() -> None:
    cipher = _Counted(JoinAdj(b"k" * 32))
    points = JoinPoints()
    orders = pa.array([5, 1, 2, 3, 1, None], pa.int64())
    lines = pa.array([1, 1, 2, 9, None, 5, 5], pa.int64())
    assert points.encrypt(cipher, "a", orders).equals(JoinCipher(cipher._inner).encrypt(orders))
    assert cipher.encrypted == 4
    assert points.encrypt(cipher, "a", lines).equals(JoinCipher(cipher._inner).encrypt(lines))
    assert cipher.encrypted == 5  # only 9 was new


def test_another_key_or_encoding_shares_nothing() -> None:
    cipher = _Counted(JoinAdj(b"k" * 32))
    points = JoinPoints()
    points.encrypt(cipher, "a", pa.array([1, 2], pa.int64()))
    other = JoinAdj(b"o" * 32)
    got = points.encrypt(JoinCipher(other), "b", pa.array([1, 2], pa.int64()))
    assert got.equals(JoinCipher(other).encrypt(pa.array([1, 2], pa.int64())))
    text = pa.array([b"1", b"x"], pa.binary())
    assert points.encrypt(cipher, "a", text).equals(JoinCipher(cipher._inner).encrypt(text))
    assert cipher.encrypted == 4
