"""Order-preserving encryption (Boldyreva, Chenette, Lee, O'Neill; EUROCRYPT 2009).

``Ope(key, bits)`` maps ``bits``-bit integers to ciphertexts whose order is the
plaintexts' order, so the server can run range predicates, ORDER BY, MIN/MAX on
them. What it leaks: the order of all values and, as BCLO show, roughly the
upper half of each plaintext's bits. Use it only where a query needs order.

The map is BCLO's lazily sampled random order-preserving function, computed in
Rust (``veil_kernels::ope``) with an exact hypergeometric sampler
(``veil_kernels::hgd``). Ciphertext sizes:

* ``bits <= 32``: ``cipher_bits = bits + 31`` (at most 63); ciphertexts are
  non-negative int64 values, compared natively by the server as BIGINT. That
  form has no room for a version byte: its version lives in the key label
  (``KeyLabel("ope", scope, version)``), like FF1's.
* ``bits > 32``: ``cipher_bits = bits + 32`` (at most 96); ciphertexts are
  fixed-width binary ``0x01 || big-endian ciphertext`` (``1 + ceil(cipher_bits/8)``
  bytes), which DuckDB and PostgreSQL order byte-wise, i.e. numerically.

A narrower range may be asked for (``cipher_bits``, more than ``bits``): a
server that bit-packs integers stores ``cipher_bits`` a row, not 64.
``NARROW_EXPANSION`` bits over the plaintext's (``bits + 16``, as pyope's default
15 -> 31 bits) still leave BCLO's random order-preserving function 2**16 range
points per plaintext; what it leaks is the same (order, roughly the upper half
of each plaintext's bits). Such a key is derived under its own label version
(``NARROW_LABEL_VERSION``), so no key serves two ranges, and the design records
the width (``Encryption.params["cipher_bits"]``); a design without it reads the
``bits + 31`` ciphertexts as before.

Plaintexts are signed (``[-2**(bits-1), 2**(bits-1))``, mapped to the unsigned
domain by flipping the sign bit) or unsigned (``[0, 2**bits)``). Decryption
returns int64, except unsigned 64-bit schemes, which return uint64.

Each instance caches plaintext/ciphertext pairs, so repeated values cost a hash
lookup; new values of a column are walked through the tree in sorted order,
each resuming where it leaves the previous one's path, so clustered data (say
prices in a 64-bit column) shares most of its work. BCLO defines no test vectors;
``tests/crypto/vectors/ope_regression.json`` is Veil's own guard against changes of
the map.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np
import pyarrow as pa

from veil import _native
from veil.crypto._native_errors import native_errors
from veil.crypto.keys import KeyLabel
from veil.errors import DomainError, MalformedCiphertextError, ParameterError

if TYPE_CHECKING:
    from veil.crypto.keys import MasterKey

SCHEME = "ope"
KEY_BYTES = 32
NARROW_CIPHER_BITS = 63
# A narrower range: this many ciphertext bits over the plaintext's (``Ope(cipher_bits=)``)
NARROW_EXPANSION = 16
# The key label's version for a range other than the default ``cipher_bits_for(bits)``
NARROW_LABEL_VERSION = 2

Column: TypeAlias = np.ndarray | pa.Array | pa.ChunkedArray


class Ope:
    """One order-preserving encryption key over ``bits``-bit integers."""

    def __init__(
        self,
        key: bytes,
        bits: int,
        *,
        signed: bool = True,
        column: str | None = None,
        cipher_bits: int | None = None,
    ):
        if not isinstance(bits, int) or not 1 <= bits <= 64:
            raise ParameterError(f"OPE plaintext bits must be an integer in 1..64, got {bits!r}")
        self.column = column
        self.bits = bits
        self.signed = signed
        with native_errors(column):
            self._cipher = _native.OpeCipher(bytes(key), bits, signed, cipher_bits)
        self.cipher_bits: int = self._cipher.cipher_bits
        self.domain: str = self._cipher.domain.split(";")[0]

    @classmethod
    def from_master(
        cls,
        master: MasterKey,
        scope: str,
        bits: int,
        *,
        signed: bool = True,
        column: str | None = None,
        cipher_bits: int | None = None,
    ) -> Ope:
        """The key of ``scope``; with ``cipher_bits``, that range's own key."""
        version = 1 if cipher_bits is None else NARROW_LABEL_VERSION
        key = master.derive(KeyLabel(SCHEME, scope, version), KEY_BYTES)
        return cls(key, bits, signed=signed, column=column, cipher_bits=cipher_bits)

    @property
    def binary(self) -> bool:
        """True when ciphertexts are fixed-width binary rather than int64."""
        return self.cipher_bits > NARROW_CIPHER_BITS

    def __repr__(self) -> str:
        return f"Ope(bits={self.bits}, signed={self.signed}, column={self.column!r})"

    # -- columns ---------------------------------------------------------------

    def encrypt(self, values: Column) -> Column:
        """Encrypt a column; numpy in gives numpy out (binary ciphertexts: Arrow)."""
        if isinstance(values, pa.ChunkedArray):
            chunks = [self.encrypt(chunk) for chunk in values.chunks]
            return pa.chunked_array(chunks, type=self._cipher_type())
        if isinstance(values, pa.Array):
            plain, valid = _arrow_ints(values)
            return self._encrypt_arrow(plain, valid)
        plain = _plaintext_array(np.asarray(values))
        if self.binary:
            return self._encrypt_arrow(plain, None)
        with self._native_errors():
            return self._cipher.encrypt_int64(plain)

    def decrypt(self, values: Column) -> Column:
        """Decrypt a column of int64 or binary ciphertexts."""
        if isinstance(values, pa.ChunkedArray):
            chunks = [self.decrypt(chunk) for chunk in values.chunks]
            return pa.chunked_array(chunks, type=self._plain_type())
        if isinstance(values, pa.Array):
            return self._decrypt_arrow(values)
        array: np.ndarray = np.asarray(values)
        if array.dtype == object or self.binary:
            return self._decrypt_arrow(pa.array(array, pa.binary())).to_numpy(zero_copy_only=False)
        with self._native_errors():
            bits = self._cipher.decrypt_int64(_int64_ciphertexts(array, self.column))
        return bits.view(self._plain_dtype())

    def encrypt_one(self, value: int) -> int | bytes:
        if not -(2**63) <= value < 2**64:
            raise DomainError(
                f"value {value} is out of range", column=self.column, domain=self.domain
            )
        dtype = np.int64 if value < 2**63 else np.uint64
        result = self.encrypt(np.array([value], dtype=dtype))
        return result[0].as_py() if isinstance(result, pa.Array) else int(result[0])

    def decrypt_one(self, ciphertext: int | bytes) -> int:
        if isinstance(ciphertext, bytes):
            return int(self.decrypt(pa.array([ciphertext], pa.binary()))[0].as_py())
        if self.binary or not 0 <= ciphertext < 2**NARROW_CIPHER_BITS:
            raise MalformedCiphertextError(
                f"{self._where()}{ciphertext!r} is not a ciphertext of this OPE scheme"
            )
        return int(self.decrypt(np.array([ciphertext], dtype=np.int64))[0])

    # -- helpers ---------------------------------------------------------------

    def _encrypt_arrow(self, plain: np.ndarray, valid: np.ndarray | None) -> pa.Array:
        with self._native_errors():
            if not self.binary:
                out = self._cipher.encrypt_int64(plain, valid)
                return pa.array(out, pa.int64(), mask=_null_mask(valid))
            data = self._cipher.encrypt_binary(plain, valid)
        return _fixed_width_binary(data, self._cipher.binary_width, valid)

    def _decrypt_arrow(self, values: pa.Array) -> pa.Array:
        if pa.types.is_binary_view(values.type):
            values = values.cast(pa.binary())  # DuckDB may hand back views
        valid = None if values.null_count == 0 else _valid_mask(values)
        with self._native_errors():
            if pa.types.is_integer(values.type) and not self.binary:
                array = _int64_ciphertexts(_arrow_values(values), self.column)
                bits = self._cipher.decrypt_int64(array, valid)
            elif pa.types.is_binary(values.type) or pa.types.is_large_binary(values.type):
                data, offsets = _binary_buffers(values)
                bits = self._cipher.decrypt_binary(data, offsets, valid)
            else:
                raise MalformedCiphertextError(
                    f"{self._where()}OPE ciphertexts of {self.cipher_bits} bits are "
                    f"{self._cipher_type()}, got a {values.type} column"
                )
        return pa.array(bits.view(self._plain_dtype()), mask=_null_mask(valid))

    def _cipher_type(self) -> pa.DataType:
        return pa.binary() if self.binary else pa.int64()

    def _plain_dtype(self) -> type[np.integer[Any]]:
        return np.uint64 if (self.bits == 64 and not self.signed) else np.int64

    def _plain_type(self) -> pa.DataType:
        return pa.from_numpy_dtype(self._plain_dtype())

    @contextmanager
    def _native_errors(self) -> Iterator[None]:
        """Native errors as Veil's; the message already names the domain."""
        try:
            with native_errors(self.column):
                yield
        except DomainError as exc:
            exc.domain = self.domain
            raise

    def _where(self) -> str:
        return f"column {self.column!r}: " if self.column else ""


