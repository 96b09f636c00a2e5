"""Row-bound RND: a table column's values encrypted under their row's id.

A Veil table's row ids are never used twice (``veil.exec.row_ids``), so the
row id can serve as the nonce of a stream cipher: a value is stored as
``value XOR keystream(row id)`` (AES-256 in counter mode, the construction in
``rust/veil-kernels/src/rowrnd.rs``). An encoded number stays an 8-byte
BIGINT and a string keeps its length, where AES-GCM RND (``veil.crypto.rnd``)
adds 29 bytes and makes every number a 37-byte BLOB.

Leakage is RND's: lengths and NULLs. Unlike AES-GCM it does not authenticate
(answers' integrity is out of Veil's scope, see docs/security.md), and it is
secure only while no (key, row id) pair encrypts two values: the caller
derives the key with the table's load-unique server name in its scope, since
a reloaded table numbers its rows from 0 again. The version is in the key
label (``rowrnd-v1``): a raw ciphertext has no room for a version byte.
"""

from __future__ import annotations

from typing import NoReturn

import numpy as np
import pyarrow as pa

from veil import _native
from veil.crypto._binary import binary_array, column_buffers
from veil.crypto._native_errors import native_errors
from veil.crypto.keys import KeyLabel, MasterKey
from veil.errors import ParameterError

VERSION = 1
KEY_LABEL = f"rowrnd-v{VERSION}"
KEY_BYTES = 32


class RowRnd:
    """A row-bound RND key: encrypts and decrypts Arrow columns under row ids."""

    __slots__ = ("_cipher", "column")

    def __init__(self, key: bytes, *, column: str | None = None):
        self.column = column
        with native_errors(column=column):
            self._cipher = _native.RowRndKey(bytes(key))

    @classmethod
    def from_master(cls, master: MasterKey, scope: str, column: str | None = None) -> RowRnd:
        return cls(master.derive(KeyLabel(KEY_LABEL, scope), KEY_BYTES), column=column)

    def encrypt(self, ids: np.ndarray, values: pa.Array) -> pa.Array:
        """int64 values -> int64 ciphertexts; binary or string -> binary. NULL stays NULL."""
        return self._apply(ids, values)

    def decrypt(self, ids: np.ndarray, ciphertexts: pa.Array) -> pa.Array:
        """The inverse of ``encrypt``: int64 back to int64, binary to binary."""
        return self._apply(ids, ciphertexts)

    def __repr__(self) -> str:
        return f"RowRnd(version={VERSION}, column={self.column!r})"

    def __reduce__(self) -> NoReturn:
        raise TypeError("a RowRnd instance holds a key and is not picklable")

    def _apply(self, ids: np.ndarray, values: pa.Array | pa.ChunkedArray) -> pa.Array:
        if isinstance(values, pa.ChunkedArray):
            values = values.combine_chunks()
        if len(ids) != len(values):
            raise ParameterError(
                f"{self._where()}row-bound RND needs one row id per value; got {len(ids)} ids "
                f"and {len(values)} values"
            )
        id_bits = np.ascontiguousarray(np.asarray(ids, dtype=np.int64).view(np.uint64))
        if pa.types.is_integer(values.type):
            return self._words(id_bits, values.cast(pa.int64()))
        if (
            pa.types.is_binary(values.type)
            or pa.types.is_string(values.type)
            or (pa.types.is_large_binary(values.type) or pa.types.is_large_string(values.type))
        ):
            buffers = column_buffers(values)
            with native_errors(column=self.column):
                offsets, data = self._cipher.xor_column(id_bits, buffers.native_args())
            return binary_array(offsets, data, buffers)
        raise ParameterError(
            f"{self._where()}row-bound RND takes int64 or binary columns, not {values.type}"
        )

    def _words(self, ids: np.ndarray, values: pa.Array) -> pa.Array:
        bits = values.fill_null(0).to_numpy(zero_copy_only=False).view(np.uint64)
        out = np.empty(len(bits), dtype=np.uint64)
        with native_errors(column=self.column):
            self._cipher.xor_words(ids, np.ascontiguousarray(bits), out)
        validity = values.buffers()[0] if values.null_count else None
        if values.null_count and values.offset:
            validity = values.is_valid().buffers()[1]  # realigned to offset 0
        return pa.Array.from_buffers(
            pa.int64(), len(values), [validity, pa.py_buffer(out.view(np.int64))],
            null_count=values.null_count,
        )  # fmt: skip

    def _where(self) -> str:
        return f"column {self.column!r}: " if self.column else ""
