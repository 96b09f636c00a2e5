"""ASHE: additive symmetric encryption of 64-bit integers, so the server can SUM.

ASHE is the scheme of Seabed (Papadimitriou et al., OSDI 2016). A value ``m``
stored in the row with id ``i`` is encrypted as::

    c = m + F(i) - F(i - 1)   (mod 2**64)

where ``F`` is a PRF keyed by the column's ASHE key (AES-256; the exact
definition is in ``rust/veil-kernels/src/ashe.rs``). The server stores ``c`` as
a signed BIGINT (the same 64 bits) and adds ciphertexts with its own ``SUM``
(DuckDB returns a HUGEINT, PostgreSQL a NUMERIC: no overflow). The client
reduces the total mod 2**64 and removes the pads ``F(i) - F(i - 1)`` of the ids
that were summed; over a run of consecutive ids ``a..b`` they telescope to
``F(b) - F(a - 1)``, so the client needs the summed ids as runs (or a bitmap),
not one by one. :meth:`Ashe.decrypt_sum` does both steps.

Row ids are 64-bit values on a cycle: id 0's predecessor is ``2**64 - 1``, and a
negative int64 id stands for its two's-complement bits, so the signed and
unsigned views of an id agree on which ids are consecutive.

Three rules callers must keep:

- **Ids are one-time.** Two values encrypted under one id leak their
  difference. Every row id is used once, ever: an UPDATE writes a fresh id, and
  ids are never reused after a DELETE. :meth:`Ashe.encrypt` refuses a batch
  that repeats an id; uniqueness across batches is the id allocator's job.
- **NULL stays NULL and is not summed.** SQL's SUM skips NULLs, so the ids
  given to :meth:`Ashe.decrypt_sum` must be those of the non-NULL ciphertexts
  the server added, and nothing else.
- **Sums wrap at 64 bits.** A sum is recovered mod 2**64 and read as a signed
  int64, so a sum whose true value leaves ``[-2**63, 2**63)`` comes back wrong.
  A sum of ``count`` values with ``|v| <= max_abs`` is exact when
  ``count * max_abs < 2**63``: check with :func:`sum_fits` or
  :func:`require_sum_fits` before pushing a SUM down, and split wider values
  into words (or refuse that pushdown) otherwise.

Versioning: a raw 64-bit ciphertext has no room for a version byte per value.
The scheme's version is part of its key label (``KeyLabel("ashe-v1", scope)``),
so a later construction always runs under a different key and can never be
confused with this one, and the physical design records :data:`VERSION` for
each ASHE column. What the server learns is in ``docs/security.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from decimal import Decimal
from numbers import Integral
from typing import NoReturn, TypeAlias

import numpy as np
import pyarrow as pa

from veil import _native
from veil.crypto._native_errors import native_errors
from veil.crypto.keys import KeyLabel, MasterKey
from veil.errors import DomainError, ParameterError

VERSION = 1
KEY_LABEL = f"ashe-v{VERSION}"
KEY_BYTES = 32
#: A sum of values is exact while its magnitude stays below this bound.
SUM_BOUND = 2**63
#: Ids per block of a grouped server sum: the server returns, per group and
#: block, the SUM of the ciphertexts and the ids summed as one 64-bit mask.
BLOCK_ROWS = 64
# Where a two-word expression's high word carries its rows' overflow flags:
# a high word is ``value >> 32`` of an int64, |.| <= 2**31, so a block's sum of
# them stays within 2**37 and the flags' count (<= 64) sits apart above.
ASHE_FLAG_BIT = 40
_MOD = 2**64

IntColumn: TypeAlias = np.ndarray | pa.Array | pa.ChunkedArray
IdColumn: TypeAlias = np.ndarray | pa.Array | pa.ChunkedArray | Sequence[int]
#: ``(base id, bits)``: bits as uint64 words or uint8 bytes (least significant
#: bit first, Arrow's bitmap layout), or one bool per id.
Bitmap: TypeAlias = tuple[int, np.ndarray]
_Kernel: TypeAlias = Callable[[np.ndarray, np.ndarray], np.ndarray]


LOW_WORD_BITS = 32  # a two-word value's low word: its low 32 bits, unsigned


def word_bits(max_abs: int, words: int, flag_bit: int | None) -> list[int]:
    """Ciphertext bits per word of a value with ``|value| <= max_abs``, for block sums.

    A word stored modulo ``2**b`` needs a block's sum to be exact modulo
    ``2**b``: ``BLOCK_ROWS`` values of a signed word need ``|sum| < 2**(b-1)``,
    of the unsigned low word ``sum < 2**b``. A high word carries up to
    ``BLOCK_ROWS`` overflow flags of ``2**flag_bit`` each.
    """
    if max_abs <= 0:  # no domain known: whole words
        return [64] * words
    if words == 1:
        return [min(64, (BLOCK_ROWS * max_abs).bit_length() + 1)]
    low = (BLOCK_ROWS * ((1 << LOW_WORD_BITS) - 1)).bit_length()
    high_sum = BLOCK_ROWS * ((max_abs >> LOW_WORD_BITS) + 1)
    if flag_bit is not None:
        high_sum += BLOCK_ROWS << flag_bit
    return [low, min(64, high_sum.bit_length() + 1)]


def sum_fits(count: int, max_abs: int) -> bool:
    """Whether any sum of ``count`` values with ``|value| <= max_abs`` is exact."""
    if count < 0 or max_abs < 0:
        raise ParameterError(f"count and max_abs are non-negative; got {count} and {max_abs}")
    return count * max_abs < SUM_BOUND


def require_sum_fits(count: int, max_abs: int, *, column: str | None = None) -> None:
    """Raise :class:`DomainError` unless :func:`sum_fits` holds."""
    if not sum_fits(count, max_abs):
        raise DomainError(
            f"a sum of {count} values of magnitude up to {max_abs} may leave the 64-bit "
            "range ASHE sums in; split the values into narrower words or sum on the client",
            column=column,
            domain=f"|sum| < 2**63 (count * max_abs = {count * max_abs})",
        )


class Ashe:
    """An ASHE key: encrypts int64 columns under row ids and decrypts their sums."""

    __slots__ = ("_cipher", "column")

    def __init__(self, key: bytes, *, column: str | None = None):
        self.column = column
        with native_errors(column=column):
            self._cipher = _native.AsheKey(bytes(key))

    @classmethod
    def from_master(cls, master: MasterKey, scope: str, column: str | None = None) -> Ashe:
        return cls(master.derive(KeyLabel(KEY_LABEL, scope), KEY_BYTES), column=column)

    def encrypt(self, ids: IdColumn, values: IntColumn) -> IntColumn:
        """Encrypt ``values[j]`` under ``ids[j]``; ids must not repeat.

        numpy in gives an int64 numpy array out; Arrow gives an Arrow int64
        column with the same NULLs (NULL stays NULL).
        """
        id_bits = self._ids(ids)
        self._check_fresh(id_bits)
        return self._map(id_bits, values, self._encrypt_numpy)

    def decrypt(self, ids: IdColumn, ciphertexts: IntColumn) -> IntColumn:
        """Decrypt single stored ciphertexts (not sums) under their ids."""
        if isinstance(ciphertexts, np.ndarray) and ciphertexts.dtype == np.uint64:
            ciphertexts = ciphertexts.view(np.int64)  # the same 64 bits
        return self._map(self._ids(ids), ciphertexts, self._decrypt_numpy)

    def encrypt_one(self, id_: int, value: int) -> int:
        """The stored (signed) ciphertext of one value."""
        self._check_value(value)
        return _signed((value + self.pad(id_)) % _MOD)

    def decrypt_one(self, id_: int, ciphertext: int) -> int:
        return _signed((ciphertext - self.pad(id_)) % _MOD)

    def pad(self, id_: int) -> int:
        """``F(id) - F(id - 1) mod 2**64``: what encryption adds under ``id_``."""
        return int(self._cipher.pad(_id_bits(id_)))

    def pad_sum(
        self,
        *,
        ids: IdColumn | None = None,
        runs: np.ndarray | Sequence[tuple[int, int]] | None = None,
        bitmap: Bitmap | None = None,
    ) -> int:
        """The sum mod 2**64 of the pads of the ids given in one of three forms.

        ``ids``: any order, repeats counted. ``runs``: ``[start, end]`` pairs,
        both ends included (a run may cross from ``2**64 - 1`` to 0, or from -1
        to 0, but a run longer than ``2**63`` ids is refused as reversed).
        ``bitmap``: ``(base, bits)``, bit k standing for id ``base + k``.
        """
        given = [form is not None for form in (ids, runs, bitmap)]
        if sum(given) != 1:
            raise ParameterError(
                f"{self._where()}give the summed ids in exactly one form: ids=, runs= or bitmap="
            )
        if ids is not None:
            return int(self._cipher.pad_sum_ids(self._ids(ids)))
        if runs is not None:
            return int(self._cipher.pad_sum_runs(self._runs(runs)))
        assert bitmap is not None
        base, words = self._bitmap(bitmap)
        return int(self._cipher.pad_sum_bitmap(base, words))

    def pad_sums_blocks(self, blocks: np.ndarray, masks: np.ndarray) -> np.ndarray:
        """Per row r, the pad sum of the ids ``BLOCK_ROWS * blocks[r] + k`` for the set bits k of ``masks[r]``.

        ``blocks`` (int64 block numbers) and ``masks`` (uint64 or int64 bits,
        least significant first) come from a grouped server sum; the result
        is uint64, one pad sum per row, to subtract from the row's SUM mod 2**64.
        """
        if len(blocks) != len(masks):
            raise ParameterError(
                f"{self._where()}one mask per block; got {len(blocks)} blocks and {len(masks)} masks"
            )
        bases = np.ascontiguousarray(blocks, dtype=np.int64).view(np.uint64) * np.uint64(BLOCK_ROWS)
        bits = np.ascontiguousarray(masks)
        bits = bits.view(np.uint64) if bits.dtype == np.int64 else bits.astype(np.uint64)
        out = np.empty(len(bits), dtype=np.uint64)
        with native_errors(column=self.column):
            self._cipher.pad_sums_blocks(bases, bits, out)
        return out

    def decrypt_sum(
        self,
        total: int | Decimal | np.integer,
        *,
        ids: IdColumn | None = None,
        runs: np.ndarray | Sequence[tuple[int, int]] | None = None,
        bitmap: Bitmap | None = None,
    ) -> int:
        """The plaintext sum from the server's SUM of the ciphertexts of the given ids.

        ``total`` is the server's exact sum (any size). The result is the sum
        of the plaintexts mod 2**64, read as a signed int64: exact when the
        true sum fits (see :func:`sum_fits`).
        """
        pads = self.pad_sum(ids=ids, runs=runs, bitmap=bitmap)
        return _signed((self._total(total) - pads) % _MOD)

    def __repr__(self) -> str:
        return f"Ashe(version={VERSION}, column={self.column!r})"

    def __reduce__(self) -> NoReturn:
        raise TypeError("an Ashe instance holds a key and is not picklable")

    # --- columns ------------------------------------------------------------------

    def _map(self, ids: np.ndarray, values: IntColumn, kernel: _Kernel) -> IntColumn:
        """Run ``kernel`` over a numpy or Arrow column aligned with ``ids``."""
        if isinstance(values, pa.ChunkedArray):
            self._check_aligned(ids, values)
            chunks, row = [], 0
            for chunk in values.chunks:
                chunks.append(self._arrow(ids[row : row + len(chunk)], chunk, kernel))
                row += len(chunk)
            return pa.chunked_array(chunks, type=pa.int64())
        if isinstance(values, pa.Array):
            self._check_aligned(ids, values)
            return self._arrow(ids, values, kernel)
        if isinstance(values, np.ndarray):
            self._check_aligned(ids, values)
            return kernel(ids, self._int64(values))
        raise ParameterError(
            f"{self._where()}ASHE takes a numpy array or an Arrow array of integers, "
            f"not {type(values).__name__}"
        )

    def _arrow(self, ids: np.ndarray, values: pa.Array, kernel: _Kernel) -> pa.Array:
        if not pa.types.is_integer(values.type):
            raise ParameterError(
                f"{self._where()}ASHE encrypts integer columns; got Arrow type {values.type}"
            )
        if values.null_count == 0:
            out = kernel(ids, self._int64(values.to_numpy()))
            return pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(out)])
        valid = values.is_valid().to_numpy(zero_copy_only=False)
        out = kernel(ids, self._int64(values.fill_null(0).to_numpy()))
        out[~valid] = 0  # NULL slots hold no pad
        return pa.Array.from_buffers(
            pa.int64(),
            len(values),
            [values.is_valid().buffers()[1], pa.py_buffer(out)],
            null_count=values.null_count,
        )

    def _encrypt_numpy(self, ids: np.ndarray, values: np.ndarray) -> np.ndarray:
        out = np.empty(len(values), dtype=np.uint64)
        with native_errors(column=self.column):
            self._cipher.encrypt(ids, values, out)
        return out.view(np.int64)

    def _decrypt_numpy(self, ids: np.ndarray, ciphertexts: np.ndarray) -> np.ndarray:
        out = np.empty(len(ciphertexts), dtype=np.int64)
        with native_errors(column=self.column):
            self._cipher.decrypt(ids, ciphertexts.view(np.uint64), out)
        return out

    # --- argument checks ----------------------------------------------------------

    def _ids(self, ids: IdColumn) -> np.ndarray:
        """Ids as a contiguous uint64 array of their 64 bits."""
        if isinstance(ids, pa.ChunkedArray):
            ids = ids.combine_chunks()
        if isinstance(ids, pa.Array):
            if not pa.types.is_integer(ids.type) or ids.null_count:
                raise ParameterError(
                    f"{self._where()}row ids are integers without NULLs; "
                    f"got Arrow type {ids.type} with {ids.null_count} NULLs"
                )
            ids = ids.to_numpy()
        if not isinstance(ids, np.ndarray):
            return np.array([_id_bits(i) for i in ids], dtype=np.uint64)
        if ids.ndim != 1 or ids.dtype.kind not in "iu":
            raise ParameterError(
                f"{self._where()}row ids are a 1-D integer array; got {ids.dtype} "
                f"with {ids.ndim} dimensions"
            )
        wide = ids.astype(np.int64 if ids.dtype.kind == "i" else np.uint64, copy=False)
        return np.ascontiguousarray(wide.view(np.uint64))

    def _check_fresh(self, ids: np.ndarray) -> None:
        """Refuse a batch that repeats an id (pads are one-time)."""
        if len(ids) < 2:
            return
        if np.all(ids[1:] > ids[:-1]) or np.all(ids.view(np.int64)[1:] > ids.view(np.int64)[:-1]):
            return
        unique, counts = np.unique(ids, return_counts=True)
        if len(unique) != len(ids):
            repeated = int(unique[np.argmax(counts > 1)].view(np.int64))
            raise ParameterError(
                f"{self._where()}row id {repeated} appears more than once in the batch; "
                "ASHE pads are one-time (two values under one id leak their difference), "
                "so every value needs a fresh id"
            )

    def _check_aligned(self, ids: np.ndarray, values: IntColumn) -> None:
        if len(ids) != len(values):
            raise ParameterError(
                f"{self._where()}ASHE needs one row id per value; got {len(ids)} ids "
                f"and {len(values)} values"
            )

    def _int64(self, values: np.ndarray) -> np.ndarray:
        """An integer array as contiguous int64, refusing what int64 cannot hold."""
        if values.ndim != 1 or values.dtype.kind not in "iu":
            raise ParameterError(
                f"{self._where()}ASHE encrypts 1-D integer arrays; got {values.dtype} "
                f"with {values.ndim} dimensions"
            )
        if values.dtype == np.uint64 and len(values) and values.max() >= 2**63:
            row = int(np.argmax(values >= 2**63))
            raise DomainError(
                f"value at row {row} is outside the domain", column=self.column, domain="int64"
            )
        return np.ascontiguousarray(values, dtype=np.int64)

    def _check_value(self, value: int) -> None:
        if not -(2**63) <= value < 2**63:
            raise DomainError(
                f"value {value} is outside the domain", column=self.column, domain="int64"
            )

    def _runs(self, runs: np.ndarray | Sequence[tuple[int, int]]) -> np.ndarray:
        if not isinstance(runs, np.ndarray):
            runs = np.array(
                [[_id_bits(start), _id_bits(end)] for start, end in runs], dtype=np.uint64
            ).reshape(-1, 2)
        if runs.ndim != 2 or runs.shape[1] != 2 or runs.dtype.kind not in "iu":
            raise ParameterError(
                f"{self._where()}runs are an (n, 2) integer array of [start, end] pairs; "
                f"got {runs.dtype} with shape {runs.shape}"
            )
        bits = np.ascontiguousarray(runs.astype(np.int64, copy=False).view(np.uint64))
        reversed_ = (bits[:, 1] - bits[:, 0]) >= np.uint64(2**63)
        if reversed_.any():
            start, end = runs[int(np.argmax(reversed_))].tolist()
            raise ParameterError(
                f"{self._where()}run [{start}, {end}] ends before it starts; "
                "a run is [start, end] with both ends included"
            )
        return bits

    def _bitmap(self, bitmap: Bitmap) -> tuple[int, np.ndarray]:
        base, bits = bitmap
        if not isinstance(bits, np.ndarray) or bits.ndim != 1:
            raise ParameterError(f"{self._where()}a bitmap's bits are a 1-D numpy array")
        if bits.dtype == np.bool_:
            bits = np.packbits(bits, bitorder="little")
        if bits.dtype == np.uint8:
            padded = np.zeros(-(-len(bits) // 8) * 8, dtype=np.uint8)
            padded[: len(bits)] = bits
            bits = padded.view("<u8")
        if bits.dtype != np.uint64:
            raise ParameterError(
                f"{self._where()}a bitmap's bits are uint64 words, uint8 bytes or bools; "
                f"got {bits.dtype}"
            )
        return _id_bits(base), np.ascontiguousarray(bits, dtype=np.uint64)

    def _total(self, total: int | Decimal | np.integer) -> int:
        if isinstance(total, Integral) and not isinstance(total, bool):
            return int(total)
        if isinstance(total, Decimal) and total.is_finite() and total == total.to_integral():
            return int(total)
        raise ParameterError(
            f"{self._where()}an ASHE sum is an integer (the server's SUM of the ciphertexts); "
            f"got {total!r}"
        )

    def _where(self) -> str:
        return f"column {self.column!r}: " if self.column else ""


def _id_bits(id_: int) -> int:
    """A row id's 64 bits: ids in ``[-2**63, 2**64)``, negative ones as two's complement."""
    if isinstance(id_, bool) or not isinstance(id_, Integral):
        raise ParameterError(f"a row id is an integer, not {type(id_).__name__}")
    if not -(2**63) <= int(id_) < _MOD:
        raise DomainError(f"row id {id_} is outside the 64-bit range", domain="[-2**63, 2**64)")
    return int(id_) % _MOD


def _signed(bits: int) -> int:
    return bits - _MOD if bits >= 2**63 else bits
