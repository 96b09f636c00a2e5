"""Pass: key columns the client only compares for equality stay encrypted.

TPC-H Q13 joins customer to orders on ``c_custkey = o_custkey``, groups by
``c_custkey`` and counts ``o_orderkey``: the client decrypted 1.65M DET keys
(most of its time) to compare, group and count them. Under one DET key
(a key scope: the workload's join group) equal values have equal
ciphertexts, so these can all run on the ciphertexts as fetched::

    scan 0: customer {c_custkey: kept encrypted}
    scan 1: orders {o_custkey: kept encrypted, o_orderkey: kept encrypted}
    local:  ... customer LEFT JOIN orders ON c_custkey = o_custkey ... (unchanged)

The same holds for the rows of a server join (``pushdown_joins``): TPC-DS q22
joined ``inventory`` to ``date_dim`` on the server, then decrypted 2.3M
``inv_item_sk`` values only to join them with ``item`` on the client.

A column of a plain scan (not aggregated or shared on the server; joined
there without grouping) stays encrypted when every reference to it in the
local plan is one of

- ``a = b`` with ``b`` another such column under the same key scope, form
  and type (a join or a correlation), anywhere a condition may be;
- ``COUNT(col)``, ``COUNT(DISTINCT col)`` or ``col IS [NOT] NULL`` (NULL
  stays NULL under DET);
- a GROUP BY key;
- an output of a derived table that the outer query never reads.

Anything else (an output of the query, ORDER BY, a comparison with a
constant or an expression, a function, a bind filter's keys) needs the
value: the column is decrypted as usual, and so is every column it was to
be compared with.
Floating-point columns are always decrypted (``-0.0 = 0.0``, but not their
encodings). The server's part is unchanged: nothing new is revealed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlglot import exp

from veil.design.model import DET, Encryption
from veil.encoding import FLOAT_KIND
from veil.sql.derived_outputs import (
    branches,
    derived_selects,
    output_names,
    output_references,
    projected_output,
)
from veil.sql.plan import Scan
from veil.sql.state import PlanState

Key = tuple[int, str]  # (id of the scan, plaintext column)


@dataclass
class _Candidate:
    scan: Scan | None  # None: an output of a derived table or CTE (``_Outputs``)
    column: str
    enc: Encryption
    partners: set[Key] = field(default_factory=set)  # columns it is compared with


def compare_ciphertexts(state: PlanState) -> PlanState:
    if any(j.args.get("using") for j in state.query.find_all(exp.Join)):
        return state
    candidates = _candidates(state)
    if not candidates:
        return state
    read = _derived_outputs_read(state.query)
    outputs = _Outputs(state, candidates)
    referenced: set[Key] = set()
    for node in state.query.find_all(exp.Column):
        key = outputs.key_of(node)
        if key is None or (key not in candidates and outputs.is_output(key)):
            # a column a pass wrote (or an output alias; an output of no candidate, as
            # before outputs were followed): keep any candidate of its name
            for known in [k for k, c in candidates.items() if c.column == node.name.lower()]:
                del candidates[known]
            continue
        if key not in candidates:
            continue
        referenced.add(key)
        partner = _allowed(node, candidates[key], candidates, outputs, read)
        if partner is False:
            del candidates[key]
        elif partner is not True:
            candidates[key].partners.add(partner)
            if outputs.projected(node) == partner:  # the output holds what its column holds
                candidates[partner].partners.add(key)
    _drop_unpaired(candidates)
    for key, candidate in candidates.items():
        if key in referenced and candidate.scan is not None:
            candidate.scan.ciphertext.add(candidate.column)
    return state


class _Outputs:
    """The outputs of derived tables and CTEs that project a candidate, as candidates.

    TPC-DS q01 groups ``store_returns`` by ``sr_customer_sk`` in a CTE and
    joins its output with ``c_customer_sk``: the output stays a ciphertext when
    its column does, and every reference to it (through each alias of the
    CTE) is held to the rules a column's are. Off when outputs are read by no
    name (``SELECT * FROM cte``, a NATURAL JOIN).
    """

    def __init__(self, state: PlanState, candidates: dict[Key, _Candidate]):
        self._state = state
        unnamed = any(  # outputs read by no name: a star, a NATURAL JOIN's columns
            (isinstance(n, exp.Star) and not isinstance(n.parent, exp.Count))
            or (isinstance(n, exp.Join) and str(n.args.get("method") or "").upper() == "NATURAL")
            for n in state.query.walk()
        )
        self._selects = {} if unnamed else derived_selects(state.scopes, state.query)
        self._references = output_references(state.scopes, self._selects)
        self._add(candidates)

    def key_of(self, node: exp.Column) -> Key | None:
        """A base column's (scan, column), or an output's (select, name); None: neither."""
        return self._references.get(id(node)) or _key_of(node, self._state)

    def is_output(self, key: Key) -> bool:
        return key[0] in self._selects

    def projected(self, node: exp.Column) -> Key | None:
        """The output ``node`` is projected as, if its SELECT is a derived table or CTE."""
        return projected_output(node, self._selects)

    def _add(self, candidates: dict[Key, _Candidate]) -> None:
        """Each output projecting a candidate in every SELECT (of a UNION) that returns it,
        all under the same key scope (an output of an inner one: innermost first)."""
        grew = True
        while grew:
            grew = False
            for body_id, body in self._selects.items():
                for position, name in enumerate(output_names(body)):
                    output = (body_id, name)
                    inner = [self._projected_key(s, position) for s in branches(body)]
                    if output in candidates or not all(k in candidates for k in inner):
                        continue
                    encs = [candidates[k].enc for k in inner if k is not None]
                    if all(_same_ciphertexts(encs[0], e) for e in encs):
                        # paired from the start: a column decrypted makes its output plaintext
                        keys = {k for k in inner if k is not None}
                        candidates[output] = _Candidate(None, name, encs[0], keys)
                        grew = True

    def _projected_key(self, select: exp.Select, position: int) -> Key | None:
        projection = select.expressions[position]
        column = projection.this if isinstance(projection, exp.Alias) else projection
        return self.key_of(column) if isinstance(column, exp.Column) else None


def _candidates(state: PlanState) -> dict[Key, _Candidate]:
    return {
        (id(scan), column): _Candidate(scan, column, enc)
        for scan, column, enc in det_fetched_columns(state)
    }


def det_fetched_columns(state: PlanState) -> list[tuple[Scan, str, Encryption]]:
    """The columns of plain scans (not aggregated or shared on the server; joined on the
    server without grouping: a row per joined row, each column as ``Scan.fetched`` names it)
    fetched under DET, not floats, not yet kept encrypted: those whose ciphertexts the local
    plan could use as they are (``compare_ciphertexts``, ``decrypt_outputs``)."""
    # a bind filter's key query reads its sources' columns outside the local plan, and
    # sends their values (``veil.exec.bind``): those are decrypted
    keyed = {
        (id(source), column.name.lower())
        for scan in state.scans.values()
        for bind in scan.binds
        for source in bind.sources
        for column in bind.keys.find_all(exp.Column)
    }
    found = []
    for scan in state.scans.values():
        joined = scan.joined is None or scan.joined.groups is None
        plain = joined and scan.aggregation is None
        if not plain or scan.with_row_id or scan.late or scan.same_rows is not None:
            continue
        for column in sorted(scan.columns - scan.ciphertext):
            enc = scan.table.fetchable(column)
            if enc.scheme != DET or enc.row_bound or enc.sql_type.kind == FLOAT_KIND:
                continue
            if (id(scan), column) not in keyed:
                found.append((scan, column, enc))
    return found


def _key_of(node: exp.Expr, state: PlanState) -> Key | None:
    """The (scan, column) a column reference reads; None: not a base column."""
    ref = state.resolved.get(id(node)) if isinstance(node, exp.Column) else None
    if ref is None:
        return None
    return id(state.scans.get((ref.scope_id, ref.alias))), ref.column


def _allowed(
    node: exp.Column,
    mine: _Candidate,
    candidates: dict[Key, _Candidate],
    outputs: _Outputs,
    read: set[tuple[str, str]],
) -> bool | Key:
    """True: a context that needs no value; False: one that does; a key: equal to that column."""
    parent = node.parent
    if isinstance(parent, exp.Count) or (
        isinstance(parent, exp.Distinct)
        and isinstance(parent.parent, exp.Count)
        and len(parent.expressions) == 1
    ):
        return True
    if isinstance(parent, exp.Is) and parent.this is node:
        # IS [NOT] NULL only: IS TRUE / IS FALSE need the value (a ciphertext is "true")
        return isinstance(parent.expression, exp.Null)
    if isinstance(parent, exp.Group):
        return True
    if isinstance(parent, exp.EQ):
        other = parent.expression if parent.this is node else parent.this
        key = outputs.key_of(other) if isinstance(other, exp.Column) else None
        theirs = candidates.get(key) if key is not None else None
        if key is None or theirs is None or not _same_ciphertexts(mine.enc, theirs.enc):
            return False
        return key
    output = outputs.projected(node)
    if output is not None:
        return output if output in candidates else False
    return _unread_output(node, read)


def _same_ciphertexts(a: Encryption, b: Encryption) -> bool:
    """Equal values encrypt alike under both (one key, one stored form, one encoding)."""
    return (
        a.key_scope == b.key_scope
        and a.sql_type == b.sql_type
        and a.params.get("form") == b.params.get("form")
        and a.params.get("narrow_bits") == b.params.get("narrow_bits")
    )


def _unread_output(node: exp.Column, read: set[tuple[str, str]]) -> bool:
    """Whether ``node`` is an output of a derived table that the outer query never reads."""
    projection: exp.Expr = node
    if isinstance(node.parent, exp.Alias):
        projection = node.parent
    select = projection.parent
    if not isinstance(select, exp.Select) or not any(p is projection for p in select.expressions):
        return False
    derived = select.parent
    if not isinstance(derived, exp.Subquery) or not derived.alias:
        return False
    if not isinstance(derived.parent, (exp.From, exp.Join)):
        return False  # a scalar or IN subquery: its value is compared outside
    return (derived.alias.lower(), projection.alias_or_name.lower()) not in read


def _derived_outputs_read(tree: exp.Expr) -> set[tuple[str, str]]:
    """(table alias, column) of every qualified column reference; any star reads all."""
    if any(isinstance(n, exp.Star) and not isinstance(n.parent, exp.Count) for n in tree.walk()):
        return {("*", "*")} | {
            (s.alias.lower(), p.alias_or_name.lower())
            for s in tree.find_all(exp.Subquery)
            if s.alias and isinstance(s.this, exp.Select)
            for p in s.this.expressions
        }
    return {(c.table.lower(), c.name.lower()) for c in tree.find_all(exp.Column)}


def _drop_unpaired(candidates: dict[Key, _Candidate]) -> None:
    """Drop, until none is left, columns compared with a column that is decrypted."""
    changed = True
    while changed:
        changed = False
        for key in list(candidates):
            if any(p not in candidates for p in candidates[key].partners):
                del candidates[key]
                changed = True
