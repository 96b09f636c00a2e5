"""A pack's plaintext layout: a compact, versioned record list.

Layout (before compression), version 3 (written since issue 14's second round)::

    version (1 byte, 0x03) | count n | terminator t (1 byte)
    n shared-prefix lengths | n key-suffix lengths
    key suffixes, concatenated | values, each followed by t

``t`` is a byte that no value of the list holds (a newline when possible,
else NUL, else the smallest absent byte). A compressor predicts where a record
ends from its text (a log line's newline comes in one match with the next
line's date), whereas a list of value lengths is noise it has to pay for: 200
log lines of 68 bytes, zstd 19, reach 87% of the whole-dataset zlib ratio with
terminators against 78% with lengths; 64 short JSON records 87% against 81%.
Values that use all 256 byte values are written as version 2 (still read)::

    version (1 byte, 0x02) | count n
    n shared-prefix lengths | n key-suffix lengths | n value lengths
    key suffixes, concatenated | values, concatenated

Counts and lengths are unsigned LEB128 varints. Keys are front-coded: key i
is the first ``shared`` bytes of key i-1 followed by its suffix, and the
suffix's first byte is stored as its difference (mod 256) from key i-1's byte
at that position (when key i-1 has one), so consecutive integer keys become
runs of the same three bytes (versions 2 and 3). Version 1 (still read)::

    version (1 byte, 0x01) | count n (u32)
    key lengths (n x u32) | value lengths (n x u32)
    keys, concatenated | values, concatenated          (integers big-endian)

On short records version 1's 8 bytes of lengths and 9-byte keys per row were
as much as a third of a compressed pack (68-byte log lines in packs of 750:
59% of the whole-dataset ratio against 82% with version 2, zlib).

Keys are the encoded keys of :mod:`veil.kv.keys`, stored in the pack's order
(by packID order: the encoded key itself, or its pseudorandom ID). Keeping
keys together and values together lets the compressor see similar bytes side
by side. Stores open packs with the native decoder
(``veil.kv.envelope.Envelope.open_records`` / ``lookup``: AES-GCM, inflate and
parse in one call, rust/veil-kernels/src/kvpack.rs); :func:`parse_entries` and
:func:`lookup` here are the Python reading of the same layout, kept as the
reference the tests compare the native decoder with. Packs are serialised
natively too (``_native.kv_serialize_pack``), off the per-row Python path.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable

import numpy as np

from veil import _native
from veil.errors import MalformedCiphertextError
from veil.kv.codec import Inflater

PACK_FORMAT_V1 = 1
PACK_FORMAT_V2 = 2
PACK_FORMAT_VERSION = 3
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
    """The record list (version 3, else 2) of (encoded key, value) pairs, in pack order."""
    pairs = list(entries)
    return _native.kv_serialize_pack([k for k, _ in pairs], [v for _, v in pairs])


def serialize_entries_v2(entries: Iterable[tuple[bytes, bytes]]) -> bytes:
    """Version 2, as Veil wrote before terminated values (tests: old packs stay readable)."""
    pairs = list(entries)
    return _native.kv_serialize_pack([k for k, _ in pairs], [v for _, v in pairs], version2=True)


def serialize_entries_v1(entries: Iterable[tuple[bytes, bytes]]) -> bytes:
    """Version 1, as Veil wrote before issue 14 (tests: old packs stay readable)."""
    pairs = list(entries)
    keys = [k for k, _ in pairs]
    values = [v for _, v in pairs]
    key_lengths = np.fromiter((len(k) for k in keys), dtype=_U32, count=len(keys))
    value_lengths = np.fromiter((len(v) for v in values), dtype=_U32, count=len(values))
    return b"".join(
        [
            _HEADER.pack(PACK_FORMAT_V1, len(pairs)),
            key_lengths.tobytes(),
            value_lengths.tobytes(),
            *keys,
            *values,
        ]
    )


def lookup(inflater: Inflater, key: bytes) -> bytes | None:
    """The value of ``key`` in a pack (version 1: inflating no further than its end)."""
    head = inflater.read_to(_HEADER.size)
    if head[:1] in (bytes([PACK_FORMAT_V2]), bytes([PACK_FORMAT_VERSION])):
        keys, values = parse_entries(inflater.read_to(1 << 62))
        return dict(zip(keys, values, strict=True)).get(key)
    if len(head) < _HEADER.size:
        raise MalformedCiphertextError("pack plaintext is truncated")
    version, count = _HEADER.unpack_from(head)
    if version != PACK_FORMAT_V1:
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
    if data[:1] == bytes([PACK_FORMAT_V2]):
        return _parse_v2(data)
    if data[:1] == bytes([PACK_FORMAT_VERSION]):
        return _parse_v3(data)
    if len(data) < _HEADER.size:
        raise MalformedCiphertextError("pack plaintext is truncated")
    version, count = _HEADER.unpack_from(data)
    if version != PACK_FORMAT_V1:
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


def _parse_v2(data: bytes) -> tuple[list[bytes], list[bytes]]:
    """The reference reading of version 2 (a plain loop; stores use the native one)."""
    count, at = _varint(data, 1)
    lengths, at = _lengths(data, at, 3 * count)
    keys, at = _keys(data, at, lengths[:count], lengths[count : 2 * count])
    values = []
    for size in lengths[2 * count :]:
        values.append(_take(data, at, size))
        at += size
    if at != len(data):
        raise MalformedCiphertextError("pack plaintext lengths do not add up")
    return keys, values


def _parse_v3(data: bytes) -> tuple[list[bytes], list[bytes]]:
    """The reference reading of version 3 (values ended by the terminator byte)."""
    count, at = _varint(data, 1)
    terminator = _take(data, at, 1)
    lengths, at = _lengths(data, at + 1, 2 * count)
    keys, at = _keys(data, at, lengths[:count], lengths[count:])
    values = []
    for _ in range(count):
        end = data.find(terminator, at)
        if end < 0:
            raise MalformedCiphertextError("pack plaintext lacks a value terminator")
        values.append(data[at:end])
        at = end + 1
    if at != len(data):
        raise MalformedCiphertextError("pack plaintext lengths do not add up")
    return keys, values


def _lengths(data: bytes, at: int, count: int) -> tuple[list[int], int]:
    lengths = []
    for _ in range(count):
        length, at = _varint(data, at)
        lengths.append(length)
    return lengths, at


def _keys(data: bytes, at: int, shared: list[int], suffixes: list[int]) -> tuple[list[bytes], int]:
    """Front-coded keys (versions 2 and 3) from their shared and suffix lengths."""
    keys: list[bytes] = []
    previous = b""
    for common, size in zip(shared, suffixes, strict=True):
        suffix = bytearray(_take(data, at, size))
        at += size
        if common > len(previous):
            raise MalformedCiphertextError("pack key shares more than the previous key")
        if suffix and len(previous) > common:
            suffix[0] = (suffix[0] + previous[common]) & 0xFF
        previous = previous[:common] + bytes(suffix)
        keys.append(previous)
    return keys, at


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = 0
    for shift in range(0, 35, 7):
        if at >= len(data):
            raise MalformedCiphertextError("pack plaintext is truncated")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            if value >= 1 << 32:
                raise MalformedCiphertextError("pack plaintext has a length past 4 GiB")
            return value, at
    raise MalformedCiphertextError("pack plaintext has an overlong length")


def _take(data: bytes, at: int, size: int) -> bytes:
    if at + size > len(data):
        raise MalformedCiphertextError("pack plaintext lengths do not add up")
    return data[at : at + size]
