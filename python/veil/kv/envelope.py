"""The stored form of a pack or of one APPEND-mode row.

::

    stored = version (0x01) | codec id (1 byte) | nonce (12 bytes) | AES-256-GCM(body)
    stored = version (0x02) | codec id (zstd) | dictionary version (u32) | nonce | AES-256-GCM(body)
    body   = pad(compress(plaintext))       (see veil.kv.codec)

Version 2 (issue 14) is a pack compressed with the table's trained zstd
dictionary of that version (``veil.kv.dictionary``); the header, version
included, is part of the associated data, so a server cannot make a pack name
another dictionary.

The associated data binds the ciphertext to where it is stored: the table's
scope, the kind of record (a pack or an epoch row) and its location (the
packID, or the epoch and key). A server that moves a pack to another packID or
another table, or swaps two packs, makes decryption fail with
:class:`~veil.errors.AuthenticationError` instead of returning wrong rows.

Packs are opened by the native core in one call (:meth:`Envelope.open_records`,
:meth:`Envelope.lookup`): AES-GCM, inflation (libdeflate for zlib) and
parsing of the record list run without the GIL, so a range query's scan
threads open packs on both cores. :meth:`Envelope.open` (APPEND rows, the
per-row baseline) keeps the Python path.

The update-if tag of a stored value is the first 16 bytes of its SHA-256:
every write encrypts under a fresh random nonce, so two writes of even the same
plaintext get different tags, and a client that read an old version can never
overwrite a newer one by accident.
"""

from __future__ import annotations

import hashlib
import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager

import zstandard
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from veil import _native
from veil.crypto._native_errors import native_errors
from veil.errors import AuthenticationError, MalformedCiphertextError
from veil.kv import codec
from veil.kv.dictionary import Dictionaries, Dictionary, MissingDictionaryError

ENVELOPE_VERSION = 0x01
ENVELOPE_DICTIONARY = 0x02
DICTIONARY_CODEC = "zstd-dict"  # the compression option: zstd with the table's dictionary
NONCE_BYTES = 12
TAG_BYTES = 16
_HEADER_BYTES = {ENVELOPE_VERSION: 2, ENVELOPE_DICTIONARY: 6}
_U32 = struct.Struct(">I")
_AUTH_FAILED = (
    "a stored pack failed authentication: it was tampered with or moved on "
    "the server, or this store was written with a different key file"
)


def stored_tag(stored: bytes) -> bytes:
    """The update-if tag ("hash" in the paper) of a stored value."""
    return hashlib.sha256(stored).digest()[:TAG_BYTES]


