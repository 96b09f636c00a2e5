"""A point write's encryption without per-column kernels equals the kernels' (issue 41).

``encode`` widens a few narrow integers and views strings as bytes instead of
casting; a narrow row-bound RND masks and checks its width in numpy; a table
encryptor's row-bound columns XOR in one native call (``ciphers.encrypt``).
"""

from __future__ import annotations

import datetime

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from veil.ciphers.row_bound import RowBoundCipher
from veil.crypto.rowrnd import RowRnd
from veil.encoding import SqlType, encode
from veil.errors import DomainError

INTS = [
    pa.array([1, -2, None, 127], pa.int8()),
    pa.array([1, -(2**15), 2**15 - 1], pa.int16()),
    pa.array([None, None], pa.int32()),
    pa.array([5, None, -(2**31), 2**31 - 1, 0], pa.int32()).slice(1),
    pa.array([], pa.int32()),
    pa.array(list(range(100)), pa.int32()),
    pa.array([7, 8], pa.int64()),
]


@pytest.mark.parametrize("values", INTS)
def test_integers_encode_as_the_cast_does(values: pa.Array) -> None:
    got = encode(values, SqlType("BIGINT"))
    want = pc.cast(values, pa.int64())
    assert got.type == pa.int64() and got.equals(want) and got.null_count == want.null_count


def test_dates_and_strings_encode_as_the_casts_do() -> None:
    days = pa.array([datetime.date(1992, 1, 1), None, datetime.date(1970, 1, 1)], pa.date32())
    for dates in (days, days.slice(1)):
        want = pc.cast(pc.cast(dates, pa.int32()), pa.int64())
        assert encode(dates, SqlType("DATE")).equals(want)
    for texts in (
        pa.array(["a", None, "\u00e9t\u00e9", ""]),
        pa.array(["x", "yz"], pa.large_string()),
        pa.array(["p", "q", "r"]).slice(1),
    ):
        got = encode(texts, SqlType("VARCHAR"))
        assert got.type == pa.binary()
        assert got.equals(pc.cast(pc.cast(texts, pa.string()), pa.binary()))


IDS = np.array([3, 1 << 40, 9], dtype=np.int64)


def _narrow(bits: int) -> RowBoundCipher:
    return RowBoundCipher(RowRnd(b"\x05" * 32, column="c"), None, bits=bits)


@pytest.mark.parametrize(
    "values",
    [
        pa.array([1, -5, 2**19 - 1], pa.int64()),
        pa.array([None, 3, None], pa.int64()),
        pa.array([0, 1, 2, 3], pa.int64()).slice(1),
    ],
)
def test_narrow_rnd_seals_as_the_kernels_do(values: pa.Array) -> None:
    cipher = _narrow(20)
    sealed = cipher.encrypt_rows(IDS, values)
    layer = cipher.sealing_layer()
    assert isinstance(layer, RowRnd)
    xored = layer.encrypt(IDS, cipher.sealing_input(values))
    assert sealed.equals(pc.bit_wise_and(xored, pa.scalar((1 << 20) - 1, pa.int64())))
    assert cipher.decrypt_rows(IDS, sealed).equals(values)
    many = np.arange(100, dtype=np.int64)  # past the numpy path: the kernels
    assert cipher.decrypt_rows(many, cipher.encrypt_rows(many, pa.array(many))).equals(
        pa.array(many)
    )


def test_narrow_rnd_refuses_values_beyond_its_width() -> None:
    with pytest.raises(DomainError):
        _narrow(8).encrypt_rows(IDS, pa.array([1, 128, 2], pa.int64()))
    with pytest.raises(DomainError):
        _narrow(8).encrypt_rows(IDS, pa.array([1, None, -129], pa.int64()))


def test_a_subclass_encrypting_whole_has_no_sealing_layer() -> None:
    class Whole(RowBoundCipher):
        def encrypt_rows(self, ids: np.ndarray, encoded: pa.Array) -> pa.Array:
            return encoded

    assert Whole(RowRnd(b"\x01" * 32), None).sealing_layer() is None
    assert isinstance(RowBoundCipher(RowRnd(b"\x01" * 32), None).sealing_layer(), RowRnd)
