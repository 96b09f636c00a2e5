"""Behaviour of ASHE: the API over numpy and Arrow, NULLs, sums, edges and errors."""

from __future__ import annotations

import pickle
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest

from veil.crypto.ashe import (
    KEY_LABEL,
    SUM_BOUND,
    VERSION,
    Ashe,
    require_sum_fits,
    sum_fits,
)
from veil.crypto.keys import KeyLabel, MasterKey
from veil.errors import DomainError, ParameterError

pytestmark = pytest.mark.unit

KEY = bytes(range(32))
MOD = 2**64


@pytest.fixture
def ashe() -> Ashe:
    return Ashe(KEY, column="lineitem.l_quantity")


def server_sum(ciphertexts: np.ndarray | pa.Array) -> int:
    """What DuckDB's HUGEINT or PostgreSQL's NUMERIC SUM returns: the exact sum."""
    values = ciphertexts.to_pylist() if isinstance(ciphertexts, pa.Array) else ciphertexts.tolist()
    return sum(v for v in values if v is not None)


def test_sum_of_a_run_decrypts_with_its_two_end_pads(ashe: Ashe) -> None:
    ids = np.arange(100, 200, dtype=np.int64)
    values = np.arange(-50, 50, dtype=np.int64) * 7
    ciphertexts = ashe.encrypt(ids, values)
    assert ciphertexts.dtype == np.int64
    total = server_sum(ciphertexts)
    expected = int(values.sum())
    assert ashe.decrypt_sum(total, runs=[(100, 199)]) == expected
    assert ashe.decrypt_sum(total, ids=ids) == expected
    assert ashe.decrypt_sum(total, bitmap=(100, np.ones(100, dtype=bool))) == expected
    assert ashe.pad_sum(runs=[(100, 199)]) == sum(ashe.pad(i) for i in range(100, 200)) % MOD


def test_subsets_sum_only_their_ids(ashe: Ashe) -> None:
    ids = np.arange(1, 65, dtype=np.uint64)
    values = np.arange(1, 65, dtype=np.int64) ** 3
    ciphertexts = ashe.encrypt(ids, values)
    chosen = values % 3 == 0
    total = server_sum(ciphertexts[chosen])
    expected = int(values[chosen].sum())
    assert ashe.decrypt_sum(total, ids=ids[chosen]) == expected
    assert ashe.decrypt_sum(total, bitmap=(1, chosen)) == expected
    assert ashe.decrypt_sum(total, bitmap=(1, np.packbits(chosen, bitorder="little"))) == expected
    words = np.packbits(chosen, bitorder="little").view("<u8")
    assert ashe.decrypt_sum(total, bitmap=(1, words)) == expected


def test_single_values_decrypt(ashe: Ashe) -> None:
    ids = np.array([5, 9, 10, 11], dtype=np.int64)
    values = np.array([-(2**63), -1, 0, 2**63 - 1], dtype=np.int64)
    ciphertexts = ashe.encrypt(ids, values)
    np.testing.assert_array_equal(ashe.decrypt(ids, ciphertexts), values)
    np.testing.assert_array_equal(ashe.decrypt(ids, ciphertexts.view(np.uint64)), values)
    for i, v, c in zip(ids.tolist(), values.tolist(), ciphertexts.tolist(), strict=True):
        assert ashe.encrypt_one(i, v) == c
        assert ashe.decrypt_one(i, c) == v


def test_ciphertext_is_value_plus_pad_as_signed_bits(ashe: Ashe) -> None:
    stored = ashe.encrypt_one(7, -3)
    assert -(2**63) <= stored < 2**63
    assert stored % MOD == (-3 + ashe.pad(7)) % MOD


def test_arrow_nulls_stay_null_and_are_not_summed(ashe: Ashe) -> None:
    values = pa.array([4, None, -6, None, 10], pa.int32())
    ids = pa.array([20, 21, 22, 23, 24], pa.int64())
    ciphertexts = ashe.encrypt(ids, values)
    assert ciphertexts.type == pa.int64()
    assert ciphertexts.is_null().to_pylist() == [False, True, False, True, False]
    assert ashe.decrypt(ids, ciphertexts).to_pylist() == values.to_pylist()
    # The ids of the summed (non-NULL) rows: 20, 22 and 24.
    total = server_sum(ciphertexts)
    assert ashe.decrypt_sum(total, ids=[20, 22, 24]) == 8
    assert ashe.decrypt_sum(total, runs=[(20, 20), (22, 22), (24, 24)]) == 8


