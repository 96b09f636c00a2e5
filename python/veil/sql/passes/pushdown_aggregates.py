"""Pass: GROUP BY and aggregates on the server (MONOMI Algorithm 1, lines 14-37).

A query block over one table whose WHERE went to the server whole, whose
GROUP BY keys have DET encryptions and whose aggregates the schemes allow
(COUNT(*), COUNT(col), MIN/MAX of an OPE column, SUM/AVG of an expression in
the table's packed HOM group, over few groups: ``few_groups``) is aggregated
by the server (two-level with HOM sums: ``veil.sql.remote._packed_sums``)::

    SELECT l_returnflag, COUNT(*), MAX(l_shipdate) FROM lineitem
    WHERE l_shipdate < DATE '1998-09-02' GROUP BY l_returnflag
      RemoteSQL: SELECT c_rf, COUNT(*), MAX(c_sd_ope) FROM t_li WHERE c_sd_ope < $1 GROUP BY c_rf
      local:     SELECT l_returnflag, ANY_VALUE(__veil_agg_0), ANY_VALUE(__veil_agg_1)
                 FROM __veil_scan_0 AS lineitem GROUP BY l_returnflag

DET groups exactly as the plaintext does (equal encodings <=> equal values, NULL
with NULL), so each local group is one server row and ANY_VALUE returns it.
Blocks that are correlated, hold subqueries or windows, or need anything
else (SUM without HOM, DISTINCT, FILTER) are left to the client. AVG is the
HOM sum over the count of the expression's non-NULL rows.
"""

from __future__ import annotations

from sqlglot import exp
from sqlglot.optimizer.scope import Scope

from veil.crypto.ashe import BLOCK_ROWS
from veil.design.model import BLOCKS, DET, OPE, SEARCH, HomGroup, TableDesign
from veil.sql.columns import BaseColumn, block_sources, row_expression
from veil.sql.conjuncts import conjunct_list, subqueries_outside_where
from veil.sql.plan import ASHE_WORD, Aggregation, Scan
from veil.sql.remote import hom_ciphertexts, id_bit_position
from veil.sql.rewrite_server import ServerContext
from veil.sql.state import PlanState, ScanKey
from veil.sql.sums import ASHE_ROW_COST, built_sums, count_present
from veil.sql.text import text

AGG_PREFIX = "__veil_agg_"
# The cost rule's figures (``few_groups``), measured on this project's machine.
HOM_DECRYPT_SECONDS = 2.2e-3
CLIENT_SECONDS_PER_ROW = 2e-6


def pushdown_aggregates(state: PlanState) -> PlanState:
    """Each block is decided alone; a block's rewrite is built whole, then committed."""
    for scope in state.scopes:
        select = scope.expression
        if not isinstance(select, exp.Select):
            continue
        scan = _sole_scan(scope, state.scans)
        if scan is None or not _filters_all_pushed(select, scan):
            continue
        aggregation = _aggregation(select, scan, state.resolved, state.ctx)
        if aggregation is None:
            continue
        types = _result_types(select, scan, state.ctx)
        if types is not None:  # commit: nothing above touched the scan or the query
            _rewrite_locally(select, scan, aggregation, types)
            scan.aggregation = aggregation
    return state


def _result_types(select: exp.Select, scan: Scan, ctx: ServerContext) -> dict[int, str] | None:
    """The SQL type of each aggregate as plaintext DuckDB computes it (None: unknown).

    The local plan casts each server result back to it, so a pushed SUM of an
    INTEGER column is a HUGEINT as in plaintext, not the DECIMAL(38,0) it
    arrives as (which would change a UNION's type with a DECIMAL column).
    """
    types = {}
    for node in select.find_all(exp.AggFunc):
        found = ctx.expression_type(node, scan.table.name, scan.alias)
        if found is None:
            return None
        types[id(node)] = found
    return types


def _sole_scan(scope: Scope, scans: dict[ScanKey, Scan]) -> Scan | None:
    select = scope.expression
    if (
        select.args.get("joins")
        or len(block_sources(scope)) != 1
        or subqueries_outside_where(select)
    ):
        return None
    if select.find(exp.Window) or select.args.get("distinct") is not None:
        return None
    alias = next(iter(block_sources(scope)))
    scan = scans.get((id(scope), alias))
    return scan if scan is not None and scan.reduction is None and not scan.with_row_id else None


def _filters_all_pushed(select: exp.Select, scan: Scan) -> bool:
    where = select.args.get("where")
    if where is None:
        return True
    exact = {p.original for p in scan.predicates if SEARCH not in p.schemes}
    return all(text(c) in exact for c in conjunct_list(where.this))


