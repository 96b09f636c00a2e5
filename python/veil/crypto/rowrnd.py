"""Row-bound RND: a table column's values encrypted under their row's id.

A Veil table's row ids are never used twice (``veil.session.row_ids``), so the
row id can serve as the nonce of a stream cipher: a value is stored as
``value XOR keystream(row id)`` (AES-256 in counter mode, the construction in
``rust/veil-kernels/src/rowrnd.rs``). An encoded number stays an 8-byte
BIGINT and a string keeps its length, where AES-GCM RND (``veil.crypto.rnd``)
adds 29 bytes and makes every number a 37-byte BLOB.

Leakage is RND's: lengths and NULLs. Unlike AES-GCM it does not authenticate
(answers' integrity is out of Veil's scope, see docs/security.md), and it is
secure only while no (key, row id) pair encrypts two values: the caller
derives the key with the table's load-unique server name in its scope, since
a reloaded table numbers its rows from 0 again. The version is in the key
label (``rowrnd-v1``): a raw ciphertext has no room for a version byte.

The XOR itself is :func:`veil.crypto.server_ops.xor_row_keystream`: the
server runs it too, to peel an onion layer under a layer key the client
reveals (:func:`veil.crypto.server_ops.layer_xor`).
"""

from __future__ import annotations

from typing import NoReturn

import numpy as np
import pyarrow as pa

from veil import _native
from veil.crypto._native_errors import native_errors
from veil.crypto.keys import KeyLabel, MasterKey
from veil.crypto.server_ops import xor_row_keystream, xor_row_keystreams
from veil.errors import ParameterError

VERSION = 1
KEY_LABEL = f"rowrnd-v{VERSION}"
KEY_BYTES = 32


class RowRnd:
    """A row-bound RND key: encrypts and decrypts Arrow columns under row ids."""

    __slots__ = ("_cipher", "column")

    def __init__(self, key: bytes, *, column: str | None = None):
        self.column = column
        with native_errors(column=column):
            self._cipher = _native.RowRndKey(bytes(key))

    @classmethod
    def from_master(cls, master: MasterKey, scope: str, column: str | None = None) -> RowRnd:
        return cls(master.derive(KeyLabel(KEY_LABEL, scope), KEY_BYTES), column=column)

    def encrypt(self, ids: np.ndarray, values: pa.Array) -> pa.Array:
        """int64 values -> int64 ciphertexts; binary or string -> binary. NULL stays NULL."""
        return xor_row_keystream(self._cipher, ids, values, column=self.column)

    def decrypt(self, ids: np.ndarray, ciphertexts: pa.Array) -> pa.Array:
        """The inverse of ``encrypt``: int64 back to int64, binary to binary."""
        return xor_row_keystream(self._cipher, ids, ciphertexts, column=self.column)

    def __repr__(self) -> str:
        return f"RowRnd(version={VERSION}, column={self.column!r})"

    def __reduce__(self) -> NoReturn:
        raise TypeError("a RowRnd instance holds a key and is not picklable")


def xor_columns(ids: np.ndarray, columns: list[tuple[RowRnd, pa.Array]]) -> list[pa.Array]:
    """Several columns of the same rows, each encrypted or decrypted under its own key,
    in one native call: for a few rows, where a call per column costs more than its AES
    work (issue 41). Equal, column by column, to ``RowRnd.decrypt``."""
    return xor_row_keystreams(ids, [(key._cipher, values) for key, values in columns])


def reseal_columns(
    old_ids: np.ndarray, new_ids: np.ndarray, columns: list[tuple[RowRnd, pa.Array]]
) -> list[pa.Array]:
    """Stored values of several columns carried from their rows' ids ``old_ids`` to
    ``new_ids`` in one native call: each XOR the keystreams of both, which is what
    decrypting and encrypting it again gives (issue 41: a point UPDATE's unassigned
    columns). Equal, column by column, to ``encrypt(new_ids, decrypt(old_ids, v))``."""
    if len(old_ids) != len(new_ids):
        raise ParameterError(
            f"row-bound RND needs one new row id per old one; got {len(old_ids)} and {len(new_ids)}"
        )
    pairs = [(key._cipher, values) for key, values in columns]
    return xor_row_keystreams(old_ids, pairs, to_ids=new_ids)
