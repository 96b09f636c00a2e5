"""Rows of a batch in the order of a key's DET ciphertexts, so the server packs that key tight.

A narrow DET key (``veil.load.narrow_det``) holds random-looking integers of
20-23 bits whatever the plaintext's order: DuckDB bit-packs each run of 1,024
of them at their full width, where the plaintext keys, loaded in their own order,
take a few bits a row (``FOR``/``DELTA_FOR`` bit-packing of close values).
TPC-DS SF 1's inventory stored ``inv_item_sk`` in 31.3 MB (21 bits a row) against
8 MB plaintext; customer_demographics' ``cd_demo_sk`` 5.7 MB against 0.01 MB.

So the loader numbers the rows of each batch (``loader.BATCH_ROWS``) in the order
of one such key's ciphertexts: sorted, 1,024 consecutive ciphertexts span a
fraction of the range, and DuckDB stores their differences. Measured on one TPC-DS
SF 1 load (with the load's INSERTs in one transaction): customer_demographics 12.3 ->
9.4 MB; inventory's ``inv_item_sk`` 31.3 -> 16.3 MB, but its dictionary-compressed
8-byte columns (the quantity's DET and OPE, the warehouse's DET) grew by 12 MB, as
the source order kept runs of them that this order breaks: 75.5 -> 74.7 MB in all.
Only the order within
runs of rows the load orders otherwise changes (equal values of the table's
``sort_by`` column, ``veil.load.clusters``), so the row groups' ranges of that
column, and the ids' runs for key ranges, stay as they were.

What the server learns: the order of rows within a batch follows ciphertexts it
holds anyway, and no longer the source order there. Not for tables whose rows
something else orders: clustered ones (ASHE's runs of group keys), Paillier's
packs (built in source order in a second pass), re-keys (``in_source_order``),
nor tables with ASHE sums at all, whose source order usually keeps rows that share
many columns (TPC-DS's tickets, TPC-H's orders) together, which the server's
run-length encoding uses; and only where bit-packing pays: a DuckDB-like server.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from veil.ciphers.columns import ColumnCipher, column_cipher
from veil.crypto.keys import MasterKey
from veil.design.model import DET, Encryption, TableDesign
from veil.encoding import encode
from veil.load.narrow_det import NARROW_PARAM

# Below these, what the order saves is a few kilobytes: keep the source order.
MIN_ROWS = 100_000
MIN_DISTINCT = 4096


def key_of(table: TableDesign, rows: int | None) -> Encryption | None:
    """The narrow DET column of ``table`` with the most distinct values, if it qualifies."""
    if table.hom is not None or table.sums is not None or table.cluster_by:
        return None
    if rows is None or rows < MIN_ROWS:
        return None
    keys = [
        e
        for e in table.encryptions
        if e.scheme == DET
        and not e.is_expression
        and not e.onion
        and isinstance(e.params.get(NARROW_PARAM), int)
        and e.source != table.sort_by
        and isinstance(e.params.get("distinct"), int)
    ]
    if not keys:
        return None
    best = max(keys, key=lambda e: (int(str(e.params["distinct"])), e.source))
    return best if int(str(best.params["distinct"])) >= MIN_DISTINCT else None


class CipherOrder:
    """Reorders batches of one table's plaintext rows (see the module)."""

    def __init__(self, master: MasterKey, table: TableDesign, key: Encryption):
        self._key = key
        self._cipher: ColumnCipher = column_cipher(master, key)
        ordered = table.column(table.sort_by) if table.sort_by else None
        self._runs_of = ordered.name if ordered is not None else None
        self._sort_type = ordered.sql_type if ordered is not None else None

    def reorder(self, plain: pa.Table) -> pa.Table:
        """``plain``'s rows, ordered by the key's ciphertexts within runs of equal
        ``sort_by`` values (NULL keys last in their run)."""
        if len(plain) < 2:
            return plain
        ciphertexts = self._ciphertexts(plain.column(self._key.source))
        order = np.lexsort((ciphertexts, self._runs(plain)))
        return plain.take(pa.array(order))

    def _ciphertexts(self, column: pa.ChunkedArray) -> np.ndarray:
        """The key's ciphertexts as int64, NULL as the largest; each distinct value
        encrypted once (DET: equal values, equal ciphertexts)."""
        encoded = encode(column, self._key.sql_type)
        combined = encoded.combine_chunks() if isinstance(encoded, pa.ChunkedArray) else encoded
        dictionary = combined.dictionary_encode()
        sealed = self._cipher.encrypt(dictionary.dictionary)
        values = np.asarray(pa.array(sealed).cast(pa.int64()).fill_null(np.iinfo(np.int64).max))
        indices = dictionary.indices.fill_null(len(values)).to_numpy(zero_copy_only=False)
        return np.append(values, np.iinfo(np.int64).max)[indices]

    def _runs(self, plain: pa.Table) -> np.ndarray:
        """Each row's run of equal ``sort_by`` values (0 for all without one)."""
        if self._runs_of is None or self._sort_type is None:
            return np.zeros(len(plain), dtype=np.int64)
        column = plain.column(self._runs_of)
        encoded = encode(column, self._sort_type)
        array = encoded.combine_chunks() if isinstance(encoded, pa.ChunkedArray) else encoded
        nulls = np.asarray(array.is_null())
        values = np.asarray(array.fill_null(0).cast(pa.int64()))
        changed = (values[1:] != values[:-1]) | (nulls[1:] != nulls[:-1])
        return np.concatenate([[0], np.cumsum(changed)])
