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
import os
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from veil.ciphers.cipher import ColumnCipher
from veil.ciphers.fitted_rnd import FittedRowBound
from veil.ciphers.row_bound import RowBoundCipher
from veil.crypto.keys import MasterKey
from veil.design.model import DET, HOM, JOIN, OPE, RND, RND_BITS, SEARCH, Encryption
from veil.errors import ParameterError

__all__ = ["ColumnCipher", "RowBoundCipher"]  # where they were first defined

_MODULES = {
    HOM: "veil.crypto.hom",
    RND: "veil.crypto.rnd",
    DET: "veil.crypto.det",
    OPE: "veil.crypto.ope",
    SEARCH: "veil.crypto.search",
    JOIN: "veil.crypto.joinadj",
}


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
    """The cipher of one server column; ``context`` binds RND ciphertexts to it.

    A wrapped onion (``Encryption.outer``) is its scheme's cipher inside the
    column's row-bound RND layer (``layer_key``).
    """
    if encryption.scheme == RND:
        bits = encryption.params.get(RND_BITS)
        narrow = bits if isinstance(bits, int) and encryption.sql_type.is_integral else None
        fit = encryption.params.get("fit")  # the loaded range (``veil.ciphers.fitted_rnd``)
        if narrow is not None and isinstance(fit, list):
            layer = _row_rnd(master, encryption, context)
            return FittedRowBound(layer, bits=narrow, low=int(fit[0]), fit=int(fit[1]))
        return RowBoundCipher(_row_rnd(master, encryption, context), None, bits=narrow)
    inner = _scheme_cipher(master, encryption)
    if encryption.outer is not None:
        return RowBoundCipher(_layer(master, encryption, context), inner)
    return inner


def layer_key(master: MasterKey, encryption: Encryption, context: bytes) -> bytes:
    """The key of an onion's outer RND layer: what the client sends the server to peel it.

    Its scope names the server column (``context``), whose table name is fresh
    per load, so no two columns or loads share a layer key: revealing it
    reveals that one layer of that one column.
    """
    from veil.crypto.keys import KeyLabel
    from veil.crypto.rowrnd import KEY_BYTES, KEY_LABEL

    scope = f"layer:{encryption.key_scope}@{context.decode()}"
    return master.derive(KeyLabel(KEY_LABEL, scope), KEY_BYTES)


def layer_form(encryption: Encryption) -> str:
    """``"int"`` when the scheme's ciphertexts are BIGINTs, else ``"bytes"`` (server type)."""
    if encryption.scheme == OPE:
        return "bytes" if encryption.ope_binary else "int"
    if encryption.scheme == DET and encryption.sql_type.is_integral:
        return "bytes" if encryption.params.get("form") == BYTES_FORM else "int"
    return "bytes"


def _layer(master: MasterKey, encryption: Encryption, context: bytes) -> Any:
    from veil.crypto.rowrnd import RowRnd

    return RowRnd(layer_key(master, encryption, context), column=encryption.source)


def _row_rnd(master: MasterKey, encryption: Encryption, context: bytes) -> Any:
    from veil.crypto.rowrnd import RowRnd

    # the context names the server column, whose table name is fresh per load:
    # a reloaded table's ids start at 0 again, under other keys
    scope = f"{encryption.key_scope}@{context.decode()}"
    return RowRnd.from_master(master, scope, column=encryption.source)


def _scheme_cipher(master: MasterKey, encryption: Encryption) -> ColumnCipher:
    scheme, integral = encryption.scheme, encryption.sql_type.is_integral
    label = encryption.source
    module = _module(scheme)
    if module is None:
        raise ParameterError(f"scheme {scheme} is not installed in this Veil; cannot use {label!r}")
    if scheme == DET:
        narrow = encryption.params.get("narrow_bits")
        if integral and isinstance(narrow, int):
            from veil.crypto.det_narrow import NarrowDet

            det = _Int64Cipher(
                NarrowDet.from_master(master, encryption.key_scope, narrow, column=label)
            )
            return Int32Form(det) if encryption.params.get(STORED_BITS) == 32 else det
        if integral:
            det = _Int64Cipher(
                module.DetInt.from_master(master, encryption.key_scope, bits=64, column=label)
            )
            return BytesForm(det) if encryption.params.get("form") == BYTES_FORM else det
        return module.DetBytes.from_master(master, encryption.key_scope, column=label)
    if scheme == OPE:
        bits = int(str(encryption.params.get("bits", 64)))
        narrow = encryption.params.get(OPE_CIPHER_BITS)  # ``veil.load.narrow_ope``
        ope = module.Ope.from_master(
            master,
            encryption.key_scope,
            bits,
            signed=True,
            column=label,
            cipher_bits=narrow if isinstance(narrow, int) else None,
        )
        if encryption.params.get("form") == BYTES_FORM and not ope.binary:
            return OrderedBytesForm(_Int64Cipher(ope))
        return _Int64Cipher(ope)
    if scheme == SEARCH:
        search = module.Search.from_master(master, encryption.key_scope, column=label)
        return SearchCipher(search)
    if scheme == JOIN:
        return JoinCipher(module.JoinAdj.from_master(master, encryption.key_scope, column=label))
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


