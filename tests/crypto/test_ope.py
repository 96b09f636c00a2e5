"""Behaviour of order-preserving encryption (veil.crypto.ope)."""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from veil import _native
from veil.crypto.keys import KeyLabel, MasterKey
from veil.crypto.ope import Ope, ope_string_prefix
from veil.errors import DomainError, MalformedCiphertextError, ParameterError

pytestmark = pytest.mark.unit

KEY = bytes(range(32))
VECTORS = Path(__file__).parent / "vectors" / "ope_regression.json"


def test_regression_vectors_still_hold():
    document = json.loads(VECTORS.read_text())
    key = bytes.fromhex(document["key_hex"])
    for case in document["cases"]:
        ope = Ope(key, case["bits"], signed=case["signed"])
        assert ope.cipher_bits == case["cipher_bits"]
        for plain, expected in zip(case["plaintexts"], case["ciphertexts"], strict=True):
            got = ope.encrypt_one(int(plain))
            assert (got.hex() if isinstance(got, bytes) else str(got)) == expected
            assert ope.decrypt_one(got) == int(plain)


@pytest.mark.parametrize(("bits", "cipher_bits"), [(1, 32), (16, 47), (32, 63), (33, 65), (64, 96)])
def test_cipher_bits_follow_the_documented_rule(bits, cipher_bits):
    assert Ope(KEY, bits).cipher_bits == cipher_bits


# Known answers of the narrower range (``cipher_bits``): a guard against changes of the map
NARROW_VECTORS = [
    (
        25,
        41,
        [-16777216, -1, 0, 1, 16777215],
        [3587, 1099315081537, 1099315084662, 1099315135320, 2199023139609],
    ),
    (32, 48, [-(2**31), 0, 2**31 - 1], [7160, 140736070588795, 281474976679645]),
]


@pytest.mark.parametrize(("bits", "cipher_bits", "plaintexts", "ciphertexts"), NARROW_VECTORS)
def test_a_narrower_range_keeps_order_in_its_bits(bits, cipher_bits, plaintexts, ciphertexts):
    ope = Ope(KEY, bits, cipher_bits=cipher_bits)
    assert (ope.cipher_bits, ope.binary) == (cipher_bits, False)
    assert [ope.encrypt_one(v) for v in plaintexts] == ciphertexts
    values = np.sort(np.random.default_rng(3).integers(-(2 ** (bits - 1)), 2 ** (bits - 1), 500))
    encrypted = ope.encrypt(values)
    assert (np.diff(encrypted) >= 0).all() and encrypted.max() < 2**cipher_bits
    np.testing.assert_array_equal(
        Ope(KEY, bits, cipher_bits=cipher_bits).decrypt(encrypted), values
    )
    with pytest.raises(DomainError):
        ope.encrypt_one(2 ** (bits - 1))
    with pytest.raises(ParameterError, match="ciphertext bits"):
        Ope(KEY, bits, cipher_bits=bits)


def test_a_narrower_range_has_a_key_of_its_own():
    master = MasterKey(bytes(32))
    default = Ope.from_master(master, "t.c", 25)
    narrow = Ope.from_master(master, "t.c", 25, cipher_bits=41)
    assert narrow.decrypt_one(narrow.encrypt_one(9)) == 9
    # the same scope's default key under the narrow range gives another map
    assert Ope(master.derive(KeyLabel("ope", "t.c"), 32), 25, cipher_bits=41).encrypt_one(
        9
    ) != narrow.encrypt_one(9)
    assert default.cipher_bits == 56


def test_numpy_round_trip_keeps_order_and_dtype():
    ope = Ope(KEY, 32)
    values = np.array([5, -3, 2**31 - 1, -(2**31), 0, 5], dtype=np.int32)
    ciphertexts = ope.encrypt(values)
    assert ciphertexts.dtype == np.int64 and (ciphertexts >= 0).all()
    order = np.argsort(values, kind="stable")
    assert (np.diff(ciphertexts[order]) >= 0).all()
    assert ciphertexts[0] == ciphertexts[5]
    back = ope.decrypt(ciphertexts)
    assert back.dtype == np.int64 and back.tolist() == values.tolist()


def test_arrow_nulls_slices_and_chunks_are_preserved():
    ope = Ope(KEY, 16, column="price")
    array = pa.array([1, None, -7, 300, None, 12], pa.int16())
    encrypted = ope.encrypt(array)
    assert encrypted.type == pa.int64() and encrypted.null_count == 2
    assert ope.decrypt(encrypted).to_pylist() == array.to_pylist()
    sliced = array.slice(2, 3)
    assert ope.encrypt(sliced).to_pylist() == encrypted.slice(2, 3).to_pylist()
    assert ope.decrypt(encrypted.slice(2, 3)).to_pylist() == [-7, 300, None]
    chunked = pa.chunked_array([array.slice(0, 2), array.slice(2)])
    assert ope.decrypt(ope.encrypt(chunked)).to_pylist() == array.to_pylist()