def ope_string_prefix(values: pa.Array | pa.ChunkedArray, prefix_bytes: int = 8) -> np.ndarray:
    """The first ``prefix_bytes`` bytes of each string as a big-endian integer.

    Shorter strings are padded with zero bytes, so the result orders strings
    like byte-wise comparison does, up to ties (strings sharing a prefix, or
    differing only by trailing NUL bytes). The value is below
    ``2**(8*prefix_bytes)``; encrypt it with ``Ope(bits=8*prefix_bytes,
    signed=False)`` (``bits=64`` for the default). NULL rows give 0.
    """
    if not 1 <= prefix_bytes <= 8:
        raise ParameterError(f"prefix_bytes must be in 1..8, got {prefix_bytes}")
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if not (pa.types.is_string(values.type) or pa.types.is_binary(values.type)):
        values = values.cast(pa.large_binary())
    data, offsets = _binary_buffers(values)
    starts = offsets[:-1]
    lengths = np.minimum(offsets[1:] - starts, prefix_bytes)
    result = np.zeros(len(values), dtype=np.uint64)
    for position in range(prefix_bytes):  # at most 8 passes, each over every row
        present = lengths > position
        byte = np.zeros(len(values), dtype=np.uint64)
        byte[present] = data[starts[present] + position]
        result = (result << np.uint64(8)) | byte
    if values.null_count:
        result[~_valid_mask(values)] = 0
    return result


