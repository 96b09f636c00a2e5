"""The stored form of a pack or of one APPEND-mode row.

::

    stored = version (0x01) | codec id (1 byte) | nonce (12 bytes) | AES-256-GCM(body)
    stored = version (0x02) | codec id (zstd) | dictionary version (u32) | nonce | AES-256-GCM(body)
    body   = pad(compress(plaintext))       (see veil.kv.codec)

    stored = version (0x03) | codec id (zstd) | dictionary version (u32, 0 = none)
             | nonce (12 bytes) | index length (u32) | sealed index | sealed blocks

Version 2 (issue 14) is a pack compressed with the table's trained zstd
dictionary of that version (``veil.kv.dictionary``); the header, version
included, is part of the associated data, so a server cannot make a pack name
another dictionary.

Version 3 (issue 14, *blocked packs*) cuts a pack's rows into blocks of
``block_rows`` that are compressed (zstd, with the dictionary when the table
has one) and sealed one by one under a key derived from the pack's nonce,
behind a sealed index of each block's first key and length
(rust/veil-kernels/src/kvpack/blocks.rs documents the layout and why it is
safe). A point read decrypts the index and one block, not the whole pack, so
packs can be large (little envelope per row, good compression) while a read
stays as cheap as a small pack's. Stores write it with
``compression="zstd-dict"`` and no padding (padding tiers keep version 2: a
blocked pack's index length would tell the server its block count).

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
from collections.abc import Sequence
from typing import Any

import zstandard
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from veil import _native
from veil.crypto._native_errors import native_errors
from veil.errors import AuthenticationError, MalformedCiphertextError, VeilError
from veil.kv import codec
from veil.kv.dictionary import Dictionaries, Dictionary, MissingDictionaryError

ENVELOPE_VERSION = 0x01
ENVELOPE_DICTIONARY = 0x02
ENVELOPE_BLOCKED = 0x03
DICTIONARY_CODEC = "zstd-dict"  # the compression option: zstd with the table's dictionary
NONCE_BYTES = 12
TAG_BYTES = 16
_HEADER_BYTES = {ENVELOPE_VERSION: 2, ENVELOPE_DICTIONARY: 6, ENVELOPE_BLOCKED: 6}
_U32 = struct.Struct(">I")
_BLOCKED = bytes([ENVELOPE_BLOCKED])
_BLOCKED_MINIMUM = _HEADER_BYTES[ENVELOPE_BLOCKED] + NONCE_BYTES + TAG_BYTES
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
        "_kind_prefixes",
        "_prepared",
        "_prepared_raw",
        "_tiers",
        "blocked",
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
        self.blocked = self.wants_dictionary and not tiers  # write version 3 packs
        # The table's dictionary versions (set by the store) and the one this
        # client compresses packs with (None: plain codec).
        self.dictionaries: Dictionaries | None = None
        self.dictionary: Dictionary | None = None
        self._prepared: dict[int, _native.KvDictionary] = {}  # authenticated versions
        self._prepared_raw: dict[bytes, _native.KvDictionary] = {}  # the same, by header bytes
        self._kind_prefixes: dict[bytes, bytes] = {}

    def seal(
        self,
        kind: bytes,
        location: bytes,
        plaintext: bytes,
        *,
        use_dictionary: bool = False,
        dense: bool = False,
    ) -> bytes:
        """``plaintext`` compressed and sealed; ``dense`` compresses hard (no dictionary)."""
        dictionary = self.dictionary if use_dictionary else None
        if dictionary is None:
            header = bytes([ENVELOPE_VERSION, self._codec])
            squeeze = codec.compress_dense if dense else codec.compress
            compressed = squeeze(self._codec, plaintext)
        else:
            header = bytes([ENVELOPE_DICTIONARY, codec.ZSTD]) + _U32.pack(dictionary.version)
            compressed = dictionary.compressor().compress(plaintext)
        body = codec.pad(compressed, self._tiers)
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._aead.encrypt(nonce, body, self._aad(header, kind, location))
        return header + nonce + sealed

    def seal_blocked(
        self,
        kind: bytes,
        location: bytes,
        entries: Sequence[tuple[bytes, bytes]],
        positions: Sequence[bytes],
        block_rows: int,
        *,
        dense: bool = False,
        previous: bytes | None = None,
    ) -> bytes:
        """A blocked pack (version 3) of ``entries`` in pack order, ``positions`` their order keys.

        ``dense`` compresses hard (zstd 19 against 9: a few % smaller, ~20x
        slower to write, as fast to read), for packs written once in bulk.
        ``previous`` is the stored pack this one replaces at the same place:
        if it is a blocked pack with the same header (dictionary version), its
        unchanged blocks keep their compressed form (a put recompresses one
        block, not the pack).
        """
        dictionary = self.dictionary
        header = bytes([ENVELOPE_BLOCKED, codec.ZSTD]) + _U32.pack(
            dictionary.version if dictionary else 0
        )
        if previous is not None and previous[: len(header)] != header:
            previous = None  # another format or dictionary: its blocks do not fit
        nonce = os.urandom(NONCE_BYTES)
        try:  # ``previous`` is opened (authenticated) again to reuse its blocks
            body = _native.kv_seal_blocked(
                self._key,
                nonce,
                self._aad(header, kind, location),
                [k for k, _ in entries],
                [v for _, v in entries],
                list(positions),
                block_rows,
                dictionary.prepared if dictionary else None,
                dense,
                previous,
            )
        except _native.NativeError as exc:
            raise _pack_error(exc) from None
        return header + nonce + body

    def open(self, kind: bytes, location: bytes, stored: bytes) -> bytes:
        if stored[:1] == bytes([ENVELOPE_BLOCKED]):
            raise MalformedCiphertextError("a blocked pack is opened with open_records")
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
        self,
        kind: bytes,
        location: bytes,
        stored: bytes,
        between: tuple[bytes, bytes] | None = None,
    ) -> tuple[list[bytes], list[bytes]]:
        """The (keys, values) of a stored pack, in one native call (GIL released).

        ``between`` (low, high), for range reads of an ordered layout: a
        blocked pack opens only the blocks that may hold keys in that range,
        so the lists may lack keys outside it (they are still ascending).
        """
        header_bytes = _check(stored)
        header = stored[:header_bytes]
        aad = self._aad(header, kind, location)
        prepared = self._prepared_for(stored)
        try:
            if header[0] == ENVELOPE_BLOCKED:
                low, high = between or (None, None)
                return _native.kv_open_blocked(self._key, stored, aad, prepared, low, high)
            nonce, sealed = (
                stored[header_bytes : header_bytes + NONCE_BYTES],
                stored[header_bytes + NONCE_BYTES :],
            )
            return _native.kv_open_pack(self._key, header[1], nonce, sealed, aad, prepared)
        except _native.NativeError as exc:
            raise _pack_error(exc) from None

    def open_range(
        self,
        kind: bytes,
        location: bytes,
        stored: bytes,
        bounds: tuple[bytes, bytes, bytes | None],
        *,
        int_keys: bool = False,
    ) -> tuple[list[Any], list[bytes]]:
        """A blocked pack's entries with ``low <= key <= high`` (and key < ``stop``).

        ``bounds`` is (low, high, stop): a range read's slice of one pack,
        cut natively, ``stop`` being the next pack's packID (None: no next
        pack in the range). With ``int_keys`` the keys come back as the
        integers they encode (the table's keys are integers).
        """
        if stored[:1] != _BLOCKED or len(stored) < _BLOCKED_MINIMUM:
            raise MalformedCiphertextError("open_range reads blocked packs only")
        prepared = self._prepared_raw.get(stored[2:6]) or self._prepared_for(stored)
        aad = b"".join((self._kind_prefix(kind), _U32.pack(len(location)), location, stored[:6]))
        low, high, stop = bounds
        try:
            return _native.kv_range_blocked(
                self._key, stored, aad, prepared, low, high, stop, int_keys
            )
        except _native.NativeError as exc:
            raise _pack_error(exc) from None

    def lookup(
        self,
        kind: bytes,
        location: bytes,
        stored: bytes,
        wanted: bytes,
        position: bytes | None = None,
    ) -> bytes | None:
        """The value of ``wanted`` in a stored pack (None if absent), in one native call.

        ``position`` is the key's place in pack order (default: the key itself);
        a blocked pack uses it to pick the one block to open. A point read's
        hot path: no slicing of the stored pack, no context managers.
        """
        if stored[:1] == _BLOCKED and len(stored) >= _BLOCKED_MINIMUM:
            # The hot path, kept to a few operations (~0.5 us of Python on
            # a ~10 us read): the AAD from a per-kind prefix, the prepared
            # dictionary by the header's raw version bytes.
            prepared = self._prepared_raw.get(stored[2:6]) or self._prepared_for(stored)
            aad = b"".join(
                (self._kind_prefix(kind), _U32.pack(len(location)), location, stored[:6])
            )
            try:
                return _native.kv_blocked_lookup(
                    self._key, stored, aad, position or wanted, wanted, prepared
                )
            except _native.NativeError as exc:
                raise _pack_error(exc) from None
        header_bytes = _check(stored)
        aad = self._aad(stored[:header_bytes], kind, location)
        prepared = self._prepared_for(stored)
        try:
            if stored[0] == ENVELOPE_BLOCKED:
                return _native.kv_blocked_lookup(
                    self._key, stored, aad, position or wanted, wanted, prepared
                )
            nonce_end = header_bytes + NONCE_BYTES
            return _native.kv_pack_lookup(
                self._key,
                stored[1],
                stored[header_bytes:nonce_end],
                stored[nonce_end:],
                aad,
                wanted,
                prepared,
            )
        except _native.NativeError as exc:
            raise _pack_error(exc) from None

    def _prepared_for(self, stored: bytes) -> _native.KvDictionary | None:
        if stored[0] == ENVELOPE_VERSION:
            return None
        version = int.from_bytes(stored[2:6], "big")
        prepared = self._prepared.get(version)
        if prepared is None:
            if stored[0] == ENVELOPE_BLOCKED and version == 0:
                return None  # a blocked pack written before the table had a dictionary
            prepared = self._prepared[version] = self._dictionary_for(stored).prepared
            self._prepared_raw[stored[2:6]] = prepared
        return prepared

    def _kind_prefix(self, kind: bytes) -> bytes:
        """The start of the AAD of every record of ``kind`` (see :meth:`_aad`)."""
        prefix = self._kind_prefixes.get(kind)
        if prefix is None:
            prefix = self._kind_prefixes[kind] = (
                self._aad_prefix + len(kind).to_bytes(4, "big") + kind
            )
        return prefix

    def _dictionary_for(self, stored: bytes) -> Dictionary:
        """The dictionary a (version 2 or 3) stored pack names, fetched and authenticated."""
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


def _check(stored: bytes) -> int:
    """The header length of a stored value, checking its version and minimum length."""
    header_bytes = _HEADER_BYTES.get(stored[0]) if stored else None
    if header_bytes is None:
        raise MalformedCiphertextError(
            f"stored pack has envelope version {stored[:1].hex() or 'none'}; this Veil reads "
            f"versions {ENVELOPE_VERSION} to {ENVELOPE_BLOCKED}; upgrade Veil to read it"
        )
    if len(stored) < header_bytes + NONCE_BYTES + TAG_BYTES:
        raise MalformedCiphertextError("stored pack is truncated")
    return header_bytes


def _split(stored: bytes) -> tuple[bytes, bytes, bytes]:
    """(header, nonce, ciphertext || tag) of a stored value, checking its version."""
    header_bytes = _check(stored)
    nonce_end = header_bytes + NONCE_BYTES
    return stored[:header_bytes], stored[header_bytes:nonce_end], stored[nonce_end:]


def _pack_error(exc: _native.NativeError) -> VeilError:
    """A native error as Veil's, with the envelope's own authentication advice."""
    if isinstance(exc, _native.NativeAuthenticationError):
        return AuthenticationError(_AUTH_FAILED)
    try:
        with native_errors():
            raise exc
    except VeilError as mapped:
        return mapped
    raise AssertionError("native_errors maps every native error")  # pragma: no cover
