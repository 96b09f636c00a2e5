"""SEARCH: Song–Wagner–Perrig searchable encryption of the words of a text.

The client stores, per row, the encryptions of the row's distinct words;
the server, given a token for one word, tells which rows hold that word and
learns nothing else about them. Before any token is issued the stored words
are indistinguishable from random: equal words in different rows encrypt
differently. After a query the server knows which rows hold the queried
word (and can re-test new rows against that token). At rest a row's length
(``1 + 16 * n``) does reveal ``n``, its number of distinct words.

Scheme (SWP 2000, §4.4, with 16-byte words split 8 + 8; details in the Rust
module ``veil_kernels::search``): ``X = CMAC(K_pre, word) = L || R``,
``k = AES(K_f, L || 0^8)``, random ``S`` (8 bytes), stored
``C = X XOR (S || F_k(S))`` with ``F_k(S)`` the first 8 bytes of
``AES(k, S || 0^8)``. A token is ``0x01 || X || k``; the server matches
``C`` when ``T = C XOR X`` satisfies ``T[8:] == F_k(T[:8])``. A word that is
absent matches with probability 2**-64 per stored word.

Stored format per row: ``0x01`` followed by one 16-byte ciphertext per
distinct word, sorted (which, the ciphertexts being random, shuffles them and
hides the order of the words). An empty text stores ``0x01`` alone.

Tokenisation (:func:`tokenize`, computed by the same Rust code for texts and
for queries): a word is a maximal run of Unicode letters and digits (Rust's
``char::is_alphanumeric``: Alphabetic or Numeric); everything else — spaces,
punctuation, symbols, ``_`` — separates words. Each character is replaced by
its Unicode lowercase mapping, keeping only letters and digits ('İ' becomes
'i'); there is no context-dependent casing (Greek final sigma stays 'ς') and
no Unicode normalisation (NFC and NFD spellings are different words, as they
are different strings to LIKE).

Use for ``LIKE``: SEARCH finds whole words only. ``LIKE '%cat%'`` also
matches "concatenate", so the word "cat" must not pre-filter it; which words
a pattern guarantees is SQL's business (``veil.sql.prefilter_like``).

:func:`search_match` runs on the server, so it lives in the keyless
:mod:`veil.crypto.server_ops`; it is re-exported here beside the key.
"""

from __future__ import annotations

from typing import Any, NoReturn

import pyarrow as pa

from veil import _native
from veil.crypto._binary import binary_array, column_buffers, map_binary_column
from veil.crypto._native_errors import native_errors
from veil.crypto.keys import KeyLabel, MasterKey
from veil.crypto.server_ops import search_match
from veil.errors import ParameterError

__all__ = ["Search", "search_match", "tokenize"]

KEY_BYTES = 32
VERSION = 0x01
WORD_BYTES = 16
TOKEN_BYTES = 33


def tokenize(text: str) -> list[str]:
    """The words of ``text``, lowercased, in order, repeats kept."""
    return _native.search_tokenize(text)


class Search:
    """Encrypts texts for word search and makes search tokens (client side)."""

    __slots__ = ("_key", "column")

    def __init__(self, key: bytes, *, column: str | None = None):
        if len(key) != KEY_BYTES:
            raise ParameterError(f"a SEARCH key is {KEY_BYTES} bytes, got {len(key)}")
        self._key = bytes(key)
        self.column = column

    @classmethod
    def from_master(cls, master: MasterKey, scope: str, *, column: str | None = None) -> Search:
        return cls(master.derive(KeyLabel("search", scope), KEY_BYTES), column=column)

    def encrypt(self, values: Any) -> Any:
        """Encrypt the words of each text of a string column; NULL stays NULL."""
        return map_binary_column(values, self._encrypt_array)

    def token(self, word: str) -> bytes:
        """The token for one word (any case); refuses text that is not one word."""
        with native_errors(column=self.column):
            return _native.search_token(self._key, word)

    def _encrypt_array(self, array: pa.Array) -> pa.BinaryArray:
        buffers = column_buffers(array)
        with native_errors(column=self.column):
            offsets, data = _native.search_encrypt(self._key, buffers.native_args())
        return binary_array(offsets, data, buffers)

    def __repr__(self) -> str:
        return f"Search(column={self.column!r})"

    def __reduce__(self) -> NoReturn:
        raise TypeError("a Search instance holds a key and is not picklable")
