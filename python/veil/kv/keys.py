"""Order-preserving byte encoding of MiniCrypt keys.

The backend orders rows by ``memcmp`` of their key bytes, so every key is
encoded to bytes whose byte order is the key order:

* a 64-bit signed integer -> ``0x01`` || 8 bytes big-endian with the sign bit
  flipped (so -1 < 0 < 1 byte-wise),
* a byte string -> ``0x02`` || the bytes themselves.

The leading kind byte keeps the two key types apart (one store holds one
type) and leaves ``0x00`` free for the *root pack* (packID ``0x00``), which
sorts below every encoded key so that every floor lookup finds a pack.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from veil.errors import ParameterError

Key = int | bytes
KeyKind = Literal["int", "bytes"]

INT_TAG = 0x01
BYTES_TAG = 0x02
ROOT_PACK_ID = b"\x00"
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
_SIGN = 1 << 63
_INT_PREFIX = bytes([INT_TAG])
_BYTES_PREFIX = bytes([BYTES_TAG])


def key_kind(key: object) -> KeyKind:
    """``"int"`` or ``"bytes"``; anything else is rejected with a clear error."""
    if isinstance(key, bool) or not isinstance(key, int | bytes | bytearray | memoryview):
        raise ParameterError(
            f"a key must be an int (signed 64-bit) or bytes, got {type(key).__name__}"
        )
    return "int" if isinstance(key, int) else "bytes"


def encode_key(key: Key, kind: KeyKind | None = None) -> bytes:
    """The order-preserving byte form of ``key`` (see the module docstring).

    ``kind`` is :func:`key_kind` of ``key`` when the caller already knows it.
    """
    if (kind or key_kind(key)) == "int":
        assert isinstance(key, int)
        if not INT64_MIN <= key <= INT64_MAX:
            raise ParameterError(f"integer key {key} is outside the signed 64-bit range")
        return _INT_PREFIX + (key + _SIGN).to_bytes(8, "big")
    return _BYTES_PREFIX + bytes(key)


def decode_key(encoded: bytes) -> Key:
    """The key that :func:`encode_key` turned into ``encoded``."""
    tag = encoded[0] if encoded else None
    if tag == INT_TAG and len(encoded) == 9:
        return int.from_bytes(encoded[1:], "big") - _SIGN
    if tag == BYTES_TAG:
        return encoded[1:]
    raise ParameterError("stored key has an unknown encoding; was it written by Veil?")


def decode_keys(encoded: list[bytes]) -> list[Key]:
    """:func:`decode_key` over a batch; integer keys in one numpy pass."""
    if not encoded:
        return []
    if encoded[0][:1] == _INT_PREFIX:
        raw = np.frombuffer(b"".join(encoded), dtype=np.uint8)
        if raw.size == 9 * len(encoded):
            rows = raw.reshape(-1, 9)
            if (rows[:, 0] == INT_TAG).all():
                unsigned = rows[:, 1:].copy().view(">u8").ravel()
                return (unsigned ^ np.uint64(_SIGN)).astype(">u8").view(">i8").tolist()
    return [decode_key(e) for e in encoded]


def encoded_kind(encoded: bytes) -> KeyKind:
    return "int" if encoded[:1] == bytes([INT_TAG]) else "bytes"
