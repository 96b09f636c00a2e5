"""Behaviour of DET: column kinds, NULLs, slices, and the errors it raises."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from veil.crypto.det import DetBytes, DetInt
from veil.crypto.keys import MasterKey
from veil.errors import (
    AuthenticationError,
    DomainError,
    MalformedCiphertextError,
    ParameterError,
)

pytestmark = pytest.mark.unit

INT_KEY = bytes(range(16))
SIV_KEY = bytes(range(32))


@pytest.mark.parametrize(("bits", "dtype"), [(20, np.int32), (32, np.int32), (33, np.int64)])
def test_det_int_numpy_round_trip_and_width(bits: int, dtype: type) -> None:
    det = DetInt(INT_KEY, bits)
    values = np.array([-(2 ** (bits - 1)), -5, 0, 7, 2 ** (bits - 1) - 1], dtype=np.int64)
    ciphertexts = det.encrypt(values)
    assert ciphertexts.dtype == dtype
    assert ciphertexts.min() >= -(2 ** (bits - 1)) and ciphertexts.max() < 2 ** (bits - 1)
    assert not np.array_equal(ciphertexts, values)
    np.testing.assert_array_equal(det.decrypt(ciphertexts), values)


def test_det_int_accepts_every_integer_type_alike() -> None:
    det = DetInt(INT_KEY, 32)
    expected = det.encrypt(np.array([1, 2, 100], dtype=np.int64))
    for dtype in (np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.uint64):
        np.testing.assert_array_equal(det.encrypt(np.array([1, 2, 100], dtype=dtype)), expected)
    arrow = det.encrypt(pa.array([1, 2, 100], pa.uint16()))
    assert arrow.type == pa.int32()
    assert arrow.to_pylist() == expected.tolist()


def test_det_int_arrow_keeps_nulls_slices_and_chunks() -> None:
    det = DetInt(INT_KEY, 64)
    column = pa.array([5, None, -7, None, 2**62, 0], pa.int64())
    sliced = column.slice(1, 4)
    encrypted = det.encrypt(sliced)
    assert encrypted.type == pa.int64()
    assert encrypted.is_null().to_pylist() == [True, False, True, False]
    assert encrypted[1].as_py() == det.encrypt_one(-7)
    assert det.decrypt(encrypted).to_pylist() == sliced.to_pylist()
    chunked = pa.chunked_array([column.slice(0, 2), column.slice(2)])
    encrypted_chunks = det.encrypt(chunked)
    assert isinstance(encrypted_chunks, pa.ChunkedArray)
    assert det.decrypt(encrypted_chunks).to_pylist() == column.to_pylist()


def test_det_int_out_of_domain_names_column_domain_and_row() -> None:
    det = DetInt(INT_KEY, 32, column="orders.qty")
    with pytest.raises(DomainError) as caught:
        det.encrypt(np.array([0, 1, 2**31], dtype=np.int64))
    message = str(caught.value)
    assert "'orders.qty'" in message and "row 2" in message
    assert "-2147483648" in message and "2147483647" in message
    assert caught.value.column == "orders.qty" and caught.value.domain == det.domain
    chunked = pa.chunked_array([pa.array([1, 2]), pa.array([3, -(2**40)])])
    with pytest.raises(DomainError, match="row 3"):
        det.encrypt(chunked)
    with pytest.raises(DomainError, match=r"'orders\.qty'"):
        det.encrypt_one(2**70)


def test_det_int_uint64_beyond_int64_is_out_of_domain() -> None:
    det = DetInt(INT_KEY, 64, column="c")
    with pytest.raises(DomainError, match="row 1"):
        det.encrypt(np.array([1, 2**63], dtype=np.uint64))


def test_det_int_decrypt_rejects_values_wider_than_the_width() -> None:
    det = DetInt(INT_KEY, 24, column="c")
    with pytest.raises(MalformedCiphertextError, match=r"'c'.*row 0"):
        det.decrypt(np.array([2**30], dtype=np.int64))


def test_det_int_refuses_bad_parameters_and_types() -> None:
    with pytest.raises(ParameterError, match="20 to 64"):
        DetInt(INT_KEY, 16)
    with pytest.raises(ParameterError, match="16, 24 or 32"):
        DetInt(b"short", 32)
    det = DetInt(INT_KEY, 32, column="c")
    with pytest.raises(ParameterError, match="integer"):
        det.encrypt(np.array([1.5]))
    with pytest.raises(ParameterError, match="integer"):
        det.encrypt(pa.array(["a"]))
    with pytest.raises(TypeError):
        det.encrypt([1, 2])  # type: ignore[arg-type]


def test_from_master_separates_scopes_and_hides_keys() -> None:
    master = MasterKey(bytes(32))
    a = DetInt.from_master(master, "t.a", bits=32, column="a")
    same = DetInt.from_master(master, "t.a", bits=32)
    other = DetInt.from_master(master, "t.b", bits=32)
    assert a.encrypt_one(42) == same.encrypt_one(42) != other.encrypt_one(42)
    text = DetBytes.from_master(master, "t.a", column="a")
    assert text.encrypt_one("x") == DetBytes.from_master(master, "t.a").encrypt_one("x")
    for thing in (a, text):
        assert "key" not in repr(thing).lower()


def test_det_bytes_round_trip_with_nulls_slices_and_chunks() -> None:
    det = DetBytes(SIV_KEY)
    column = pa.array(["skip", "alice", None, "", "bob", "alice"])
    sliced = column.slice(1)
    encrypted = det.encrypt(sliced)
    assert encrypted.type == pa.binary()
    assert encrypted.is_null().to_pylist() == [False, True, False, False, False]
    assert encrypted[0] == encrypted[4], "deterministic"
    assert len(encrypted[2].as_py()) == 17 and encrypted[2].as_py()[0] == 0x01
    assert det.decrypt(encrypted).cast(pa.string()).to_pylist() == sliced.to_pylist()
    chunked = pa.chunked_array([column.slice(0, 3), column.slice(3)], type=pa.string())
    assert det.decrypt(det.encrypt(chunked)).cast(pa.string()).to_pylist() == column.to_pylist()


def test_det_bytes_accepts_large_types_and_python_sequences() -> None:
    det = DetBytes(SIV_KEY)
    expected = det.encrypt(pa.array([b"a", b"bc"])).to_pylist()
    assert det.encrypt(pa.array(["a", "bc"], pa.large_string())).to_pylist() == expected
    from_numpy = det.encrypt(np.array([b"a", b"bc", None], dtype=object))
    assert isinstance(from_numpy, np.ndarray), "numpy in gives numpy out"
    assert from_numpy.tolist() == [*expected, None]
    assert det.encrypt_one("a") == det.encrypt_one(b"a") == expected[0]
    assert det.decrypt_one(expected[1]) == b"bc"


def test_det_bytes_wrong_key_and_tampering_fail_authentication() -> None:
    ciphertext = DetBytes(SIV_KEY).encrypt_one("secret")
    with pytest.raises(AuthenticationError, match="'name'"):
        DetBytes(bytes(32), column="name").decrypt_one(ciphertext)
    tampered = ciphertext[:-1] + bytes([ciphertext[-1] ^ 1])
    with pytest.raises(AuthenticationError):
        DetBytes(SIV_KEY).decrypt_one(tampered)
    column = pa.array([ciphertext, tampered])
    with pytest.raises(AuthenticationError, match="row 1"):
        DetBytes(SIV_KEY).decrypt(column)


@pytest.mark.parametrize(
    ("ciphertext", "reason"),
    [(b"", "empty"), (b"\x01short", "shorter"), (b"\x02" + bytes(20), "version")],
)
def test_det_bytes_malformed_ciphertexts(ciphertext: bytes, reason: str) -> None:
    with pytest.raises(MalformedCiphertextError, match=reason):
        DetBytes(SIV_KEY, column="c").decrypt_one(ciphertext)


def test_det_bytes_refuses_other_types_and_keys() -> None:
    with pytest.raises(ParameterError, match="32 or 64"):
        DetBytes(bytes(16))
    with pytest.raises(ParameterError, match="binary or string"):
        DetBytes(SIV_KEY, column="c").encrypt(pa.array([1, 2]))
