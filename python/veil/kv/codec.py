"""Compression of packs (zlib by default, zstd and lz4 selectable) and padding.

Each codec has a one-byte id stored (authenticated) in the pack envelope, so a
client reads packs written with any codec; the ``compression`` option only
chooses how this client writes.

Padding (paper §2.5): the server sees the length of every stored pack, which
says how well that pack compressed -- a hint about its contents (many repeated
values compress better than varied ones). With padding tiers the compressed
pack is padded to the smallest tier that holds it, so the server learns only
the tier. Beyond the largest tier the size is rounded up to a multiple of it.
"""

from __future__ import annotations

import struct
import threading
import zlib
from collections.abc import Callable, Sequence

import lz4.frame
import zstandard

from veil.errors import MalformedCiphertextError, ParameterError

ZLIB, ZSTD, LZ4 = 1, 2, 3
CODEC_IDS = {"zlib": ZLIB, "zstd": ZSTD, "lz4": LZ4}
_LENGTH = struct.Struct(">I")
DENSE_ZSTD_LEVEL = 19  # any level's frames decode the same way


_ZSTD = threading.local()  # zstandard's (de)compressors are not thread-safe: one per thread


def _zstd_compress(data: bytes) -> bytes:
    compressor = getattr(_ZSTD, "compressor", None)
    if compressor is None:
        compressor = _ZSTD.compressor = zstandard.ZstdCompressor(level=3)
    return bytes(compressor.compress(data))


def _zstd_decompress(data: bytes) -> bytes:
    # A new decompressor per call costs more than decompressing a short row.
    decompressor = getattr(_ZSTD, "decompressor", None)
    if decompressor is None:
        decompressor = _ZSTD.decompressor = zstandard.ZstdDecompressor()
    return bytes(decompressor.decompress(data))


_COMPRESS: dict[int, Callable[[bytes], bytes]] = {
    ZLIB: lambda data: zlib.compress(data, 6),
    ZSTD: _zstd_compress,
    LZ4: lz4.frame.compress,
}
_DECOMPRESS: dict[int, Callable[[bytes], bytes]] = {
    ZLIB: zlib.decompress,
    ZSTD: _zstd_decompress,
    LZ4: lz4.frame.decompress,
}


def codec_id(name: str) -> int:
    try:
        return CODEC_IDS[name]
    except KeyError:
        raise ParameterError(
            f"unknown compression {name!r}; choose one of {', '.join(CODEC_IDS)}"
        ) from None


def compress(codec: int, data: bytes) -> bytes:
    return _COMPRESS[codec](data)


def compress_dense(codec: int, data: bytes) -> bytes:
    """``data`` compressed hard (zstd 19, zlib 9): for rows written once and read rarely,
    such as trained dictionaries, where every stored byte counts and time does not."""
    if codec == ZSTD:
        return bytes(zstandard.ZstdCompressor(level=DENSE_ZSTD_LEVEL).compress(data))
    if codec == ZLIB:
        return zlib.compress(data, 9)
    return compress(codec, data)


def decompress(codec: int, data: bytes) -> bytes:
    try:
        return _DECOMPRESS[codec](data)
    except KeyError:
        raise MalformedCiphertextError(f"pack uses unknown compression id {codec}") from None
    except Exception as exc:  # each library raises its own error type
        raise MalformedCiphertextError(f"pack does not decompress: {exc}") from None


class Inflater:
    """Decompresses a pack lazily, only as far as a reader asks.

    zlib inflates incrementally, so a point read stops at the end of the value
    it needs (half a pack on average); zstd and lz4 are fast enough that they
    simply decompress everything on first use.
    """

    __slots__ = ("_codec", "_data", "_inflate", "buffer")

    def __init__(self, codec: int, data: bytes):
        self._codec, self._data = codec, data
        self._inflate = zlib.decompressobj() if codec == ZLIB else None
        self.buffer = b""

    def read_to(self, end: int) -> bytes:
        """The plaintext up to at least ``end`` bytes (all of it if shorter)."""
        if len(self.buffer) >= end:
            return self.buffer
        try:
            if self._inflate is None:
                if not self._data:  # inflated whole already
                    return self.buffer
                self.buffer = decompress(self._codec, self._data)
                self._data = b""
            else:
                more = self._inflate.decompress(self._data, end - len(self.buffer))
                self._data = self._inflate.unconsumed_tail
                self.buffer += more
        except zlib.error as exc:
            raise MalformedCiphertextError(f"pack does not decompress: {exc}") from None
        return self.buffer


def pad_tiers(padding: str | Sequence[int] | None) -> tuple[int, ...]:
    """Normalise the ``padding`` option to sorted tier sizes (empty = no padding).

    ``"pow2"`` means powers of two from 256 bytes to 16 MiB.
    """
    if padding is None:
        return ()
    if padding == "pow2":
        return tuple(2**i for i in range(8, 25))
    if isinstance(padding, str):
        raise ParameterError(f"padding must be None, 'pow2' or a list of sizes, got {padding!r}")
    tiers = tuple(sorted(int(t) for t in padding))
    if not tiers or tiers[0] <= 0:
        raise ParameterError("padding tiers must be positive byte sizes")
    return tiers


def pad(data: bytes, tiers: tuple[int, ...]) -> bytes:
    """Length-prefix ``data`` and pad it with zeros to its tier."""
    body = _LENGTH.pack(len(data)) + data
    if not tiers:
        return body
    target = next((t for t in tiers if t >= len(body)), None)
    if target is None:
        largest = tiers[-1]
        target = -(-len(body) // largest) * largest
    return body + bytes(target - len(body))


def unpad(body: bytes) -> bytes:
    if len(body) < _LENGTH.size:
        raise MalformedCiphertextError("pack body is truncated")
    (length,) = _LENGTH.unpack_from(body)
    if _LENGTH.size + length > len(body):
        raise MalformedCiphertextError("pack body is shorter than its length prefix")
    return body[_LENGTH.size : _LENGTH.size + length]
