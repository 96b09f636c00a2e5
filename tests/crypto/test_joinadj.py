"""JOIN-ADJ (``veil.crypto.joinadj``): re-keying, determinism, NULLs, bad input.

The ristretto255 hash-to-group itself is checked against RFC 9496 by
``cargo test`` (tests/crypto/vectors/ristretto255_rfc9496.json).
"""

from __future__ import annotations

import pickle

import numpy as np
import pyarrow as pa
import pytest

from veil.crypto.joinadj import CIPHERTEXT_BYTES, TOKEN_BYTES, JoinAdj, rekey
from veil.crypto.keys import MasterKey
from veil.errors import DomainError, MalformedCiphertextError, ParameterError

pytestmark = pytest.mark.unit

MASTER = MasterKey(bytes(range(32)))
A = JoinAdj.from_master(MASTER, "joinadj:t.a", "t.a")
B = JoinAdj.from_master(MASTER, "joinadj:u.b", "u.b")
C = JoinAdj.from_master(MASTER, "joinadj:v.c", "v.c")

COLUMNS = [
    pa.array([0, 1, -1, None, 2**63 - 1, -(2**63), 1], pa.int64()),
    pa.array([3, None, 3], pa.int32()),
    pa.array(["alpha", "", None, "alpha", "naïve"], pa.string()),
    pa.array([b"", b"\x00" * 1000, None, b"x"], pa.binary()),
    pa.array([b"\x01", None], pa.large_binary()),
    pa.array([], pa.int64()),
]


@pytest.mark.parametrize("values", COLUMNS, ids=lambda v: str(v.type))
def test_rekeyed_equals_directly_keyed(values: pa.Array) -> None:
    sealed = A.encrypt(values)
    assert sealed.type == pa.binary()
    assert sealed.is_null().equals(values.is_null())
    assert all(len(c) == CIPHERTEXT_BYTES and c[0] == 1 for c in sealed.drop_null().to_pylist())
    assert rekey(A.token_to(B), sealed).equals(B.encrypt(values))


def test_equal_values_give_equal_ciphertexts_and_keys_differ() -> None:
    sealed = A.encrypt(pa.array(["x", "y", "x"])).to_pylist()
    assert sealed[0] == sealed[2] != sealed[1]
    assert A.encrypt_one("x") == sealed[0] != B.encrypt_one("x")
    assert A.encrypt_one(7) == A.encrypt(pa.array([7]))[0].as_py()
    assert A.encrypt_one(7) == A.encrypt_one((7).to_bytes(8, "little"))
    assert A.encrypt_one(b"") != A.encrypt_one(0)


def test_tokens_compose() -> None:
    values = pa.array([5, None, -9])
    via_b = rekey(B.token_to(C), rekey(A.token_to(B), A.encrypt(values)))
    assert via_b.equals(rekey(A.token_to(C), A.encrypt(values)))
    assert via_b.equals(C.encrypt(values))
    assert len(A.token_to(C)) == TOKEN_BYTES
    assert rekey(A.token_to(A), A.encrypt(values)).equals(A.encrypt(values))


def test_rekey_keeps_the_form_of_its_input() -> None:
    token = A.token_to(B)
    chunked = pa.chunked_array([A.encrypt(pa.array([1, 2])), A.encrypt(pa.array([None, 3]))])
    assert rekey(token, chunked).combine_chunks().equals(B.encrypt(pa.array([1, 2, None, 3])))
    as_numpy = rekey(token, np.array([A.encrypt_one(4), None], dtype=object))
    assert list(as_numpy) == [B.encrypt_one(4), None]
    sliced = A.encrypt(pa.array([1, None, 2, 3])).slice(1)
    assert rekey(token, sliced).equals(B.encrypt(pa.array([None, 2, 3])))


def test_bad_tokens_are_parameter_errors() -> None:
    sealed = A.encrypt(pa.array([1]))
    good = A.token_to(B)
    for bad in [good[:32], b"\x02" + good[1:], b"\x01" + bytes(32), b"\x01" + b"\xff" * 32]:
        with pytest.raises(ParameterError, match="JOIN-ADJ token"):
            rekey(bad, sealed)


def test_bad_ciphertexts_are_malformed() -> None:
    good = A.encrypt_one(1)
    for bad in [good[:32], b"\x00" + good[1:], b"\x01" + b"\xff" * 32, b"\x01" + bytes(32)]:
        with pytest.raises(MalformedCiphertextError, match="row 1"):
            rekey(A.token_to(B), pa.array([good, bad]))


def test_bad_keys_and_values() -> None:
    with pytest.raises(ParameterError):
        JoinAdj(bytes(16))
    with pytest.raises(DomainError):
        A.encrypt_one(2**63)
    with pytest.raises(ParameterError):
        A.encrypt_one(True)
    with pytest.raises(ParameterError, match="JOIN-ADJ takes"):
        A.encrypt(pa.array([1.5]))
    with pytest.raises(ParameterError):
        A.token_to("B")  # type: ignore[arg-type]


def test_a_key_does_not_show_or_travel() -> None:
    assert repr(A) == "JoinAdj(version=1, column='t.a')"
    with pytest.raises(TypeError, match="not picklable"):
        pickle.dumps(A)
