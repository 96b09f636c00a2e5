"""Pass: how many rows each plain scan's statement returns, from the load's statistics.

The cost model (``veil.exec.cost``) prices a statement by the rows it returns.
The server's optimizer estimates them over ciphertexts, where DuckDB's
estimates of filtered scans are often far off (one row for a range on an OPE
column); the client's statistics of the plaintext (``veil.sql.selectivity``:
DET distinct counts, OPE quantiles, recorded at load) know better. A scan
keeps the share of its table its exact server filters keep, and a semi-join
reduction the share its partners' filters keep (``join_rows.reduced_share``); bind
filters, which thin it further by keys only the client knows, are left out
(so the estimate errs high). Server joins carry their own (``pushdown_joins``);
an aggregated scan's groups are left to the server's estimate, the rows it
groups are ``kept_rows`` (ASHE's blocks of ids are at most that many). Every
scan, a server join's too, records the rows its own filters keep
(``filtered_rows``): its table's scan returns them, whatever joins follow.
"""

from __future__ import annotations

import logging

from veil.sql.join_rows import (
    kept_share_of,
    read_share,
    reduced_share,
    scanned_share_of,
    zone_share,
)
from veil.sql.state import PlanState

log = logging.getLogger(__name__)


def estimate_rows(state: PlanState) -> PlanState:
    for scan in state.scans.values():
        try:
            scan.read_share = read_share(scan, state)
            scan.zone_share = zone_share(scan, state)
        except Exception:  # an estimate never costs the plan its pushdown: unknown instead
            log.debug("no read share for scan %s", scan.alias, exc_info=True)
        try:
            kept = kept_share_of(scan, state)
            scan.filtered_rows = scan.table.row_count * scanned_share_of(scan, state)
            if scan.joined is not None:
                continue
            share = kept * reduced_share(scan, state)
        except Exception:  # an estimate never costs the plan its pushdown: unknown instead
            log.debug("no row estimate for scan %s", scan.alias, exc_info=True)
            continue
        if scan.aggregation is None:
            scan.estimated_rows = scan.table.row_count * share
        else:  # it returns groups (the server's estimate); the rows they gather
            scan.kept_rows = scan.table.row_count * share
    return state
