"""Pass: how many rows each plain scan's statement returns, from the load's statistics.

The cost model (``veil.cost.model``) prices a statement by the rows it returns.
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
from math import prod

from veil.sql.join_rows import (
    kept_share_of,
    read_share,
    reduced_share,
    scanned_share_of,
    zone_share,
)
from veil.sql.plan import JoinedFetch
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
    joined = {id(s.joined): s.joined for s in state.scans.values() if s.joined is not None}
    for fetch in joined.values():
        try:
            _reduce_joined(fetch, state)
        except Exception:  # an estimate never costs the plan its pushdown: left as it was
            log.debug("no reduced rows for a server join", exc_info=True)
    return state


def _reduce_joined(fetch: JoinedFetch, state: PlanState) -> None:
    """A server join's rows thinned by its members' semi-join reductions from outside it
    (``pushdown_joins`` counted its members' own filters): TPC-H Q2's region, nation,
    supplier and partsupp, reduced by the parts of size 15 and type ``%BRASS``, return 642
    rows, priced at 160,000 without them."""
    share = prod(reduced_share(s, state) for s in fetch.scans if s.reduction is not None)
    if share >= 1.0 or fetch.joined_rows is None:
        return
    fetch.joined_rows *= share
    if fetch.estimated_rows is not None:
        fetch.estimated_rows = min(fetch.estimated_rows, fetch.joined_rows)
