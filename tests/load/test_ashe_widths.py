"""The ASHE flags word keeps a NULL counter only where the server cannot count by columns.

Where the server bit-packs integers (DuckDB), each 7-bit counter of the flags
word costs 7 bits a row: a summed source whose every column has a per-row
server column is counted by testing those instead (``veil.sql.sums``); one
read only inside sums (sealed in blocks, as TPC-H's l_tax) keeps its counter.
"""

from __future__ import annotations

from veil.ciphers.columns import available_schemes
from veil.design.model import BLOCKS, FLAG_FIELD_BITS, Column
from veil.designer.greedy import greedy_design
from veil.load import ashe_widths

SCHEMA = {
    "t": [
        Column("k", "INTEGER"),
        Column("x", "DECIMAL(15,2)"),
        Column("y", "DECIMAL(15,2)"),
        Column("z", "INTEGER"),
        Column("w", "INTEGER"),
    ]
}
WORKLOAD = [
    "SELECT k, SUM(x * (1 + y)), SUM(z), SUM(w) FROM t GROUP BY k",
    "SELECT k, z, w FROM t WHERE z > 3",
]


def test_only_sources_sealed_in_blocks_keep_a_counter() -> None:
    table = greedy_design(SCHEMA, WORKLOAD, available_schemes(), "").tables["t"]
    sums = table.sums
    assert sums is not None
    assert {e.scheme for e in table.encryptions_of("y")} == {BLOCKS}
    # fitted to data where every source had NULLs but w
    profile: ashe_widths.Profile = [
        (-5 if s != "w" else 0, 5, 0 if s == "w" else 3) for s in sums.sources
    ]
    ashe_widths.fit(table, profile)
    assert sums.null_fields is not None and sorted(f for f in sums.null_fields if f) == [1, 2]
    ashe_widths.count_on_columns(table)
    fields = dict(zip(sums.sources, sums.null_fields, strict=True))
    assert fields == {"x * (1 + y)": 1, "z": None, "w": 0}
    assert sums.overflow_bits == FLAG_FIELD_BITS * 2


def test_a_design_not_fitted_to_data_keeps_its_fields() -> None:
    table = greedy_design(SCHEMA, WORKLOAD, available_schemes(), "").tables["t"]
    assert table.sums is not None
    before = list(table.sums.null_fields or [])
    ashe_widths.count_on_columns(table)
    assert table.sums.null_fields == before
