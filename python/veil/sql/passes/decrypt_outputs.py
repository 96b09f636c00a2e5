"""Pass: columns the query only outputs (and groups by) are decrypted in its result's rows.

TPC-H Q10 groups the joined customers by ``c_custkey, c_name, c_acctbal,
c_phone, n_name, c_address, c_comment`` and returns 20 of 38,000 groups: the
client decrypted the 38,000 fetched rows of five DET text columns (20 ms of
a 52 ms plaintext query) to output twenty. Under DET equal values have equal
ciphertexts, so grouping the ciphertexts groups the values; such columns stay
encrypted through the local plan and only the result's rows are decrypted::

    scan 0: customer {c_name: kept encrypted, ...}
    local:  SELECT ..., customer.c_name AS c_name, ... GROUP BY ..., customer.c_name ...
    result: column 1 decrypted (20 values)

A column of a plain scan (not aggregated or shared on the server; joined
there without grouping) fetched under DET qualifies when every reference to it in the local plan is
a bare output of the outermost SELECT (possibly aliased) or a key of that
SELECT's GROUP BY, and that SELECT neither is DISTINCT nor orders, filters
(HAVING, QUALIFY) or groups by the output's name or position. Floats are
always decrypted (``-0.0 = 0.0``, but not their encodings). The server's part
is unchanged: nothing new is revealed.
"""

from __future__ import annotations

from sqlglot import exp

from veil.design.model import Encryption
from veil.sql.passes.compare_ciphertexts import det_fetched_columns
from veil.sql.plan import LateOutput, Scan
from veil.sql.state import PlanState

Key = tuple[int, str]  # (id of the scan, plaintext column)


def decrypt_outputs(state: PlanState) -> PlanState:
    top = state.query
    if not isinstance(top, exp.Select) or top.args.get("distinct") or _positional(top):
        return state
    if any(isinstance(p, exp.Star) for p in top.expressions):
        return state
    if any(j.args.get("using") for j in top.find_all(exp.Join)):
        return state
    candidates = _candidates(state)
    named = _names_read_by_clauses(top)
    group = top.args.get("group")
    outputs: dict[Key, list[int]] = {}
    for node in top.find_all(exp.Column):
        key = _key_of(node, state)
        if key is None:  # a pass's column, or an output alias: keep any candidate of its name
            for known in [k for k in candidates if k[1] == node.name.lower()]:
                del candidates[known]
            continue
        if key not in candidates:
            continue
        position = _output_position(node, top)
        if position is not None and top.expressions[position].alias_or_name.lower() not in named:
            outputs.setdefault(key, []).append(position)
        elif not (group is not None and node.parent is group):
            del candidates[key]
    for key, positions in outputs.items():
        if key not in candidates:
            continue
        scan, enc = candidates[key]
        scan.ciphertext.add(key[1])
        state.late_outputs += [LateOutput(p, scan, key[1], enc) for p in positions]
    return state


def _candidates(state: PlanState) -> dict[Key, tuple[Scan, Encryption]]:
    return {(id(scan), column): (scan, enc) for scan, column, enc in det_fetched_columns(state)}


def _key_of(node: exp.Column, state: PlanState) -> Key | None:
    ref = state.resolved.get(id(node))
    if ref is None:
        return None
    scan = state.scans.get((ref.scope_id, ref.alias))
    return None if scan is None else (id(scan), ref.column)


def _output_position(node: exp.Column, top: exp.Select) -> int | None:
    """The result column that ``node`` is, bare or aliased, if it is one."""
    projection: exp.Expr = node.parent if isinstance(node.parent, exp.Alias) else node
    for position, output in enumerate(top.expressions):
        if output is projection:
            return position
    return None


def _names_read_by_clauses(top: exp.Select) -> set[str]:
    """Unqualified names in ORDER BY, HAVING and QUALIFY (they may read an output's alias)."""
    names: set[str] = set()
    for clause in ("order", "having", "qualify"):
        found = top.args.get(clause)
        if found is not None:
            names |= {c.name.lower() for c in found.find_all(exp.Column) if not c.table}
    return names


def _positional(top: exp.Select) -> bool:
    """GROUP BY / ORDER BY by position (``ORDER BY 2``) or ALL: outputs read by number."""
    for clause in ("group", "order"):
        found = top.args.get(clause)
        if found is None:
            continue
        if found.args.get("all") or any(
            isinstance(e.this if isinstance(e, exp.Ordered) else e, exp.Literal | exp.Star)
            for e in found.expressions
        ):
            return True
    return False
