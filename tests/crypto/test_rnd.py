"""Behaviour of RND: formats, NULLs, input kinds, and every way decryption fails."""

from __future__ import annotations

import pickle

import numpy as np
import pyarrow as pa
import pytest

from veil import _native
from veil.crypto.keys import MasterKey
from veil.crypto.rnd import OVERHEAD, VERSION, Rnd
from veil.errors import AuthenticationError, MalformedCiphertextError, ParameterError

pytestmark = pytest.mark.unit

KEY = bytes(range(32))


@pytest.fixture
def rnd() -> Rnd:
    return Rnd(KEY, context=b"orders.note", column="orders.note")


def test_format_is_version_nonce_ciphertext_tag(rnd: Rnd) -> None:
    sealed = rnd.encrypt_one("hello")
    assert sealed[0] == VERSION
    assert len(sealed) == len(b"hello") + OVERHEAD == 34
    assert rnd.decrypt_one(sealed) == b"hello"


def test_strings_binaries_and_large_types_round_trip(rnd: Rnd) -> None:
    for array in (
        pa.array(["a", None, "", "ünïcode"]),
        pa.array([b"a", None, b"", b"\x00\xff"], pa.binary()),
        pa.array(["a", None, ""], pa.large_string()),
        pa.array([b"a", None], pa.large_binary()),
        pa.array(["view", None, ""], pa.string_view()),
    ):
        sealed = rnd.encrypt(array)
        assert sealed.type == pa.binary()
        assert sealed.null_count == array.null_count
        assert rnd.decrypt(sealed).to_pylist() == array.cast(pa.large_binary()).to_pylist()


def test_numpy_in_gives_numpy_out(rnd: Rnd) -> None:
    values = np.array([b"x", None, b"yz"], dtype=object)
    sealed = rnd.encrypt(values)
    assert isinstance(sealed, np.ndarray)
    assert sealed[1] is None
    assert list(rnd.decrypt(sealed)) == [b"x", None, b"yz"]


def test_chunked_arrays_stay_chunked(rnd: Rnd) -> None:
    chunked = pa.chunked_array([["a", "b"], [], [None, "c"]])
    sealed = rnd.encrypt(chunked)
    assert isinstance(sealed, pa.ChunkedArray) and sealed.num_chunks == 3
    assert rnd.decrypt(sealed).to_pylist() == [b"a", b"b", None, b"c"]


def test_wrong_key_fails_authentication_naming_the_column(rnd: Rnd) -> None:
    sealed = rnd.encrypt(pa.array(["secret"]))
    other = Rnd(bytes(32), context=b"orders.note", column="orders.note")
    with pytest.raises(AuthenticationError, match=r"orders\.note.*row 0.*wrong key"):
        other.decrypt(sealed)


def test_wrong_context_fails_authentication(rnd: Rnd) -> None:
    sealed = rnd.encrypt_one(b"secret")
    with pytest.raises(AuthenticationError):
        Rnd(KEY, context=b"orders.other").decrypt_one(sealed)


@pytest.mark.parametrize("position", [0, 1, 13, 20, -1])
def test_every_tampered_byte_is_detected(rnd: Rnd, position: int) -> None:
    sealed = bytearray(rnd.encrypt_one(b"payload"))
    sealed[position] ^= 0x01
    error = MalformedCiphertextError if position == 0 else AuthenticationError
    with pytest.raises(error):
        rnd.decrypt_one(bytes(sealed))


@pytest.mark.parametrize(
    ("stored", "reason"),
    [
        (b"", "empty"),
        (b"\x01" + bytes(27), "shorter"),
        (b"\x02" + bytes(40), "version byte 0x02"),
    ],
)
def test_malformed_ciphertexts_say_why(rnd: Rnd, stored: bytes, reason: str) -> None:
    with pytest.raises(MalformedCiphertextError, match=reason):
        rnd.decrypt(pa.array([b"\x01" + bytes(30), stored]).slice(1))


def test_bad_keys_and_types_are_parameter_errors() -> None:
    with pytest.raises(ParameterError, match="32 bytes"):
        Rnd(b"short")
    with pytest.raises(ParameterError, match="encode other types"):
        Rnd(KEY).encrypt(pa.array([1, 2]))
    with pytest.raises(ParameterError, match="pyarrow Array"):
        Rnd(KEY).encrypt(["a list"])
    with pytest.raises(_native.NativeParameterError, match="nonce is 12 bytes"):
        _native.rnd_encrypt_with_nonce_for_tests(KEY, b"", b"", b"")


def test_from_master_derives_a_per_scope_key() -> None:
    master = MasterKey(bytes(32))
    sealed = Rnd.from_master(master, "orders.note").encrypt_one(b"v")
    assert Rnd.from_master(master, "orders.note").decrypt_one(sealed) == b"v"
    with pytest.raises(AuthenticationError):
        Rnd.from_master(master, "orders.other").decrypt_one(sealed)


def test_the_key_never_shows(rnd: Rnd) -> None:
    assert KEY.hex() not in repr(rnd) and str(KEY) not in repr(rnd)
    with pytest.raises(TypeError):
        pickle.dumps(rnd)
