"""BLOCKS columns: a table's never-queried columns, stored as sealed blocks of rows.

The design stores a column that no query of the workload reads in blocks
(``veil.crypto.rowblocks``) in the table's side table
``blocks_table(c, first_id, row_count, payload)``: ``c`` numbers the
column (its place among the table's BLOCKS columns), a block holds its encoded values for the row ids
``first_id .. first_id + row_count - 1``. The loader writes blocks of
``BLOCK_ROWS`` rows; every INSERT and UPDATE writes the blocks of the fresh
ids it takes (row ids are never reused, so blocks are never rewritten). A
DELETE removes the main table's rows: a block's values for deleted ids are
never returned, and the space stays until the table is reloaded.

A scan fetching a BLOCKS column fetches the row ids in its place
(``TableDesign.stored_column``); the client reads the table's block index,
fetches the blocks covering those ids, opens them and takes the values.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from veil.crypto.keys import MasterKey
from veil.crypto.rowblocks import RowBlocks
from veil.design.model import BLOCKS, Encryption, TableDesign
from veil.distinct import distinct
from veil.errors import InternalError

BLOCK_ROWS = 8192  # rows per block at load: ~55 KB of TPC-H comments once compressed


def blocks_schema() -> pa.Schema:
    return pa.schema(
        [
            ("c", pa.int32()),
            ("first_id", pa.int64()),
            ("row_count", pa.int32()),
            ("payload", pa.binary()),
        ]
    )


def block_key(master: MasterKey, table: TableDesign, enc: Encryption) -> RowBlocks:
    """The key of one BLOCKS column, its blocks bound to the table's load-unique name."""
    return RowBlocks.from_master(master, enc.key_scope, f"{table.server_name}.{enc.name}")


def block_columns(table: TableDesign) -> list[Encryption]:
    return [e for e in table.encryptions if e.scheme == BLOCKS]


def block_number(table: TableDesign, enc: Encryption) -> int:
    """The side table's number for a BLOCKS column (``c``)."""
    return [e.name for e in block_columns(table)].index(enc.name)


def seal_blocks(
    table: TableDesign, keys: dict[str, RowBlocks], encoded: dict[str, pa.Array], first_id: int
) -> pa.Table:
    """Side-table rows for the encoded values of rows ``first_id``, ``first_id + 1``, ...

    ``keys`` and ``encoded`` are keyed by the columns' server names.
    """
    numbers = {e.name: i for i, e in enumerate(block_columns(table))}
    names, starts, counts, payloads = [], [], [], []
    for name, values in encoded.items():
        for offset in range(0, len(values), BLOCK_ROWS):
            part = values.slice(offset, BLOCK_ROWS)
            names.append(numbers[name])
            starts.append(first_id + offset)
            counts.append(len(part))
            payloads.append(keys[name].seal(first_id + offset, part))
    return pa.table(
        [
            pa.array(names, pa.int32()),
            pa.array(starts, pa.int64()),
            pa.array(counts, pa.int32()),
            pa.array(payloads, pa.binary()),
        ],
        schema=blocks_schema(),
    )


def covering_blocks(starts: np.ndarray, counts: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Indexes (into ``starts``, sorted) of the blocks holding ``ids``; each id must be held."""
    at = np.searchsorted(starts, ids, side="right") - 1
    held = (at >= 0) & (ids < starts[np.maximum(at, 0)] + counts[np.maximum(at, 0)])
    if not held.all():
        missing = int(ids[~held][0])
        raise InternalError(f"no block holds row id {missing}: the blocks table is incomplete")
    return distinct(at)


def values_at(opened: dict[int, pa.Array], ids: np.ndarray, value_type: pa.DataType) -> pa.Array:
    """The values of ``ids`` from the opened blocks (keyed by first id), in ``ids``' order."""
    chosen = sorted(opened)
    if not chosen:
        return pa.array([], value_type)
    first = np.array(chosen, dtype=np.int64)
    sizes = np.array([len(opened[s]) for s in chosen], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    at = np.searchsorted(first, ids, side="right") - 1
    positions = offsets[at] + (ids - first[at])
    joined = pa.concat_arrays([opened[s].cast(value_type) for s in chosen])
    return joined.take(pa.array(positions))
