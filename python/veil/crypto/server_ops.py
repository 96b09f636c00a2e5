"""What the untrusted server computes over ciphertexts: pure functions, no master key.

A backend registers these as server functions (DuckDB UDFs; the PostgreSQL
extension has them in C). None needs a key the server is not meant to hold,
so a backend imports this module and nothing else from :mod:`veil.crypto`:
the server side cannot reach a secret by accident.

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

The implementations stay beside their schemes' formats
(:mod:`veil.crypto.paillier_wire`, :mod:`veil.crypto.search`,
:mod:`veil.crypto.rowrnd`, :mod:`veil.crypto.joinadj`), where the client-side
tests and the benchmarks also reach them; this module gathers what a server
may call.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from veil.crypto.joinadj import rekey
from veil.crypto.paillier_wire import sum_ciphertext_groups
from veil.crypto.rowrnd import RowRnd
from veil.crypto.search import search_match

__all__ = ["layer_xor", "rekey", "search_match", "sum_ciphertext_groups"]


def layer_xor(
    key: bytes, ids: np.ndarray | pa.Array, values: pa.Array | pa.ChunkedArray
) -> pa.Array:
    """``values`` XOR the row-bound RND keystream of ``ids`` under a layer key.

    Equal to ``RowRnd(key).decrypt(ids, values)``: int64 in gives int64 out,
    binary or string gives binary; NULL stays NULL.
    """
    if isinstance(ids, pa.ChunkedArray | pa.Array):
        ids = ids.to_numpy(zero_copy_only=False)
    return RowRnd(key).decrypt(np.asarray(ids, dtype=np.int64), values)
