"""Pass: aggregates of one table under the same server filter become one statement.

TPC-DS q09 asks fifteen scalar subqueries of ``store_sales``, three per
quantity range: the range's row count, and the averages of two columns.
``pushdown_aggregates`` gives each its own statement, so the server scans
the same rows three times and the client unpads two sets of ASHE blocks.
The first aggregation now also computes the others' items, and the others'
scans read its local table (``Scan.same_rows``)::

    RemoteSQL 1: SELECT COUNT(*) FROM t_ss WHERE c_qty BETWEEN $1 AND $2
    RemoteSQL 2: SELECT COUNT(..), c_rid >> 6, BIT_OR(..), SUM(c_w0) .. WHERE c_qty BETWEEN $1 AND $2 ..
    RemoteSQL 3: SELECT COUNT(..), c_rid >> 6, BIT_OR(..), SUM(c_w1) .. WHERE c_qty BETWEEN $1 AND $2 ..
      ->  RemoteSQL 1: SELECT COUNT(*), COUNT(..), COUNT(..), c_rid >> 6, BIT_OR(..),
                       SUM(c_w0), SUM(c_w1) .. WHERE c_qty BETWEEN $1 AND $2 GROUP BY c_rid >> 6

Two aggregations share when they group the same table by the same keys under
the same server filter, text and parameters, so over the same rows: each
group's items are then the same whichever statement computes them. A count
computed per block of ids adds up to the count (``veil.exec.hom_fetch``
re-aggregates every item over the blocks). The later scan's local plan reads
its items under their new positions in the shared aggregation. Paillier
sums (their packs' masks are per statement), fetches whose statement
changes at run time (bind filters, reductions) and scans another's bind
filter reads are left alone.
"""

from __future__ import annotations

import re

from sqlglot import exp

from veil.sql.plan import Scan
from veil.sql.remote import numbered, scan_statement
from veil.sql.state import PlanState

_LOCAL = re.compile(r"^__veil_agg_(\d+)$")

Shape = tuple[str, tuple[str, ...], str, str]


def share_aggregates(state: PlanState) -> PlanState:
    scans = list(state.scans.values())
    sources = {id(s) for scan in scans for bind in scan.binds for s in bind.sources}
    first: dict[Shape, Scan] = {}
    for scan in scans:
        if id(scan) in sources or not _shareable(scan):
            continue
        shape = _shape(scan)
        theirs = first.setdefault(shape, scan)
        if theirs is not scan:
            _merge(scan, theirs)
    return state


def _shareable(scan: Scan) -> bool:
    aggregation = scan.aggregation
    if aggregation is None or aggregation.hom_product is not None:
        return False
    if scan.joined is not None or scan.same_rows is not None or scan.reduction is not None:
        return False
    return not (scan.binds or scan.with_row_id or scan.late or scan.counted)


def _shape(scan: Scan) -> Shape:
    """The table, the grouping keys, and the server filter's text and parameters."""
    assert scan.aggregation is not None
    where = scan_statement(scan).args.get("where")
    text, values = numbered(where) if where is not None else (None, [])
    rendered = text.sql(dialect="duckdb") if text is not None else ""
    return scan.table.server_name, tuple(scan.aggregation.keys), rendered, repr(values)


def _merge(mine: Scan, theirs: Scan) -> None:
    """``theirs`` computes ``mine``'s items too; ``mine``'s local plan reads them there."""
    ours, own = theirs.aggregation, mine.aggregation
    assert ours is not None and own is not None
    offset = len(ours.items)
    select = mine.node.find_ancestor(exp.Select) if mine.node is not None else None
    assert select is not None
    ours.items.extend(own.items)
    if own.id_bit is not None and ours.id_bit is None:  # the shared statement sums by block
        ours.id_bit, ours.word_sum = own.id_bit, own.word_sum
    for column in select.find_all(exp.Column):
        found = _LOCAL.match(column.name)
        if found is None or column.table != mine.alias:
            continue
        if column.find_ancestor(exp.Select) is select:
            column.set("this", exp.to_identifier(f"__veil_agg_{int(found.group(1)) + offset}"))
    mine.same_rows = theirs
