"""Narrow DET: integers of the loaded range keep a narrow ciphertext, every other still works.

DET integers are FF1 over the type's 64 bits: random 64-bit ciphertexts,
which a column store cannot compress, where the plaintext keys (TPC-H's
l_partkey, under 2**18 at SF 1) bit-pack into a few bits. Sizing FF1's
domain from the loaded data would refuse later values beyond it; instead
the int64 domain is split in two and each part permuted onto itself:

- the narrow part ``N = [-2**(b-1), 2**(b-1))`` by FF1 over ``b`` bits, so a
  value in it encrypts to a value in it (``b`` bits a row once bit-packed);
- the rest ``W`` by FF1 over 64 bits, cycle-walked (Black and Rogaway,
  "Ciphers with arbitrary finite domains", 2002): a ciphertext that lands in
  ``N`` is encrypted again until it leaves it. That is a permutation of
  ``W``; as ``|N| / 2**64 <= 2**-16`` a walk almost never takes a second step.

The whole is a permutation of int64 under one key scope (two derived keys),
so equality, joins and GROUP BY work as for ``DetInt``. Leakage beyond
DET's equality pattern: whether each value lies in ``N`` (the loaded range,
chosen at load as the key scope's largest |value| with a bit of headroom).
No version byte fits a width-preserving ciphertext: the format's version is
that of its key labels.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NoReturn

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from veil.crypto.det import FF1_KEY_BYTES, FF1_KEY_LABEL, DetInt
from veil.crypto.keys import KeyLabel, MasterKey

NARROW_KEY_LABEL = "det-ff1-narrow"
MIN_BITS = 20  # FF1 (SP 800-38G) wants a domain of at least a million values
MAX_BITS = 48  # wider gains too little to be worth the leak


class NarrowDet:
    """DET over int64 whose values in ``[-2**(bits-1), 2**(bits-1))`` stay there."""

    __slots__ = ("_narrow", "_wide", "bits", "column")

    def __init__(
        self,
        narrow_key: bytes,
        wide_key: bytes,
        bits: int,
        *,
        column: str | None = None,
        wide_bits: int = 64,
    ):
        if not MIN_BITS <= bits < wide_bits <= 64:
            raise ValueError(f"narrow DET needs {MIN_BITS} <= bits < wide bits <= 64; got {bits}")
        self.bits = bits
        self.column = column
        self._narrow = DetInt(narrow_key, bits, column=column)
        # ``wide_bits`` < 64 only in tests, where walks are then frequent
        self._wide = DetInt(wide_key, wide_bits, column=column)

    @classmethod
    def from_master(
        cls, master: MasterKey, scope: str, bits: int, column: str | None = None
    ) -> NarrowDet:
        narrow = master.derive(KeyLabel(NARROW_KEY_LABEL, scope), FF1_KEY_BYTES)
        wide = master.derive(KeyLabel(FF1_KEY_LABEL, scope), FF1_KEY_BYTES)
        return cls(narrow, wide, bits, column=column)

    def encrypt(self, values: pa.Array) -> pa.Array:
        return self._arrow(values, encrypt=True)

    def decrypt(self, values: pa.Array) -> pa.Array:
        return self._arrow(values, encrypt=False)

    def encrypt_one(self, value: int) -> int:
        return int(self._ints(np.array([value], dtype=np.int64), encrypt=True)[0])

    def decrypt_one(self, value: int) -> int:
        return int(self._ints(np.array([value], dtype=np.int64), encrypt=False)[0])

    def __repr__(self) -> str:
        return f"NarrowDet(bits={self.bits}, column={self.column!r})"

    def __reduce__(self) -> NoReturn:
        raise TypeError("a NarrowDet instance holds keys and is not picklable")

    def _arrow(self, values: pa.Array, *, encrypt: bool) -> pa.Array:
        if isinstance(values, pa.ChunkedArray):
            values = values.combine_chunks()
        # no cast or fill of what needs none: each is ~5-15 us, a point row's whole decryption
        ints = values if values.type == pa.int64() else values.cast(pa.int64())
        ints = ints.fill_null(0) if ints.null_count else ints
        numbers = ints.to_numpy(zero_copy_only=False)
        out = pa.array(self._ints(numbers.astype(np.int64, copy=False), encrypt=encrypt))
        return pc.if_else(values.is_valid(), out, None) if values.null_count else out

    def _ints(self, values: np.ndarray, *, encrypt: bool) -> np.ndarray:
        narrow = self._inside(values)
        if narrow.all():  # the usual case: no copies in and out of the narrow part
            cipher = self._narrow.encrypt if encrypt else self._narrow.decrypt
            return np.asarray(cipher(values), dtype=np.int64)
        out = np.empty_like(values)
        step: Callable[[np.ndarray], np.ndarray]
        if encrypt:
            out[narrow] = self._narrow.encrypt(values[narrow])
            step = self._wide.encrypt
        else:
            out[narrow] = self._narrow.decrypt(values[narrow])
            step = self._wide.decrypt
        out[~narrow] = self._walk(values[~narrow], step)
        return out

    def _walk(self, values: np.ndarray, step: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        """``step`` applied until each value leaves the narrow part (cycle walking)."""
        out = np.asarray(step(values), dtype=np.int64)
        again = np.flatnonzero(self._inside(out))
        while len(again):
            out[again] = step(out[again])
            again = again[self._inside(out[again])]
        return out

    def _inside(self, values: np.ndarray) -> np.ndarray:
        half = 1 << (self.bits - 1)
        result: np.ndarray = (values >= -half) & (values < half)
        return result