def test_null_slots_hold_no_pad(ashe: Ashe) -> None:
    ciphertexts = ashe.encrypt(np.arange(3), pa.array([None, 1, None], pa.int64()))
    assert np.frombuffer(ciphertexts.buffers()[1], dtype=np.int64)[[0, 2]].tolist() == [0, 0]


def test_sliced_and_chunked_arrow_columns(ashe: Ashe) -> None:
    column = pa.array([1, None, 3, 4, None, 6], pa.int64()).slice(1)
    ids = np.arange(50, 55)
    sliced = ashe.encrypt(ids, column)
    assert ashe.decrypt(ids, sliced).to_pylist() == column.to_pylist()
    chunked = pa.chunked_array([[1, 2], [], [None, 4]], pa.int64())
    encrypted = ashe.encrypt(pa.chunked_array([[60, 61, 62, 63]], pa.int64()), chunked)
    assert isinstance(encrypted, pa.ChunkedArray) and encrypted.num_chunks == 3
    assert ashe.decrypt(np.arange(60, 64), encrypted).to_pylist() == [1, 2, None, 4]


def test_sums_wrap_and_sum_fits_says_when(ashe: Ashe) -> None:
    ids = np.arange(2, dtype=np.int64)
    values = np.array([2**63 - 1, 1], dtype=np.int64)
    total = server_sum(ashe.encrypt(ids, values))
    assert ashe.decrypt_sum(total, runs=[(0, 1)]) == -(2**63)  # 2**63 wrapped
    assert not sum_fits(2, 2**63 - 1)
    assert sum_fits(2, 2**62 - 1)
    assert sum_fits(10**9, 9_223_372_035) and not sum_fits(10**9, 9_223_372_037)
    assert SUM_BOUND == 2**63
    require_sum_fits(6_000_000, 10**12)
    with pytest.raises(DomainError, match="split the values"):
        require_sum_fits(6_000_000, 2**62, column="lineitem.l_extendedprice")
    with pytest.raises(ParameterError):
        sum_fits(-1, 5)


def test_negative_sums_and_large_server_totals(ashe: Ashe) -> None:
    ids = np.arange(1000, 1010)
    values = np.full(10, -(10**15), dtype=np.int64)
    ciphertexts = ashe.encrypt(ids, values)
    total = server_sum(ciphertexts)
    assert ashe.decrypt_sum(total, runs=[(1000, 1009)]) == -(10**16)
    # The server's exact sum may be far outside 64 bits; only its residue counts.
    assert ashe.decrypt_sum(total + 5 * MOD, runs=[(1000, 1009)]) == -(10**16)
    assert ashe.decrypt_sum(Decimal(total), runs=[(1000, 1009)]) == -(10**16)
    assert ashe.decrypt_sum(np.int64(ciphertexts[0]), ids=[1000]) == -(10**15)


def test_id_zero_follows_the_largest_id(ashe: Ashe) -> None:
    """Ids are a cycle: 0's predecessor is 2**64 - 1 (-1 as a signed row id)."""
    assert ashe.pad(0) == (ashe._cipher.prf(0) - ashe._cipher.prf(2**64 - 1)) % MOD
    assert ashe.pad(-1) == ashe.pad(2**64 - 1)
    ids = np.array([-2, -1, 0, 1], dtype=np.int64)
    values = np.array([1, 2, 3, 4], dtype=np.int64)
    total = server_sum(ashe.encrypt(ids, values))
    assert ashe.decrypt_sum(total, runs=[(-2, 1)]) == 10
    assert ashe.decrypt_sum(total, runs=[(2**64 - 2, 1)]) == 10
    assert ashe.decrypt_sum(total, ids=ids.view(np.uint64)) == 10
    assert ashe.decrypt_sum(total, bitmap=(-2, np.ones(4, dtype=bool))) == 10
    top = np.array([2**63 - 1, 2**63], dtype=np.uint64)  # consecutive as unsigned
    total = server_sum(ashe.encrypt(top, np.array([5, 6])))
    assert ashe.decrypt_sum(total, runs=np.array([[2**63 - 1, 2**63]], dtype=np.uint64)) == 11


def test_from_master_uses_the_versioned_label() -> None:
    master = MasterKey(bytes(32))
    assert KEY_LABEL == f"ashe-v{VERSION}" == "ashe-v1"
    derived = Ashe.from_master(master, "t.c")
    direct = Ashe(master.derive(KeyLabel("ashe-v1", "t.c"), 32))
    other = Ashe.from_master(master, "t.d")
    assert derived.pad(3) == direct.pad(3) != other.pad(3)


