"""A server join's ASHE sums: (keys, block) rows -> one row per group, split among the scans.

The server joins, groups by the query's keys and by block of 64 row ids of
the summed scan, and returns per such row the other aggregates, the block's
mask of ids, how many joined rows it gathered and the sums of the word
columns (``veil.sql.remote.joined_statement``). A pad is removed once per
id, so the sums are exact only when the join gave each summed row at most
one partner in its group: then the mask has a bit per joined row. A row
whose count exceeds its mask's bits summed some id twice (a join that
repeats rows, which the planner's key statistics did not foresee):
``RepeatedRowsError``, and the session plans again without sums over joins.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from veil.errors import VeilError
from veil.exec.ashe_sums import as_words, present_count, unpadded_sums
from veil.exec.hom_fetch import reaggregate
from veil.sql.plan import JOIN_ROW, Aggregation, JoinGroup, Scan

if TYPE_CHECKING:
    from veil.ciphers.cache import CipherCache

_KEY = "__veil_key_{}"


class RepeatedRowsError(VeilError):
    """A server join summed some row twice in one group: its ASHE pads do not cancel."""


def finish_joined_sums(
    parts: list[tuple[Scan, pa.Table]], tail: pa.Table, groups: JoinGroup, ciphers: CipherCache
) -> dict[str, pa.Table]:
    """Each scan's local table: one row per group, paired with the others' by ``JOIN_ROW``.

    ``parts``: each scan's decrypted keys and aggregates, a row per (group, block);
    ``tail``: the server's block, mask, joined rows and word sums of those rows.
    """
    summed = groups.summed
    assert summed is not None
    blocks, masks, joined = tail.column(0), tail.column(1), tail.column(2)
    ids = np.bitwise_count(as_words(masks, np.uint64))
    if (ids != joined.to_numpy().astype(np.uint64)).any():
        raise RepeatedRowsError(
            "the server join repeated a summed row within a group; planning again without sums over joins"
        )
    words = groups.ashe_words()
    totals = {name: tail.column(3 + i) for i, name in enumerate(words)}
    table = summed.table
    sums, counters = unpadded_sums(
        table, groups.ashe_sources(), ciphers.ashe(table), blocks, masks, totals
    )
    by_scan = {id(scan): plain for scan, plain in parts}
    columns = {
        _KEY.format(i): by_scan[id(scan)].column(column)
        for i, (scan, column, _) in enumerate(groups.keys)
    }
    for scan, item in groups.items:
        name = groups.local_name(item.key)
        if item.kind == "SUM":
            assert item.ashe_index is not None
            columns[name] = sums[item.ashe_index]
        else:
            columns[name] = present_count(by_scan[id(scan)].column(name), item, counters)
    keys = [_KEY.format(i) for i in range(len(groups.keys))]
    items = [item for _, item in groups.items]
    grouped = reaggregate(pa.table(columns), Aggregation(keys=keys, items=items))
    row_numbers = pa.array(np.arange(grouped.num_rows, dtype=np.int64))
    tables = {}
    for scan, _ in parts:
        own = {
            column: grouped.column(_KEY.format(i))
            for i, (owner, column, _) in enumerate(groups.keys)
            if owner is scan
        }
        for owner, item in groups.items:
            if owner is scan:
                name = groups.local_name(item.key)
                own[name] = grouped.column(name)
        tables[scan.local_name] = pa.table({**own, JOIN_ROW: row_numbers})
    return tables
