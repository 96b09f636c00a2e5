"""Pass: the range of a filtered dimension's keys, sent to the fact table ordered by them.

A date-range star join (TPC-DS q16: catalog_sales joined to the 60 days of
date_dim a filter keeps) reads the whole fact table on the server, even with
the dimension's filter pushed as a semi-join (``reduce_joins``): the fact's
join key is DET, whose ciphertexts follow no order, so no block of rows can
be skipped. Plaintext DuckDB skips most of them, as the fact table is loaded
in date order and the join hands the dimension's min/max key to the scan.

When the design orders the fact table by that key under OPE (``veil.designer``
gives a fact's date key an OPE encryption and loads its rows in its order,
``TableDesign.sort_by``), the client can do the same: it fetches the small
dimension first (its filter runs on the server as before), takes its keys'
lowest and highest, and sends them as a range on the fact's OPE
ciphertexts::

    catalog_sales ... WHERE c_sold IN (SELECT r1.c_sk FROM t_date AS r1 WHERE r1.c_date BETWEEN $1 AND $2)
                  AND c_sold_ope BETWEEN $3 AND $4       -- OPE(min key), OPE(max key)

The server skips the blocks of rows (DuckDB's row groups) outside the range,
here and wherever the fact is read again inside other scans' semi-joins
(``veil.sql.remote``: a scan's run-time filters go with it). Planned as a
``BindFilter`` on the OPE column, filled in by the executor
(``veil.exec.bind``).

Sound: every key of the dimension's kept rows lies in the range, so a fact
row outside it joins none of them; the semi-join and the local plan still
filter exactly. What it reveals beyond the semi-join: the range's two OPE
ciphertexts, which the fact's OPE column (the policy's) already orders.
Only where it pays: the dimension at most a quarter of the fact's rows and
filtered (else its keys span everything), and the fact's column held in
narrow blocks (its zones, ``veil.load.zones``).
"""

from __future__ import annotations

from sqlglot import exp

from veil.design.model import DET, OPE, Encryption
from veil.sql.passes.plan_bind_filters import reaches
from veil.sql.plan import BindFilter, Scan
from veil.sql.state import PlanState

# the dimension is at most this fraction of the fact's rows (as ``plan_bind_filters``)
_SMALL_FRACTION = 0.25
# the fact's blocks each span at most this share of the column's values, on average:
# a range then skips most of the blocks its keys miss
_NARROW_ZONES = 0.5
# a probe's local table: the dimension scan's name and this
_PROBE_SUFFIX = "_keys"


def plan_key_ranges(state: PlanState) -> PlanState:
    probes: dict[int, Scan] = {}  # by dimension scan: its keys' own statement
    for _, edges in state.edges:
        for edge in edges:
            _range(edge.left, edge.left_column, edge.right, edge.right_column, probes)
            _range(edge.right, edge.right_column, edge.left, edge.left_column, probes)
    _drop_cycles(list(state.scans.values()))
    return state


def _range(
    source: Scan, source_column: str, target: Scan, target_column: str, probes: dict[int, Scan]
) -> None:
    """A range filter on ``target`` from the keys of ``source``'s filtered rows."""
    if target.with_row_id or not _small_beside(source, target):
        return
    if target.aggregation is not None and not (
        target.reduction is not None and any(s is source for s in target.reduction.scans)
    ):
        return  # grouped on the server: only rows its semi-join drops anyway may go
    source_enc = next(e for e in source.table.encryptions if e.name == source_column)
    target_det = next(e for e in target.table.encryptions if e.name == target_column)
    target_enc = target.table.find(target_det.source, OPE)
    if source_enc.scheme != DET or target_enc is None or target_enc.is_expression:
        return
    if not _narrow(target_enc):
        return
    keys = _fetched_keys(source, source_enc) or _probed_keys(source, source_enc, probes)
    if keys is None or any(b.target_enc is target_enc and b.keys == keys[1] for b in target.binds):
        return
    target.binds.append(BindFilter([keys[0]], target_enc, keys[1], keys[2]))


def _small_beside(source: Scan, target: Scan) -> bool:
    rows, target_rows = source.table.row_count, target.table.row_count
    return bool(rows and target_rows and rows <= _SMALL_FRACTION * target_rows)


def _fetched_keys(source: Scan, enc: Encryption) -> tuple[Scan, exp.Select, str] | None:
    """The keys of the rows ``source`` fetches by its own statement, filtered (its own
    filters, or its semi-join's: TPC-DS q72's d2, by d1's year through the week it shares)."""
    if source.joined is not None or source.aggregation is not None or source.with_row_id:
        return None
    if not (source.predicates or source.residuals or source.reduction):
        return None
    if enc.source not in source.columns:
        return None
    keys = _keys_of(source, enc)
    if source.residuals:
        keys = keys.where(exp.and_(*[r.copy() for r in source.residuals], copy=False))
    return source, keys, f"the {source.alias} rows fetched"


def _probed_keys(
    source: Scan, enc: Encryption, probes: dict[int, Scan]
) -> tuple[Scan, exp.Select, str] | None:
    """The keys of ``source``'s rows its exact server filters keep, fetched by a statement
    of their own: ``source`` is joined or grouped on the server (TPC-DS q16's date_dim,
    in one server join with catalog_sales), so its rows never reach the client alone."""
    if not source.predicates:
        return None
    probe = probes.get(id(source))
    if probe is None:
        probe = Scan(
            table=source.table,
            alias=source.alias,
            local_name=f"{source.local_name}{_PROBE_SUFFIX}",
            columns={enc.source},
            predicates=list(source.predicates),
        )
        probes[id(source)] = probe
    described = f"the {source.alias} rows its server filters keep, fetched first"
    return probe, _keys_of(probe, enc), described


def _keys_of(scan: Scan, enc: Encryption) -> exp.Select:
    return exp.select(exp.column(enc.source, table=scan.alias)).from_(
        exp.alias_(exp.to_table(scan.local_name), scan.alias, table=True)
    )


def _narrow(enc: Encryption) -> bool:
    """Whether the load kept the column's values in narrow blocks (``veil.load.zones``)."""
    zones = enc.params.get("zones")
    if not isinstance(zones, list) or len(zones) < 2:
        return False  # one block (or none recorded): nothing to skip
    widths = [high - low for low, high in zones]
    return sum(widths) / len(widths) <= _NARROW_ZONES


def _drop_cycles(scans: list[Scan]) -> None:
    """Drop the range filters no fetch order satisfies: a source fetched after its target
    (a source whose own key filters come from the target, or a joined member)."""
    for scan in scans:
        scan.binds = [b for b in scan.binds if b.target_enc.scheme != OPE or _acyclic(b, scan)]


def _acyclic(bind: BindFilter, target: Scan) -> bool:
    return not reaches(bind, target, set())
