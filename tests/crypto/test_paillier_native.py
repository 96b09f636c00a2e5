"""The native (Rust on GMP) server loops of paillier_wire against gmpy2.

Every result must be byte-identical to the gmpy2 arithmetic the loops
replaced: ``x * y % n^2`` written as ``0x01 || c`` over the full width.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pytest
from gmpy2 import mpz
from hypothesis import given, settings
from hypothesis import strategies as st

from veil import _native
from veil.crypto._native_errors import native_errors
from veil.crypto.paillier import PaillierKey
from veil.crypto.paillier_wire import (
    add_ciphertexts,
    ciphertext_width,
    sum_ciphertext_groups,
    sum_ciphertexts,
    to_wire,
)
from veil.errors import MalformedCiphertextError, ParameterError

pytestmark = pytest.mark.unit


@functools.cache
def n_square(bits: int) -> int:
    return int(PaillierKey.from_seed(bytes([bits % 256]) * 32, bits=bits).public.n_square)


KEY_BITS = st.sampled_from([512, 1024])


@st.composite
def ciphertext_ints(draw: st.DrawFn, n2: int) -> int | None:
    """A ciphertext integer, edge values (1, n^2 - 1, short ones) included, or None."""
    return draw(
        st.none()
        | st.sampled_from([1, 2, 255, 256, n2 - 1, n2 - 2, n2 // 2])
        | st.integers(1, 2**64)
        | st.integers(1, n2 - 1)
    )


def wire(values: list[int | None], n2: int) -> pa.Array:
    width = ciphertext_width(n2)
    return pa.array([None if c is None else to_wire(c, width) for c in values], pa.binary())


def reference_product(values: list[int | None], n2: int) -> bytes:
    total = mpz(1)
    for c in values:
        if c is not None:
            total = total * c % n2
    return to_wire(total, ciphertext_width(n2))


@settings(max_examples=40, deadline=None)
@given(data=st.data(), bits=KEY_BITS)
def test_add_matches_gmpy2(data: st.DataObject, bits: int) -> None:
    n2 = n_square(bits)
    pairs = data.draw(st.lists(st.tuples(ciphertext_ints(n2), ciphertext_ints(n2)), max_size=12))
    a, b = [p[0] for p in pairs], [p[1] for p in pairs]
    expected = [
        None if x is None or y is None else to_wire(mpz(x) * y % n2, ciphertext_width(n2))
        for x, y in pairs
    ]
    assert add_ciphertexts(wire(a, n2), wire(b, n2), n2).to_pylist() == expected


@settings(max_examples=40, deadline=None)
@given(data=st.data(), bits=KEY_BITS)
def test_sums_match_gmpy2(data: st.DataObject, bits: int) -> None:
    n2 = n_square(bits)
    groups = data.draw(st.lists(st.none() | st.lists(ciphertext_ints(n2), max_size=6), max_size=6))
    members = [c for group in groups if group is not None for c in group]
    assert sum_ciphertexts(wire(members, n2), n2) == reference_product(members, n2)
    width = ciphertext_width(n2)
    column = pa.array(
        [
            None if g is None else [None if c is None else to_wire(c, width) for c in g]
            for g in groups
        ],
        pa.list_(pa.binary()),
    )
    expected = [None if g is None else reference_product(g, n2) for g in groups]
    assert sum_ciphertext_groups(column, n2).to_pylist() == expected


def test_sliced_chunked_and_other_binary_layouts() -> None:
    n2 = n_square(512)
    values = [3, None, n2 - 1, 7, 1, None, 12345, n2 // 3]
    full = wire(values, n2)
    width = ciphertext_width(n2)
    sliced = full.slice(2, 5)
    expected = [None if x is None else to_wire(mpz(x) * x % n2, width) for x in values[2:7]]
    chunked = pa.chunked_array([full.slice(2, 1), full.slice(3, 4)])
    assert add_ciphertexts(sliced, chunked, n2).to_pylist() == expected
    large = sliced.cast(pa.large_binary())
    fixed = pa.array([to_wire(c, width) for c in (3, 5)], pa.binary(width + 1))
    assert add_ciphertexts(large, sliced, n2).to_pylist() == expected
    assert sum_ciphertexts(fixed, n2) == to_wire(15, width)
    assert sum_ciphertexts(chunked, n2) == reference_product(values[2:7], n2)
    groups = pa.array([[full[0].as_py()], None, [], [full[3].as_py(), None]])
    sums = sum_ciphertext_groups(pa.chunked_array([groups.slice(1), groups.slice(0, 0)]), n2)
    assert sums.to_pylist() == [None, to_wire(1, width), to_wire(7, width)]


def test_empty_and_all_null_columns() -> None:
    n2 = n_square(512)
    width = ciphertext_width(n2)
    nulls = pa.array([None, None], pa.binary())
    assert add_ciphertexts(nulls, wire([5, 6], n2), n2).to_pylist() == [None, None]
    assert sum_ciphertexts(nulls, n2) == to_wire(1, width)
    assert sum_ciphertexts(pa.array([], pa.binary()), n2) == to_wire(1, width)
    assert sum_ciphertexts(pa.chunked_array([], pa.binary()), n2) == to_wire(1, width)
    assert len(add_ciphertexts(pa.array([], pa.binary()), pa.array([], pa.binary()), n2)) == 0
    empty_groups = pa.array([], pa.list_(pa.binary()))
    assert sum_ciphertext_groups(empty_groups, n2).to_pylist() == []


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (lambda w, n2: w[:-1], "got 128"),
        (lambda w, n2: b"\x02" + w[1:], "version 0x02"),
        (lambda w, n2: b"\x01" + bytes(len(w) - 1), r"in 1\.\.n\^2-1"),
        (lambda w, n2: b"\x01" + n2.to_bytes(len(w) - 1, "big"), r"in 1\.\.n\^2-1"),
    ],
)
def test_malformed_ciphertexts_are_refused(
    bad: Callable[[bytes, int], bytes], message: str
) -> None:
    n2 = n_square(512)
    good = to_wire(5, ciphertext_width(n2))
    column = pa.array([good, None, bad(good, n2)], pa.binary())
    for run in (
        lambda: add_ciphertexts(column, column, n2),
        lambda: sum_ciphertexts(column, n2),
        lambda: sum_ciphertext_groups(pa.array([[good], [bad(good, n2)]]), n2),
    ):
        with pytest.raises(MalformedCiphertextError, match=message):
            run()
    # Errors name the row of the whole column, past NULLs and chunk bounds.
    chunked = pa.chunked_array([column.slice(0, 1), column.slice(1)])
    with pytest.raises(MalformedCiphertextError, match=f"row 2: .*{message}"):
        sum_ciphertexts(chunked, n2)


def test_mismatched_and_wrong_typed_columns() -> None:
    n2 = n_square(512)
    column = wire([5, 6], n2)
    with pytest.raises(MalformedCiphertextError, match="different lengths"):
        add_ciphertexts(column, column.slice(1), n2)
    with pytest.raises(MalformedCiphertextError, match="binary values"):
        sum_ciphertexts(pa.array([1, 2]), n2)
    with pytest.raises(MalformedCiphertextError, match="list column"):
        sum_ciphertext_groups(column, n2)


def packed(values: list[bytes]) -> tuple[np.ndarray, np.ndarray, None]:
    offsets = np.cumsum([0, *map(len, values)], dtype=np.int64)
    return offsets, np.frombuffer(b"".join(values), np.uint8), None


def test_native_kernel_checks_its_own_input() -> None:
    """Direct callers, who skip paillier_wire's column checks, still get errors."""
    n2 = n_square(512)
    modulus = n2.to_bytes(ciphertext_width(n2), "big")
    good = to_wire(5, ciphertext_width(n2))
    with pytest.raises(MalformedCiphertextError, match=r"row 1.*version 0x07"), native_errors():
        _native.paillier_product(modulus, packed([good, b"\x07" + good[1:]]))
    with pytest.raises(MalformedCiphertextError, match=r"row 0.*in 1\.\.n\^2-1"), native_errors():
        _native.paillier_multiply_rows(modulus, packed([b"\x01" + modulus]), packed([good]))
    with pytest.raises(ParameterError, match=r"n\^2 must be"), native_errors():
        _native.paillier_product(b"\x01", packed([]))
    with pytest.raises(ParameterError, match="group offsets"), native_errors():
        _native.paillier_group_products(modulus, packed([good]), np.array([0, 2], np.int64))
    with pytest.raises(ParameterError, match="different lengths"), native_errors():
        _native.paillier_multiply_rows(modulus, packed([good]), packed([]))
