"""Pass: two fetches of the same rows become one statement.

TPC-H Q11 joins partsupp, supplier and nation for GERMANY twice, once for
the grouped sums and once for the HAVING's total: the same server join,
filters and parameters, with two column lists. The first fetch now also
returns the second's columns, and the second's scans read the first's local
tables (``Scan.same_rows``) instead of sending the statement again::

    RemoteSQL 1: SELECT j2.a, j2.b, j2.c FROM ... WHERE <join> AND j0.n = $1
    RemoteSQL 2: SELECT j2.b, j2.c FROM ... WHERE <join> AND j0.n = $1
      ->  RemoteSQL 1 only (a, b, c); scan 2's tables are scan 1's

Two fetches share when their statements, projection aside, are the same
text with the same parameters: the same tables in the same order, the same
joins, filters and semi-joins, so the same rows in the same order (a local
table with more columns than a scan reads changes nothing). Fetches whose
statement changes at run time (bind filters, on them or on their semi-join's
scans), grouped or aggregated fetches, DML's and ``decrypt_late``'s, and a
fetch another's bind filter reads are left alone.

Scans that keep columns as ciphertexts (``compare_ciphertexts``) share when
they keep the same ones: a column's ciphertext is its table's one fetchable
encryption whichever scan fetches it, so the shared local table holds each
column in the form both local plans read (TPC-DS q75's three UNION ALL
branches each fetched all of date_dim and the Books items, keys encrypted;
q83's three CTEs each fetched item).
"""

from __future__ import annotations

from sqlglot import exp

from veil.sql.plan import Scan
from veil.sql.remote import joined_statement, numbered, scan_statement
from veil.sql.state import PlanState

Shape = tuple[str, str, tuple[tuple[str, ...], ...]]


def share_fetches(state: PlanState) -> PlanState:
    scans = list(state.scans.values())
    sources = {id(s) for scan in scans for bind in scan.binds for s in bind.sources}
    first: dict[Shape, list[Scan]] = {}
    for fetch in _fetches(scans):
        if not all(_shareable(scan, sources) for scan in fetch):
            continue
        shape = _shape(fetch)
        if shape not in first:
            first[shape] = fetch
            continue
        for mine, theirs in zip(fetch, first[shape], strict=True):
            theirs.columns |= mine.columns
            mine.same_rows = theirs
    return state


def _fetches(scans: list[Scan]) -> list[list[Scan]]:
    """The plan's statements in order, each as the scans it fetches."""
    found: list[list[Scan]] = []
    for scan in scans:
        if scan.joined is None:
            found.append([scan])
        elif scan is scan.joined.scans[0]:
            found.append(list(scan.joined.scans))
    return found


def _shareable(scan: Scan, sources: set[int]) -> bool:
    if scan.binds or scan.aggregation is not None or scan.with_row_id or scan.late:
        return False
    if id(scan) in sources:
        return False
    if scan.joined is not None and scan.joined.groups is not None:
        return False
    reduction = scan.reduction
    return reduction is None or not any(s.binds for s in reduction.scans)


def _shape(fetch: list[Scan]) -> Shape:
    """The fetch's statement without its projection: text and parameters; and the columns
    each of its scans keeps as ciphertexts."""
    joined = fetch[0].joined
    statement = joined_statement(joined) if joined is not None else scan_statement(fetch[0])
    statement.set("expressions", [exp.Star()])
    text, values = numbered(statement)
    kept = tuple(tuple(sorted(scan.ciphertext)) for scan in fetch)
    return text.sql(dialect="duckdb"), repr(values), kept
