"""Column ciphers: one object per server column that encrypts and decrypts it.

This is the only place where the SQL layers meet the crypto core. A column
cipher takes an *encoded* plaintext column (int64 or binary, see
``veil.encoding``) and returns the ciphertext column stored on the server, and
back. The working key is derived from the master key under the encryption's
key scope, so two server columns in one key scope (a DET join group) produce
comparable ciphertexts and every other pair does not.

Schemes are imported lazily: a design may only use the schemes this Veil has
(``available_schemes``).
"""

from __future__ import annotations

import importlib
from functools import cache
from typing import Any, Protocol

import pyarrow as pa

from veil.crypto.keys import MasterKey
from veil.design.model import DET, HOM, OPE, RND, SEARCH, Encryption
from veil.encoding import bytes_to_int64, int64_to_bytes
from veil.errors import ParameterError

_MODULES = {
    HOM: "veil.crypto.hom",
    RND: "veil.crypto.rnd",
    DET: "veil.crypto.det",
    OPE: "veil.crypto.ope",
    SEARCH: "veil.crypto.search",
}


class ColumnCipher(Protocol):
    def encrypt(self, encoded: pa.Array) -> pa.Array: ...

    def decrypt(self, stored: pa.Array) -> pa.Array: ...

    def encrypt_one(self, encoded: int | bytes) -> int | bytes: ...


@cache
def _module(scheme: str) -> Any | None:
    try:
        return importlib.import_module(_MODULES[scheme])
    except ImportError:
        return None


def available_schemes() -> frozenset[str]:
    """Schemes whose crypto core is installed."""
    return frozenset(s for s in _MODULES if _module(s) is not None)


def column_cipher(master: MasterKey, encryption: Encryption, context: bytes = b"") -> ColumnCipher:
    """The cipher of one server column; ``context`` binds RND ciphertexts to it."""
    scheme, integral = encryption.scheme, encryption.sql_type.is_integral
    label = encryption.source
    if scheme == RND:
        return _RndCipher(master, encryption.key_scope, context, label, integral)
    module = _module(scheme)
    if module is None:
        raise ParameterError(f"scheme {scheme} is not installed in this Veil; cannot use {label!r}")
    if scheme == DET:
        if integral:
            return _Int64Cipher(
                module.DetInt.from_master(master, encryption.key_scope, bits=64, column=label)
            )
        return module.DetBytes.from_master(master, encryption.key_scope, column=label)
    if scheme == OPE:
        bits = int(str(encryption.params.get("bits", 64)))
        ope = module.Ope.from_master(master, encryption.key_scope, bits, signed=True, column=label)
        return _Int64Cipher(ope)
    if scheme == SEARCH:
        search = module.Search.from_master(master, encryption.key_scope, column=label)
        return SearchCipher(search)
    raise ParameterError(f"scheme {scheme} cannot be used column-wise ({label!r})")


class SearchCipher:
    """SEARCH: encrypts text for word search; the client never decrypts it."""

    def __init__(self, inner: Any):
        self._inner = inner

    def encrypt(self, encoded: pa.Array) -> pa.Array:
        return self._inner.encrypt(encoded.cast(pa.string()))

    def decrypt(self, stored: pa.Array) -> pa.Array:
        raise ParameterError(
            "SEARCH ciphertexts are not decryptable; fetch the column's DET or RND form"
        )

    def encrypt_one(self, encoded: int | bytes) -> int | bytes:
        raise ParameterError("SEARCH compares words, not values; use token()")

    def token(self, word: str) -> bytes:
        return bytes(self._inner.token(word))


class _Int64Cipher:
    """An integer scheme whose ciphertexts may be int64 or (wide OPE) binary."""

    def __init__(self, inner: Any):
        self._inner = inner

    def encrypt(self, encoded: pa.Array) -> pa.Array:
        return self._inner.encrypt(encoded)

    def decrypt(self, stored: pa.Array) -> pa.Array:
        return self._inner.decrypt(stored)

    def encrypt_one(self, encoded: int | bytes) -> int | bytes:
        return self._inner.encrypt_one(encoded)


class _RndCipher:
    """RND over the encoded value (integers as 8 big-endian bytes)."""

    def __init__(self, master: MasterKey, scope: str, context: bytes, label: str, integral: bool):
        self._integral = integral
        from veil.crypto.rnd import Rnd

        self._inner = Rnd.from_master(master, scope, context=context, column=label)

    def encrypt(self, encoded: pa.Array) -> pa.Array:
        data = int64_to_bytes(encoded) if self._integral else encoded
        return self._inner.encrypt(data)

    def decrypt(self, stored: pa.Array) -> pa.Array:
        plain = self._inner.decrypt(stored)
        return bytes_to_int64(plain) if self._integral else plain

    def encrypt_one(self, encoded: int | bytes) -> int | bytes:
        raise ParameterError(
            "RND ciphertexts are randomised; constants cannot be compared with them"
        )
