"""Key filters the client computes and the server applies (a bind join).

Some filters cannot run on the server at all (``p_name LIKE '%green%'``:
a substring, not a word SEARCH could find). MONOMI then ships the whole
joined fact table to the client. But when the filtered table is small and
DET-equi-joined to a large one, the client can finish the filter on the
small table first, and send the DET ciphertexts of the surviving join keys
to the server as a filter on the large table's join column::

    part (fetched, filtered locally)  ->  lineitem: c_partkey IN (ct1, ct2, ...)

Sound for inner joins: a large-table row whose key matches no surviving row
of the small table joins nothing, so dropping it changes no result; the
local plan still joins and filters exactly. What it reveals: which rows of
the small table pass the client-side filter (as their DET join keys), as a
pushed filter would.

Planned here (``plan_bind_filters``), filled in by the executor
(``veil.exec.bind``) once the small table's scan has been fetched.
"""

from __future__ import annotations

from sqlglot import exp
from sqlglot.optimizer.scope import Scope

from veil.design.model import DET
from veil.sql.plan import BindFilter, JoinEdge, Scan

# The small side is at most this fraction of the large side's rows: below,
# fetching the small table first and filtering the large one pays off.
_SMALL_FRACTION = 0.25


def plan_bind_filters(scope_edges: list[tuple[Scope, list[JoinEdge]]]) -> None:
    for _, edges in scope_edges:
        for edge in edges:
            _bind(edge.left, edge.left_column, edge.right, edge.right_column)
            _bind(edge.right, edge.right_column, edge.left, edge.left_column)


def _bind(source: Scan, source_column: str, target: Scan, target_column: str) -> None:
    if not source.residuals or not _standalone(source) or target.aggregation is not None:
        return
    if source.table.row_count > _SMALL_FRACTION * target.table.row_count:
        return
    source_enc = next(e for e in source.table.encryptions if e.name == source_column)
    target_enc = next(e for e in target.table.encryptions if e.name == target_column)
    if source_enc.scheme != DET or source_enc.source not in source.columns:
        return
    condition = exp.and_(*[r.copy() for r in source.residuals], copy=False)
    target.binds.append(BindFilter(source, source_enc, target_enc, condition.sql("duckdb")))


def _standalone(scan: Scan) -> bool:
    """Fetched by its own statement, as a plain filtered scan."""
    return scan.joined is None and scan.aggregation is None and not scan.with_row_id
