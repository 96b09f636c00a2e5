"""JOIN-ADJ: CryptDB's adjustable join, on the ristretto255 group.

Each column is encrypted deterministically under a key of its own, so that two
columns cannot be compared until the client decides they should be joined;
then it hands the server a token that re-keys one column onto the other's key
(:func:`rekey`), and equal plaintexts have equal ciphertexts across both. A
value ``v`` is stored as ``0x01 || encode(k * H(v))`` (33 bytes), a token from
key ``a`` to key ``b`` is ``0x01 || (k_b / k_a mod l)`` (the construction and
its references are in ``rust/veil-kernels/src/joinadj.rs``).

Leakage: like DET, equal values under one key, and once a token is used,
equal values across the two columns. A token reveals neither key, but it is
no one-way street: it is a public scalar the server can invert, so re-keying
``a`` onto ``b`` makes the two columns one equality class for good (see
docs/security.md, "Onion layers and JOIN-ADJ").

:func:`rekey` runs on the server, so it lives in the keyless
:mod:`veil.crypto.server_ops`; it is re-exported here beside the key.
"""

from __future__ import annotations

from typing import NoReturn

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from veil import _native
from veil.crypto._binary import binary_array, column_buffers
from veil.crypto._native_errors import native_errors
from veil.crypto.keys import KeyLabel, MasterKey
from veil.crypto.server_ops import rekey
from veil.errors import DomainError, ParameterError

__all__ = ["JoinAdj", "rekey"]

VERSION = 1
KEY_LABEL = f"joinadj-v{VERSION}"
KEY_BYTES = 32
CIPHERTEXT_BYTES = 33
TOKEN_BYTES = 33
_INT64 = (-(2**63), 2**63 - 1)
_BINARY = (
    pa.types.is_binary,
    pa.types.is_string,
    pa.types.is_large_binary,
    pa.types.is_large_string,
)


class JoinAdj:
    """A JOIN-ADJ key: deterministic 33-byte ciphertexts and re-keying tokens."""

    __slots__ = ("_key", "column")

    def __init__(self, key: bytes, *, column: str | None = None):
        self.column = column
        with native_errors(column=column):
            self._key = _native.JoinAdjKey(bytes(key))

    @classmethod
    def from_master(cls, master: MasterKey, scope: str, column: str | None = None) -> JoinAdj:
        return cls(master.derive(KeyLabel(KEY_LABEL, scope), KEY_BYTES), column=column)

    def encrypt(self, values: pa.Array | pa.ChunkedArray) -> pa.Array:
        """int64, binary or string values -> 33-byte binary ciphertexts; NULL stays NULL.

        An integer is encrypted as its 8 little-endian bytes, a string as its UTF-8.
        """
        if isinstance(values, pa.ChunkedArray):
            values = values.combine_chunks()
        if pa.types.is_integer(values.type):
            return self._words(values.cast(pa.int64()))
        if any(test(values.type) for test in _BINARY):
            buffers = column_buffers(values)
            with native_errors(column=self.column):
                offsets, data = self._key.encrypt_column(buffers.native_args())
            return binary_array(offsets, data, buffers)
        raise ParameterError(
            f"{self._where()}JOIN-ADJ takes int64, binary or string columns, not {values.type}"
        )

    def encrypt_one(self, value: int | bytes | str) -> bytes:
        """The ciphertext of one value (the same bytes ``encrypt`` gives for it)."""
        return self._key.encrypt_one(_value_bytes(value, self.column))

    def token_to(self, other: JoinAdj) -> bytes:
        """The token that re-keys this key's ciphertexts onto ``other``'s (33 bytes)."""
        if not isinstance(other, JoinAdj):
            raise ParameterError(f"token_to needs a JoinAdj key, got {type(other).__name__}")
        return self._key.token_to(other._key)

    def __repr__(self) -> str:
        return f"JoinAdj(version={VERSION}, column={self.column!r})"

    def __reduce__(self) -> NoReturn:
        raise TypeError("a JoinAdj instance holds a key and is not picklable")

    def _words(self, values: pa.Array) -> pa.Array:
        numbers = np.ascontiguousarray(values.fill_null(0).to_numpy(zero_copy_only=False))
        validity_buffer = pc.is_valid(values).buffers()[1] if values.null_count else None
        validity = None if validity_buffer is None else np.frombuffer(validity_buffer, np.uint8)
        with native_errors(column=self.column):
            offsets, data = self._key.encrypt_words(numbers, validity)
        return pa.Array.from_buffers(
            pa.binary(), len(values),
            [validity_buffer, pa.py_buffer(offsets), pa.py_buffer(data)],
            null_count=values.null_count,
        )  # fmt: skip

    def _where(self) -> str:
        return f"column {self.column!r}: " if self.column else ""


def _value_bytes(value: int | bytes | str, column: str | None) -> bytes:
    if isinstance(value, bool):
        raise ParameterError("JOIN-ADJ encrypts integers, bytes or strings, not booleans")
    if isinstance(value, int):
        if not _INT64[0] <= value <= _INT64[1]:
            raise DomainError(
                f"{value} does not fit a signed 64-bit integer", column=column, domain="int64"
            )
        return value.to_bytes(8, "little", signed=True)
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    raise ParameterError(
        f"JOIN-ADJ encrypts integers, bytes or strings, not {type(value).__name__}"
    )