class JoinCipher:
    """JOIN-ADJ: equality the server can re-key; the client never decrypts it.

    A point multiplication per value (tens of microseconds): each distinct
    value is encrypted once, in threads (the kernel releases the GIL).
    """

    def __init__(self, inner: Any):
        self._inner = inner

    def encrypt(self, encoded: pa.Array) -> pa.Array:
        if isinstance(encoded, pa.ChunkedArray):
            encoded = encoded.combine_chunks()
        indexed = encoded.dictionary_encode()
        distinct = indexed.dictionary
        parts = _split(len(distinct))
        if len(parts) > 1:
            chunks = list(_pool().map(lambda p: self._inner.encrypt(distinct.slice(*p)), parts))
        else:
            chunks = [self._inner.encrypt(distinct)]
        points = pa.concat_arrays(
            [c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for c in chunks]
        )
        return points.take(indexed.indices)

    def decrypt(self, stored: pa.Array) -> pa.Array:
        raise ParameterError(
            "JOIN-ADJ ciphertexts are not decryptable; fetch the column's DET form"
        )

    def encrypt_one(self, encoded: int | bytes) -> int | bytes:
        return bytes(self._inner.encrypt_one(encoded))

    def token_to(self, other: JoinCipher) -> bytes:
        """The token re-keying this column's ciphertexts onto ``other``'s key."""
        return bytes(self._inner.token_to(other._inner))


