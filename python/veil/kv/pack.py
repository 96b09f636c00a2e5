"""A pack's plaintext layout: a compact, versioned, length-prefixed record list.

Layout (before compression), all integers big-endian::

    version (1 byte, 0x01) | count n (u32)
    key lengths (n x u32) | value lengths (n x u32)
    keys, concatenated | values, concatenated

Keys are the encoded keys of :mod:`veil.kv.keys`, stored in the pack's order
(by packID order: the encoded key itself, or its pseudorandom ID). Keeping
keys together and values together lets the compressor see similar bytes side
by side. Stores open packs with the native decoder
(``veil.kv.envelope.Envelope.open_records`` / ``lookup``: AES-GCM, inflate and
parse in one call, rust/veil-kernels/src/kvpack.rs); :func:`parse_entries` and
:func:`lookup` here are the Python reading of the same layout, kept as the
reference the tests compare the native decoder with.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable

import numpy as np

from veil.errors import MalformedCiphertextError
from veil.kv.codec import Inflater

PACK_FORMAT_VERSION = 1
_HEADER = struct.Struct(">BI")
_U32 = np.dtype(">u4")


class Pack:
    """The plaintext of one pack: encoded key -> value."""

    __slots__ = ("items",)

    def __init__(self, items: dict[bytes, bytes] | None = None):
        self.items: dict[bytes, bytes] = items if items is not None else {}

    def __len__(self) -> int:
        return len(self.items)

    def ordered(self, order: Callable[[bytes], bytes]) -> list[tuple[bytes, bytes]]:
        """Entries sorted by ``order(encoded key)`` (the packID order)."""
        return sorted(self.items.items(), key=lambda kv: order(kv[0]))

    def serialize(self, order: Callable[[bytes], bytes]) -> bytes:
        return serialize_entries(self.ordered(order))

    @classmethod
    def parse(cls, data: bytes) -> Pack:
        keys, values = parse_entries(data)
        return cls(dict(zip(keys, values, strict=True)))


def serialize_entries(entries: Iterable[tuple[bytes, bytes]]) -> bytes:
    pairs = list(entries)
    keys = [k for k, _ in pairs]
    values = [v for _, v in pairs]
    key_lengths = np.fromiter((len(k) for k in keys), dtype=_U32, count=len(keys))
    value_lengths = np.fromiter((len(v) for v in values), dtype=_U32, count=len(values))
    return b"".join(
        [
            _HEADER.pack(PACK_FORMAT_VERSION, len(pairs)),
            key_lengths.tobytes(),
            value_lengths.tobytes(),
            *keys,
            *values,
        ]
    )


def lookup(inflater: Inflater, key: bytes) -> bytes | None:
    """The value of ``key`` in a pack, inflating no further than its end."""
    head = inflater.read_to(_HEADER.size)
    if len(head) < _HEADER.size:
        raise MalformedCiphertextError("pack plaintext is truncated")
    version, count = _HEADER.unpack_from(head)
    if version != PACK_FORMAT_VERSION:
        raise MalformedCiphertextError(f"pack format version {version} is unknown")
    lengths_end = _HEADER.size + 8 * count
    data = inflater.read_to(lengths_end)
    if len(data) < lengths_end:
        raise MalformedCiphertextError("pack plaintext is truncated")
    lengths = np.frombuffer(data, dtype=_U32, count=2 * count, offset=_HEADER.size)
    key_ends = (np.cumsum(lengths[:count], dtype=np.int64) + lengths_end).tolist()
    data = inflater.read_to(key_ends[-1] if count else lengths_end)
    start = lengths_end
    for index, end in enumerate(key_ends):
        if data[start:end] == key:
            value_start = key_ends[-1] + int(lengths[count : count + index].sum())
            value_end = value_start + int(lengths[count + index])
            data = inflater.read_to(value_end)
            if len(data) < value_end:
                raise MalformedCiphertextError("pack plaintext is truncated")
            return data[value_start:value_end]
        start = end
    return None


def parse_entries(data: bytes) -> tuple[list[bytes], list[bytes]]:
    if len(data) < _HEADER.size:
        raise MalformedCiphertextError("pack plaintext is truncated")
    version, count = _HEADER.unpack_from(data)
    if version != PACK_FORMAT_VERSION:
        raise MalformedCiphertextError(
            f"pack format version {version} is unknown; upgrade Veil to read it"
        )
    lengths_end = _HEADER.size + 8 * count
    if lengths_end > len(data):
        raise MalformedCiphertextError("pack plaintext is truncated")
    if count == 0:
        if lengths_end != len(data):
            raise MalformedCiphertextError("empty pack has trailing bytes")
        return [], []
    lengths = np.frombuffer(data, dtype=_U32, count=2 * count, offset=_HEADER.size)
    ends = np.cumsum(lengths, dtype=np.int64) + lengths_end
    if int(ends[-1]) != len(data):
        raise MalformedCiphertextError("pack plaintext lengths do not add up")
    starts = np.concatenate(([lengths_end], ends[:-1])).tolist()
    stops = ends.tolist()
    cut = [data[a:b] for a, b in zip(starts, stops, strict=True)]
    return cut[:count], cut[count:]