def test_repeated_ids_are_refused(ashe: Ashe) -> None:
    with pytest.raises(ParameterError, match="row id 7 appears more than once"):
        ashe.encrypt(np.array([7, 3, 7]), np.array([1, 2, 3]))
    with pytest.raises(ParameterError, match="one-time"):
        ashe.encrypt([-1, 2**64 - 1], np.array([1, 2]))  # the same 64 bits
    # Fresh ids in any order are fine.
    ashe.encrypt(np.array([9, 3, 5]), np.array([1, 2, 3]))
    ashe.encrypt(np.array([-3, -2, -1, 0]), np.arange(4))


def test_pad_sum_takes_exactly_one_form(ashe: Ashe) -> None:
    with pytest.raises(ParameterError, match="exactly one form"):
        ashe.pad_sum()
    with pytest.raises(ParameterError, match="exactly one form"):
        ashe.decrypt_sum(0, ids=[1], runs=[(1, 1)])
    assert ashe.pad_sum(ids=[]) == ashe.pad_sum(runs=[]) == 0
    assert ashe.decrypt_sum(0, ids=np.array([], dtype=np.int64)) == 0


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda a: a.encrypt(np.arange(3), np.arange(2)), ParameterError, "one row id per value"),
        (lambda a: a.encrypt(np.arange(2), np.array([1.5, 2.0])), ParameterError, "integer"),
        (lambda a: a.encrypt(np.arange(2), [1, 2]), ParameterError, "numpy array or an Arrow"),
        (lambda a: a.encrypt(np.arange(1), pa.array(["x"])), ParameterError, "Arrow type"),
        (lambda a: a.encrypt(pa.array([1, None]), np.arange(2)), ParameterError, "NULLs"),
        (lambda a: a.encrypt(np.zeros((2, 2), int), np.arange(2)), ParameterError, "1-D"),
        (
            lambda a: a.encrypt(np.arange(1), np.array([2**63], np.uint64)),
            DomainError,
            "outside the domain",
        ),
        (lambda a: a.encrypt_one(1, 2**63), DomainError, "outside the domain"),
        (lambda a: a.pad(2**64), DomainError, "64-bit range"),
        (lambda a: a.pad(-(2**63) - 1), DomainError, "64-bit range"),
        (lambda a: a.pad(1.0), ParameterError, "integer"),
        (lambda a: a.pad_sum(runs=[(10, 5)]), ParameterError, r"run \[10, 5\] ends before"),
        (lambda a: a.pad_sum(runs=np.arange(6)), ParameterError, r"\(n, 2\)"),
        (lambda a: a.pad_sum(bitmap=(0, [1, 2])), ParameterError, "numpy array"),
        (lambda a: a.pad_sum(bitmap=(0, np.array([1], np.int32))), ParameterError, "uint64"),
        (lambda a: a.decrypt_sum(1.5, ids=[1]), ParameterError, "integer"),
        (lambda a: a.decrypt_sum(Decimal("1.5"), ids=[1]), ParameterError, "integer"),
        (lambda a: a.decrypt_sum(None, ids=[1]), ParameterError, "integer"),
    ],
)
def test_argument_errors(ashe: Ashe, call, error, message) -> None:
    with pytest.raises(error, match=message):
        call(ashe)


def test_errors_name_the_column(ashe: Ashe) -> None:
    with pytest.raises(ParameterError, match=r"lineitem\.l_quantity"):
        ashe.encrypt(np.arange(3), np.arange(2))


def test_key_length_is_checked() -> None:
    with pytest.raises(ParameterError, match="32 bytes"):
        Ashe(bytes(16))


def test_not_picklable_and_repr_hides_the_key(ashe: Ashe) -> None:
    with pytest.raises(TypeError):
        pickle.dumps(ashe)
    assert KEY.hex() not in repr(ashe) and "version=1" in repr(ashe)


def test_large_batches_release_the_gil_and_agree_with_small_ones(ashe: Ashe) -> None:
    ids = np.arange(10_000, dtype=np.uint64) * 2  # gaps: every id its own run
    values = np.arange(10_000, dtype=np.int64)
    whole = ashe.encrypt(ids, values)
    parts = np.concatenate(
        [ashe.encrypt(ids[i : i + 100], values[i : i + 100]) for i in range(0, 10_000, 100)]
    )
    np.testing.assert_array_equal(whole, parts)
    assert ashe.decrypt_sum(server_sum(whole), ids=ids) == int(values.sum())