def _split(count: int, smallest: int = 4096) -> list[tuple[int, int]]:
    """(offset, length) parts of ``count`` values, one per thread when there are enough."""
    threads = min(4, os.cpu_count() or 1) if count >= 2 * smallest else 1
    step = -(-count // threads) if count else 0
    return (
        [(start, min(step, count - start)) for start in range(0, count, step)]
        if count
        else [(0, 0)]
    )


@cache
def _pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(min(4, os.cpu_count() or 1), thread_name_prefix="veil-joinadj")


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


BYTES_FORM = "bytes"
# ``Encryption.params``: an OPE column's ciphertext bits where narrower than its
# scheme's default (``veil.crypto.ope``'s ``cipher_bits``; ``veil.load.narrow_ope``)
OPE_CIPHER_BITS = "cipher_bits"
# ``Encryption.params``: the server stores the column's ciphertexts in this many bits,
# as every value its SQL type accepts encrypts into them (``veil.load.narrow_det``)
STORED_BITS = "stored_bits"
_INT32 = np.iinfo(np.int32)


class Int32Form:
    """Narrow DET ciphertexts that fit 32 bits, as int32: a PostgreSQL INTEGER column.

    The same ciphertexts in half the bytes a row. Each ciphertext the stored
    column can hold fits (``narrow_det.choose_by_type``); a constant outside the
    SQL type's range (``WHERE k IN (1, 2**40)``) encrypts outside 32 bits, so a
    batch with one stays int64, which the server compares with the INTEGER
    column as it compares any BIGINT with an INTEGER.
    """

    def __init__(self, inner: ColumnCipher):
        self._inner = inner

    def encrypt(self, encoded: pa.Array) -> pa.Array:
        ints = self._inner.encrypt(encoded)
        if isinstance(ints, pa.ChunkedArray):
            ints = ints.combine_chunks()
        low, high = pc.min_max(ints).values()
        inside = low.as_py() is None or (_INT32.min <= low.as_py() and high.as_py() <= _INT32.max)
        return ints.cast(pa.int32()) if inside else ints

    def decrypt(self, stored: pa.Array) -> pa.Array:
        return self._inner.decrypt(stored.cast(pa.int64()))

    def encrypt_one(self, encoded: int | bytes) -> int | bytes:
        return self._inner.encrypt_one(encoded)


class BytesForm:
    """Integer ciphertexts stored as 8-byte binaries (``Encryption.params["form"]``).

    The same int64 ciphertexts, in another server type: a server that
    dictionary-compresses binary columns (DuckDB) stores a column of few
    distinct ciphertexts in a fraction of 8 bytes a row. Only equality is
    preserved (the bytes are little-endian), which is all DET promises.
    """

    def __init__(self, inner: ColumnCipher):
        self._inner = inner

    def encrypt(self, encoded: pa.Array) -> pa.Array:
        return as_bytes(self._inner.encrypt(encoded))

    def decrypt(self, stored: pa.Array) -> pa.Array:
        return self._inner.decrypt(as_int64(stored))

    def unpacked(self, stored: pa.Array) -> tuple[pa.Array, ColumnCipher]:
        """The int64 ciphertexts, and the cipher of those: equal exactly when the
        binaries are, and hashed twice as fast (``veil.exec.decrypt.decrypt_values``)."""
        return as_int64(stored), self._inner

    def encrypt_one(self, encoded: int | bytes) -> int | bytes:
        value = self._inner.encrypt_one(encoded)
        assert isinstance(value, int)
        return value.to_bytes(8, "little", signed=True)


class OrderedBytesForm:
    """OPE's int64 ciphertexts stored as 8-byte binaries that sort as the integers do.

    Big-endian with the sign bit flipped, so the server's byte-wise order of
    the binaries (DuckDB's BLOB, PostgreSQL's bytea) is the ciphertexts'
    order: ranges, MIN/MAX and ORDER BY work unchanged, and a server that
    dictionary-compresses binaries stores a column of few distinct values
    (dates) in a fraction of 8 bytes a row. (Such columns repeat, so the fetch
    path decrypts their distinct values only: ``veil.exec.decrypt._repeats``.)
    """

    def __init__(self, inner: ColumnCipher):
        self._inner = inner

    def encrypt(self, encoded: pa.Array) -> pa.Array:
        return as_bytes(self._inner.encrypt(encoded), ordered=True)

    def decrypt(self, stored: pa.Array) -> pa.Array:
        return self._inner.decrypt(as_int64(stored, ordered=True))

    def unpacked(self, stored: pa.Array) -> tuple[pa.Array, ColumnCipher]:
        """As ``BytesForm.unpacked``."""
        return as_int64(stored, ordered=True), self._inner

    def encrypt_one(self, encoded: int | bytes) -> int | bytes:
        value = self._inner.encrypt_one(encoded)
        assert isinstance(value, int)
        return (value ^ _SIGN).to_bytes(8, "big", signed=True)


_SIGN = -(1 << 63)  # XOR flips the sign bit of an int64


def as_bytes(ints: pa.Array, *, ordered: bool = False) -> pa.Array:
    """int64 values as 8-byte little-endian binaries (NULL stays NULL).

    ``ordered``: big-endian with the sign bit flipped, sorting as the integers.
    """
    ints = ints.cast(pa.int64())
    words = ints.fill_null(0).to_numpy(zero_copy_only=False).astype("<i8", copy=False)
    if ordered:
        words = (words ^ np.int64(_SIGN)).astype(">i8")
    fixed = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(8), len(ints), [None, pa.py_buffer(words.tobytes())]
    )
    if ints.null_count:
        fixed = pc.if_else(ints.is_valid(), fixed, None)
    return fixed.cast(pa.binary())


def as_int64(stored: pa.Array, *, ordered: bool = False) -> pa.Array:
    """8-byte binaries back to the int64 values ``as_bytes`` wrote."""
    order = ">i8" if ordered else "<i8"
    packed = _packed_values(stored, order)
    if packed is not None:  # TPC-H Q18's 6M l_quantity: 25 -> 3 ms
        return pa.array(packed ^ np.int64(_SIGN) if ordered else packed)
    fixed = stored.cast(pa.binary(8))
    values = np.frombuffer(fixed.buffers()[1], dtype=order, count=len(fixed) + fixed.offset)
    native = values[fixed.offset :].astype(np.int64)
    ints = pa.array(native ^ np.int64(_SIGN) if ordered else native)
    return pc.if_else(fixed.is_valid(), ints, None) if fixed.null_count else ints


def _packed_values(stored: pa.Array, order: str) -> np.ndarray | None:
    """The values of a binary column without NULLs whose every value is 8 bytes, read in
    place from its data buffer (no cast, no copy where ``order`` is native); else None."""
    kind = stored.type
    if stored.null_count or not len(stored):
        return None
    if not (pa.types.is_binary(kind) or pa.types.is_large_binary(kind)):
        return None
    width = np.int64 if pa.types.is_large_binary(kind) else np.int32
    start = stored.offset
    offsets = np.frombuffer(stored.buffers()[1], dtype=width)[start : start + len(stored) + 1]
    if not bool(np.all(np.diff(offsets) == 8)):
        return None
    data = stored.buffers()[2]
    values = np.frombuffer(data, dtype=order, count=len(stored), offset=int(offsets[0]))
    return values.astype(np.int64, copy=False)