def test_wide_ciphertexts_are_versioned_fixed_width_and_sort_bytewise():
    ope = Ope(KEY, 64)
    values = pa.array([-(2**63), -1, 0, None, 2**63 - 1], pa.int64())
    encrypted = ope.encrypt(values)
    assert encrypted.type == pa.binary() and encrypted.null_count == 1
    present = [c for c in encrypted.to_pylist() if c is not None]
    assert all(len(c) == 13 and c[0] == 0x01 for c in present)
    assert present == sorted(present)
    assert ope.decrypt(encrypted).to_pylist() == values.to_pylist()
    assert ope.decrypt(encrypted.slice(1, 2)).to_pylist() == [-1, 0]
    for kind in (pa.large_binary(), pa.binary_view()):
        assert ope.decrypt(encrypted.cast(kind)).to_pylist() == values.to_pylist()
    assert ope.decrypt(ope.encrypt(np.array([3, -3]))).tolist() == [3, -3]


def test_unsigned_64_bit_values_come_back_as_uint64():
    ope = Ope(KEY, 64, signed=False)
    values = np.array([0, 2**63, 2**64 - 1], dtype=np.uint64)
    back = ope.decrypt(ope.encrypt(values)).to_numpy()  # binary ciphertexts are Arrow
    assert back.dtype == np.uint64 and back.tolist() == values.tolist()
    assert ope.decrypt_one(ope.encrypt_one(2**64 - 1)) == 2**64 - 1


@pytest.mark.parametrize(
    ("bits", "signed", "bad"),
    [(8, True, 128), (8, True, -129), (8, False, -1), (8, False, 256), (64, True, 2**63)],
)
def test_out_of_domain_values_name_the_column_and_domain(bits, signed, bad):
    ope = Ope(KEY, bits, signed=signed, column="qty")
    dtype = np.uint64 if bad >= 2**63 else np.int64
    with pytest.raises(DomainError, match=r"'qty'.*row 1.*\[") as info:
        ope.encrypt(np.array([0, bad], dtype=dtype))
    assert f"{bits}-bit" in str(info.value) and info.value.domain == ope.domain
    with pytest.raises(DomainError, match="qty"):
        ope.encrypt(pa.array([bad, 0], pa.uint64() if bad >= 2**63 else pa.int64()))
    with pytest.raises(DomainError, match="qty"):
        ope.encrypt_one(bad)


def test_tampered_or_foreign_ciphertexts_are_refused():
    ope = Ope(KEY, 32, column="age")
    ciphertext = int(ope.encrypt(np.array([40]))[0])
    fresh = Ope(KEY, 32, column="age")
    with pytest.raises(MalformedCiphertextError, match=r"'age'.*row 1"):
        fresh.decrypt(np.array([ciphertext, ciphertext + 1]))
    with pytest.raises(MalformedCiphertextError):
        fresh.decrypt(np.array([-5]))
    with pytest.raises(MalformedCiphertextError):
        Ope(bytes(32), 32).decrypt(np.array([ciphertext]))
    wide = Ope(KEY, 40)
    good = wide.encrypt_one(7)
    assert isinstance(good, bytes)
    for bad in (b"\x02" + good[1:], good[:-1], good + b"\x00"):
        with pytest.raises(MalformedCiphertextError):
            wide.decrypt(pa.array([bad], pa.binary()))
    with pytest.raises(MalformedCiphertextError, match="binary"):
        wide.decrypt(pa.array([1, 2]))


def test_parameters_are_checked():
    for bits in (0, 65):
        with pytest.raises(ParameterError, match=r"1\.\.64"):
            Ope(KEY, bits)
    with pytest.raises(ParameterError, match="32 bytes"):
        Ope(KEY[:16], 32)
    with pytest.raises(ParameterError, match="integer"):
        Ope(KEY, 32).encrypt(np.array([1.5]))


def test_keys_come_from_the_master_and_never_show():
    master = MasterKey(bytes(32))
    first = Ope.from_master(master, "t.c", 32, column="c")
    second = Ope.from_master(master, "t.c", 32)
    other = Ope.from_master(master, "t.d", 32)
    assert first.encrypt_one(9) == second.encrypt_one(9) != other.encrypt_one(9)
    assert KEY.hex() not in repr(Ope(KEY, 8)) and "bits=8" in repr(Ope(KEY, 8))