class Envelope:
    """Seals and opens records of one table under its pack key."""

    __slots__ = (
        "_aad_prefix",
        "_aead",
        "_codec",
        "_key",
        "_tiers",
        "codec_name",
        "dictionaries",
        "dictionary",
        "wants_dictionary",
    )

    def __init__(self, key: bytes, scope: str, codec_name: str, tiers: tuple[int, ...]):
        self._aead = AESGCM(key)
        self._key = key
        scope_bytes = scope.encode()
        self._aad_prefix = (
            b"\x00\x00\x00\x07veil-kv" + len(scope_bytes).to_bytes(4, "big") + scope_bytes
        )
        self.wants_dictionary = codec_name == DICTIONARY_CODEC
        self._codec = codec.ZSTD if self.wants_dictionary else codec.codec_id(codec_name)
        self.codec_name = codec_name
        self._tiers = tiers
        # The table's dictionary versions (set by the store) and the one this
        # client compresses packs with (None: plain codec).
        self.dictionaries: Dictionaries | None = None
        self.dictionary: Dictionary | None = None

    def seal(
        self, kind: bytes, location: bytes, plaintext: bytes, *, use_dictionary: bool = False
    ) -> bytes:
        dictionary = self.dictionary if use_dictionary else None
        if dictionary is None:
            header = bytes([ENVELOPE_VERSION, self._codec])
            compressed = codec.compress(self._codec, plaintext)
        else:
            header = bytes([ENVELOPE_DICTIONARY, codec.ZSTD]) + _U32.pack(dictionary.version)
            compressed = dictionary.compressor().compress(plaintext)
        body = codec.pad(compressed, self._tiers)
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._aead.encrypt(nonce, body, self._aad(header, kind, location))
        return header + nonce + sealed

    def open(self, kind: bytes, location: bytes, stored: bytes) -> bytes:
        codec_id, compressed = self.open_compressed(kind, location, stored)
        if stored[0] == ENVELOPE_DICTIONARY:
            data = self._dictionary_for(stored).data
            decompressor = zstandard.ZstdDecompressor(dict_data=zstandard.ZstdCompressionDict(data))
            try:
                return decompressor.decompress(compressed)
            except zstandard.ZstdError as exc:
                raise MalformedCiphertextError(f"pack does not decompress: {exc}") from None
        return codec.decompress(codec_id, compressed)

    def open_compressed(self, kind: bytes, location: bytes, stored: bytes) -> tuple[int, bytes]:
        """Authenticate and decrypt; return (codec id, compressed plaintext)."""
        header, nonce, sealed = _split(stored)
        try:
            body = self._aead.decrypt(nonce, sealed, self._aad(header, kind, location))
        except InvalidTag:
            raise AuthenticationError(_AUTH_FAILED) from None
        return header[1], codec.unpad(body)

    def open_records(
        self, kind: bytes, location: bytes, stored: bytes
    ) -> tuple[list[bytes], list[bytes]]:
        """The (keys, values) of a stored pack, in one native call (GIL released)."""
        header, nonce, sealed = _split(stored)
        aad = self._aad(header, kind, location)
        prepared = self._prepared_for(stored)
        with _pack_errors():
            return _native.kv_open_pack(self._key, header[1], nonce, sealed, aad, prepared)

    def lookup(self, kind: bytes, location: bytes, stored: bytes, wanted: bytes) -> bytes | None:
        """The value of ``wanted`` in a stored pack (None if absent), in one native call."""
        header, nonce, sealed = _split(stored)
        aad = self._aad(header, kind, location)
        prepared = self._prepared_for(stored)
        with _pack_errors():
            return _native.kv_pack_lookup(
                self._key, header[1], nonce, sealed, aad, wanted, prepared
            )

    def _prepared_for(self, stored: bytes) -> _native.KvDictionary | None:
        if stored[0] != ENVELOPE_DICTIONARY:
            return None
        return self._dictionary_for(stored).prepared

    def _dictionary_for(self, stored: bytes) -> Dictionary:
        """The dictionary a (version 2) stored pack names, fetched and authenticated."""
        (version,) = _U32.unpack_from(stored, 2)
        if self.dictionaries is None:
            raise MissingDictionaryError(
                f"this pack was compressed with dictionary version {version}, and this "
                "reader has no access to the table's dictionaries"
            )
        return self.dictionaries.get(version)

    def _aad(self, header: bytes, kind: bytes, location: bytes) -> bytes:
        # Length-prefixed parts, so no two (scope, kind, location) share an AAD.
        return b"".join(
            (
                self._aad_prefix,
                len(kind).to_bytes(4, "big"),
                kind,
                len(location).to_bytes(4, "big"),
                location,
                header,
            )
        )


def _split(stored: bytes) -> tuple[bytes, bytes, bytes]:
    """(header, nonce, ciphertext || tag) of a stored value, checking its version."""
    header_bytes = _HEADER_BYTES.get(stored[0]) if stored else None
    if header_bytes is None:
        raise MalformedCiphertextError(
            f"stored pack has envelope version {stored[:1].hex() or 'none'}; this Veil reads "
            f"versions {ENVELOPE_VERSION} and {ENVELOPE_DICTIONARY}"
        )
    if len(stored) < header_bytes + NONCE_BYTES + TAG_BYTES:
        raise MalformedCiphertextError("stored pack is truncated")
    nonce_end = header_bytes + NONCE_BYTES
    return stored[:header_bytes], stored[header_bytes:nonce_end], stored[nonce_end:]


@contextmanager
def _pack_errors() -> Iterator[None]:
    """Native errors as Veil's, with the envelope's own authentication advice."""
    try:
        with native_errors():
            yield
    except AuthenticationError:
        raise AuthenticationError(_AUTH_FAILED) from None
