"""Pass: keep only the semi-join reductions worth their server join.

``reduce_joins`` gives a scan a reduction whenever its join partners filter
on the server. Two kinds cost more than they save, and this pass, run once
the server joins are chosen, trims them:

- a scan fetched inside a server join (``pushdown_joins``): the join already
  does the part of its reduction among the joined scans; only the scans
  outside it that hang off this scan are left (TPC-H Q7: customer's nation),
  or nothing;
- a small table reduced by a join over far larger ones: a table with less
  than 1% of the rows of the reduction's other tables is fetched whole (Q7's
  25-row nation scans each ran lineitem's six-million-row join to drop a few
  rows);
- a small fetch reduced the same way: a scan whose own filters keep fewer
  bytes than half the rows of the reduction's other tables (on DuckDB; five
  times their rows on PostgreSQL) is fetched with those filters alone. The
  server's semi-join reads every row of its partners to drop at most the
  fetch's rows, and a fetched byte costs the client about what two scanned
  rows cost DuckDB, a fifth of one PostgreSQL
  (``Backend.scanned_rows_per_byte``; TPC-DS q07's 366 dates of 2000, 6 KB, ran a five-table join over store_sales, 16.5 of the query's
  38 server ms at SF 0.1, to keep 46 of them; q43's 366 kept all 366);
- a reduction that by the load's statistics keeps (nearly) every row
  (``join_rows.reduced_share``): its partners have no filter and hold every
  key. It only costs, and the server's own estimate of it may be far off:
  under an ILP design PostgreSQL expected Q9's lineitem, reduced by partsupp
  on two keys, to keep 2,454 rows, and probed lineitem by row id six million
  times (44.5 s).

Dropping a reduction, or part of one, only lets more rows reach the client,
whose local plan joins and filters exactly. Scans aggregated on the server
keep theirs (the reduction decides which groups they return).
"""

from __future__ import annotations

import logging
import math

from veil.sql.join_rows import reduced_share, scanned_share_of
from veil.sql.plan import Reduction, Scan
from veil.sql.state import PlanState
from veil.sql.widths import encryption_width

log = logging.getLogger(__name__)

_MIN_SHARE = 100  # a reduced table holds at least 1/_MIN_SHARE of the others' rows
_KEEPS_ALL = 0.99  # a reduction estimated to keep this share of the rows is dropped


def trim_reductions(state: PlanState) -> PlanState:
    for scan in state.scans.values():
        if scan.reduction is None or scan.aggregation is not None:
            continue
        if scan.joined is not None:
            scan.reduction = _outside(scan.reduction, scan, scan.joined.scans)
        if scan.reduction is not None and not _worth_it(scan, scan.reduction, state):
            scan.reduction = None
        if scan.reduction is not None and _keeps_all(scan, state):
            scan.reduction = None
        if scan.reduction is not None:  # the form its statement takes on this server
            scan.reduction.by_exists = state.ctx.semi_joins_by_exists()
    return state


def _keeps_all(scan: Scan, state: PlanState) -> bool:
    try:
        return reduced_share(scan, state) >= _KEEPS_ALL
    except Exception:  # an estimate that fails keeps the reduction
        log.debug("no reduced share for scan %s", scan.alias, exc_info=True)
        return False


def _worth_it(scan: Scan, reduction: Reduction, state: PlanState) -> bool:
    """Row counts from the load (0 when unknown, which keeps the reduction)."""
    others = sum(o.table.row_count for o in reduction.scans if o is not scan)
    if scan.table.row_count * _MIN_SHARE < others:
        return False
    return _filtered_bytes(scan, state) * state.ctx.scanned_rows_per_byte() >= others


def _filtered_bytes(scan: Scan, state: PlanState) -> float:
    """What the scan fetches with its own exact server filters alone (unbounded, which
    keeps the reduction, when the estimate fails)."""
    try:
        width = max(8.0, sum(encryption_width(enc) for _, enc in scan.fetched()))
        return scan.table.row_count * scanned_share_of(scan, state) * width
    except Exception:  # an estimate that fails keeps the reduction
        log.debug("no filtered rows for scan %s", scan.alias, exc_info=True)
        return math.inf


def _outside(reduction: Reduction, target: Scan, members: list[Scan]) -> Reduction | None:
    """The part of a joined scan's reduction that its server join does not do."""
    inside = {id(m) for m in members if m is not target}
    edges = [e for e in reduction.edges if id(e.left) not in inside and id(e.right) not in inside]
    part = reduction.part(target, edges)
    return part if len(part.scans) > 1 else None
