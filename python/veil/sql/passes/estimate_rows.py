"""Pass: how many rows each plain scan's statement returns, from the load's statistics.

The cost model (``veil.exec.cost``) prices a statement by the rows it returns.
The server's optimizer estimates them over ciphertexts, where DuckDB's
estimates of filtered scans are often far off (one row for a range on an OPE
column); the client's statistics of the plaintext (``veil.sql.selectivity``:
DET distinct counts, OPE quantiles, recorded at load) know better. A scan
keeps the share of its table its exact server filters keep, and a semi-join
reduction the share its partners' filters keep (``_reduced_share``); bind
filters, which thin it further by keys only the client knows, are left out
(so the estimate errs high). Server joins carry their own (``pushdown_joins``);
an aggregated scan's groups are left to the server's estimate, the rows it
groups are ``kept_rows`` (ASHE's blocks of ids are at most that many).
"""

from __future__ import annotations

import logging
import math

from veil.sql.join_rows import read_share
from veil.sql.plan import JoinEdge, Scan
from veil.sql.selectivity import kept_share
from veil.sql.state import PlanState

log = logging.getLogger(__name__)


def estimate_rows(state: PlanState) -> PlanState:
    for scan in state.scans.values():
        try:
            scan.read_share = read_share(scan, state)
        except Exception:  # an estimate never costs the plan its pushdown: unknown instead
            log.debug("no read share for scan %s", scan.alias, exc_info=True)
        if scan.joined is not None:
            continue
        try:
            share = _own_share(scan, state) * _reduced_share(scan, state)
        except Exception:  # an estimate never costs the plan its pushdown: unknown instead
            log.debug("no row estimate for scan %s", scan.alias, exc_info=True)
            continue
        if scan.aggregation is None:
            scan.estimated_rows = scan.table.row_count * share
        else:  # it returns groups (the server's estimate); the rows they gather
            scan.kept_rows = scan.table.row_count * share
    return state


def _own_share(scan: Scan, state: PlanState) -> float:
    """The share of the scan's rows its exact server filters keep."""
    nodes = [p.node for p in scan.predicates if p.exact and p.node is not None]
    return kept_share(nodes, scan, state.resolved, state.ctx)


def _reduced_share(scan: Scan, state: PlanState) -> float:
    """The share of the scan's rows its semi-join reduction keeps.

    Walking out from the scan along the reduction's joins, each partner keeps
    the share of its own filters (and of the partners beyond it). Joined to a
    smaller table (a foreign key to its key), a row survives with its one
    partner row's chance; to a larger one, with any of its ``fanout`` rows'
    (``1 - (1 - p) ** fanout``). TPC-H Q17's lineitem, reduced by part's brand
    and container (1 in 1,000 parts), was priced at six million rows for 6,000.
    """
    reduction = scan.reduction
    if reduction is None:
        return 1.0
    return _partners_share(scan, reduction.edges, {id(scan)}, state)


def _partners_share(scan: Scan, edges: list[JoinEdge], seen: set[int], state: PlanState) -> float:
    share = 1.0
    for edge in edges:
        if edge.left is scan or edge.right is scan:
            other = edge.right if edge.left is scan else edge.left
            if id(other) in seen:
                continue
            seen.add(id(other))
            kept = _own_share(other, state) * _partners_share(other, edges, seen, state)
            fanout = other.table.row_count / max(scan.table.row_count, 1)
            share *= -math.expm1(max(fanout, 1.0) * math.log1p(-min(kept, 1.0 - 1e-12)))
    return share
