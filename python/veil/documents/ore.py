"""Lewi–Wu order-revealing encryption for ``ore`` index fields (the native core, cretrit).

An order key (:mod:`veil.documents.values`, an int64 or, for strings, a uint64)
is mapped to an unsigned 64-bit key and encrypted two ways:

* a *right* ciphertext (``0x01`` ‖ ~430 bytes): randomised, IND-CPA on its own;
  it is what the server stores, in the field's B+-tree (:mod:`veil.documents.oretree`);
* a *left* ciphertext: deterministic, never sent; compared with a right one it
  gives the order of the two keys. Only the client, which holds the key, can
  make one, so only the client can compare.

The tree's entries point to documents through *tags*: 8 random bytes drawn per
stored value, kept in the document (``k``) and, sealed with AES-GCM, in the
tree, so the server cannot link a tree entry to a document before a query
returns it.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import pyarrow as pa

from veil import _native
from veil.crypto._native_errors import native_errors
from veil.crypto.keys import KeyLabel, MasterKey
from veil.crypto.rnd import Rnd

TAG_BYTES = 8
#: Keys per native ORE encryption call (seconds of work, the GIL released, the cores shared).
CHUNK = 8192
_SIGN = 1 << 63


class OreKeys:
    """One ``ore`` field's ORE key and the key that seals its tree's tags."""

    def __init__(self, master: MasterKey, where: str, path: str, signed: bool):
        self.path = path
        self.signed = signed
        self._cipher = _native.OreCipher(master.derive(KeyLabel("ore-v1", where)))
        self._tags = Rnd.from_master(
            master, f"{where}/ore-tags", context=f"{where}/ore-tags".encode(), column=path
        )

    def _unsigned(self, keys: list[int]) -> list[int]:
        """int64 keys moved to uint64 in the same order (strings' keys are unsigned)."""
        return [k + _SIGN for k in keys] if self.signed else keys

    def left(self, keys: list[int]) -> list[bytes]:
        return self._encrypt(self._cipher.encrypt_left, keys)

    def right(self, keys: list[int]) -> list[bytes]:
        return self._encrypt(self._cipher.encrypt_right, keys)

    def _encrypt(self, encrypt: Callable[[list[int]], list[bytes]], keys: list[int]) -> list[bytes]:
        """``keys`` encrypted ``CHUNK`` at a time (about 3,000 keys a second a core): a
        bulk load's million in one call would hold minutes of output in memory and give
        no progress between calls."""
        out: list[bytes] = []
        with native_errors(self.path, "uint64"):
            for at in range(0, len(keys), CHUNK):
                out += encrypt(self._unsigned(keys[at : at + CHUNK]))
        return out

    def seal_tags(self, tags: list[bytes]) -> list[bytes]:
        return list(self._tags.encrypt(pa.array(tags, pa.binary())).to_pylist())

    def open_tags(self, sealed: list[bytes]) -> list[bytes]:
        if not sealed:
            return []
        return list(self._tags.decrypt(pa.array(sealed, pa.binary())).to_pylist())


def fresh_tags(count: int) -> list[bytes]:
    """``count`` random tags (collisions have odds ~count**2 / 2**64)."""
    raw = os.urandom(TAG_BYTES * count)
    return [raw[i : i + TAG_BYTES] for i in range(0, len(raw), TAG_BYTES)]


def rank(left: bytes, rights: list[bytes], inclusive: bool) -> int:
    """How many of ``rights`` (sorted by key) lie below ``left``'s key (or at it too)."""
    with native_errors("ore tree"):
        return _native.ore_rank(left, rights, inclusive)
