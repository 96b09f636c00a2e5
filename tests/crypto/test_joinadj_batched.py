"""JOIN-ADJ columns (``veil.crypto.joinadj``): the batched, multi-core kernels give the
bytes of one value at a time, and the bytes themselves stay pinned.

``JoinAdj.encrypt`` and ``rekey`` run a column on all cores and compress its points in
batches (``rust/veil-kernels/src/joinadj/batch.rs``); ``encrypt_one`` keeps the
unbatched path. Stored JOIN onions and server re-keys depend on the two agreeing.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from veil.crypto.joinadj import JoinAdj, rekey
from veil.crypto.keys import MasterKey
from veil.errors import MalformedCiphertextError

pytestmark = pytest.mark.unit

MASTER = MasterKey(bytes(range(32)))
A = JoinAdj.from_master(MASTER, "joinadj:t.a", "t.a")
B = JoinAdj.from_master(MASTER, "joinadj:u.b", "u.b")

# from the unbatched kernel (``encrypt_one``, whose code the batching left as it was)
KNOWN = {
    0: "012c7998aff9ec276991f28697e0d8da7e05f15b8f690acc574013cd9b1e7b044a",
    -1: "01403f0eccb976b34bdbc9edaf8c1c84dcfcbecf7c1be24895c763363fe0045377",
    "alpha": "01c2f719f3c72d2c357b646894d67e3daad1aa838131937e5269fe770bb0b8947a",
    b"": "0106267f97fac903ce004a53ec91d2c29d93903f4253a6e1371e7db1fdf0063a35",
}


def test_known_ciphertexts_one_value_and_in_columns() -> None:
    for value, expected in KNOWN.items():
        assert A.encrypt_one(value).hex() == expected
    words = A.encrypt(pa.array([v for v in KNOWN if isinstance(v, int)], pa.int64()))
    assert [w.hex() for w in words.to_pylist()] == [KNOWN[0], KNOWN[-1]]
    texts = A.encrypt(pa.array(["alpha"]))
    assert texts[0].as_py().hex() == KNOWN["alpha"]


@pytest.mark.parametrize("rows", [1, 63, 700, 3000])
def test_a_column_equals_its_values_one_by_one(rows: int) -> None:
    values = pa.array([None if i % 11 == 5 else i * 7919 - 10**6 for i in range(rows)], pa.int64())
    sealed = A.encrypt(values)
    assert sealed.is_null().equals(values.is_null())
    expected = [None if v is None else A.encrypt_one(v) for v in values.to_pylist()]
    assert sealed.to_pylist() == expected
    moved = rekey(A.token_to(B), sealed)
    assert moved.to_pylist() == [
        None if v is None else B.encrypt_one(v) for v in values.to_pylist()
    ]


def test_a_malformed_ciphertext_deep_in_a_long_column_is_refused() -> None:
    sealed = A.encrypt(pa.array(range(2000), pa.int64())).to_pylist()
    sealed[1500] = b"\x00" + sealed[1500][1:]
    with pytest.raises(MalformedCiphertextError):
        rekey(A.token_to(B), pa.array(sealed, pa.binary()))
