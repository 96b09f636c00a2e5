"""Row-bound RND of a column: ciphertexts that need the rows' ids (``veil.crypto.rowrnd``).

Its own module so that ``veil.ciphers.fitted_rnd`` can extend it while
``veil.ciphers.columns`` chooses between the two.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from veil.ciphers.cipher import ColumnCipher
from veil.errors import DomainError, ParameterError


class RowBoundCipher:
    """Row-bound RND (``veil.crypto.rowrnd``) of a column, or of an onion's inner ciphertexts.

    ``layer`` is the RND under the rows' ids; ``inner`` the scheme beneath it
    (None: the RND column of the plain encoding). Integers stay 8-byte BIGINTs
    and strings keep their length; both need the rows' ids to encrypt and
    decrypt, so the column-only methods refuse.

    ``bits`` (a number's RND only): the value's low ``bits`` bits XOR as many
    of the keystream, stored as a non-negative BIGINT below ``2**bits``. The
    width is the column's domain's (``veil.design.domains.rnd_bits``), so every
    valid value fits and the ciphertext is as uniform over ``bits`` bits as
    the full one over 64, while DuckDB bit-packs it (DECIMAL(7,2): 25 bits a
    row where 8 random bytes stay uncompressed). A value beyond the width is
    refused, never cut.
    """

    def __init__(self, layer: Any, inner: ColumnCipher | None, *, bits: int | None = None):
        if bits is not None and not 1 <= bits < 64:
            raise ParameterError(f"narrow RND needs 1 <= bits < 64; got {bits}")
        self._layer = layer
        self._inner = inner
        self._bits = bits

    def encrypt_rows(self, ids: np.ndarray, encoded: pa.Array) -> pa.Array:
        return self.sealed(self._layer.encrypt(ids, self.sealing_input(encoded)))

    def sealing_layer(self) -> Any:
        """The RND layer whose XOR of ``sealing_input``'s values ``sealed`` finishes, so
        that several columns' XORs can run in one call (``veil.crypto.rowrnd.xor_columns``);
        None when ``encrypt_rows`` must run whole (a subclass's own)."""
        if type(self).encrypt_rows is not RowBoundCipher.encrypt_rows:
            return None
        return self._layer

    def sealing_input(self, encoded: pa.Array) -> pa.Array:
        """What the layer XORs: the inner ciphertexts, each checked to fit the width."""
        stored = encoded if self._inner is None else self._inner.encrypt(encoded)
        if self._bits is not None:
            self._check_width(stored)
        return stored

    def sealed(self, xored: pa.Array) -> pa.Array:
        """``encrypt_rows``'s result, given ``sealing_input``'s values XOR the keystreams."""
        if self._bits is None:
            return xored
        if len(xored) <= _SMALL_ROWS and not xored.offset:
            words = np.frombuffer(xored.buffers()[1], dtype=np.int64, count=len(xored))
            validity = xored.buffers()[0] if xored.null_count else None
            return pa.Array.from_buffers(
                pa.int64(),
                len(xored),
                [validity, pa.py_buffer(words & np.int64((1 << self._bits) - 1))],
                null_count=xored.null_count,
            )
        return pc.bit_wise_and(xored, _mask(self._bits))

    def decrypt_rows(self, ids: np.ndarray, stored: pa.Array) -> pa.Array:
        return self.decrypt_opened(self._layer.decrypt(ids, stored))

    def resealing_layer(self) -> Any:
        """The RND layer a stored value's keystreams are swapped under when it moves to a
        new row id without being decrypted (``veil.ciphers.encrypt.Resealed``): the
        layer XORs ``reseal_input``'s values with the old and new ids' keystreams, and
        ``resealed`` finishes them. None: such values cannot move so."""
        return self.sealing_layer()

    def reseal_input(self, stored: pa.Array) -> pa.Array:
        """What the layer's keystreams are swapped in, of ``stored`` values."""
        return stored

    def resealed(self, moved: pa.Array, stored: pa.Array) -> pa.Array:
        """The stored values under their new ids, given ``reseal_input``'s with the
        keystreams swapped (``stored``: the values as they were)."""
        return self.sealed(moved)

    def opening_layer(self) -> Any:
        """The RND layer whose XOR of the stored values ``decrypt_opened`` finishes, so that
        several columns' XORs can run in one call (``veil.crypto.rowrnd.xor_columns``);
        None when ``decrypt_rows`` must run whole."""
        return self._layer

    def decrypt_opened(self, opened: pa.Array) -> pa.Array:
        """``decrypt_rows``'s result, given the stored values XOR the layer's keystreams."""
        if self._bits is not None:  # the low bits are the value's; sign-extend them
            opened = _sign_extended(opened, self._bits)
        return opened if self._inner is None else self._inner.decrypt(opened)

    def _check_width(self, encoded: pa.Array) -> None:
        assert self._bits is not None
        low, high = _extremes(encoded)
        limit = 1 << (self._bits - 1)
        if low is not None and high is not None and (low < -limit or high >= limit):
            column = getattr(self._layer, "column", None)
            raise DomainError(
                f"a value of {column or 'a column'} lies outside its type's {self._bits}-bit "
                "domain; it cannot be stored"
            )

    def encrypt(self, encoded: pa.Array) -> pa.Array:
        raise ParameterError("row-bound RND encrypts a column with its rows' ids: encrypt_rows()")

    def decrypt(self, stored: pa.Array) -> pa.Array:
        raise ParameterError("row-bound RND decrypts a column with its rows' ids: decrypt_rows()")

    def encrypt_one(self, encoded: int | bytes) -> int | bytes:
        raise ParameterError(
            "RND ciphertexts are randomised; constants cannot be compared with them"
        )


# Up to this many rows (a point write's), masks and width checks run in numpy: three
# Arrow kernels cost ~30 us a column whatever its length (issue 41).
_SMALL_ROWS = 64


def _extremes(encoded: pa.Array) -> tuple[int | None, int | None]:
    """The least and greatest non-NULL value (None, None: none)."""
    if len(encoded) <= _SMALL_ROWS and encoded.type == pa.int64() and not encoded.null_count:
        if not len(encoded):
            return None, None
        start = encoded.offset
        words = np.frombuffer(encoded.buffers()[1], np.int64, count=start + len(encoded))[start:]
        return int(words.min()), int(words.max())
    extremes = pc.min_max(encoded.cast(pa.int64()))
    return extremes["min"].as_py(), extremes["max"].as_py()


def _mask(bits: int) -> pa.Scalar:
    return pa.scalar((1 << bits) - 1, pa.int64())


def _sign_extended(opened: pa.Array, bits: int) -> pa.Array:
    """The low ``bits`` bits of each int64, sign-extended; NULL stays NULL.

    In numpy over the values' buffer: three Arrow kernels cost ~30 us a column
    whatever its length, most of a point query's row (issue 41).
    """
    top = np.int64(1 << (bits - 1))
    start = opened.offset
    words = np.frombuffer(opened.buffers()[1], dtype=np.int64, count=start + len(opened))[start:]
    plain = ((words & np.int64((1 << bits) - 1)) ^ top) - top
    validity = None
    if opened.null_count:
        validity = opened.buffers()[0] if start == 0 else opened.is_valid().buffers()[1]
    return pa.Array.from_buffers(
        pa.int64(), len(opened), [validity, pa.py_buffer(plain)], null_count=opened.null_count
    )
