"""What hash tables past the caches and index lookups take, beyond the optimizer's units.

PostgreSQL prices a row built into a hash table at a few thousandths of a
unit, the same at any size; on ciphertext keys, scattered over their range,
a table of a million rows outgrows the caches and each insert and later
lookup misses them: TPC-H Q22's anti-join built 1.5M order keys in 180 ms,
priced at 10. So a built row costs its units plus, for the share of its
table out of the caches (``server_time.spilled_share``), a rate measured
here: a self-join building a quarter of a table's rows on a stored key of
near-unique ciphertexts, its time beyond its units' over those rows. A
nested loop's index lookups are priced as cached pages too (Q7's 121,324
lookups into lineitem took 0.37 s, priced at 0.03): each of its outer rows
costs a second rate, from the same join with hash joins off.
"""

from __future__ import annotations

from veil.backends.base import quote
from veil.cost.context import CostContext
from veil.cost.server_time import plan_work
from veil.cost.timing import fastest
from veil.design.model import DET

_MIN_ROWS = 100_000  # smaller tables' hash tables stay in the caches: nothing to measure


def hash_and_lookup_ns(session: CostContext, statement: float, per_cost: float) -> dict[str, float]:
    """Nanoseconds per built row past the caches (``build``) and per index lookup of a
    nested loop (``lookup``: the same join with hash joins off), beyond the cost units;
    empty where the server prices no plan's nodes, or no table has a near-unique DET key
    of enough rows."""
    settings = getattr(session.backend, "settings", None)  # PostgreSQL's
    if settings is None:
        return {}
    best = None
    for table in session.design.tables.values():
        if table.row_count < _MIN_ROWS:
            continue
        for enc in table.encryptions:
            distinct = enc.params.get("distinct")
            unique = isinstance(distinct, int) and distinct >= 0.9 * table.row_count
            keyed = enc.scheme == DET and enc.sql_type.is_integral and not enc.outer and unique
            if keyed and (best is None or table.row_count > best[0].row_count):
                best = (table, enc)
    if best is None:
        return {}
    table, enc = best
    name, key, row_id = quote(table.server_name), quote(enc.name), quote(table.row_id)
    # the first quarter of the rows by id (a range the optimizer estimates right, where it
    # took ``id % 4 = 0`` for 0.5% and looped over an index), their keys scattered
    quarter = table.row_count // 4
    sql = (
        f"SELECT count(*) FROM {name} AS a JOIN (SELECT {key} AS k FROM {name} "
        f"WHERE {row_id} < {quarter}) AS b ON a.{key} = b.k"
    )
    found: dict[str, float] = {}
    off = {"enable_hashjoin": "off", "enable_mergejoin": "off"}
    for kind, values in (("build", {}), ("lookup", off)):
        with settings(values):
            rate = _rate(session, sql, statement, per_cost, kind)
        if rate is None:
            return {}
        found[kind] = rate
    return found


def _rate(
    session: CostContext, sql: str, statement: float, per_cost: float, kind: str
) -> float | None:
    """Nanoseconds per unit of ``kind``'s work in ``sql`` beyond its cost units; None where
    the server prices no plan's nodes."""
    backend = session.backend
    estimate = backend.estimate(sql)
    if estimate.operators is None or not estimate.costed_operators:
        return None
    work = plan_work(estimate.operators)
    units = work.built_spill if kind == "build" else work.lookups
    if units <= 0:  # the plan has none of that work (a small table's, in the caches)
        return 0.0
    backend.execute(sql)  # warm: the table's pages in the server's buffers
    spent = fastest(lambda: backend.execute(sql)) - statement
    return max(spent - work.cost * per_cost, 0.0) / units * 1e9