def _aggregation(
    select: exp.Select, scan: Scan, resolved: dict[int, BaseColumn], ctx: ServerContext
) -> Aggregation | None:
    group = select.args.get("group")
    keys: list[str] = []
    if group is not None:
        if any(group.args.get(k) for k in ("rollup", "cube", "grouping_sets", "all")):
            return None
        for key in group.expressions:
            ref = resolved.get(id(key)) if isinstance(key, exp.Column) else None
            if ref is None or scan.table.find(ref.column, DET) is None:
                return None
            if ref.column not in keys:  # GROUP BY a, a: one key (a second fetched a twice)
                keys.append(ref.column)
    aggregates = [a for a in select.find_all(exp.AggFunc)]
    if not aggregates:
        return None
    if any(isinstance(a, exp.Sum | exp.Avg) for a in aggregates) and not _sums_pay(
        ctx.hom_pushdown, scan.table, keys
    ):
        return None  # one decryption per group and pack mask would cost more than the rows
    aggregation = Aggregation(keys=keys)
    for node in aggregates:
        if not _add_aggregate(node, scan, resolved, aggregation, ctx):
            return None
    if not _columns_are_keys(select, aggregates, keys, resolved):
        return None
    return aggregation


def _add_aggregate(
    node: exp.Expr,
    scan: Scan,
    resolved: dict[int, BaseColumn],
    aggregation: Aggregation,
    ctx: ServerContext,
) -> bool:
    if isinstance(node.parent, exp.Filter) or isinstance(node.this, exp.Distinct):
        return False
    if isinstance(node, exp.Sum | exp.Avg):
        return _add_sum(node, scan, resolved, aggregation, ctx)
    if isinstance(node, exp.Count) and isinstance(node.this, exp.Star):
        aggregation.add(id(node), "COUNT", None)
        return True
    ref = resolved.get(id(node.this)) if isinstance(node.this, exp.Column) else None
    if ref is None or len(node.expressions) > 0:
        return False
    if isinstance(node, exp.Count):
        counted = scan.table.fetchable(ref.column)
        if counted.scheme == BLOCKS:
            return False  # its values (and NULLs) are inside sealed blocks: not countable there
        aggregation.add(id(node), "COUNT", counted)
        return True
    if isinstance(node, exp.Min | exp.Max):
        enc = scan.table.find(ref.column, OPE)
        if enc is not None:
            kind = type(node).__name__.upper()
            extreme = ctx.extreme(kind, exp.column(enc.name), enc)
            aggregation.add(id(node), kind, enc, extreme)
            return True
    return False


def _add_sum(
    node: exp.Expr,
    scan: Scan,
    resolved: dict[int, BaseColumn],
    aggregation: Aggregation,
    ctx: ServerContext,
) -> bool:
    """SUM under ASHE or from the packed HOM group, with the count of the expression's non-NULL rows.

    The count makes an all-NULL SUM NULL and is AVG's denominator; sums of
    one expression share it.
    """
    summed = row_expression(node.this, resolved)
    table = scan.table
    if not summed or summed[0] != table.name:
        return False
    present, field = count_present(table, summed[1])
    if present is None:
        return False
    sums = built_sums(table)
    if sums is not None:
        index = sums.index(summed[1])
        if index is None:
            return False
        item = aggregation.add(id(node), "SUM", None)
        item.ashe_index = index
        if aggregation.id_bit is None:
            aggregation.id_bit = ctx.id_bit(id_bit_position(table))
            aggregation.word_sum = ctx.wrapping_sum(exp.column(ASHE_WORD))
    else:
        group = table.hom
        index = group.index(summed[1]) if group is not None else None
        if index is None:
            return False
        item = aggregation.add(id(node), "SUM", None)
        item.hom_index = index
        if aggregation.hom_product is None:
            aggregation.hom_product = ctx.hom_product(hom_ciphertexts(), table)
    item.count_key = _count_key(aggregation, present, -id(node), field)
    return True


def _count_key(
    aggregation: Aggregation, count: exp.Expr, key: int, null_field: int | None = None
) -> int:
    """The key of the item counting ``count``: an existing one, or a new one under ``key``."""
    for item in aggregation.items:
        if (
            item.kind == "COUNT"
            and item.server is not None
            and item.server == count
            and item.null_field == null_field
        ):
            return item.key
    aggregation.add(key, "COUNT", None, count).null_field = null_field
    return key


def _sums_pay(policy: str, table: TableDesign, keys: list[str]) -> bool:
    """``auto``: the cost rules decide (``blocks_pay`` for ASHE, ``few_groups`` for
    Paillier); ``always`` / ``never`` override them.
    """
    if policy == "never":
        return False
    if policy == "always":
        return built_sums(table) is not None or table.hom is not None
    if built_sums(table) is not None:
        return blocks_pay(table, keys)
    return few_groups(table, keys)


