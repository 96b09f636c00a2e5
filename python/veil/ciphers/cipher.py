"""What every column cipher does (``veil.ciphers.columns`` makes them)."""

from __future__ import annotations

from typing import Protocol

import pyarrow as pa


class ColumnCipher(Protocol):
    def encrypt(self, encoded: pa.Array) -> pa.Array: ...

    def decrypt(self, stored: pa.Array) -> pa.Array: ...

    def encrypt_one(self, encoded: int | bytes) -> int | bytes: ...
