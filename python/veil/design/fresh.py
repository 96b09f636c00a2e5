"""A design file made for loading: the same encryptions under fresh names, statistics left out.

``veil design`` writes a design (which encryptions each table stores); ``veil
load --design FILE`` loads the data under it. The file's server names may be
those of the client directory it was made from, so the load gives every
table, column and side table a fresh opaque name (a reload never collides
with, or reveals a link to, the tables already there) and fresh ASHE keys
(row ids restart with a load, so ASHE's one-time pads must too). The load's
statistics (distinct counts, quantiles, mean lengths, DET integers stored as
bytes) are the data's, so they are measured again, not copied.
"""

from __future__ import annotations

import copy

from veil.design.model import BLOCKS, Encryption, PhysicalDesign, TableDesign, opaque_name

# what ``veil load`` measures of the data (``veil.load.loader``): no cipher depends on these
DATA_STATISTICS = ("distinct", "quantiles", "mean_bytes", "kept", "unique", "zones", "zone_rows")
# ... and everything it records from the data, not the design's choice
LOAD_STATISTICS = (*DATA_STATISTICS, "form")
# how the load stored a column's ciphertexts (bytes, bit-packed): a constant compared with
# it must be encrypted alike
STORED_FORMS = ("form", "narrow_bits")


def fresh_design(design: PhysicalDesign, key_fingerprint: str) -> PhysicalDesign:
    """``design``'s encryptions under new server names and ``key_fingerprint``'s keys."""
    fresh = PhysicalDesign(key_fingerprint)
    for name, table in design.tables.items():
        fresh.tables[name] = _fresh_table(table)
    return fresh


def _fresh_table(table: TableDesign) -> TableDesign:
    fresh = copy.deepcopy(table)
    fresh.server_name, fresh.row_id = opaque_name("t"), opaque_name("c")
    fresh.id_counter = opaque_name("t")
    fresh.row_count = 0
    fresh.peeling = False  # a peel of the old copy, not of this one
    fresh.encryptions = [_fresh_encryption(e) for e in table.encryptions]
    fresh.blocks_table = (
        opaque_name("t") if any(e.scheme == BLOCKS for e in fresh.encryptions) else ""
    )
    fresh.layers_table = opaque_name("t") if table.layers_table else ""
    if fresh.sums is not None:
        fresh.sums.columns = [[opaque_name("c") for _ in words] for words in fresh.sums.columns]
        fresh.sums.key_scope = f"ashe:{opaque_name('s')}"
        if fresh.sums.overflow_column:
            fresh.sums.overflow_column = opaque_name("c")
    if fresh.hom is not None:
        fresh.hom.server_name, fresh.hom.slot_column = opaque_name("t"), fresh.row_id
    return fresh


def _fresh_encryption(enc: Encryption) -> Encryption:
    fresh = copy.deepcopy(enc)
    fresh.name = opaque_name("c")
    fresh.params = {k: v for k, v in enc.params.items() if k not in LOAD_STATISTICS}
    return fresh
