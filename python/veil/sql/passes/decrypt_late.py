"""Pass: an IN-subquery's (or a grouped derived table's) keys are grouped and filtered as
ciphertexts, decrypted once found.

TPC-H Q18's ``o_orderkey IN (SELECT l_orderkey FROM lineitem GROUP BY
l_orderkey HAVING SUM(l_quantity) > 300)`` fetches lineitem's 6M order keys
only to group them: decrypting them (1.5M distinct DET values, after
hashing 6M) cost more than the rest of the client's work, and the
subquery keeps 57 keys. Under DET (or OPE) equal ciphertexts are equal
values, so the client groups the ciphertexts as they come and decrypts
only the keys the subquery returns::

    scan 0: lineitem {l_orderkey: kept encrypted, l_quantity}
    late 0: SELECT l_orderkey FROM __veil_scan_0 GROUP BY l_orderkey HAVING ...
            -> its distinct ciphertexts, decrypted -> __veil_late_0
    local:  ... WHERE o_orderkey IN (SELECT l_orderkey FROM __veil_late_0)

Taken only where the ciphertexts cannot change the answer: the subquery
is one SELECT over one plainly fetched scan, with no ORDER BY, LIMIT,
window or nested subquery, and its key column is read only as its one
output and as a bare GROUP BY key (without GROUP BY: no aggregate at all).
Floating-point keys stay decrypted (``-0.0 = 0.0`` but their encodings
differ). The scan is the subquery's own, so nothing else reads the column.
Bind filters on the subquery read the decrypted keys (``plan_bind_filters``).
Reveals nothing new: the server's part is unchanged.

The same holds for a grouped derived table or CTE over one plain scan, such
as TPC-H Q15's ``revenue0`` (``SELECT l_suppkey AS supplier_no,
SUM(...) AS total_revenue FROM lineitem WHERE ... GROUP BY l_suppkey``):
it runs on the client as soon as its scan is fetched, grouping the key's
ciphertexts, and only its result's keys are decrypted (10,000 supplier keys
instead of 225,000 fetched rows); the local plan reads its rows::

    scan 0: lineitem {l_suppkey: kept encrypted, l_extendedprice, l_discount}
    late 0: SELECT l_suppkey AS supplier_no, SUM(...) AS total_revenue
            FROM __veil_scan_0 GROUP BY l_suppkey  -> supplier_no decrypted -> __veil_late_0
    local:  WITH revenue0 AS (SELECT * FROM __veil_late_0) ...

Taken under the conditions above, with a GROUP BY, every output named
once, and the scan read by no bind filter.
"""

from __future__ import annotations

from itertools import count

from sqlglot import exp
from sqlglot.optimizer.scope import Scope

from veil.design.model import DET, OPE, Encryption
from veil.encoding import FLOAT_KIND
from veil.sql.columns import block_sources
from veil.sql.conjuncts import is_part_of
from veil.sql.plan import LateKeys, Scan
from veil.sql.state import PlanState

LATE_PREFIX = "__veil_late_"


def decrypt_late(state: PlanState) -> PlanState:
    numbers = count()
    for node, _ in state.in_subqueries:
        subquery = node.args.get("query")
        if not isinstance(subquery, exp.Subquery) or not is_part_of(node, state.query):
            continue
        found = _late_keys(subquery.this, state)
        if found is None:
            continue
        scan, column, enc = found
        query = subquery.this
        output = query.selects[0].alias_or_name
        late = LateKeys(query, column, enc, f"{LATE_PREFIX}{next(numbers)}", output)
        reading = exp.select(exp.column(output)).from_(exp.to_table(late.local_name))
        subquery.set("this", reading)
        for other in state.scans.values():
            for bind in other.binds:
                if bind.keys is query:
                    bind.keys = reading
        scan.ciphertext.add(column)
        scan.late.append(late)
    keyed = {
        id(source) for scan in state.scans.values() for b in scan.binds for source in b.sources
    }
    for derived in _derived_tables(state.query):
        grouped = _late_groups(derived.this, state)
        if grouped is None or id(grouped[0]) in keyed:
            continue
        scan, column, enc, output = grouped
        name = f"{LATE_PREFIX}{next(numbers)}"
        late = LateKeys(derived.this, column, enc, name, output, groups=True)
        derived.set("this", exp.select("*").from_(exp.to_table(name)))
        scan.ciphertext.add(column)
        scan.late.append(late)
    return state


