"""Join edges (equi-joins the server can evaluate: DET or JOIN-ADJ) and their components."""

from __future__ import annotations

from sqlglot import exp

from veil.design.model import DET, JOIN, Encryption, TableDesign
from veil.sql.columns import BaseColumn
from veil.sql.plan import JoinEdge, Scan
from veil.sql.state import ScanKey
from veil.sql.text import text


def join_edge(
    predicate: exp.Expr,
    allowed: set[str] | None,
    scope_id: int,
    scans: dict[ScanKey, Scan],
    resolved: dict[int, BaseColumn],
) -> JoinEdge | None:
    """The join edge ``predicate`` (a conjunct of scope ``scope_id``) gives, if any.

    Either both columns belong to scans of this scope, or (a correlated
    conjunct) the left one does and the right one belongs to an outer scope.
    """
    if not isinstance(predicate, exp.EQ) or predicate.args.get("negate"):
        return None
    left = resolved.get(id(predicate.this)) if isinstance(predicate.this, exp.Column) else None
    right = (
        resolved.get(id(predicate.expression))
        if isinstance(predicate.expression, exp.Column)
        else None
    )
    if (
        left is None
        or right is None
        or (left.scope_id, left.alias) == (right.scope_id, right.alias)
    ):
        return None
    if left.scope_id != scope_id:
        left, right = right, left
    if left.scope_id != scope_id:
        return None
    same_scope = right.scope_id == scope_id
    wanted = {left.alias, right.alias} if same_scope else {left.alias}
    if allowed is not None and not wanted <= allowed:
        return None
    left_scan, right_scan = scans[(left.scope_id, left.alias)], scans[(right.scope_id, right.alias)]
    pair = equal_columns(left_scan.table, left.column, right_scan.table, right.column)
    if pair is None:
        return None
    left_enc, right_enc = pair
    edge = JoinEdge(left_scan, left_enc.name, right_scan, right_enc.name, text(predicate))
    edge.correlated = not same_scope
    edge.node = predicate
    return edge


def equal_columns(
    left: TableDesign, left_column: str, right: TableDesign, right_column: str
) -> tuple[Encryption, Encryption] | None:
    """Server columns on which ``left_column = right_column`` can be tested, if any.

    DET under one key (a workload's key group), else JOIN-ADJ onions re-keyed
    into one join class (``veil.session.onions``).
    """
    for scheme in (DET, JOIN):
        a, b = left.find(left_column, scheme), right.find(right_column, scheme)
        if a is not None and b is not None and a.key_scope == b.key_scope:
            return a, b
    return None


def components(edges: list[JoinEdge]) -> list[tuple[list[Scan], list[JoinEdge]]]:
    parent: dict[int, int] = {}
    by_id: dict[int, Scan] = {}

    def find(key: int) -> int:
        while parent.setdefault(key, key) != key:
            key = parent[key]
        return key

    for edge in edges:
        by_id[id(edge.left)], by_id[id(edge.right)] = edge.left, edge.right
        parent[find(id(edge.left))] = find(id(edge.right))
    groups: dict[int, list[Scan]] = {}
    for key, scan in by_id.items():
        groups.setdefault(find(key), []).append(scan)
    return [
        (members, [e for e in edges if find(id(e.left)) == root])
        for root, members in groups.items()
    ]
