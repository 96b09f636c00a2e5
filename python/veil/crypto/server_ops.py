"""What the untrusted server computes over ciphertexts: keyless, pure functions.

A backend registers these as server functions (DuckDB UDFs; the PostgreSQL
extension has them in C). None takes a key, so a backend imports this module
and nothing else from :mod:`veil.crypto`: the server side cannot reach a
secret by accident.

* :func:`sum_ciphertext_groups` -- HOM: per list of Paillier ciphertexts, their
  product modulo n^2, which encrypts the sum of their (packed) plaintexts.
  Needs only the public n^2.
* :func:`search_match` -- SEARCH: which stored SWP ciphertexts hold the word
  of a token. The token reveals that one word's matches and nothing else.

The implementations stay beside their schemes' formats
(:mod:`veil.crypto.paillier_wire`, :mod:`veil.crypto.search`), where the
client-side tests and the benchmarks also reach them; this module gathers what
a server may call.
"""

from __future__ import annotations

from veil.crypto.paillier_wire import sum_ciphertext_groups
from veil.crypto.search import search_match

__all__ = ["search_match", "sum_ciphertext_groups"]
