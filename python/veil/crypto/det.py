"""DET: deterministic encryption, so the server can test equality.

Equal plaintexts give equal ciphertexts under one key, which lets the server
run ``=``, ``IN``, ``GROUP BY``, equi-joins and ``COUNT DISTINCT`` on them.
That equality pattern is also exactly what DET leaks (see docs/security.md).
Columns that are joined share a key group (the ``scope`` of their key).

- :class:`DetInt` encrypts integers (and dates or scaled decimals stored as
  integers) with FF1 (NIST SP 800-38G) in radix 2 over the declared bit width:
  a 32-bit value stays a 32-bit value, so the server stores and compares it
  natively. A width-preserving ciphertext has no room for a version byte; its
  format version is the ``version`` of its key label (``KeyLabel("det-ff1",
  scope, version)``). FF1 does not authenticate: a wrong key decrypts to other
  integers, which is why Veil stores the master key's fingerprint beside data.
- :class:`DetBytes` encrypts byte strings and text with AES-SIV (RFC 5297, no
  associated data). Stored format, version 1: ``0x01 || SIV (16 bytes) ||
  ciphertext`` (17 bytes of expansion). The SIV authenticates: a wrong key or a
  tampered value raises :class:`~veil.errors.AuthenticationError`.

Working keys: ``DetInt`` takes a 16-, 24- or 32-byte AES key (``from_master``
derives 16: AES-128, which keeps FF1 at one AES-128 block per round);
``DetBytes`` takes a 32- or 64-byte AES-SIV key (``from_master`` derives 32).
"""

from __future__ import annotations

from typing import Any, NoReturn, TypeAlias

import numpy as np
import pyarrow as pa

from veil import _native
from veil.crypto._binary import binary_array, column_buffers, map_binary_column
from veil.crypto._native_errors import native_errors
from veil.crypto.keys import KeyLabel, MasterKey
from veil.errors import DomainError, ParameterError

FF1_KEY_LABEL = "det-ff1"
SIV_KEY_LABEL = "det-siv"
FF1_KEY_BYTES = 16
SIV_KEY_BYTES = 32
SIV_OVERHEAD = 17  # version byte + 16-byte SIV
_INT32_OFFSETS_LIMIT = 2**31 - 1

IntColumn: TypeAlias = np.ndarray | pa.Array | pa.ChunkedArray


class DetInt:
    """FF1 over signed ``bits``-bit integers (``bits`` in 20..64)."""

    __slots__ = ("_cipher", "bits", "column")

    def __init__(self, key: bytes, bits: int = 64, *, column: str | None = None):
        self.bits = bits
        self.column = column
        with native_errors(column=column):
            self._cipher = _native.Ff1Int(bytes(key), bits)

    @classmethod
    def from_master(
        cls, master: MasterKey, scope: str, bits: int = 64, column: str | None = None
    ) -> DetInt:
        key = master.derive(KeyLabel(FF1_KEY_LABEL, scope), FF1_KEY_BYTES)
        return cls(key, bits, column=column)

    @property
    def domain(self) -> str:
        """The plaintext (and ciphertext) range, for messages."""
        return str(self._cipher.domain)

    @property
    def arrow_type(self) -> pa.DataType:
        """int32 for widths up to 32 bits, else int64."""
        return pa.int32() if self.bits <= 32 else pa.int64()

    def encrypt(self, values: IntColumn) -> IntColumn:
        """Encrypts a column; numpy in gives numpy out, Arrow gives Arrow."""
        return self._column(values, encrypt=True)

    def decrypt(self, values: IntColumn) -> IntColumn:
        return self._column(values, encrypt=False)

    def encrypt_one(self, value: int) -> int:
        return int(self._column(self._scalar(value), encrypt=True)[0])

    def decrypt_one(self, value: int) -> int:
        return int(self._column(self._scalar(value), encrypt=False)[0])

    def __repr__(self) -> str:
        return f"DetInt(bits={self.bits}, column={self.column!r})"

    def __reduce__(self) -> NoReturn:
        raise TypeError("a DetInt instance holds a key and is not picklable")

    def _scalar(self, value: int) -> np.ndarray:
        if not -(2**63) <= value < 2**63:
            raise self._domain_error(f"value {value} is outside the domain {self.domain}")
        return np.array([value], dtype=np.int64)

    def _column(self, values: IntColumn, *, encrypt: bool) -> IntColumn:
        if isinstance(values, pa.ChunkedArray):
            chunks, row = [], 0
            for chunk in values.chunks:
                chunks.append(self._arrow(chunk, encrypt, row))
                row += len(chunk)
            return pa.chunked_array(chunks, type=self.arrow_type)
        if isinstance(values, pa.Array):
            return self._arrow(values, encrypt, 0)
        if isinstance(values, np.ndarray):
            out = np.empty(len(values), dtype=self.arrow_type.to_pandas_dtype())
            self._native(values, out, encrypt, 0)
            return out
        raise TypeError(
            f"DetInt takes a numpy array or an Arrow array, not {type(values).__name__}"
        )

    def _arrow(self, values: pa.Array, encrypt: bool, row_base: int) -> pa.Array:
        if not pa.types.is_integer(values.type):
            raise ParameterError(
                f"{self._where()}DetInt encrypts integer columns; got Arrow type {values.type}"
            )
        if values.null_count == 0:
            out = np.empty(len(values), dtype=self.arrow_type.to_pandas_dtype())
            self._native(values.to_numpy(), out, encrypt, row_base)
            return pa.Array.from_buffers(self.arrow_type, len(values), [None, pa.py_buffer(out)])
        # NULL slots may hold anything; encrypt zeros there and keep the
        # original validity bitmap (with its offset) for the result.
        filled = values.fill_null(0).to_numpy()
        out = np.empty(values.offset + len(values), dtype=self.arrow_type.to_pandas_dtype())
        self._native(filled, out[values.offset :], encrypt, row_base)
        return pa.Array.from_buffers(
            self.arrow_type,
            len(values),
            [values.buffers()[0], pa.py_buffer(out)],
            null_count=values.null_count,
            offset=values.offset,
        )

    def _native(self, values: np.ndarray, out: np.ndarray, encrypt: bool, row_base: int) -> None:
        values = self._as_native_ints(values, row_base)
        try:
            with native_errors(column=self.column):
                self._cipher.run(encrypt, values, out, row_base)
        except DomainError as exc:
            exc.domain = self.domain  # the message already names it
            raise

    def _as_native_ints(self, values: np.ndarray, row_base: int) -> np.ndarray:
        """int32/int64 contiguous arrays as they are, other integers widened."""
        if values.ndim != 1 or values.dtype.kind not in "iu":
            raise ParameterError(
                f"{self._where()}DetInt encrypts 1-D integer arrays; got {values.dtype} "
                f"with {values.ndim} dimensions"
            )
        if values.dtype == np.uint64 and len(values) and values.max() >= 2**63:
            row = int(np.argmax(values >= 2**63))
            raise self._domain_error(
                f"value at row {row + row_base} is outside the domain {self.domain}"
            )
        if values.dtype not in (np.int32, np.int64):
            values = values.astype(np.int64)
        return np.ascontiguousarray(values)

    def _domain_error(self, message: str) -> DomainError:
        error = DomainError(message, column=self.column)
        error.domain = self.domain
        return error

    def _where(self) -> str:
        return f"column {self.column!r}: " if self.column else ""


