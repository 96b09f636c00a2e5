"""Row-bound RND against a reference: AES-256 in counter mode from the `cryptography` package."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from hypothesis import given, settings
from hypothesis import strategies as st

from veil.crypto.rowrnd import RowRnd
from veil.errors import ParameterError

pytestmark = pytest.mark.unit

KEY = bytes(range(100, 132))
RND = RowRnd(KEY, column="c")


def keystream(row_id: int, length: int) -> bytes:
    """The reference: AES-256(k, 0x02 || 0^3 || counter (4, BE) || id (8, BE)), concatenated."""
    aes = Cipher(algorithms.AES(KEY), modes.ECB()).encryptor()
    blocks = [
        aes.update(bytes([2, 0, 0, 0]) + j.to_bytes(4, "big") + (row_id % 2**64).to_bytes(8, "big"))
        for j in range(-(-length // 16))
    ]
    return b"".join(blocks)[:length]


def xor(data: bytes, stream: bytes) -> bytes:
    return bytes(a ^ b for a, b in zip(data, stream, strict=True))


@settings(deadline=None, max_examples=50)
@given(
    st.lists(st.one_of(st.none(), st.binary(max_size=70)), min_size=1, max_size=30),
    st.integers(0, 2**40),
)
def test_binary_values_match_the_reference(values: list[bytes | None], first: int) -> None:
    ids = np.arange(first, first + len(values), dtype=np.int64)
    sealed = RND.encrypt(ids, pa.array(values, pa.binary())).to_pylist()
    for row_id, value, stored in zip(ids.tolist(), values, sealed, strict=True):
        expected = None if value is None else xor(value, keystream(row_id, len(value)))
        assert stored == expected
    assert RND.decrypt(ids, pa.array(sealed, pa.binary())).to_pylist() == values


@settings(deadline=None, max_examples=50)
@given(st.lists(st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)), min_size=1, max_size=30))
def test_int64_values_match_the_reference(values: list[int | None]) -> None:
    ids = np.arange(len(values), dtype=np.int64) * 7 - 3  # a negative id is its 64 bits
    sealed = RND.encrypt(ids, pa.array(values, pa.int64()))
    assert sealed.type == pa.int64() and sealed.null_count == values.count(None)
    for row_id, value, stored in zip(ids.tolist(), values, sealed.to_pylist(), strict=True):
        if value is None:
            assert stored is None
            continue
        plain = (value % 2**64).to_bytes(8, "little")
        expected = int.from_bytes(xor(plain, keystream(row_id, 8)), "little", signed=True)
        assert stored == expected
    assert RND.decrypt(ids, sealed).to_pylist() == values


def test_strings_sliced_arrays_and_equal_values() -> None:
    column = pa.array(["x", "same", None, "same", "ünïcode"]).slice(1)
    ids = np.array([10, 11, 12, 13])
    sealed = RND.encrypt(ids, column)
    assert sealed[0].as_py() != sealed[2].as_py()  # equal values under different ids
    assert RND.decrypt(ids, sealed).cast(pa.string()).to_pylist() == column.to_pylist()
    numbers = pa.array([None, 5, None, 7], pa.int64()).slice(1)
    assert RND.decrypt(ids[:3], RND.encrypt(ids[:3], numbers)).to_pylist() == [5, None, 7]


def test_keys_and_ids_matter_and_bad_input_is_refused() -> None:
    ids = np.array([1, 2])
    values = pa.array([123, 456], pa.int64())
    other = RowRnd(bytes(32))
    assert other.encrypt(ids, values) != RND.encrypt(ids, values)
    assert RND.decrypt(ids + 1, RND.encrypt(ids, values)) != values
    with pytest.raises(ParameterError, match="one row id per value"):
        RND.encrypt(ids[:1], values)
    with pytest.raises(ParameterError, match="int64 or binary"):
        RND.encrypt(ids, pa.array([1.5, 2.5]))
    with pytest.raises(TypeError):
        import pickle

        pickle.dumps(RND)
