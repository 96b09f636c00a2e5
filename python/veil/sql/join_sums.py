"""ASHE sums inside a server join: which SUM / AVG a grouped join may add on the server.

TPC-H Q5's ``SUM(l_extendedprice * (1 - l_discount))`` by ``n_name`` over six
tables: the server joins, groups by the keys and by block of 64 lineitem row
ids, and adds the ASHE words of the expression (``veil.sql.remote``); the
client removes the pads of each block's ids (``veil.exec.joined_sums``).

Three conditions, all checked here:

- one scan's expressions only (``summed``), each stored among that table's
  ASHE sums: the blocks are of that scan's ids;
- each summed row joined at most once (``each_row_once``): a pad is removed
  once per id, so a join that repeated a row within a group would add its
  ciphertext twice. The planner requires every other scan to be reached from
  the summed one through joins on columns whose values were distinct at
  load (keys: lineitem -> orders -> customer); the executor checks it again
  on the server's answer (a row's joined count against its mask's bits),
  since rows written after the load may repeat a key;
- it pays (``_pays``): the server returns a row per (group, block) with a
  kept row, each worth ``ASHE_ROW_COST`` fetched rows, against the joined
  rows the plain server join would send (``ctx.hom_pushdown``: ``always`` /
  ``never`` override the estimate, as for one table).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlglot import exp

from veil.sql.columns import row_expression
from veil.sql.join_rows import edge_encryption, joined_rows, read_share
from veil.sql.plan import ASHE_WORD, AggregateItem, JoinEdge, JoinGroup, Scan
from veil.sql.remote import id_bit_position, joined_alias, qualified
from veil.sql.selectivity import ashe_pairs, ashe_runs, distinct_rows
from veil.sql.state import PlanState
from veil.sql.sums import ASHE_ROW_COST, built_sums, count_present


def join_sums(
    nodes: Sequence[exp.Expr],
    group: JoinGroup,
    members: list[Scan],
    edges: list[JoinEdge],
    state: PlanState,
) -> dict[int, str] | None:
    """Add the SUM / AVG ``nodes`` to ``group`` as ASHE sums of one scan; their SQL types.

    None (``group`` then to be dropped) when a condition fails.
    """
    aliases = {id(s): joined_alias(i) for i, s in enumerate(members)}
    by_alias = {s.alias: s for s in members}
    types: dict[int, str] = {}
    summed: Scan | None = None
    for node in nodes:
        if isinstance(node.parent, exp.Filter) or isinstance(node.this, exp.Distinct):
            return None
        found = _summed_source(node.this, by_alias, state)
        if found is None or (summed is not None and found[0] is not summed):
            return None
        summed, source = found
        sums = built_sums(summed.table)
        index = sums.index(source) if sums is not None else None
        present, field = count_present(summed.table, source)
        kind = state.ctx.expression_type(node, summed.table.name, summed.alias)
        if index is None or present is None or kind is None:
            return None
        item = AggregateItem(id(node), "SUM", None, ashe_index=index)
        group.items.append((summed, item))
        counted = qualified(present, summed, aliases[id(summed)])
        item.count_key = _count_item(group, summed, counted, -id(node), field)
        types[id(node)] = kind
    if summed is None or not state.ctx.join_sums or not each_row_once(summed, members, edges):
        return None
    if not _pays(summed, members, edges, group, state):
        return None
    group.summed = summed
    group.id_bit = state.ctx.id_bit(id_bit_position(summed.table))
    group.word_sum = state.ctx.wrapping_sum(exp.column(ASHE_WORD))
    return types


def _summed_source(
    node: exp.Expr, by_alias: dict[str, Scan], state: PlanState
) -> tuple[Scan, str] | None:
    """The scan an expression reads one row of, and the expression as the design spells it."""
    found = row_expression(node, state.resolved)
    column = next(node.find_all(exp.Column), None)
    ref = state.resolved.get(id(column)) if column is not None else None
    scan = by_alias.get(ref.alias) if ref is not None else None
    return (scan, found[1]) if found is not None and scan is not None else None


def _count_item(
    group: JoinGroup, scan: Scan, count: exp.Expr, key: int, null_field: int | None
) -> int:
    """The key of the item counting ``count`` over the join: an existing one, or a new one."""
    for _, item in group.items:
        if item.kind == "COUNT" and item.server == count and item.null_field == null_field:
            return item.key
    item = AggregateItem(key, "COUNT", None, count, null_field=null_field)
    group.items.append((scan, item))
    return key


def each_row_once(summed: Scan, members: list[Scan], edges: list[JoinEdge]) -> bool:
    """Does every joined row hold a different row of ``summed``, by the load's statistics?

    So when every other member is reached from ``summed`` through a join on
    one of its columns whose values were all distinct at load (a key): each
    row then meets at most one row of it. Joins between members already
    reached only filter (Q5's ``c_nationkey = s_nationkey``); two joins
    between the same pair (a composite key) reach nothing on their own.
    """
    reached = {id(summed)}
    grew = True
    while grew and len(reached) < len(members):
        grew = False
        for edge in edges:
            for near, far, column in (
                (edge.left, edge.right, edge.right_column),
                (edge.right, edge.left, edge.left_column),
            ):
                if id(near) in reached and id(far) not in reached and _is_key(far, column):
                    reached.add(id(far))
                    grew = True
    return len(reached) == len(members)


def _is_key(scan: Scan, column: str) -> bool:
    """Were the server column's values distinct at load, one per row (no NULL)?"""
    enc = edge_encryption(scan, column)
    return enc is not None and enc.params.get("unique") is True


def _pays(
    summed: Scan, members: list[Scan], edges: list[JoinEdge], group: JoinGroup, state: PlanState
) -> bool:
    """Does the estimate favour the sums, or the policy ask for them? Keeps the estimate."""
    joined = joined_rows(members, edges, state)
    groups = distinct_rows([enc for _, _, enc in group.keys]) or joined
    # a table ordered by a filtered column keeps its rows within the range's stretch of ids
    share = read_share(summed, state)
    rows = summed.table.row_count * (share if share is not None else 1.0)
    group.estimated_rows = ashe_pairs(rows, joined, groups)
    group.estimated_runs = ashe_runs(rows, joined, groups)
    policy = state.ctx.hom_pushdown
    if policy in ("always", "never"):
        return policy == "always"
    return group.estimated_rows * ASHE_ROW_COST <= joined
