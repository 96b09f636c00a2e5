"""The native pack decoder (one call: AES-GCM + inflate + parse) against the Python path."""

from __future__ import annotations

import os
from typing import Any

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from hypothesis import given, settings
from hypothesis import strategies as st

from veil.errors import AuthenticationError, MalformedCiphertextError
from veil.kv import codec
from veil.kv.codec import Inflater
from veil.kv.envelope import Envelope
from veil.kv.pack import (
    lookup,
    parse_entries,
    serialize_entries,
    serialize_entries_v1,
    serialize_entries_v2,
)

KEY = bytes(range(32))
CODECS = ["zlib", "zstd", "lz4"]
ENTRIES = st.dictionaries(st.binary(max_size=12), st.binary(max_size=300), max_size=60)


def _sealed_raw(name: str, compressed: bytes, codec_byte: int | None = None) -> bytes:
    """A stored pack around an arbitrary compressed body (for malformed cases)."""
    envelope = Envelope(KEY, "t", name, ())
    header = bytes([0x01, codec.codec_id(name) if codec_byte is None else codec_byte])
    nonce = os.urandom(12)
    aad = envelope._aad(header, b"pack", b"p")
    return header + nonce + AESGCM(KEY).encrypt(nonce, codec.pad(compressed, ()), aad)


@settings(max_examples=40, deadline=None)
@given(
    entries=ENTRIES,
    name=st.sampled_from(CODECS),
    padded=st.booleans(),
    serialize=st.sampled_from([serialize_entries, serialize_entries_v1, serialize_entries_v2]),
)
def test_native_open_equals_the_python_path(
    entries: dict[bytes, bytes], name: str, padded: bool, serialize: Any
) -> None:
    envelope = Envelope(KEY, "t", name, codec.pad_tiers("pow2" if padded else None))
    ordered = sorted(entries.items())
    stored = envelope.seal(b"pack", b"p", serialize(ordered))
    old = parse_entries(envelope.open(b"pack", b"p", stored))
    assert envelope.open_records(b"pack", b"p", stored) == old
    for key in [*entries, b"\xff" * 13]:
        codec_id, compressed = envelope.open_compressed(b"pack", b"p", stored)
        expected = lookup(Inflater(codec_id, compressed), key)
        assert envelope.lookup(b"pack", b"p", stored, key) == expected == entries.get(key)


@pytest.mark.parametrize("name", CODECS)
def test_tampered_moved_or_wrong_key_pack_fails_authentication(name: str) -> None:
    envelope = Envelope(KEY, "t", name, ())
    stored = envelope.seal(b"pack", b"p", serialize_entries([(b"k", b"v" * 100)]))
    flipped = bytearray(stored)
    flipped[-20] ^= 1
    wrong_key = Envelope(bytes(32), "t", name, ())
    for opener, location, data in [
        (envelope, b"p", bytes(flipped)),
        (envelope, b"q", stored),
        (wrong_key, b"p", stored),
    ]:
        with pytest.raises(AuthenticationError, match="different key file"):
            opener.open_records(b"pack", location, data)
        with pytest.raises(AuthenticationError, match="tampered"):
            opener.lookup(b"pack", location, data, b"k")


@pytest.mark.parametrize("name", CODECS)
def test_truncated_stream_is_a_clear_error(name: str) -> None:
    whole = codec.compress(codec.codec_id(name), serialize_entries([(b"k", os.urandom(2000))]))
    stored = _sealed_raw(name, whole[: len(whole) // 2])
    envelope = Envelope(KEY, "t", name, ())
    with pytest.raises(MalformedCiphertextError, match="does not decompress"):
        envelope.open_records(b"pack", b"p", stored)
    with pytest.raises(MalformedCiphertextError, match="does not decompress"):
        envelope.lookup(b"pack", b"p", stored, b"k")


@pytest.mark.parametrize(
    ("plaintext", "reason"),
    [
        (b"\x04\x00\x00\x00\x00", "version 4 is unknown"),
        (b"\x02\x01\x01\x01\x00k", "shares more than the previous key"),
        (serialize_entries_v2([(b"k", b"value")])[:-1], "do not add up"),
        (serialize_entries([(b"k", b"value")])[:-1], "lacks a value terminator"),
        (serialize_entries([(b"k", b"value")]) + b"x", "do not add up"),
        (b"\x01\x00\x00\x00\x09", "truncated"),
    ],
)
def test_malformed_record_list_is_refused(plaintext: bytes, reason: str) -> None:
    stored = _sealed_raw("zlib", codec.compress(codec.ZLIB, plaintext))
    with pytest.raises(MalformedCiphertextError, match=reason):
        Envelope(KEY, "t", "zlib", ()).open_records(b"pack", b"p", stored)


def test_unknown_codec_and_short_values_are_refused() -> None:
    envelope = Envelope(KEY, "t", "zlib", ())
    with pytest.raises(MalformedCiphertextError, match="unknown compression id 9"):
        envelope.open_records(b"pack", b"p", _sealed_raw("zlib", b"", codec_byte=9))
    with pytest.raises(MalformedCiphertextError, match="truncated"):
        envelope.open_records(b"pack", b"p", b"\x01\x01" + bytes(20))
    with pytest.raises(MalformedCiphertextError, match="envelope version"):
        envelope.lookup(b"pack", b"p", b"\x07" + bytes(40), b"k")
