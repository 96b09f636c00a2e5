"""RND: randomised authenticated encryption (AES-256-GCM) of whole columns.

RND hides everything but a value's length: equal plaintexts give unrelated
ciphertexts, so the server can store and return RND values but compute
nothing on them. Use it for columns that are only fetched.

Stored format: ``0x01 || nonce (12 bytes) || ciphertext || tag (16 bytes)``,
29 bytes more than the plaintext. The instance's ``context`` is the GCM
associated data; bind the table and column identity there, so that a
ciphertext copied into another column (under a shared key) fails to decrypt.

Nonces are 96-bit random values from a ChaCha20 generator seeded by the
operating system for each batch. Random nonces are safe for at most 2**32
encryptions under one key (NIST SP 800-38D §8.3; the chance of any nonce
repeating is then below 2**-32, and a repeat would break confidentiality
and integrity). Veil keys RND per column and versions its keys, so a column
is re-keyed before it stores four billion values.

Decryption verifies every value: a wrong key, a wrong context or a changed
byte raises :class:`~veil.errors.AuthenticationError`; a truncated value or
an unknown version raises :class:`~veil.errors.MalformedCiphertextError`.
"""

from __future__ import annotations

from typing import Any, NoReturn

import pyarrow as pa

from veil import _native
from veil.crypto._binary import binary_array, column_buffers, map_binary_column
from veil.crypto._native_errors import native_errors
from veil.crypto.keys import KeyLabel, MasterKey
from veil.errors import ParameterError

KEY_BYTES = 32
VERSION = 0x01
NONCE_BYTES = 12
TAG_BYTES = 16
OVERHEAD = 1 + NONCE_BYTES + TAG_BYTES


class Rnd:
    """AES-256-GCM with a random nonce per value; ``context`` is the AAD."""

    __slots__ = ("_key", "column", "context")

    def __init__(self, key: bytes, *, context: bytes = b"", column: str | None = None):
        if len(key) != KEY_BYTES:
            raise ParameterError(f"an RND key is {KEY_BYTES} bytes, got {len(key)}")
        self._key = bytes(key)
        self.context = bytes(context)
        self.column = column

    @classmethod
    def from_master(
        cls, master: MasterKey, scope: str, *, context: bytes = b"", column: str | None = None
    ) -> Rnd:
        key = master.derive(KeyLabel("rnd", scope), KEY_BYTES)
        return cls(key, context=context, column=column)

    def encrypt(self, values: Any) -> Any:
        """Encrypt a binary or string column (Arrow or numpy); NULL stays NULL."""
        return map_binary_column(values, self._encrypt_array)

    def decrypt(self, values: Any) -> Any:
        """Decrypt RND ciphertexts to ``binary`` (cast to utf8 if it was text)."""
        return map_binary_column(values, self._decrypt_array)

    def encrypt_one(self, value: bytes | str) -> bytes:
        result: bytes = self._encrypt_array(pa.array([value])).to_pylist()[0]
        return result

    def decrypt_one(self, ciphertext: bytes) -> bytes:
        result: bytes = self._decrypt_array(pa.array([ciphertext], pa.binary())).to_pylist()[0]
        return result

    def _encrypt_array(self, array: pa.Array) -> pa.BinaryArray:
        buffers = column_buffers(array)
        with native_errors(column=self.column):
            offsets, data = _native.rnd_column(self._key, self.context, buffers.native_args())
        return binary_array(offsets, data, buffers)

    def _decrypt_array(self, array: pa.Array) -> pa.BinaryArray:
        buffers = column_buffers(array)
        with native_errors(column=self.column):
            offsets, data = _native.rnd_column(
                self._key, self.context, buffers.native_args(), decrypt=True
            )
        return binary_array(offsets, data, buffers)

    def __repr__(self) -> str:
        return f"Rnd(column={self.column!r}, context={self.context!r})"

    def __reduce__(self) -> NoReturn:
        raise TypeError("an Rnd instance holds a key and is not picklable")
