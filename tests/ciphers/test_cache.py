"""A session's cipher cache answers an encryption object from its memo only while the
object is as it was (issue 41: the memo skips building the cache key)."""

from __future__ import annotations

import pyarrow as pa

from veil.ciphers.cache import CipherCache
from veil.crypto.keys import MasterKey
from veil.design.model import DET, Encryption, TableDesign


def _table(enc: Encryption, server_name: str = "t_1") -> TableDesign:
    return TableDesign("t", server_name, "c_id", [], [enc])


def test_the_same_object_gets_the_same_cipher() -> None:
    cache = CipherCache(MasterKey(b"\x05" * 32))
    enc = Encryption("c_a", "a", DET, "BIGINT", "s1")
    table = _table(enc)
    assert cache.get(table, enc) is cache.get(table, enc)


def test_a_change_in_place_gets_its_own_cipher() -> None:
    """A peel changes an encryption's params in place; a key scope may change too: the
    memo must not answer with the cipher made before."""
    cache = CipherCache(MasterKey(b"\x05" * 32))
    enc = Encryption("c_a", "a", DET, "BIGINT", "s1")
    table = _table(enc)
    before = cache.get(table, enc)
    enc.params["form"] = "bytes"
    changed = cache.get(table, enc)
    assert changed is not before
    enc.params.pop("form")
    assert cache.get(table, enc) is before  # made of the same again: the first one
    enc.key_scope = "s2"
    other = cache.get(table, enc)
    assert other is not before
    values = pa.array([1, 2, 3], pa.int64())
    assert not other.encrypt(values).equals(before.encrypt(values))


def test_another_table_gets_its_own_cipher() -> None:
    cache = CipherCache(MasterKey(b"\x05" * 32))
    enc = Encryption("c_a", "a", "RND", "BIGINT", "s1")
    assert cache.get(_table(enc, "t_1"), enc) is not cache.get(_table(enc, "t_2"), enc)