def _derived_tables(query: exp.Expr) -> list[exp.CTE | exp.Subquery]:
    """The CTEs and the derived tables of FROM and JOIN clauses, innermost first."""
    found = [
        node
        for node in query.walk()
        if isinstance(node, exp.CTE)
        or (isinstance(node, exp.Subquery) and isinstance(node.parent, exp.From | exp.Join))
    ]
    return found[::-1]


def _late_groups(query: exp.Expr, state: PlanState) -> tuple[Scan, str, Encryption, str] | None:
    """The scan, key column, its encryption and output name a grouped ``query`` may keep
    encrypted, if it may."""
    if not isinstance(query, exp.Select) or query.args.get("group") is None:
        return None
    if query.args.get("distinct"):
        return None
    names = [p.alias_or_name.lower() for p in query.selects]
    if any(isinstance(p, exp.Star) or not n for p, n in zip(query.selects, names, strict=True)):
        return None
    scan = _one_scan(query, state)
    if scan is None or len(set(names)) != len(names):
        return None
    for projection in query.selects:
        found = _grouped_key(query, projection, scan, state)
        if found is not None:
            return scan, found[0], found[1], projection.alias_or_name
    return None


def _late_keys(query: exp.Expr, state: PlanState) -> tuple[Scan, str, Encryption] | None:
    """The scan, column and encryption whose ciphertexts ``query`` may group, if it may."""
    if not isinstance(query, exp.Select) or len(query.selects) != 1:
        return None
    distinct = query.args.get("distinct")
    if distinct is not None and distinct.args.get("on") is not None:
        return None
    scan = _one_scan(query, state)
    found = _grouped_key(query, query.selects[0], scan, state) if scan is not None else None
    if scan is None or found is None:
        return None
    return scan, found[0], found[1]


def _one_scan(query: exp.Select, state: PlanState) -> Scan | None:
    """The one plain scan ``query`` reads, if it reads no more, is not correlated and has
    no ORDER BY, LIMIT, window or nested query."""
    if any(query.args.get(k) for k in ("order", "limit", "offset", "qualify", "with_")):
        return None
    if any(isinstance(n, (exp.Window, exp.Subquery, exp.Select)) for n in _below(query)):
        return None
    scope = next((s for s in state.scopes if s.expression is query), None)
    if scope is None or len(block_sources(scope)) != 1:
        return None
    scan = _only_scan(scope, state)
    alias = next(iter(block_sources(scope)))
    if scan is None or any(c.table != alias for c in query.find_all(exp.Column)):
        return None  # correlated, or reading an output alias
    return scan


def _grouped_key(
    query: exp.Select, projection: exp.Expr, scan: Scan, state: PlanState
) -> tuple[str, Encryption] | None:
    """The column and encryption of ``projection`` if it is a key only output and grouped."""
    output = projection.unalias()
    if not isinstance(output, exp.Column):
        return None
    ref = state.resolved.get(id(output))
    if ref is None or ref.column in scan.ciphertext:
        return None
    enc = scan.table.fetchable(ref.column)
    if enc.scheme not in (DET, OPE) or enc.row_bound or enc.sql_type.kind == FLOAT_KIND:
        return None
    return (ref.column, enc) if _only_grouped(query, output, ref.column, state) else None


def _below(query: exp.Select) -> list[exp.Expr]:
    return [n for n in query.walk() if n is not query]


def _only_scan(scope: Scope, state: PlanState) -> Scan | None:
    alias, source = next(iter(scope.sources.items()))
    scan = state.scans.get((id(scope), alias))
    if scan is None or not isinstance(source, exp.Table):
        return None
    if scan.joined is not None or scan.aggregation is not None or scan.with_row_id:
        return None
    return scan


def _only_grouped(query: exp.Select, output: exp.Column, column: str, state: PlanState) -> bool:
    """The key is read as the output and as a bare GROUP BY key, nowhere else."""
    group = query.args.get("group")
    keys = list(group.expressions) if group is not None else []
    if group is None and any(isinstance(n, exp.AggFunc) for n in query.walk()):
        return False
    if group is not None and not any(
        isinstance(k, exp.Column) and _reads(k, column, state) for k in keys
    ):
        return False
    allowed = {id(output)} | {id(k) for k in keys if isinstance(k, exp.Column)}
    return all(
        id(node) in allowed for node in query.find_all(exp.Column) if _reads(node, column, state)
    )


def _reads(node: exp.Column, column: str, state: PlanState) -> bool:
    ref = state.resolved.get(id(node))
    return ref is not None and ref.column == column
