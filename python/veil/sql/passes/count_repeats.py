"""Pass: a fetch of few distinct rows returns each once, with how many rows it stands for.

A fetch whose columns are all deterministic ciphertexts (DET or OPE, equal
values: equal ciphertexts) and whose rows repeat a lot is grouped on the
server by every column it returns, with ``COUNT(*)``; the client decrypts
each distinct row once and repeats it that many times (``np.repeat``), so
the local plan sees exactly the rows the plain fetch would have sent, in
another order (TPC-H Q12: 30,000 joined (ship mode, order priority) rows
are 35 distinct ones)::

    SELECT j0.c_mode, j1.c_prio FROM t_li AS j0, t_ord AS j1 WHERE ...
      ->  SELECT j0.c_mode, j1.c_prio, COUNT(*) FROM ... WHERE ...
          GROUP BY j0.c_mode, j1.c_prio

Unlike ``pushdown_aggregates`` this needs nothing of the query's aggregates
(CASE inside SUM, DISTINCT, windows, no aggregate at all): the local plan is
unchanged. It reveals nothing new: the server could group the stored DET
and OPE columns itself, and it already sees which rows the filters keep.

Chosen when the product of the columns' distinct counts (recorded at load)
is at most 1/``_REPEATS`` of the rows the fetch is estimated to return.
Fetches with row ids (RND values, DML), aggregated or grouped fetches, and
fetches another shares (``share_fetches``) are left alone.
"""

from __future__ import annotations

from veil.design.model import BLOCKS, DET, OPE, Encryption
from veil.sql.plan import Scan
from veil.sql.selectivity import distinct_rows
from veil.sql.state import PlanState

# Distinct rows at most this share of the rows: grouping on the server costs
# about what sending the rows does, so only a large cut pays.
_REPEATS = 8


def count_repeats(state: PlanState) -> PlanState:
    scans = list(state.scans.values())
    shared = {id(s) for s in scans if s.same_rows is not None}
    shared |= {id(s.same_rows) for s in scans if s.same_rows is not None}
    for scan in scans:
        if scan.joined is None:
            if _countable([scan], shared, scan.estimated_rows):
                scan.counted = True
        elif scan is scan.joined.scans[0] and scan.joined.groups is None:
            fetch = scan.joined
            if _countable(fetch.scans, shared, fetch.estimated_rows):
                fetch.counted = True
    return state


def _countable(scans: list[Scan], shared: set[int], rows: float | None) -> bool:
    if rows is None or any(id(s) in shared for s in scans):
        return False
    if any(s.aggregation is not None or s.with_row_id for s in scans):
        return False
    encs = [enc for scan in scans for _, enc in scan.fetched()]
    if not encs or not all(_deterministic(enc) for enc in encs):
        return False
    distinct = distinct_rows(encs)
    return distinct is not None and distinct * _REPEATS <= rows


def _deterministic(enc: Encryption | None) -> bool:
    """Equal values have equal ciphertexts in it (so GROUP BY groups values)."""
    return (
        enc is not None and enc.scheme in (DET, OPE) and not enc.row_bound and enc.scheme != BLOCKS
    )