def blocks_pay(table: TableDesign, keys: list[str]) -> bool:
    """The cost rule for ASHE sums: push them down when the server returns few rows.

    The server returns a row per (group, block of 64 row ids) the group's rows
    touch: at most ``groups * min(blocks, rows per group)``. Each such row
    costs the client about ``ASHE_ROW_COST`` fetched rows (it is wider, and
    is unpadded and re-aggregated), so the sums go to the server when those
    rows cost less than fetching the table's: TPC-H Q1 (4 groups) and Q6 (1)
    yes; Q18's GROUP BY l_orderkey (a group per 4 rows) and Q15's
    GROUP BY l_suppkey (one per 600) no.
    """
    rows = max(table.row_count, 1)
    groups = _groups(table, keys)
    blocks = -(-rows // BLOCK_ROWS)
    returned = min(rows, groups * min(blocks, -(-rows // groups)))
    return returned * ASHE_ROW_COST <= rows


def _groups(table: TableDesign, keys: list[str]) -> int:
    """Groups of ``keys``: the product of the distinct counts the loader recorded (capped by rows)."""
    rows = max(table.row_count, 1)
    groups = 1
    for key in keys:
        enc = table.find(key, DET)
        distinct = enc.params.get("distinct") if enc is not None else None
        groups *= int(str(distinct)) if distinct is not None else rows
    return max(1, min(groups, rows))


def few_groups(table: TableDesign, keys: list[str]) -> bool:
    """The cost rule for HOM sums: push them down when decrypting costs less than fetching.

    Each (group, pack mask, chunk) row the server returns costs the client
    one Paillier decryption (``HOM_DECRYPT_SECONDS``). The server multiplies
    at most ``2^summand_bits`` packs per product, so the table's packs fall
    into chunks, and a group's rows (spread over the table, as Q1's flags
    are) may touch every chunk: per chunk at most ``2^R`` masks, and in all
    at most one per pack plus one per chunk. Summing on the client
    instead costs about ``CLIENT_SECONDS_PER_ROW`` per row (fetch, decrypt,
    add). Groups are estimated from the distinct counts the loader recorded
    (their product for several keys; the row count when unknown).
    """
    group = table.hom
    rows = max(table.row_count, 1)
    if group is None:
        return False
    groups = _groups(table, keys)
    decryptions = groups * _products_per_group(group, rows, groups)
    return decryptions * HOM_DECRYPT_SECONDS <= rows * CLIENT_SECONDS_PER_ROW


def _products_per_group(group: HomGroup, rows: int, groups: int) -> int:
    """At most ``2^R`` masks per chunk, and one product per pack plus one per chunk."""
    packs_per_group = -(-rows // (group.rows_per_ciphertext * groups))
    table_chunks = -(-rows // (group.rows_per_ciphertext << group.summand_bits))
    chunks = max(1, min(packs_per_group, table_chunks))
    return min(2**group.rows_per_ciphertext * chunks, packs_per_group + chunks)


def _columns_are_keys(
    select: exp.Select,
    aggregates: list[exp.AggFunc],
    keys: list[str],
    resolved: dict[int, BaseColumn],
) -> bool:
    """Outside aggregates, the block may read only its GROUP BY keys."""
    inside = {id(c) for a in aggregates for c in a.find_all(exp.Column)}
    for column in select.find_all(exp.Column):
        if id(column) in inside or column.find_ancestor(exp.Where):
            continue
        ref = resolved.get(id(column))
        if ref is None and not column.table:
            continue  # a reference to an output alias (ORDER BY total)
        if ref is None or ref.column not in keys:
            return False
    return True


def _rewrite_locally(
    select: exp.Select, scan: Scan, aggregation: Aggregation, types: dict[int, str]
) -> None:
    select.set("where", None)  # the server applied it, exactly
    for node in list(select.find_all(exp.AggFunc)):
        value = _any_value(aggregation.local_name(id(node)), scan.alias)
        if isinstance(node, exp.Avg):
            count_key = next(i.count_key for i in aggregation.items if i.key == id(node))
            assert count_key is not None
            count = _any_value(aggregation.local_name(count_key), scan.alias)
            value = exp.Div(
                this=exp.cast(value, "DOUBLE"),
                expression=exp.Nullif(this=count, expression=exp.Literal.number(0)),
            )
        node.replace(exp.cast(value, exp.DataType.build(types[id(node)], dialect="duckdb")))


def _any_value(name: str, alias: str) -> exp.Expr:
    return exp.Anonymous(this="ANY_VALUE", expressions=[exp.column(name, table=alias)])