class DetBytes:
    """AES-SIV over byte strings: ``0x01 || SIV || ciphertext``."""

    __slots__ = ("_cipher", "column")

    def __init__(self, key: bytes, *, column: str | None = None):
        self.column = column
        with native_errors(column=column):
            self._cipher = _native.SivBytes(bytes(key))

    @classmethod
    def from_master(cls, master: MasterKey, scope: str, column: str | None = None) -> DetBytes:
        return cls(master.derive(KeyLabel(SIV_KEY_LABEL, scope), SIV_KEY_BYTES), column=column)

    def encrypt(self, values: Any) -> Any:
        """Encrypts a binary or string column (Arrow or numpy); NULL stays NULL."""
        return self._column(values, encrypt=True)

    def decrypt(self, values: Any) -> Any:
        """Decrypts to ``binary``; cast to ``pa.string()`` if the column was text."""
        return self._column(values, encrypt=False)

    def encrypt_one(self, value: bytes | str) -> bytes:
        result: bytes = self._array(pa.array([value]), True, 0)[0].as_py()
        return result

    def decrypt_one(self, value: bytes) -> bytes:
        result: bytes = self._array(pa.array([value], pa.binary()), False, 0)[0].as_py()
        return result

    def __repr__(self) -> str:
        return f"DetBytes(column={self.column!r})"

    def __reduce__(self) -> NoReturn:
        raise TypeError("a DetBytes instance holds a key and is not picklable")

    def _column(self, values: Any, *, encrypt: bool) -> Any:
        rows_before = 0

        def kernel(array: pa.Array) -> pa.Array:
            # Count rows across chunks so errors name the row in the column.
            nonlocal rows_before
            result = self._array(array, encrypt, rows_before)
            rows_before += len(array)
            return result

        return map_binary_column(values, kernel)

    def _array(self, values: pa.Array, encrypt: bool, row_base: int) -> pa.BinaryArray:
        buffers = column_buffers(self._binary_like(values))
        data_bytes = int(buffers.offsets[-1] - buffers.offsets[0])
        valid_rows = buffers.rows - buffers.null_count
        capacity = data_bytes + SIV_OVERHEAD * valid_rows if encrypt else data_bytes
        if capacity > _INT32_OFFSETS_LIMIT:
            raise ParameterError(
                f"{self._where()}a chunk would hold {capacity} bytes of output, over the 2 GiB "
                "of an Arrow binary array; split the column into smaller chunks"
            )
        out_offsets = np.empty(buffers.rows + 1, dtype=np.int32)
        out_data = np.empty(capacity, dtype=np.uint8)
        with native_errors(column=self.column):
            self._cipher.run(encrypt, *buffers.native_args(), 0, out_offsets, out_data, row_base)
        return binary_array(out_offsets, out_data, buffers)

    def _binary_like(self, values: pa.Array) -> pa.Array:
        kind = values.type
        if pa.types.is_string_view(kind) or pa.types.is_binary_view(kind):
            return values.cast(pa.large_binary())
        if any(test(kind) for test in _BINARY_TYPES):
            return values
        raise ParameterError(
            f"{self._where()}DetBytes encrypts binary or string columns; got Arrow type {kind}"
        )

    def _where(self) -> str:
        return f"column {self.column!r}: " if self.column else ""


_BINARY_TYPES = (
    pa.types.is_binary,
    pa.types.is_string,
    pa.types.is_large_binary,
    pa.types.is_large_string,
)