def test_string_prefix_orders_like_bytes_up_to_ties():
    words = ["", "a", "ab", "abc", "abcdefgh", "abcdefghZ", "b", "é", None]
    prefixes = ope_string_prefix(pa.array(words))
    assert prefixes.dtype == np.uint64
    assert prefixes[1] == ord("a") << 56 and prefixes[-1] == 0
    assert prefixes[4] == prefixes[5]  # equal first 8 bytes tie
    assert list(prefixes[:-1]) == sorted(prefixes[:-1])
    short = ope_string_prefix(pa.array(["ab", "b"]), prefix_bytes=2)
    assert short.tolist() == [0x6162, 0x6200]
    chunked = pa.chunked_array([pa.array(words[:3]), pa.array(words[3:])])
    assert ope_string_prefix(chunked).tolist() == prefixes.tolist()
    sliced = pa.array(words, pa.large_binary()).slice(2, 3)
    assert ope_string_prefix(sliced).tolist() == prefixes[2:5].tolist()
    with pytest.raises(ParameterError):
        ope_string_prefix(pa.array(["a"]), prefix_bytes=9)


def _falling(x: int, k: int) -> int:
    return math.prod(range(x - k + 1, x + 1))


def _exact_pmf(good: int, bad: int, draws: int) -> list[Fraction]:
    """C(good,k) (draws)_k (total-draws)_(good-k) / (total)_good: exact for any urn size."""
    total = good + bad
    whole = _falling(total, good)
    return [
        Fraction(math.comb(good, k) * _falling(draws, k) * _falling(total - draws, good - k), whole)
        for k in range(min(good, draws) + 1)
    ]


@pytest.mark.parametrize(
    ("good", "bad", "draws"),
    [
        (4, 40, 20),
        (40, 4, 20),
        (30, 70, 45),
        (70, 30, 60),
        (35, 1000, 500),
        (100, 2**63 - 100, 2**62),  # a node of a 32-bit OPE tree
        (60, 2**96 - 60, 2**95 + 12345),  # a node of a 64-bit OPE tree
    ],
)
def test_hypergeometric_sampler_matches_the_exact_pmf(good, bad, draws):
    """Pearson chi-square with a fixed seed (deterministic), pooling to >= 5 expected."""
    count = 50_000
    samples = np.array(_native.ope_hgd_sample(good, bad, draws, bytes(32), count))
    observed = np.bincount(samples.astype(np.int64), minlength=min(good, draws) + 1)
    stat, bins, pending = 0.0, 0, [0, Fraction(0)]
    for k, p in enumerate(_exact_pmf(good, bad, draws)):
        pending = [pending[0] + observed[k], pending[1] + p * count]
        if pending[1] >= 5 or k == min(good, draws):
            expected = float(pending[1])
            stat += (pending[0] - expected) ** 2 / expected
            bins, pending = bins + 1, [0, Fraction(0)]
    df = bins - 1
    critical = df * (1 - 2 / (9 * df) + 5 * math.sqrt(2 / (9 * df))) ** 3  # p ~ 3e-7
    assert stat < critical


def test_hypergeometric_sampler_handles_huge_urns():
    good, total = 2**64, 2**96
    samples = _native.ope_hgd_sample(good, total - good, total // 2, bytes(range(32)), 2000)
    mean = sum(samples) / len(samples)
    sd = math.sqrt(good / 4)
    assert abs(mean - good / 2) < 5 * sd / math.sqrt(len(samples))
    with pytest.raises(_native.NativeParameterError, match="draws"):
        _native.ope_hgd_sample(3, 4, 8, bytes(32), 1)


def test_one_cipher_used_from_several_threads_gives_the_same_ciphertexts():
    # encryption runs without the GIL (a load's threads and its insert at once);
    # a second thread on the same cipher waits for its caches instead of failing
    from concurrent.futures import ThreadPoolExecutor

    values = np.random.default_rng(7).integers(-(2**31), 2**31, 200_000, dtype=np.int64)
    alone = Ope(KEY, 32).encrypt(values)
    shared = Ope(KEY, 32)
    with ThreadPoolExecutor(4) as pool:
        found = list(pool.map(lambda part: shared.encrypt(part), np.array_split(values, 8)))
    assert np.array_equal(np.concatenate(found), alone)
    wide = Ope(KEY, 48)  # binary ciphertexts
    with ThreadPoolExecutor(2) as pool:
        parts = list(pool.map(lambda part: wide.encrypt(pa.array(part)), [values, values]))
    assert parts[0].equals(parts[1])
    assert wide.decrypt(parts[0]).to_pylist() == values.tolist()
