"""Paillier raw layer: keys, signed round trips, stored-ciphertext format."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pyarrow as pa
import pytest

from veil.crypto import paillier_wire
from veil.crypto.keys import MasterKey
from veil.crypto.paillier import PaillierKey, randomness_bits
from veil.crypto.paillier_wire import (
    add_ciphertexts,
    from_wire,
    parse_array,
    sum_ciphertext_groups,
    sum_ciphertexts,
    to_wire,
)
from veil.errors import DomainError, MalformedCiphertextError, ParameterError

pytestmark = pytest.mark.unit

VECTORS = Path(__file__).parent / "vectors" / "paillier_keygen.json"


@pytest.fixture(scope="module")
def key2048() -> PaillierKey:
    return PaillierKey.from_seed(bytes(range(32)))


@pytest.fixture(scope="module")
def key() -> PaillierKey:
    return PaillierKey.from_seed(b"\x07" * 32, bits=512)


def test_2048_bit_signed_round_trip(key2048: PaillierKey) -> None:
    limit = key2048.public.max_int
    values = [0, 1, -1, 123456789, -(2**63), 2**63 - 1, limit, -limit]
    ciphertexts = key2048.encrypt_ints(values)
    assert all(len(c) == 513 and c[0] == 0x01 for c in ciphertexts)
    assert key2048.decrypt_ints(ciphertexts) == values


def test_2048_bit_raw_round_trip_and_sum(key2048: PaillierKey) -> None:
    n2 = key2048.public.n_square
    a, b = key2048.raw_encrypt(10**300), key2048.raw_encrypt(5)
    assert key2048.raw_decrypt(a) == 10**300
    assert key2048.raw_decrypt(a * b % n2) == 10**300 + 5


def test_randomness_length_is_four_times_security_level() -> None:
    assert randomness_bits(2048) == 448
    assert randomness_bits(3072) == 512


def test_encryption_is_randomised(key: PaillierKey) -> None:
    first, second = key.encrypt_ints([42, 42])
    assert first != second
    assert key.decrypt_ints([first, second]) == [42, 42]


def test_raw_encrypt_with_given_randomness_is_deterministic(key: PaillierKey) -> None:
    r = bytes(range(randomness_bits(512) // 8))
    assert key.raw_encrypt(9, r) == key.raw_encrypt(9, r)
    assert key.raw_decrypt(key.raw_encrypt(9, r)) == 9


def test_out_of_range_plaintext_names_column_and_domain(key: PaillierKey) -> None:
    with pytest.raises(DomainError, match=r"column 'price'.*domain: signed integers"):
        key.encrypt_ints([key.public.max_int + 1], column="price")


def test_same_seed_same_key_other_seed_other_key() -> None:
    seed = b"\x11" * 32
    first = PaillierKey.from_seed(seed, 512)
    assert PaillierKey.from_seed(seed, 512) is first  # cached
    assert PaillierKey.from_seed(seed, 512).public.n == first.public.n
    assert PaillierKey.from_seed(b"\x12" * 32, 512).public.n != first.public.n
    assert first.public.n.bit_length() == 512


def test_master_key_scopes_give_distinct_keys() -> None:
    master = MasterKey(b"\x01" * 32)
    a = PaillierKey.from_master(master, "lineitem.prices", bits=512)
    b = PaillierKey.from_master(master, "orders.totals", bits=512)
    assert a.public.n != b.public.n
    assert PaillierKey.from_master(master, "lineitem.prices", bits=512).public == a.public


def test_key_derivation_is_stable() -> None:
    """Data encrypted today must decrypt after an upgrade: pin derived moduli."""
    for case in json.loads(VECTORS.read_text())["cases"]:
        derived = PaillierKey.from_seed(bytes.fromhex(case["seed"]), case["bits"])
        assert format(derived.public.n, "x") == case["n"]


def test_bad_parameters_are_refused() -> None:
    with pytest.raises(ParameterError, match="32 bytes"):
        PaillierKey.from_seed(b"short")
    with pytest.raises(ParameterError, match="even number of bits"):
        PaillierKey.from_seed(b"\x00" * 32, bits=511)


def test_key_never_shows_itself(key: PaillierKey) -> None:
    assert repr(key) == "PaillierKey(bits=512)"
    with pytest.raises(TypeError, match="not picklable"):
        pickle.dumps(key)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda c: b"\x02" + c[1:], "version 0x02"),
        (lambda c: c[:-1], "is 129 bytes.*got 128"),
        (lambda c: c + b"\x00", "got 130"),
        (lambda c: b"\x01" + b"\x00" * (len(c) - 1), "not an integer in 1..n"),
        (lambda c: b"\x01" + b"\xff" * (len(c) - 1), "not an integer in 1..n"),
    ],
)
def test_malformed_ciphertexts_are_refused(key: PaillierKey, mutate, message: str) -> None:
    bad = mutate(key.encrypt_ints([1])[0])
    with pytest.raises(MalformedCiphertextError, match=message):
        key.decrypt_ints([bad], column="qty")
    with pytest.raises(MalformedCiphertextError, match=message):
        key.decrypt_ints(pa.array([bad]))
    with pytest.raises(MalformedCiphertextError, match=message):
        sum_ciphertexts(pa.array([bad]), key.public.n_square)


def test_ciphertext_sharing_a_factor_with_n_is_refused(key: PaillierKey) -> None:
    bad = to_wire(key.public.n, key.public.width)
    with pytest.raises(MalformedCiphertextError, match="shares a factor"):
        key.decrypt_ints([bad])


def test_non_binary_column_is_refused(key: PaillierKey) -> None:
    with pytest.raises(MalformedCiphertextError, match="binary"):
        parse_array(pa.array([1, 2]), key.public.n_square)


def test_add_ciphertexts_keeps_nulls_slices_and_chunks(key: PaillierKey) -> None:
    n2 = key.public.n_square
    left = pa.array([*key.encrypt_ints([1, 2, 3]), None], type=pa.binary())
    right = pa.chunked_array([[*key.encrypt_ints([10, 20])], [None, key.encrypt_ints([40])[0]]])
    total = add_ciphertexts(left, right, n2)
    assert total.null_count == 2
    assert key.decrypt_ints(total) == [11, 22, None, None]
    sliced = add_ciphertexts(left.slice(1, 2), left.slice(0, 2), n2)
    assert key.decrypt_ints(sliced) == [3, 5]


def test_add_ciphertexts_refuses_length_mismatch(key: PaillierKey) -> None:
    column = pa.array(key.encrypt_ints([1, 2]))
    with pytest.raises(MalformedCiphertextError, match="different lengths"):
        add_ciphertexts(column, column.slice(1), key.public.n_square)


def test_sum_ciphertexts_skips_nulls_and_sums_negatives(key: PaillierKey) -> None:
    column = pa.array([*key.encrypt_ints([5, -9, 0]), None], type=pa.binary())
    assert key.decrypt_ints([sum_ciphertexts(column, key.public.n_square)]) == [-4]


def test_sum_of_empty_column_is_an_encryption_of_zero(key: PaillierKey) -> None:
    empty = sum_ciphertexts(pa.array([], type=pa.binary()), key.public.n_square)
    assert from_wire(empty, key.public.n_square) == 1
    assert key.decrypt_ints([empty]) == [0]


def test_fixed_base_table_matches_plain_exponentiation(key: PaillierKey) -> None:
    n, n2 = key.public.n, key.public.n_square
    for seed in range(5):
        r = bytes((seed * 37 + i * 11) % 256 for i in range(randomness_bits(512) // 8))
        exponent = int.from_bytes(r, "little")
        expected = (1 + 7 * n) * pow(int(key._h_s), exponent, int(n2)) % n2
        assert key.raw_encrypt(7, r) == expected


def test_add_refuses_a_malformed_operand(key: PaillierKey) -> None:
    good = key.encrypt_ints([1])[0]
    with pytest.raises(MalformedCiphertextError, match="version 0x00"):
        add_ciphertexts(pa.array([good]), pa.array([b"\x00" + good[1:]]), key.public.n_square)


def test_large_and_fixed_size_binary_columns_are_read(key: PaillierKey) -> None:
    ciphertexts = key.encrypt_ints([3, -4])
    stride = key.public.width + 1
    for kind in (pa.large_binary(), pa.binary(stride)):
        column = pa.array(ciphertexts, type=kind)
        assert key.decrypt_ints(column) == [3, -4]
        assert key.decrypt_ints(column.slice(1)) == [-4]
    with pytest.raises(MalformedCiphertextError, match="got 5"):
        key.decrypt_ints(pa.array([b"\x01abcd"], type=pa.binary(5)))


def test_columns_past_the_binary_size_limit_are_chunked(
    key: PaillierKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(paillier_wire, "_MAX_BINARY_BYTES", 3 * (key.public.width + 1))
    values = [1, None, 2, 3, None, 4, 5]
    stored = paillier_wire.wire_array(
        [None if v is None else key.raw_encrypt(v) for v in values], key.public.width
    )
    assert isinstance(stored, pa.ChunkedArray) and stored.num_chunks == 3
    assert key.decrypt_ints(stored) == values
    total = add_ciphertexts(stored, stored, key.public.n_square)
    assert key.decrypt_ints(total) == [None if v is None else 2 * v for v in values]
    assert key.decrypt_ints([sum_ciphertexts(stored, key.public.n_square)]) == [15]


def test_sum_ciphertext_groups_sums_each_list(key: PaillierKey) -> None:
    a, b, c = key.encrypt_ints([5, -2, 7])
    groups = pa.array([[a, b], [], None, [c, None, a], [b]], type=pa.list_(pa.binary()))
    sums = sum_ciphertext_groups(groups, key.public.n_square)
    assert key.decrypt_ints(sums) == [3, 0, None, 12, -2]
    assert key.decrypt_ints(sum_ciphertext_groups(groups.slice(3), key.public.n_square)) == [12, -2]
    with pytest.raises(MalformedCiphertextError, match="list column"):
        sum_ciphertext_groups(pa.array([a]), key.public.n_square)


def test_encryption_known_answers() -> None:
    for case in json.loads(VECTORS.read_text())["encryptions"]:
        derived = PaillierKey.from_seed(bytes.fromhex(case["seed"]), case["bits"])
        c = derived.raw_encrypt(case["m"], bytes.fromhex(case["r_le"]))
        assert format(c, "x") == case["c"]
        assert derived.raw_decrypt(c) == case["m"]
