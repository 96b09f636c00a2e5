"""Pass: the local plan reads a per-row expression the design stores, not its columns.

The designer precomputes some per-row expressions of the workload (a
``SUBSTRING``, a ``LIKE`` boolean) as DET columns, for the server's filters
and groups. Where the local plan still computes one of them, it reads the
stored expression instead, and a column only that expression read is no
longer fetched (TPC-H Q22: ``SUBSTRING(c_phone, 1, 2)``, seven values, where
every customer's phone was fetched and decrypted, 19,000 of them)::

    SELECT SUBSTRING(customer.c_phone, 1, 2) AS cntrycode ... FROM __veil_scan_2 ...
      ->  SELECT customer."SUBSTRING(c_phone, 1, 2)" AS cntrycode ...

The local table names the column by the expression's SQL (the design's
``source``); its values are the decrypted stored ones, which the loader
computed with the same expression on the same plaintext, so the answer is
the same. Only scans fetched row by row (not aggregated on the server, not
DML's) and encryptions the server exposes (no onion layer left) qualify.
"""

from __future__ import annotations

from sqlglot import exp

from veil.design.model import DET, Encryption
from veil.sql.columns import BaseColumn, like_source, row_expression
from veil.sql.conjuncts import columns_outside
from veil.sql.plan import Scan
from veil.sql.state import PlanState


def fetch_expressions(state: PlanState) -> PlanState:
    keys = {id(scan): key for key, scan in state.scans.items()}
    sources = {id(s) for scan in state.scans.values() for b in scan.binds for s in b.sources}
    stored = {
        id(s): _stored_expressions(s)
        for s in state.scans.values()
        if _eligible(s) and id(s) not in sources  # a bind filter's keys read its columns
    }
    if not any(stored.values()):
        return state
    matches: list[tuple[exp.Expr, Scan, Encryption]] = []
    matched: set[int] = set()
    for node in state.query.walk():  # an expression before its parts
        if not isinstance(node, exp.Func | exp.Binary) or _below(node, matched):
            continue
        found = _scan_of(node, state, stored)
        if found is not None:
            matches.append((node, *found))
            matched.add(id(node))
    for node, scan, enc in matches:
        column = exp.column(exp.to_identifier(enc.source, quoted=True), table=scan.alias)
        node.replace(exp.Not(this=column) if node.args.get("negate") else column)
        scope_id, alias = keys[id(scan)]
        state.resolved[id(column)] = BaseColumn(scan.table.name, enc.source, alias, scope_id)
        scan.columns.add(enc.source)
    if matches:
        used = columns_outside(state.query, [], state.resolved)
        for scan in state.scans.values():
            if stored.get(id(scan)):
                scope_id, alias = keys[id(scan)]
                scan.columns = {c for c in scan.columns if (scope_id, alias, c) in used}
    return state


def _eligible(scan: Scan) -> bool:
    """Fetched row by row, its columns read only by the local plan (those it compares as
    ciphertexts too: ``compare_ciphertexts`` left them in it)."""
    if scan.aggregation is not None or scan.with_row_id or scan.same_rows is not None:
        return False
    if scan.late or scan.unread:  # a late subquery reads its columns outside the plan
        return False
    return scan.joined is None or scan.joined.groups is None


def _stored_expressions(scan: Scan) -> dict[str, Encryption]:
    found: dict[str, Encryption] = {}
    for enc in scan.table.encryptions:
        if not enc.is_expression or enc.source in found or enc.scheme != DET:
            continue
        exposed = scan.table.find(enc.source, DET)  # None while an onion layer wraps it
        if exposed is not None and not exposed.row_bound:
            found[enc.source] = exposed
    return found


def _scan_of(
    node: exp.Expr, state: PlanState, stored: dict[int, dict[str, Encryption]]
) -> tuple[Scan, Encryption] | None:
    """The eligible scan whose stored expression ``node`` is, with its encryption."""
    refs = {state.resolved.get(id(c)) for c in node.find_all(exp.Column)}
    ref = refs.pop() if len(refs) == 1 else None
    scan = state.scans.get((ref.scope_id, ref.alias)) if ref is not None else None
    expressions = stored.get(id(scan)) if scan is not None else None
    if scan is None or not expressions:
        return None
    # sqlglot's NOT LIKE is a LIKE marked ``negate``: it reads the positive one's boolean
    negated = isinstance(node, exp.Like | exp.ILike) and node.args.get("negate")
    found = like_source(node, state.resolved) if negated else row_expression(node, state.resolved)
    enc = expressions.get(found[1]) if found is not None else None
    return (scan, enc) if enc is not None else None


def _below(node: exp.Expr, matched: set[int]) -> bool:
    """Part of an expression already matched."""
    parent = node.parent
    while parent is not None:
        if id(parent) in matched:
            return True
        parent = parent.parent
    return False