def _plaintext_array(array: np.ndarray) -> np.ndarray:
    """An int64 or uint64 view/copy of an integer array (others are refused)."""
    if array.dtype.kind == "u":
        return np.ascontiguousarray(array, dtype=np.uint64)
    if array.dtype.kind in "ib":
        return np.ascontiguousarray(array, dtype=np.int64)
    raise ParameterError(f"OPE encrypts integer columns, got dtype {array.dtype}")


def _int64_ciphertexts(array: np.ndarray, column: str | None) -> np.ndarray:
    if array.dtype.kind not in "iu":
        where = f"column {column!r}: " if column else ""
        raise MalformedCiphertextError(f"{where}OPE ciphertexts are integers, got {array.dtype}")
    # uint64 values >= 2**63 wrap to negative int64s, which Rust rejects by row.
    return np.ascontiguousarray(array).astype(np.int64, copy=False)


def _arrow_ints(values: pa.Array) -> tuple[np.ndarray, np.ndarray | None]:
    if not pa.types.is_integer(values.type):
        raise ParameterError(f"OPE encrypts integer columns, got Arrow type {values.type}")
    valid = None if values.null_count == 0 else _valid_mask(values)
    return _plaintext_array(_arrow_values(values)), valid


def _arrow_values(values: pa.Array) -> np.ndarray:
    """The values buffer (nulls hold arbitrary values), honouring the offset."""
    dtype = values.type.to_pandas_dtype()
    buffer = values.buffers()[1]
    if buffer is None:
        return np.zeros(0, dtype=dtype)
    start = values.offset
    return np.frombuffer(buffer, dtype=dtype)[start : start + len(values)]


def _valid_mask(values: pa.Array) -> np.ndarray:
    return np.asarray(values.is_valid().to_numpy(zero_copy_only=False), dtype=bool)


def _null_mask(valid: np.ndarray | None) -> np.ndarray | None:
    return None if valid is None else ~valid


def _binary_buffers(values: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(data bytes, int64 offsets of len+1) of a string/binary array."""
    wide = pa.types.is_large_binary(values.type) or pa.types.is_large_string(values.type)
    buffers = values.buffers()
    offsets = np.frombuffer(buffers[1], dtype=np.int64 if wide else np.int32)
    offsets = offsets[values.offset : values.offset + len(values) + 1].astype(np.int64)
    data = buffers[2]
    raw = np.zeros(0, dtype=np.uint8) if data is None else np.frombuffer(data, dtype=np.uint8)
    return raw, offsets


def _fixed_width_binary(data: np.ndarray, width: int, valid: np.ndarray | None) -> pa.Array:
    rows = len(data) // width
    if len(data) >= 2**31:
        raise ParameterError("encrypt at most 150 million binary OPE values per Arrow chunk")
    offsets = np.arange(0, (rows + 1) * width, width, dtype=np.int32)
    bitmap = None if valid is None else pa.array(valid, pa.bool_()).buffers()[1]
    buffers = [bitmap, pa.py_buffer(offsets), pa.py_buffer(data)]
    return pa.Array.from_buffers(pa.binary(), rows, buffers)


__all__ = ["Ope", "ope_string_prefix"]
