"""MiniCrypt: encrypted, compressed key-value packs over unmodified stores.

``veil.kv.open(url, key_file, mode=...)`` returns a :class:`Store`; see
:mod:`veil.kv.open_store` and ``docs/kv.md``.
"""

from veil.kv.open_store import open
from veil.kv.store import Store

__all__ = ["Store", "open"]
