"""Where a Veil server's bytes go: each plaintext table's main-table bytes by kind of column.

``veil bench tpch|tpcds`` counts every server byte per table (``analytic.measure_space``);
this splits a main table's bytes by what its columns hold: each scheme's copies (DET, OPE,
RND, SEARCH, JOIN), ASHE's words and flags, the row ids. On DuckDB only (the server that
tells a column's share of its table, ``DuckDBBackend.column_bytes``); elsewhere nothing.
A space goal is met or missed by these kinds (TPC-DS SF 1's store_sales: OPE copies,
ASHE words, DET keys), not by one query, so the JSON keeps them beside the tables.
"""

from __future__ import annotations

from collections import Counter

from veil.backends import connect
from veil.design.model import PhysicalDesign, TableDesign

ROW_ID = "row id"
ASHE_WORDS = "ASHE words"
ASHE_FLAGS = "ASHE flags"


def bytes_by_kind(url: str, design: PhysicalDesign) -> dict[str, dict[str, int]]:
    """``{table: {kind: bytes}}`` of each table's main server table (empty off DuckDB)."""
    backend = connect(url)
    try:
        shares = getattr(backend, "column_bytes", None)
        if shares is None:
            return {}
        found: dict[str, dict[str, int]] = {}
        for table in design.tables.values():
            kinds = column_kinds(table)
            totals = Counter[str]()
            for column, share in shares(table.server_name).items():
                totals[kinds.get(column, "other")] += round(share)
            found[table.name] = dict(totals.most_common())
        return found
    finally:
        backend.close()


def column_kinds(table: TableDesign) -> dict[str, str]:
    """Each server column of ``table``'s main table and what it holds."""
    kinds = {e.name: e.scheme for e in table.encryptions}
    kinds[table.row_id] = ROW_ID
    if table.sums is not None:
        kinds.update({word: ASHE_WORDS for words in table.sums.columns for word in words})
        if table.sums.overflow_column:
            kinds[table.sums.overflow_column] = ASHE_FLAGS
    if table.hom is not None:
        kinds.setdefault(table.hom.slot_column, "HOM slot")
    return kinds
