"""Properties of order-preserving encryption: order, round trip, determinism."""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from veil.crypto.ope import Ope, ope_string_prefix

pytestmark = pytest.mark.property

KEY = bytes(range(100, 132))
# (bits, signed) pairs covering int64 and binary ciphertexts and both signs.
SCHEMES = [(8, True), (16, False), (32, True), (32, False), (33, True), (64, True), (64, False)]
# One instance per scheme: its caches are shared across examples on purpose.
INSTANCES = {scheme: Ope(KEY, scheme[0], signed=scheme[1]) for scheme in SCHEMES}


def _bounds(bits: int, signed: bool) -> tuple[int, int]:
    return (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)


def _edges(bits: int, signed: bool) -> list[int]:
    low, high = _bounds(bits, signed)
    return [v for v in (low, low + 1, -1, 0, 1, high - 1, high) if low <= v <= high]


@st.composite
def scheme_and_values(draw: st.DrawFn, size: int = 2) -> tuple[tuple[int, bool], list[int]]:
    scheme = draw(st.sampled_from(SCHEMES))
    low, high = _bounds(*scheme)
    value = st.one_of(st.integers(low, high), st.sampled_from(_edges(*scheme)))
    return scheme, draw(st.lists(value, min_size=size, max_size=size))


def _encrypt_one(scheme: tuple[int, bool], value: int) -> int | bytes:
    return INSTANCES[scheme].encrypt_one(value)


@settings(max_examples=300, deadline=None)
@given(scheme_and_values())
def test_order_is_strictly_preserved(case):
    scheme, (a, b) = case
    ca, cb = _encrypt_one(scheme, a), _encrypt_one(scheme, b)
    assert (a < b) == (ca < cb) and (a == b) == (ca == cb)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(SCHEMES))
def test_domain_edges_keep_their_order(scheme):
    edges = sorted(set(_edges(*scheme)))
    ciphertexts = [_encrypt_one(scheme, v) for v in edges]
    assert all(x < y for x, y in itertools.pairwise(ciphertexts))


@settings(max_examples=200, deadline=None)
@given(scheme_and_values(size=1))
def test_round_trip_through_a_fresh_instance(case):
    scheme, (value,) = case
    ciphertext = _encrypt_one(scheme, value)
    assert Ope(KEY, scheme[0], signed=scheme[1]).decrypt_one(ciphertext) == value


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(SCHEMES), st.data())
def test_columns_match_single_values_and_fresh_instances(scheme, data):
    low, high = _bounds(*scheme)
    values = data.draw(st.lists(st.integers(low, high), min_size=1, max_size=20))
    dtype = pa.uint64() if not scheme[1] else pa.int64()
    column = pa.array(values, dtype)
    cached = INSTANCES[scheme].encrypt(column)
    fresh = Ope(KEY, scheme[0], signed=scheme[1]).encrypt(column)
    assert cached.to_pylist() == fresh.to_pylist()
    assert cached.to_pylist() == [_encrypt_one(scheme, v) for v in values]
    assert INSTANCES[scheme].decrypt(cached).to_pylist() == values


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=12), st.binary(max_size=12))
def test_string_prefix_never_inverts_byte_order(a, b):
    pa_, pb = ope_string_prefix(pa.array([a, b], pa.binary()))
    if a < b:
        assert pa_ <= pb
    if a[:8].rstrip(b"\0") != b[:8].rstrip(b"\0"):
        assert pa_ != pb
    assert np.uint64(pa_) == int.from_bytes(a[:8].ljust(8, b"\0"), "big")
