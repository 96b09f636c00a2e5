"""MiniCrypt: encrypted, compressed key-value packs over unmodified stores.

``veil.kv.open(url, key_file, mode=...)`` returns a :class:`Store`; see
:mod:`veil.kv.store` and ``docs/kv.md``.
"""

from veil.kv.store import Store, open

__all__ = ["Store", "open"]
