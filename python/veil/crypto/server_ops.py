"""What the untrusted server computes over ciphertexts: pure functions, no master key.

A backend registers these as server functions (DuckDB UDFs, Spark's Arrow
UDFs; the PostgreSQL extension has them in C). None needs a key the server is
not meant to hold, so a backend imports this module and nothing else from
:mod:`veil.crypto`: the server side cannot reach a secret by accident.

* :func:`sum_ciphertext_groups` -- HOM: per list of Paillier ciphertexts, their
  product modulo n^2, which encrypts the sum of their (packed) plaintexts.
  Needs only the public n^2.
* :func:`search_match` -- SEARCH: which stored SWP ciphertexts hold the word
  of a token. The token reveals that one word's matches and nothing else.
* :func:`layer_xor` -- onion layers: removes (or adds: XOR is an involution)
  the outer RND layer of a column, stored as row-bound RND under a per-column
  *layer key*. The layer key is what the client deliberately reveals to peel
  that one layer, exposing the layer beneath (e.g. DET) for good; it is
  derived apart from every other key, so it reveals nothing else.
* :func:`rekey` -- JOIN-ADJ: re-keys a column's ciphertexts onto another
  column's key with a token, making the two equi-joinable.

The functions live here, and the keyed schemes import them from here
(:mod:`veil.crypto.rowrnd` encrypts with :func:`xor_row_keystream`;
:mod:`veil.crypto.search` and :mod:`veil.crypto.joinadj` re-export their
server functions beside their keys), never the reverse: importing this module
loads no module that holds or derives a key (``tests/structure/test_server_ops_keyless.py``).
:mod:`veil.crypto.paillier_wire`, the keyless format of Paillier ciphertexts,
keeps the HOM sums beside their format.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from veil import _native
from veil.crypto._binary import binary_array, column_buffers, map_binary_column
from veil.crypto._native_errors import native_errors
from veil.crypto.paillier_wire import sum_ciphertext_groups
from veil.errors import ParameterError

__all__ = [
    "layer_xor",
    "rekey",
    "search_match",
    "sum_ciphertext_groups",
    "xor_row_keystream",
    "xor_row_keystreams",
]


def layer_xor(
    key: bytes, ids: np.ndarray | pa.Array, values: pa.Array | pa.ChunkedArray
) -> pa.Array:
    """``values`` XOR the row-bound RND keystream of ``ids`` under a layer key.

    Equal to ``RowRnd(key).decrypt(ids, values)``: int64 in gives int64 out,
    binary or string gives binary; NULL stays NULL.
    """
    if isinstance(ids, pa.ChunkedArray | pa.Array):
        ids = ids.to_numpy(zero_copy_only=False)
    with native_errors():
        cipher = _native.RowRndKey(bytes(key))
    return xor_row_keystream(cipher, np.asarray(ids, dtype=np.int64), values)


def xor_row_keystream(
    cipher: _native.RowRndKey,
    ids: np.ndarray,
    values: pa.Array | pa.ChunkedArray,
    *,
    column: str | None = None,
) -> pa.Array:
    """Row-bound RND's one operation: each value XOR its row id's keystream.

    int64 values give int64, binary or string give binary; NULL stays NULL.
    Encrypting and decrypting are both this (see :mod:`veil.crypto.rowrnd`);
    ``column`` names the column in errors.
    """
    id_bits = _id_bits(ids)
    values = _checked(ids, values, column)
    if values.type == pa.int64():
        bits = _word_bits(values)
        out = np.empty(len(bits), dtype=np.uint64)
        with native_errors(column=column):
            cipher.xor_words(id_bits, bits, out)
        return _words_array(out, values)
    buffers = column_buffers(values)
    with native_errors(column=column):
        offsets, data = cipher.xor_column(id_bits, buffers.native_args())
    return binary_array(offsets, data, buffers)


def xor_row_keystreams(
    ids: np.ndarray,
    columns: list[tuple[_native.RowRndKey, pa.Array | pa.ChunkedArray]],
    to_ids: np.ndarray | None = None,
) -> list[pa.Array]:
    """:func:`xor_row_keystream` of several columns of the same rows, each under its own
    key, in one native call; equal to it column by column. ``to_ids``: XOR the keystreams
    of these ids too, one per row (stored values carried to new row ids).

    For a few rows (a point query's): a call per column costs ~20 us of Python
    around a few AES blocks (issue 41). The native call holds the GIL, so
    large columns go through :func:`xor_row_keystream`.
    """
    id_bits = _id_bits(ids)
    words: list[tuple[_native.RowRndKey, np.ndarray]] = []
    binaries: list[tuple[_native.RowRndKey, Any]] = []
    checked, buffers = [], []
    for cipher, values in columns:
        values = _checked(ids, values, None)
        checked.append(values)
        if values.type == pa.int64():
            words.append((cipher, _word_bits(values)))
        else:
            buffers.append(column_buffers(values))
            binaries.append((cipher, buffers[-1].native_args()))
    with native_errors():
        if to_ids is None:
            word_outputs, binary_outputs = _native.rowrnd_xor_columns(id_bits, words, binaries)
        else:
            word_outputs, binary_outputs = _native.rowrnd_reseal_columns(
                id_bits, _id_bits(to_ids), words, binaries
            )
    opened_words = iter(word_outputs)
    opened_binaries = iter(zip(binary_outputs, buffers, strict=True))
    results = []
    for values in checked:
        if values.type == pa.int64():
            results.append(_words_array(next(opened_words), values))
        else:
            (offsets, data), like = next(opened_binaries)
            results.append(binary_array(offsets, data, like))
    return results


def _id_bits(ids: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(ids, dtype=np.int64).view(np.uint64))


def _checked(ids: np.ndarray, values: pa.Array | pa.ChunkedArray, column: str | None) -> pa.Array:
    """``values`` as one int64 or binary-like array of one value per id, or an error."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if len(ids) != len(values):
        raise ParameterError(
            f"{_where(column)}row-bound RND needs one row id per value; got {len(ids)} ids "
            f"and {len(values)} values"
        )
    if pa.types.is_integer(values.type):
        # no cast of what is int64 already: ~4-15 us a column, most of a point row's time
        return values if values.type == pa.int64() else values.cast(pa.int64())
    if any(test(values.type) for test in _BINARY_LIKE):
        return values
    raise ParameterError(
        f"{_where(column)}row-bound RND takes int64 or binary columns, not {values.type}"
    )


_BINARY_LIKE = (
    pa.types.is_binary,
    pa.types.is_string,
    pa.types.is_large_binary,
    pa.types.is_large_string,
)


def _word_bits(values: pa.Array) -> np.ndarray:
    """An int64 column's values as contiguous uint64 bits, NULLs as 0."""
    filled = values.fill_null(0) if values.null_count else values
    return np.ascontiguousarray(filled.to_numpy(zero_copy_only=False).view(np.uint64))


def _words_array(out: np.ndarray, values: pa.Array) -> pa.Array:
    """The XORed bits ``out`` as an int64 column with the NULLs of ``values``."""
    validity = values.buffers()[0] if values.null_count else None
    if values.null_count and values.offset:
        validity = values.is_valid().buffers()[1]  # realigned to offset 0
    return pa.Array.from_buffers(
        pa.int64(), len(values), [validity, pa.py_buffer(out.view(np.int64))],
        null_count=values.null_count,
    )  # fmt: skip


def _where(column: str | None) -> str:
    return f"column {column!r}: " if column else ""


def rekey(token: bytes, ciphertexts: Any) -> Any:
    """Re-key JOIN-ADJ ciphertexts with a token (server side, pure; NULL stays NULL).

    ``ciphertexts`` is a binary Array, ChunkedArray or numpy array of 33-byte
    values; the result has the same form. Malformed ciphertexts and tokens
    raise :class:`~veil.errors.MalformedCiphertextError` and
    :class:`~veil.errors.ParameterError`.
    """
    token = bytes(token)

    def kernel(chunk: pa.Array) -> pa.Array:
        buffers = column_buffers(chunk)
        with native_errors():
            offsets, data = _native.joinadj_rekey(token, buffers.native_args())
        return binary_array(offsets, data, buffers)

    return map_binary_column(ciphertexts, kernel)


def search_match(ciphertexts: Any, token: Any) -> pa.BooleanArray:
    """Which rows hold the token's word (server side, pure; NULL -> NULL).

    ``ciphertexts`` is a binary Array or ChunkedArray of stored SEARCH values.
    ``token`` is the bytes from :meth:`~veil.crypto.search.Search.token`, or
    -- as a DuckDB vectorised UDF passes a constant argument -- an Arrow array
    repeating it (rows whose token is NULL give NULL).
    """
    if isinstance(token, pa.Array | pa.ChunkedArray):
        return _match_token_column(_one_chunk(ciphertexts), _one_chunk(token))
    token = bytes(token)
    if isinstance(ciphertexts, pa.ChunkedArray):
        parts = [_match(chunk, token) for chunk in ciphertexts.chunks]
        return pa.concat_arrays(parts) if parts else pa.array([], pa.bool_())
    return _match(ciphertexts, token)


def _match(ciphertexts: pa.Array, token: bytes) -> pa.BooleanArray:
    buffers = column_buffers(ciphertexts)
    with native_errors():
        bits = _native.search_match(token, buffers.native_args())
    return pa.Array.from_buffers(
        pa.bool_(),
        buffers.rows,
        [buffers.validity_buffer, pa.py_buffer(bits)],
        null_count=buffers.null_count,
    )


def _match_token_column(ciphertexts: pa.Array, tokens: pa.Array) -> pa.BooleanArray:
    """Match against a column of tokens: one native pass per distinct token."""
    if len(tokens) != len(ciphertexts):
        raise ParameterError("search_match: the token column and the ciphertexts differ in length")
    result = pa.nulls(len(ciphertexts), pa.bool_())
    for value in pc.unique(tokens.drop_null()).to_pylist():
        rows = pc.fill_null(pc.equal(tokens, pa.scalar(value, tokens.type)), False)
        result = pc.if_else(rows, _match(ciphertexts, bytes(value)), result)
    return result


def _one_chunk(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    return values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
