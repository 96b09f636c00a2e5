"""A number's row-bound RND copy fitted to its loaded values; every other value still works.

An onion load fetches a number of under 64 bits from a row-bound RND copy in
its type's bits (``RowBoundCipher``'s ``bits``): 32 for an INTEGER, whatever
its values, since random bits do not compress. TPC-DS's surrogate keys,
counts and prices span a few thousand values (customer_demographics'
cd_dep_count 0..6, five INTEGER columns of 1.9 million rows: 42 MB of the SF
0.1 onion load's 138 MB). As narrow DET does for FF1 (``veil.crypto.det_narrow``),
the values are split in two parts, each with ciphertexts of its own:

- the loaded range ``[low, low + 2**fit)`` (``fit`` the bit length of the
  loaded span, with two bits of headroom): ``(value - low) XOR pad`` in its
  low ``fit`` bits, a ciphertext below ``2**fit`` (``fit`` bits a row once the
  server bit-packs it);
- any other value the type accepts (a later INSERT or UPDATE): ``2**fit +
  ((value XOR pad) mod 2**bits)``, at or above ``2**fit``, the type's width.

``pad`` is the row's keystream (``veil.crypto.rowrnd``), used once per row as
before. Leakage beyond RND's: ``fit`` (the bit length of the loaded values'
span, to a factor of 4, as the ASHE words' widths already tell,
``veil.load.ashe_widths``), and whether each row's value lies in the loaded range.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from veil.ciphers.row_bound import RowBoundCipher
from veil.errors import ParameterError

FIT_PARAM = "fit"  # ``Encryption.params``: [low, bits] of the loaded range
HEADROOM_BITS = 2  # values may span 4 times the loaded span before they leave it


def fitted_range(low: int, high: int, bits: int) -> list[int] | None:
    """``[low, fit]`` for a copy of ``bits`` bits whose loaded values span ``low..high``;
    None when the fit saves nothing."""
    fit = max(1, (high - low).bit_length()) + HEADROOM_BITS
    return [low, fit] if fit < bits else None


class FittedRowBound(RowBoundCipher):
    """``RowBoundCipher`` of a number, ``bits`` wide, with the loaded range ``fit`` bits."""

    def __init__(self, layer: Any, *, bits: int, low: int, fit: int):
        super().__init__(layer, None, bits=bits)
        self._width = bits  # the type's (``_bits``, optional in the base class)
        if not 1 <= fit < bits:
            raise ParameterError(f"a fitted RND copy needs 1 <= fit < bits; got {fit}, {bits}")
        self._low, self._fit = low, fit
        self._narrow = pa.scalar((1 << fit) - 1, pa.int64())

    def encrypt_rows(self, ids: np.ndarray, encoded: pa.Array) -> pa.Array:
        relative = pc.subtract(encoded.cast(pa.int64()), pa.scalar(self._low, pa.int64()))
        extremes = pc.min_max(relative)
        low, high = extremes["min"].as_py(), extremes["max"].as_py()
        if low is None or (low >= 0 and high < 1 << self._fit):  # a load's: the loaded range
            return pc.bit_wise_and(self._layer.encrypt(ids, relative), self._narrow)
        self._check_width(encoded)
        values = _int64s(encoded)
        inside = (values - np.int64(self._low)).view(np.uint64) < np.uint64(1 << self._fit)
        plain = np.where(inside, values - np.int64(self._low), values)
        padded = _int64s(self._layer.encrypt(ids, pa.array(plain)))
        wide = (padded & np.int64((1 << self._width) - 1)) + np.int64(1 << self._fit)
        narrow = padded & np.int64((1 << self._fit) - 1)
        return _with_nulls(np.where(inside, narrow, wide), encoded)

    def opening_layer(self) -> Any:
        return None  # what the layer XORs depends on the stored values' range

    def resealing_layer(self) -> Any:
        return self._layer

    def reseal_input(self, stored: pa.Array) -> pa.Array:
        """The XORed bits of each stored value: a value beyond the loaded range without
        its mark (``2**fit``), whose keystream bits lie below it."""
        words = _int64s(stored)
        return pa.array(words - ((words >= (1 << self._fit)).astype(np.int64) << self._fit))

    def resealed(self, moved: pa.Array, stored: pa.Array) -> pa.Array:
        """Each value in its old form with the new keystream: the loaded range's in its
        ``fit`` low bits, another value in the type's bits, marked again (``encrypt_rows``)."""
        words, swapped = _int64s(stored), _int64s(moved)
        outside = words >= (1 << self._fit)
        wide = (swapped & np.int64((1 << self._width) - 1)) + np.int64(1 << self._fit)
        narrow = swapped & np.int64((1 << self._fit) - 1)
        return _with_nulls(np.where(outside, wide, narrow), stored)

    def decrypt_rows(self, ids: np.ndarray, stored: pa.Array) -> pa.Array:
        # a point read's few values take the numpy path below, which answers both cases:
        # the kernels' max, AND and add cost ~10 us a call whatever the length (issue 41)
        few = len(stored) <= _FEW_ROWS
        top = None if few else pc.max(stored).as_py()
        if not few and (top is None or top < 1 << self._fit):  # none beyond the loaded range
            opened = pc.bit_wise_and(self._layer.decrypt(ids, stored), self._narrow)
            return pc.add(opened, pa.scalar(self._low, pa.int64()))
        words = _int64s(stored)
        outside = words >= (1 << self._fit)
        opened = _int64s(
            self._layer.decrypt(ids, pa.array(words - (outside.astype(np.int64) << self._fit)))
        )
        inside_value = (opened & np.int64((1 << self._fit) - 1)) + np.int64(self._low)
        sign = np.int64(1 << (self._width - 1))
        outside_value = ((opened & np.int64((1 << self._width) - 1)) ^ sign) - sign
        return _with_nulls(np.where(outside, outside_value, inside_value), stored)


# Up to this many rows (a point statement's), values are read and opened in numpy
# without Arrow kernel calls (issue 41)
_FEW_ROWS = 64


def _int64s(array: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The int64 values of ``array`` (0 where NULL), read-only."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if array.type == pa.int64() and not array.null_count and 0 < len(array) <= _FEW_ROWS:
        # its own buffer: the cast, fill and conversion cost ~25 us for a point write's value
        start = array.offset
        return np.frombuffer(array.buffers()[1], np.int64, start + len(array))[start:]
    return pc.fill_null(array.cast(pa.int64()), 0).to_numpy(zero_copy_only=False)


def _with_nulls(values: np.ndarray, like: pa.Array | pa.ChunkedArray) -> pa.Array:
    """``values`` as an int64 array, NULL where ``like`` is."""
    if isinstance(like, pa.ChunkedArray):
        like = like.combine_chunks()
    mask = like.is_null().to_numpy(zero_copy_only=False) if like.null_count else None
    return pa.array(values, pa.int64(), mask=mask)
